"""The root CLI: sub-commands load lazily (start-up time), the command table is complete, errors exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import typer

from dlrmsim import cli as root
from tests.conftest import assert_one_line_error

HEAVY = ("numpy", "networkx", "simpy", "pandas", "dlrmsim.engine.simulation")


def _modules_after(argv: list[str]) -> dict[str, object]:
    """Run `dlrmsim ARGV` in a fresh interpreter; which of HEAVY it imported, and its exit code."""
    code = textwrap.dedent(f"""
        import io, json, sys
        from contextlib import redirect_stdout
        from dlrmsim.cli import main
        rc = 0
        with redirect_stdout(io.StringIO()):
            try:
                main({argv!r})
            except SystemExit as exc:
                rc = exc.code or 0
        print(json.dumps({{"rc": rc, "loaded": [m for m in {HEAVY!r} if m in sys.modules]}}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_help_imports_no_engine_or_numpy() -> None:
    got = _modules_after(["--help"])
    assert got == {"rc": 0, "loaded": []}


def test_a_workload_command_does_not_import_the_engine() -> None:
    got = _modules_after(["workload", "show", "small", "--json"])
    assert got["rc"] == 0
    assert "dlrmsim.engine.simulation" not in got["loaded"] and "networkx" not in got["loaded"] and "simpy" not in got["loaded"]


def test_command_table_matches_what_the_modules_register() -> None:
    # SUBCOMMANDS routes a command to its module without importing the others: it must list every command.
    for module in root.MODULES:
        sub = typer.Typer()
        __import__(module, fromlist=["register"]).register(sub)
        registered = set(typer.main.get_group(sub).commands)
        assert registered == {name for name, m in root.SUBCOMMANDS.items() if m == module}, module


def test_every_command_is_listed_in_help(cli) -> None:  # noqa: ANN001
    res = cli("--help")
    assert res.code == 0
    for name in [*root.SUBCOMMANDS, "demo"]:
        assert name in res.out, name


def test_usage_errors_exit_2(cli) -> None:  # noqa: ANN001
    for args in (["no-such-command"], ["workload", "show", "small", "--no-such-option"], ["workload", "show"]):
        res = cli(*args)
        assert res.code == 2, (args, res)
        assert "Traceback" not in res.err


def test_user_error_is_one_line_and_exit_2(cli) -> None:  # noqa: ANN001
    assert_one_line_error(cli("workload", "show", "no-such-workload"), "unknown workload 'no-such-workload'", "fix:")


def _help_texts(cmd: object, path: str) -> list[tuple[str, str]]:
    """(where, text) of a click command's own help and every option's, and of its sub-commands', recursively."""
    out = [(path, getattr(cmd, "help", None) or "")]
    out += [(f"{path} {p.name}", getattr(p, "help", None) or "") for p in getattr(cmd, "params", [])]
    for name, sub in getattr(cmd, "commands", {}).items():
        out += _help_texts(sub, f"{path} {name}")
    return out


def test_no_help_text_carries_printf_escapes() -> None:
    # Because click prints help strings verbatim (it does not %-format them), a "%%" written for printf-style
    # formatting shows doubled in `--help` (it did, in simulate's --lockstep-collectives).
    texts = []
    for module in root.MODULES:
        sub = typer.Typer()
        __import__(module, fromlist=["register"]).register(sub)
        texts += _help_texts(typer.main.get_group(sub), "dlrmsim")
    assert len(texts) > 50  # every command and option was reached
    assert [where for where, text in texts if "%%" in text] == []


def _chained_system_error() -> SystemError:
    """What CPython raises when Ctrl-C lands under two compiled frames: SystemErrors caused by a KeyboardInterrupt."""
    try:
        try:
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt as k:
                raise SystemError("kernel returned a result with an exception set") from k
        except SystemError as inner:
            raise SystemError("caller returned a result with an exception set") from inner
    except SystemError as outer:
        return outer


@pytest.mark.parametrize("raised", ["keyboard", "system-error"])
def test_ctrl_c_is_one_line_and_exit_130(cli, monkeypatch: pytest.MonkeyPatch, raised: str) -> None:  # noqa: ANN001
    from dlrmsim.training import simulate

    def stopped(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt if raised == "keyboard" else _chained_system_error()

    monkeypatch.setattr(simulate, "simulate_training", stopped)
    res = cli("simulate", "-t", "skx-8s-upi", "-w", "small", "-r", "2")
    # because a user who stops a run must see that it stopped (typer hands Ctrl-C back as a return value, which was
    # dropped: exit 0 and no word), and Ctrl-C inside a numba kernel arrives as a chain of SystemErrors (a traceback)
    assert res.code == 130 and res.err.strip() == "interrupted (Ctrl-C)" and res.out == ""


def test_a_system_error_of_another_cause_still_raises(cli, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    from dlrmsim.training import simulate

    def broken(*_a: object, **_k: object) -> None:
        raise SystemError("a real bug")

    monkeypatch.setattr(simulate, "simulate_training", broken)
    # because only Ctrl-C is translated: a SystemError from anything else is a defect to see in full
    with pytest.raises(SystemError, match="a real bug"):
        cli("simulate", "-t", "skx-8s-upi", "-w", "small", "-r", "2")


def test_one_simulation_commands_run_with_the_collector_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    seen: dict[str, bool] = {}

    def app(args: list[str], standalone_mode: bool) -> int:  # stands in for the typer app: records the collector
        seen[args[0]] = gc.isenabled()
        return 0

    monkeypatch.setattr(root, "app", app)
    assert gc.isenabled()
    for command in ("simulate", "demo", "calibrate", "sweep"):
        root.main([command])
    # because the imports of a one-simulation command spend 0.1-0.15 s in collector passes that free nothing, while
    # commands that simulate many points in one process need it (each simulation leaves reference cycles) and those
    # that time real kernels keep it, and every command leaves it as it found it (tests call main in-process)
    assert seen == {"simulate": False, "demo": True, "calibrate": True, "sweep": True} and gc.isenabled()
