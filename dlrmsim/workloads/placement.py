"""Embedding-table placements over ranks: table-wise, column-wise split, row-wise, small tables replicated.

A placement says which rank holds which rows and columns of which table; per-rank memory and the
largest rank count each scheme allows follow from it.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from pydantic import Field, NonNegativeInt

from dlrmsim.config import StrictModel
from dlrmsim.errors import DlrmsimError
from dlrmsim.topologies.mapping import RankMapping, check_explicit, format_sockets, map_ranks
from dlrmsim.workloads import model
from dlrmsim.workloads.schema import Workload

Strategy = Literal["table_wise", "column_wise", "row_wise"]
STRATEGIES: tuple[str, ...] = ("table_wise", "column_wise", "row_wise")


class PlacementSpec(StrictModel):
    """How to spread tables: the sharding ``strategy`` and an optional row threshold below which tables are replicated."""

    strategy: Strategy = "table_wise"
    replicate_below_rows: NonNegativeInt | None = Field(
        None, description="tables with fewer rows are replicated on every rank and trained data-parallel"
    )


@dataclass(frozen=True)
class Shard:
    """The rows [row_offset, row_offset+rows) and columns [col_offset, col_offset+columns) of ``table`` on ``rank``."""

    table: int
    rank: int
    rows: int
    columns: int
    row_offset: int = 0
    col_offset: int = 0


@dataclass(frozen=True)
class Placement:
    """Result of placing a workload's tables on ``ranks`` ranks."""

    spec: PlacementSpec
    ranks: int
    shards: tuple[Shard, ...]
    replicated_tables: tuple[int, ...]
    sharded_tables: tuple[int, ...]

    def shards_on(self, rank: int) -> list[Shard]:
        return list(self._shards_by_rank.get(rank, ()))

    @cached_property
    def _shards_by_rank(self) -> dict[int, list[Shard]]:
        """Shards per rank, in shard order (a study asks once per rank: one pass, not one per rank)."""
        out: dict[int, list[Shard]] = {}
        for s in self.shards:
            out.setdefault(s.rank, []).append(s)
        return out

    def table_bytes_on(self, w: Workload, rank: int) -> float:
        """Embedding bytes held by ``rank``: its shards plus every replicated table (bytes)."""
        own = sum(model.table_bytes(w, s.rows, s.columns) for s in self.shards_on(rank))
        return own + sum(model.table_bytes(w, w.table_rows[t]) for t in self.replicated_tables)

    def dense_params(self, w: Workload) -> int:
        """Parameters every rank holds and trains data-parallel: the MLPs and the replicated tables."""
        return sum(layer.params for layer in model.mlp_layers(w)) + sum(
            w.table_rows[t] * w.embedding_dim for t in self.replicated_tables
        )

    def memory_on(self, w: Workload, rank: int, state_bytes_per_param: float = 4.0) -> float:
        """Bytes of model state on ``rank``: its table shards, plus the data-parallel part at
        ``state_bytes_per_param`` (4: the fp32 weight, as for SGD; optimizers with moments keep more)."""
        shards = sum(model.table_bytes(w, s.rows, s.columns) for s in self.shards_on(rank))
        return shards + self.dense_params(w) * state_bytes_per_param

    def max_memory(self, w: Workload, state_bytes_per_param: float = 4.0) -> float:
        return max(self.memory_on(w, r, state_bytes_per_param) for r in range(self.ranks))


def split_tables(w: Workload, spec: PlacementSpec) -> tuple[list[int], list[int]]:
    """(model-parallel tables, replicated tables) by the row threshold."""
    thr = spec.replicate_below_rows
    rows = w.table_rows
    replicated = [t for t, r in enumerate(rows) if thr is not None and r < thr]
    sharded = [t for t in range(len(rows)) if t not in set(replicated)]
    return sharded, replicated


def max_ranks(w: Workload, spec: PlacementSpec) -> int:
    """The largest rank count the scheme allows: tables (table-wise), tables x E (column-wise), fewest rows (row-wise)."""
    sharded, _ = split_tables(w, spec)
    if not sharded:
        return 1 << 30  # everything replicated: pure data parallelism has no placement limit
    if spec.strategy == "table_wise":
        return len(sharded)
    if spec.strategy == "column_wise":
        return len(sharded) * w.embedding_dim
    return min(w.table_rows[t] for t in sharded)


def _even_split(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _assign_balanced(pieces: list[tuple[int, int, int, int]], ranks: int, w: Workload) -> list[Shard]:
    """Assign (table, columns, col_offset, rows) pieces: fewest columns of lookups first, then fewest bytes.

    Lookup work is proportional to columns (every table sees the same batch and pooling), so balancing
    columns balances lookup time; bytes break ties so memory stays even too.
    """
    # (columns, bytes, rank) per rank: the least loaded is the heap's top, ties to the lower rank (as a min over all)
    loads: list[tuple[int, float, int]] = [(0, 0.0, r) for r in range(ranks)]
    shards: list[Shard] = []
    order = sorted(pieces, key=lambda p: (-p[1], -model.table_bytes(w, p[3], p[1]), p[0], p[2]))
    for table, cols, off, rows in order:
        load_cols, load_bytes, rank = heapq.heappop(loads)
        heapq.heappush(loads, (load_cols + cols, load_bytes + model.table_bytes(w, rows, cols), rank))
        shards.append(Shard(table=table, rank=rank, rows=rows, columns=cols, col_offset=off))
    return sorted(shards, key=lambda s: (s.rank, s.table, s.col_offset))


def place(w: Workload, spec: PlacementSpec, ranks: int, source: str | None = None) -> Placement:
    """Place the workload's tables on ``ranks`` ranks, or refuse with the largest count the scheme allows."""
    if ranks < 1:
        raise DlrmsimError("rank count must be at least 1", field="ranks", fix="give a positive number of ranks")
    limit = max_ranks(w, spec)
    if ranks > limit:
        raise too_many_ranks(w, spec, ranks, limit, source)
    sharded, replicated = split_tables(w, spec)
    e = w.embedding_dim
    rows = w.table_rows
    if spec.strategy == "row_wise":
        shards = [
            Shard(table=t, rank=r, rows=n, columns=e, row_offset=sum(_even_split(rows[t], ranks)[:r]))
            for t in sharded
            for r, n in enumerate(_even_split(rows[t], ranks))
        ]
    else:
        pieces_per_table = 1 if spec.strategy == "table_wise" else max(1, -(-ranks // max(1, len(sharded))))
        pieces: list[tuple[int, int, int, int]] = []
        for t in sharded:
            offset = 0
            for cols in _even_split(e, pieces_per_table):
                pieces.append((t, cols, offset, rows[t]))
                offset += cols
        shards = _assign_balanced(pieces, ranks, w)
    return Placement(
        spec=spec, ranks=ranks, shards=tuple(shards), replicated_tables=tuple(replicated), sharded_tables=tuple(sharded)
    )


def too_many_ranks(w: Workload, spec: PlacementSpec, ranks: int, limit: int, source: str | None) -> DlrmsimError:
    sharded, _ = split_tables(w, spec)
    what = {
        "table_wise": f"{len(sharded)} model-parallel tables",
        "column_wise": f"{len(sharded)} tables x {w.embedding_dim} columns",
        "row_wise": "rows of the smallest sharded table",
    }[spec.strategy]
    fix = f"use at most {limit} ranks"
    if spec.strategy == "table_wise":
        fix += " or --placement column_wise"
    return DlrmsimError(
        f"{ranks} ranks exceed the {limit} a {spec.strategy} placement allows ({what})",
        source=source or f"{w.name}.yaml",
        field="tables",
        fix=fix,
    )


def min_ranks_for_capacity(
    w: Workload, spec: PlacementSpec, capacity_bytes: float, state_bytes_per_param: float = 4.0, upto: int = 4096
) -> int | None:
    """The fewest ranks of ``capacity_bytes`` memory each that hold the workload, or None if none up to ``upto``."""
    for p in range(1, min(upto, max_ranks(w, spec)) + 1):
        if place(w, spec, p).max_memory(w, state_bytes_per_param) <= capacity_bytes:
            return p
    return None


def rank_needs(w: Workload, placement: Placement, state_bytes_per_param: float = 4.0) -> list[float]:
    """Bytes of model state on each rank (``Placement.memory_on``), in rank order."""
    return [placement.memory_on(w, r, state_bytes_per_param) for r in range(placement.ranks)]


def map_placement(
    w: Workload,
    placement: Placement,
    capacities: Sequence[float],
    state_bytes_per_param: float = 4.0,
    sockets: Sequence[int] | None = None,
    source: str | None = None,
    topology: str = "the topology",
) -> RankMapping:
    """The sockets the placement's ranks run on: the user's ``sockets`` (checked) or the memory-aware default.

    ``capacities`` are the topology's endpoint memories (bytes) in its order. No mapping that holds the ranks
    is a one-line error saying the fewest ranks that fit.
    """
    needs = rank_needs(w, placement, state_bytes_per_param)
    if sockets is not None:
        return check_explicit(needs, capacities, sockets, source=source)
    found = map_ranks(needs, capacities)
    if found is not None:
        return found
    fewest = fewest_ranks(w, placement.spec, capacities, state_bytes_per_param)
    fix = f"use at least {fewest} ranks" if fewest else "use column_wise placement or a topology with more memory"
    big = max(capacities) if capacities else 0.0
    raise DlrmsimError(
        f"{placement.ranks} ranks need up to {max(needs) / 1e9:.1f} GB per rank and no {placement.ranks} sockets of "
        f"{topology} hold them (largest socket {big / 1e9:.1f} GB)"
        if placement.ranks > 1
        else f"1 rank needs {needs[0] / 1e9:.1f} GB and no socket of {topology} holds it (largest {big / 1e9:.1f} GB)",
        source=source or f"{w.name}.yaml",
        field="tables",
        fix=fix,
    )


def fewest_ranks(
    w: Workload,
    spec: PlacementSpec,
    capacities: Sequence[float],
    state_bytes_per_param: float = 4.0,
    sockets: Sequence[int] | None = None,
) -> int | None:
    """The fewest ranks some mapping onto these endpoints holds (onto ``sockets``, in order, when given), or None."""
    limit = min(max_ranks(w, spec), len(capacities) if sockets is None else len(sockets))
    for p in range(1, limit + 1):
        needs = rank_needs(w, place(w, spec, p), state_bytes_per_param)
        if sockets is not None:
            if all(n <= capacities[s] for n, s in zip(needs, sockets[:p], strict=True)):
                return p
        elif map_ranks(needs, capacities) is not None:
            return p
    return None


def describe_mapping(mapping: RankMapping) -> str:
    """``"sockets 56-59 (memory-aware)"``: one phrase for tables and reports."""
    return f"socket{'s' if len(mapping.sockets) > 1 else ''} {format_sockets(mapping.sockets)} ({mapping.reason})"
