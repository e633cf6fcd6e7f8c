"""Flat result records: one per finished task, flow, reduction and per-rank collective span."""

from __future__ import annotations

import gc
from dataclasses import dataclass, fields
from itertools import repeat

import numpy as np


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


class RecordLog:
    """Records in the order they were made, kept compact (tuples, arrays per batch of flows) until read.

    ``records`` returns the one list of :class:`Record` s, first turning everything buffered into records, so
    readers see exactly what eager appends would have produced. Holding few objects while a simulation runs
    keeps the garbage collector's full passes away from the event loop.
    """

    __slots__ = ("_list", "_buf", "_n_buf")

    def __init__(self, records: list[Record] | None = None) -> None:
        self._list: list[Record] = [] if records is None else records
        self._buf: list[tuple] = []
        self._n_buf = 0

    def add(self, rec: tuple) -> None:
        """One record, as the tuple of its fields in :class:`Record` order."""
        self._buf.append(rec)
        self._n_buf += 1

    def add_many(
        self,
        kind: str,
        name: str,
        category: str,
        collective_id: int | None,
        rank: np.ndarray,
        peer: np.ndarray | None,
        nbytes: np.ndarray,
        start: np.ndarray,
        end: float,
    ) -> None:
        """Records of a batch of flows or reductions that ended together at ``end`` (arrays per record)."""
        self._buf.append((None, kind, name, category, collective_id, rank, peer, nbytes, start, end))
        self._n_buf += len(rank)

    def __len__(self) -> int:
        return len(self._list) + self._n_buf

    @property
    def records(self) -> list[Record]:
        if self._buf:
            buf, self._buf, self._n_buf = self._buf, [], 0
            out = self._list
            paused = gc.isenabled()
            gc.disable()  # records hold only numbers and strings: no cycles to find, so skip collecting mid-build
            try:
                for item in buf:
                    if item[0] is not None:
                        out.append(Record(*item))
                        continue
                    _, kind, name, cat, cid, rank, peer, nbytes, start, end = item
                    n = len(rank)
                    out.extend(
                        map(
                            Record,
                            rank.tolist(),
                            repeat(kind, n),
                            repeat(name, n),
                            repeat(cat, n),
                            start.tolist(),
                            repeat(end, n),
                            nbytes.tolist(),
                            repeat(0.0, n),
                            repeat(-1, n) if peer is None else peer.tolist(),
                            repeat(None, n),
                            repeat(cid, n),
                        )
                    )
            finally:
                if paused:
                    gc.enable()
        return self._list
