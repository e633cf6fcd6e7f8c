"""Every command shown in README.md and docs/*.md runs, so the docs cannot rot.

Convention (stated here and followed by the docs):
- Commands live in fenced ```console (or bash/sh/shell) blocks, one per line, after a ``$ `` prompt.
  Lines of a block that follow a command and do not start with ``$ `` are expected output: each must
  appear in the command's output, compared after dropping table borders and collapsing whitespace
  (column widths follow the terminal). A ``...`` line stands for output left out.
- Every ``$`` command must be ``dlrmsim ...``; it runs in-process with the current checkout, in a fresh
  temporary folder (files it writes land there; arguments naming files of the repository, such as
  ``dlrmsim/studies/examples/...``, are made absolute), and must exit 0.
- A block that cannot run here (``make demo``, a calibration that measures for minutes) is preceded by
  ``<!-- doc-test: skip (REASON) -->`` naming where it is covered instead. A block that runs only on a machine
  of at least N cores (``-t host -r 2`` splits this machine's cores over 2 processes) is preceded by
  ``<!-- doc-test: needs N cores -->`` and skipped, saying so, on a machine with fewer. Nothing else is skipped:
  a shell block without ``$`` prompts, or a non-dlrmsim command without a marker, fails.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from dlrmsim.host import usable_cores

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL_LANGUAGES = {"console", "bash", "sh", "shell"}
SKIP = re.compile(r"^<!--\s*doc-test:\s*skip\s*\((?P<reason>.+)\)\s*-->$")
NEEDS_CORES = re.compile(r"^<!--\s*doc-test:\s*needs\s+(?P<cores>\d+)\s+cores\s*-->$")
FENCE = re.compile(r"^```(?P<lang>[\w-]*)\s*$")
# Top-level folders of the checkout: an argument under one of them names a repository file.
REPO_DIRS = ("dlrmsim/", "tests/", "docs/", "notebooks/", "benchmarks/", "validation/")
TABLE_CHARS = re.compile(r"[│┃║|┏┓┗┛┡┩━─╇╈┳┻┼└┘┌┐├┤]")


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    expected: tuple[str, ...]


@dataclass(frozen=True)
class Block:
    where: str  # file:line of the opening fence
    lang: str
    lines: tuple[str, ...]
    skip_reason: str | None
    cores: int = 1  # the fewest usable cores it runs on (a needs-cores marker)

    def commands(self) -> list[Command]:
        out: list[tuple[list[str], list[str]]] = []
        for line in self.lines:
            if line.startswith("$ "):
                out.append((shlex.split(line[2:], comments=True), []))
            elif line.strip() and line.strip() != "..." and out:
                out[-1][1].append(line)
        return [Command(tuple(a), tuple(e)) for a, e in out]


def shell_blocks(path: Path) -> list[Block]:
    """The fenced shell blocks of a Markdown file, each with the skip reason of a marker right above it."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group("lang")
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        if lang in SHELL_LANGUAGES:
            before = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
            skip = SKIP.match(before)
            needs = NEEDS_CORES.match(before)
            blocks.append(
                Block(
                    f"{path.relative_to(REPO)}:{start + 1}",
                    lang,
                    tuple(lines[start + 1 : end]),
                    skip.group("reason").strip() if skip else None,
                    int(needs.group("cores")) if needs else 1,
                )
            )
        i = end + 1
    return blocks


BLOCKS = [b for path in DOCS for b in shell_blocks(path)]


def normalize(text: str) -> str:
    """A line without table borders and with single spaces: what a reader sees, whatever the column widths."""
    return " ".join(TABLE_CHARS.sub(" ", text).split())


def in_checkout(arg: str) -> str:
    """``arg`` made absolute when it names a file of the repository (the command runs in a temporary folder)."""
    return str(REPO / arg) if arg.startswith(REPO_DIRS) and (REPO / arg).exists() else arg


def test_the_docs_show_runnable_commands() -> None:
    # Because a parser that found nothing would make every test below pass vacuously: the README's cookbook
    # alone has more than ten commands that run.
    runnable = [c for b in BLOCKS if b.skip_reason is None for c in b.commands() if b.where.startswith("README.md")]
    assert len(runnable) >= 10, [b.where for b in BLOCKS]


def test_the_host_split_block_needs_two_cores() -> None:
    # Because `-t host -r 2` refuses a one-core machine (2 ranks but 1 core): a marker the parser missed would run
    # the README's block there and fail the suite on that machine, though the command does what it should.
    shown = "dlrmsim simulate -t host -w small -r 2"
    split = [b for b in BLOCKS if any(" ".join(c.argv).startswith(shown) for c in b.commands())]
    assert [b.cores for b in split] == [2], [b.where for b in split]


def test_every_skip_marker_sits_right_above_a_shell_block() -> None:
    # Because a marker that no longer precedes its block would silently stop skipping it, or, if the block moved,
    # leave a reason that applies to nothing.
    for path in DOCS:
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines):
            if SKIP.match(line.strip()) or NEEDS_CORES.match(line.strip()):
                nxt = next((x for x in lines[n + 1 :] if x.strip()), "")
                m = FENCE.match(nxt)
                assert m and m.group("lang") in SHELL_LANGUAGES, f"{path.name}:{n + 1}: skip marker not followed by a shell block"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_doc_block_runs(block: Block, cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    commands = block.commands()
    # Because a shell block without prompts would show commands this test never runs.
    assert commands, f"{block.where}: a ```{block.lang} block needs '$ ' prompts (see tests/test_docs.py)"
    if block.skip_reason is not None:
        pytest.skip(f"{block.where}: {block.skip_reason}")
    if usable_cores() < block.cores:
        pytest.skip(f"{block.where}: needs {block.cores} cores, this machine gives {usable_cores()}")
    monkeypatch.chdir(tmp_path)
    for cmd in commands:
        shown = shlex.join(cmd.argv)
        # Because only dlrmsim commands can run here; anything else must carry a skip marker with its reason.
        assert cmd.argv and cmd.argv[0] == "dlrmsim", f"{block.where}: '{shown}' is not a dlrmsim command and has no skip marker"
        res = cli(*(in_checkout(a) for a in cmd.argv[1:]))
        # Because the docs promise the command works as shown.
        assert res.code == 0, f"{block.where}: '{shown}' exited {res.code}\n{res.err[-2000:]}"
        seen = [normalize(line) for line in (res.out + "\n" + res.err).splitlines()]
        for want in cmd.expected:
            # Because output shown in the docs is a claim about what the command prints.
            assert any(normalize(want) in line for line in seen), f"{block.where}: '{shown}' did not print {want!r}"


@pytest.mark.slow
def test_make_demo_command_writes_the_report(cli, tmp_path: Path) -> None:  # noqa: ANN001
    # Because `make demo` (skipped above: it builds a virtual environment) ends in `dlrmsim demo`, the README's
    # first promise; this runs that command (about a minute on 2 cores) and checks the report it announces.
    res = cli("demo", "--out", str(tmp_path / "out"))
    assert res.code == 0, res.err[-2000:]
    report = tmp_path / "out" / "report.html"
    assert report.exists() and report.stat().st_size > 10_000, "the demo must write a self-contained report.html"
