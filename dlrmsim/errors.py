"""One-line user errors: every bad input ends as a DlrmsimError the CLI prints and exits 2 on."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import get_args

from pydantic import ValidationError

EXIT_USAGE = 2


class DlrmsimError(Exception):
    """An error caused by the user's input: printed as one line, never as a traceback.

    ``source`` is the file (or preset name) the bad value came from, ``field`` its
    dotted path inside that file, and ``fix`` what the user should do instead.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | Path | None = None,
        field: str | None = None,
        fix: str | None = None,
    ) -> None:
        self.message = message
        self.source = str(source) if source is not None else None
        self.field = field
        self.fix = fix
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = [p for p in (self.source, self.field) if p]
        head = ": ".join(parts)
        text = f"{head}: {self.message}" if head else self.message
        if self.fix:
            text += f" (fix: {self.fix})"
        return " ".join(text.split())


EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C


class Interrupted(DlrmsimError):
    """The user stopped a long run (Ctrl-C): printed as one line, exit code 130, no traceback."""

    exit_code = EXIT_INTERRUPTED


def check_output_file(path: str | Path, flag: str) -> Path:
    """Refuse an output file that cannot be written (missing folder, a directory, no permission) before any work
    runs, so a long simulation is not thrown away at the end."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise DlrmsimError("is a directory", source=path, field=flag, fix="give a file name inside it")
    if not parent.is_dir():
        raise DlrmsimError("its folder does not exist", source=path, field=flag, fix=f"create it first (mkdir -p {parent})")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise DlrmsimError("not writable", source=path, field=flag, fix="choose a folder you can write to")
    return path


def parse_counts(text: str | None, flag: str) -> list[int] | None:
    """A comma-separated list of positive counts given to ``flag`` (``1,2,4``), sorted without repeats; None when
    not given."""
    if not text:
        return None
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise DlrmsimError(f"{flag} '{text}' is not a list of positive counts", field=flag, fix="e.g. 1,2,4,8")
    return sorted(set(counts))


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice nearest to a mistyped word, or None when nothing is close."""
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return match[0] if match else None


def unknown_name_error(
    kind: str, name: str, known: Iterable[str], source: str | None = None, field: str | None = None
) -> DlrmsimError:
    """Error for an unknown preset, algorithm, backend, ...: names the nearest known one."""
    known = sorted(known)
    guess = closest(name, known)
    fix = f"did you mean '{guess}'?" if guess else f"use one of: {', '.join(known)}"
    if kind in ("topology", "workload", "backend", "serving workload", "layer workload"):
        fix += " or give a YAML file path"
    return DlrmsimError(f"unknown {kind} '{name}'", source=source, field=field, fix=fix)


def from_validation_error(err: ValidationError, source: str | Path) -> DlrmsimError:
    """Turn pydantic's multi-line report into one line naming the first bad field."""
    # A misspelt field shows up twice (unknown + missing); the unknown one carries the useful suggestion.
    errors = sorted(err.errors(), key=lambda e: e["type"] != "extra_forbidden")
    first = errors[0]
    loc = ".".join(str(p) for p in _user_loc(first["loc"]))
    kind = first["type"]
    msg = first["msg"]
    fix: str | None = None
    if kind == "extra_forbidden":
        field_name = str(first["loc"][-1])
        allowed = _allowed_fields(err, first["loc"])
        guess = closest(field_name, allowed) if allowed else None
        msg = "unknown field"
        fix = f"did you mean '{guess}'?" if guess else "remove it or check the spelling"
    elif kind == "missing":
        msg = "required field is missing"
        fix = "add it"
    elif kind in ("greater_than", "greater_than_equal"):
        fix = "give a positive value"
    elif kind == "int_parsing_size":
        msg = f"{_short(first.get('input'))} is too large for a count"
        fix = "give a whole number such as 1048576 (a count of rows or items is far below 1e18)"
    elif kind == "int_from_float":
        msg = f"{_short(first.get('input'))} is not a whole number"
        fix = "give a whole number"
    elif kind.endswith("_parsing") or kind.endswith("_type"):
        fix = "check the value's type"
    elif kind == "literal_error" or kind == "enum":
        fix = "use one of the allowed values"
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    # A value that fails every member of a union (``int | list[int]``) reports once per member: one problem.
    more = len({tuple(_user_loc(e["loc"])) for e in err.errors()}) - 1
    if more:
        msg += f" (+{more} more problem{'s' if more > 1 else ''})"
    return DlrmsimError(msg, source=source, field=loc or None, fix=fix)


# Union members appear in pydantic's locations under their type's name ("constrained-int", "list[str]",
# "function-after[...]"): internal names that mean nothing to someone editing a YAML file.
_TYPE_TAG = re.compile(
    r"^(constrained-\w+|function-.*|(int|float|str|bool|list|dict|tuple|none|literal)(\[.*\])?|.*\[.*\])$", re.IGNORECASE
)


def _user_loc(loc: tuple) -> list[str | int]:
    """``loc`` without the union-member tags pydantic inserts."""
    return [p for p in loc if not (isinstance(p, str) and _TYPE_TAG.match(p))]


def _short(value: object) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _allowed_fields(err: ValidationError, loc: tuple) -> list[str]:
    # pydantic does not report the allowed names; the model title is enough to look them up.
    model = getattr(err, "_dlrmsim_model", None)
    if model is None:
        return []
    cls = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = getattr(cls, "model_fields", {}).get(part)
        if field is None:
            return []
        cls = _inner_model(field.annotation)
        if cls is None:
            return []
    return list(getattr(cls, "model_fields", {}).keys())


def _inner_model(annotation: object) -> type | None:
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return annotation
    for arg in get_args(annotation):
        inner = _inner_model(arg)
        if inner is not None:
            return inner
    return None
