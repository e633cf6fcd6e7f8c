"""One-line user errors: every bad input ends as a DlrmsimError the CLI prints and exits 2 on."""

from __future__ import annotations

import difflib
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


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice nearest to a mistyped word, or None when nothing is close."""
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return match[0] if match else None


def unknown_name_error(kind: str, name: str, known: Iterable[str], source: str | None = None, field: str | None = None) -> DlrmsimError:
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
    loc = ".".join(str(p) for p in first["loc"] if not (isinstance(p, str) and p.startswith("function-")))
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
    elif kind.endswith("_parsing") or kind.endswith("_type"):
        fix = "check the value's type"
    elif kind == "literal_error" or kind == "enum":
        fix = "use one of the allowed values"
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    more = len(err.errors()) - 1
    if more:
        msg += f" (+{more} more problem{'s' if more > 1 else ''})"
    return DlrmsimError(msg, source=source, field=loc or None, fix=fix)


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
