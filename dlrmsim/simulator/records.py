"""Flat result records: one per finished task, flow, reduction and per-rank collective span."""

from __future__ import annotations

import operator
from dataclasses import dataclass, fields

import pandas as pd


@dataclass(slots=True)
class Record:
    """One finished piece of work. Times in seconds of simulated time, sizes in bytes and flops.

    kind: the task kind given to ``compute`` ("gemm", "lookup", ...); "flow" for one network flow of a
    collective; the transfer's ``kind`` ("p2p" by default) for ``transfer``; "reduce" for reduction
    arithmetic; the op name ("allreduce", "alltoall", ...) for a rank's span of a collective.
    rank: the rank that did it (a flow's source; -1 when the source is not a rank). peer: a flow's
    destination rank (-1: none). resource: the core pool of a task, or "src->dst" node names of a flow.
    """

    rank: int
    kind: str
    name: str
    category: str
    start: float
    end: float
    bytes: float = 0.0
    flops: float = 0.0
    peer: int = -1
    resource: str | None = None
    collective_id: int | None = None

    @property
    def duration(self) -> float:
        return self.end - self.start


RECORD_COLUMNS = [f.name for f in fields(Record)]


def records_frame(records: list[Record]) -> pd.DataFrame:
    """The raw result: one row per record, columns as in :class:`Record` plus ``duration`` (s)."""
    if not records:
        return pd.DataFrame(columns=RECORD_COLUMNS + ["duration"])
    row = operator.attrgetter(*RECORD_COLUMNS)
    df = pd.DataFrame.from_records([row(r) for r in records], columns=RECORD_COLUMNS)
    df["duration"] = df["end"] - df["start"]
    return df
