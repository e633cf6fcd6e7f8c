"""The append-only results file of a sweep, and loading it back as one DataFrame.

CSV, one physical line per finished point: each line is written with one ``write`` call and fsync'ed, so a
kill leaves at most a truncated last line, which loading ignores and the next run cuts off before appending.
New columns (an evaluator output or override path not seen before) rewrite the file atomically with the
wider header (temp file + ``os.replace``). Loading keeps one row per ``point_id``: the last ``ok`` one, else the last.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from dlrmsim.errors import DlrmsimError
from dlrmsim.studies.derive import derive_scaling
from dlrmsim.studies.evaluate import STANDARD_OUTPUTS
from dlrmsim.studies.spec import POINT_FIELDS, SweepPoint

RESULTS_FILE = "results.csv"
# A sweep's numbers must read back as the evaluator's, to the bit. pandas 3 parses floats exactly by default (and
# deprecates the argument); before it, the default "high" precision parser can miss by an ulp (0.0306717959519999
# for 0.030671795951999998), and "round_trip" does not.
EXACT_FLOATS: dict[str, str] = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}
META_COLUMNS: tuple[str, ...] = ("point_id", "status", "error", "wall_s")


def results_path(out: str | Path) -> Path:
    """The results file of a sweep output folder (or the file itself when given one)."""
    p = Path(out)
    return p if p.suffix == ".csv" else p / RESULTS_FILE


def point_row(point: SweepPoint, status: str, error: str, wall_s: float, outputs: Mapping[str, Any]) -> dict[str, Any]:
    """One results row: the point's columns, its id, status, error text, wall seconds, then the evaluator's outputs."""
    row = point.columns()
    row.update(point_id=point.point_id, status=status, error=error, wall_s=wall_s)
    for key, value in outputs.items():
        row.setdefault(key, value)
    return row


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, sort_keys=True)
    # one record per physical line, always
    return " ".join(str(value).splitlines()).replace("\r", " ")


def _line(header: Sequence[str], row: Mapping[str, Any]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([_cell(row.get(c)) for c in header])
    return buf.getvalue()


def _complete_text(path: Path) -> str:
    """The file's text up to its last newline (a line cut short by a kill is not a record)."""
    if not path.exists():
        return ""
    text = path.read_text(encoding="utf-8", errors="replace")
    return text[: text.rfind("\n") + 1]


def _read_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    text = _complete_text(path)
    if not text:
        return [], []
    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    rows = [dict(zip(header, r, strict=False)) for r in reader if len(r) == len(header)]
    return header, rows


def default_columns(extra: Iterable[str] = ()) -> list[str]:
    return [*POINT_FIELDS, *extra, *META_COLUMNS, *STANDARD_OUTPUTS]


class ResultsStore:
    """Appends finished points to a sweep's results file; use as a context manager (holds an exclusive lock)."""

    def __init__(self, out: str | Path, columns: Iterable[str] = ()) -> None:
        self.path = results_path(out)
        self._wanted = list(columns)
        self._lock_fd: int | None = None
        self.header: list[str] = []

    def __enter__(self) -> ResultsStore:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise DlrmsimError(
                "another sweep is writing to this folder",
                source=self.path.parent,
                fix="wait for it to finish or use another --out",
            ) from None
        header, rows = _read_rows(self.path)
        wanted = header or default_columns()
        missing = [c for c in self._wanted if c not in wanted]
        if missing:
            wanted = _insert_before_meta(wanted, missing)
        self._rewrite(wanted, rows)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def rows(self) -> list[dict[str, str]]:
        return _read_rows(self.path)[1]

    def done_ids(self, include_failed: bool = False) -> set[str]:
        """Point ids already finished: with status ok, or any status when ``include_failed``."""
        return {r["point_id"] for r in self.rows() if include_failed or r.get("status") == "ok"}

    def append(self, row: Mapping[str, Any]) -> None:
        """Write one finished point: a single write of a whole line, flushed to disk before returning."""
        new = [k for k in row if k not in self.header]
        if new:
            overrides = [k for k in new if k not in POINT_FIELDS and k.startswith(("topology.", "workload."))]
            outputs = [k for k in new if k not in overrides]
            self._rewrite(_insert_before_meta(self.header, overrides) + outputs, self.rows())
        data = _line(self.header, row).encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _rewrite(self, header: list[str], rows: list[dict[str, str]]) -> None:
        """Replace the file atomically with ``header`` and ``rows`` (drops any truncated last line)."""
        tmp = self.path.with_suffix(".csv.tmp")
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(_line(header, dict(zip(header, header, strict=True))))
            for r in rows:
                fh.write(_line(header, r))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        self.header = header


def _insert_before_meta(header: list[str], columns: list[str]) -> list[str]:
    at = header.index("point_id") if "point_id" in header else len(header)
    return header[:at] + [c for c in columns if c not in header] + header[at:]


def load_results(out: str | Path, derive: bool = True) -> pd.DataFrame:
    """A sweep's results as one DataFrame: one row per point, one column per swept parameter and per output.

    Keeps the last ``ok`` row of each ``point_id`` (else its last row); with ``derive``, adds ``ranks_base``,
    ``speedup`` and ``efficiency`` (see ``derive_scaling``).
    """
    path = results_path(out)
    if not path.is_file():
        raise DlrmsimError("no sweep results here", source=path, fix="run `dlrmsim sweep SPEC --out DIR` first")
    text = _complete_text(path)
    if not text:
        raise DlrmsimError("the results file is empty", source=path, fix="run the sweep")
    text_columns = {"point_id": str, "status": str, "error": str}
    df = pd.read_csv(io.StringIO(text), keep_default_na=True, dtype=text_columns, **EXACT_FLOATS)
    df["error"] = df["error"].fillna("")
    df = dedupe(df)
    if "ranks" in df:
        df["ranks"] = pd.to_numeric(df["ranks"], errors="coerce").astype("Int64")
    if "replicate_below_rows" in df:
        df["replicate_below_rows"] = pd.to_numeric(df["replicate_below_rows"], errors="coerce").astype("Int64")
    if "blocking" in df:
        df["blocking"] = df["blocking"].astype(str).str.lower().map({"true": True, "false": False})
    empty = [c for c in df.columns if c not in POINT_FIELDS and c not in META_COLUMNS and df[c].isna().all()]
    df = df.drop(columns=empty).reset_index(drop=True)
    if derive and "iteration_s" in df:
        df = derive_scaling(df)
    return df


def dedupe(df: pd.DataFrame) -> pd.DataFrame:
    """One row per ``point_id``: its last ``ok`` row, else its last row; file order kept."""
    order = pd.Series(range(len(df)), index=df.index)
    rank = df["status"].eq("ok").astype(int) * len(df) + order  # ok rows beat failed ones, later beats earlier
    keep = rank.groupby(df["point_id"]).idxmax()
    return df.loc[sorted(keep.to_numpy())]
