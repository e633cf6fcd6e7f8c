"""Terminal output shared by every command: rich tables for people, plain JSON for programs."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

# Off a terminal (pipes, CI logs) rich would wrap tables at 80 columns; give them room instead.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True)


def print_json(obj: Any) -> None:
    """Write one JSON document to stdout (no rich markup, so it pipes into jq)."""
    sys.stdout.write(json.dumps(obj, indent=2, default=_default) + "\n")


def _default(obj: Any) -> Any:
    # A NumPy scalar, recognised without importing NumPy (``dlrmsim --help`` loads this module and must stay light).
    if type(obj).__module__ == "numpy" and getattr(obj, "ndim", None) == 0:
        return obj.item()
    if hasattr(obj, "model_dump"):
        return obj.model_dump()
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    # the title on its own line: as a table title it wrapped to the width of a narrow table
    table = Table()
    for col in columns:
        table.add_column(col, justify="left" if col == columns[0] else "right")
    for row in rows:
        table.add_row(*(fmt(v) for v in row))
    console.print(title, style="italic", highlight=False, markup=False)
    console.print(table)


def fmt(value: Any) -> str:
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 1e5 or abs(value) < 1e-3:
            return f"{value:.3e}"
        return f"{value:.4g}" if abs(value) < 100 else f"{value:,.1f}"
    return str(value)


def write_page(out: str | Path, page: str) -> Path:
    """Write a self-contained HTML page (UTF-8), creating its folder; returns the path."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out
