"""Cost formulas of request-level serving as small pure functions: table sizes, bytes per lookup, FC flops and
bytes, transfer sizes, table placement over a node's cards, and the memory check.

Units: bytes, flops (a multiply-add counts 2), items (ranking candidates), seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from dlrmsim.errors import DlrmsimError
from dlrmsim.topologies.topology import ComputeSpec, EfficiencyTable
from dlrmsim.workloads.schema import BYTES_PER_ELEMENT
from dlrmsim.workloads.serving.schema import Assumptions, ServingModel, ServingWorkload

GB = 1e9
QUANTIZED = ("int8", "int4")


@dataclass(frozen=True)
class Table:
    """One embedding table of the served model (expanded from its group)."""

    index: int
    group: str
    rows: int
    mean_pooling: float
    max_pooling: int


def tables(m: ServingModel) -> list[Table]:
    out: list[Table] = []
    for g in m.tables:
        for _ in range(g.count):
            out.append(Table(len(out), g.name, g.rows, g.pooling.mean, g.pooling.max))
    return out


def row_bytes(m: ServingModel) -> float:
    """Stored bytes of one row: dim x bytes per element, plus the scale/bias of quantized rows."""
    overhead = m.row_overhead_bytes if m.table_precision in QUANTIZED else 0.0
    return m.embedding_dim * BYTES_PER_ELEMENT[m.table_precision] + overhead


def table_bytes(m: ServingModel, rows: int) -> float:
    return rows * row_bytes(m)


def lookup_bytes(m: ServingModel, access_bytes: int) -> float:
    """Memory bytes one lookup moves: the row rounded up to whole accesses, plus its index."""
    return math.ceil(row_bytes(m) / access_bytes) * access_bytes + m.index_bytes


def pooled_bytes(m: ServingModel) -> float:
    """Bytes of one pooled vector (one item, one table) sent to the dense card."""
    return m.embedding_dim * BYTES_PER_ELEMENT[m.pooled_precision]


def interaction_width(m: ServingModel) -> int:
    s = m.num_tables
    if m.interaction == "dot":
        return (s + 1) * s // 2 + m.bottom_mlp[-1]
    return s * m.embedding_dim + m.bottom_mlp[-1]


def fc_shapes(m: ServingModel) -> list[tuple[int, int]]:
    """(fan_in, fan_out) of every FC layer, bottom then top."""
    b = m.bottom_mlp
    top = [interaction_width(m), *m.top_mlp]
    return [(b[i], b[i + 1]) for i in range(len(b) - 1)] + [(top[i], top[i + 1]) for i in range(len(top) - 1)]


def fc_params(m: ServingModel) -> int:
    """FC weights and biases (elements)."""
    return sum(fi * fo + fo for fi, fo in fc_shapes(m))


def dense_flops(m: ServingModel, items: int) -> float:
    """Forward flops of the FC layers (2 fi fo per item) plus the dot interaction (2 (S+1)^2 E per item)."""
    fc = sum(2.0 * fi * fo for fi, fo in fc_shapes(m))
    inter = 2.0 * (m.num_tables + 1) ** 2 * m.embedding_dim if m.interaction == "dot" else 0.0
    return items * (fc + inter)


def dense_bytes(m: ServingModel, items: int, dense_batch_items: int) -> float:
    """Memory traffic of the dense part: the FC weights once per pass of ``dense_batch_items`` items, plus
    every layer's input and output activations and the interaction's pooled inputs once."""
    eb = BYTES_PER_ELEMENT[m.dense_precision]
    passes = max(1, math.ceil(items / dense_batch_items))
    acts = sum(fi + fo for fi, fo in fc_shapes(m)) * eb + (m.num_tables + 1) * pooled_bytes(m)
    return passes * fc_params(m) * eb + items * acts


def fc_ops_per_byte(m: ServingModel, items: int) -> float:
    """Arithmetic intensity of one FC pass over ``items`` items (flops per byte of memory traffic)."""
    return dense_flops(m, items) / dense_bytes(m, items, items)


def dense_weight_bytes(m: ServingModel) -> float:
    return fc_params(m) * BYTES_PER_ELEMENT[m.dense_precision]


def index_bytes(m: ServingModel, lookups: float, items: int, n_tables: int) -> float:
    """Host-to-card input bytes for ``n_tables`` tables: the indices and one length per (item, table)."""
    return lookups * m.index_bytes + items * n_tables * m.length_bytes


def dense_input_bytes(m: ServingModel, items: int) -> float:
    """Dense features of ``items`` items sent to the card that runs the dense part."""
    return items * m.dense_features * BYTES_PER_ELEMENT[m.pooled_precision]


def gather_bandwidth_per_core(a: Assumptions) -> float:
    """B/s one core pulls with random row reads: outstanding misses x access size / latency (Little's law)."""
    return a.outstanding_misses_per_core * a.access_bytes / (a.memory_latency_ns * 1e-9)


def serving_spec(spec: ComputeSpec, a: Assumptions) -> ComputeSpec:
    """The spec the serving model runs on: the topology's, with the workload's assumptions filling what it leaves out
    (a constant GEMM efficiency when the topology has no table; saturation cores from the per-core gather rate)."""
    changes: dict[str, object] = {}
    if spec.gemm_efficiency.points in ((), ((1.0, 1.0),)):
        changes["gemm_efficiency"] = EfficiencyTable.constant(a.gemm_efficiency)
    if spec.saturation_cores is None:
        changes["saturation_cores"] = spec.memory_bandwidth_Bps / gather_bandwidth_per_core(a)
    return replace(spec, **changes) if changes else spec


def split_cores(cores: int, lookup_fraction: float) -> tuple[int, int]:
    """(lookup cores, dense cores): round(f x cores) for lookups, at least one core each."""
    if cores < 2:
        raise DlrmsimError(
            f"a unit with {cores} core cannot split lookup and dense cores", field="partitioning.lookup_core_fraction"
        )
    k = min(max(round(lookup_fraction * cores), 1), cores - 1)
    return k, cores - k


# --- placement and memory -------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodePlacement:
    """Which card position holds each table, and what each card must store."""

    card_of_table: tuple[int, ...]
    table_bytes: tuple[float, ...]  # per card
    dense_bytes: float  # FC weights replicated on every card
    reserved_bytes: float
    capacity_bytes: float
    expected_lookups: tuple[float, ...]  # per card, per item

    @property
    def cards(self) -> int:
        return len(self.table_bytes)

    def tables_on(self, card: int) -> list[int]:
        return [t for t, c in enumerate(self.card_of_table) if c == card]

    def needed_bytes(self, card: int) -> float:
        return self.table_bytes[card] + self.dense_bytes + self.reserved_bytes


def place_tables(w: ServingWorkload, cards: int, capacity_bytes: float, unit_name: str = "card") -> NodePlacement:
    """Place whole tables on ``cards`` cards by the workload's policy, refusing a model that does not fit.

    ``size``: largest table first onto the card holding the fewest bytes. ``lookups``: the table with the most
    expected lookups per item first onto the card with the fewest expected lookups (ties: fewest bytes). A table
    goes only where it fits; the error gives the memory needed and the memory available.
    """
    m = w.model
    ts = tables(m)
    sizes = np.array([table_bytes(m, t.rows) for t in ts])
    loads = np.array([t.mean_pooling for t in ts])
    dense = dense_weight_bytes(m)
    reserved = w.assumptions.reserved_memory_GB * GB
    room = capacity_bytes - dense - reserved
    needed_total = float(sizes.sum()) + cards * (dense + reserved)
    available_total = cards * capacity_bytes

    def refuse(detail: str) -> DlrmsimError:
        return DlrmsimError(
            f"model does not fit: needs {needed_total / GB:.1f} GB ({sizes.sum() / GB:.1f} GB of {m.table_precision} tables + "
            f"{dense / GB:.3f} GB FC weights and {reserved / GB:.1f} GB reserved per {unit_name}) but {cards} x "
            f"{capacity_bytes / GB:.1f} GB = {available_total / GB:.1f} GB is available{detail}",
            field="model.tables",
            fix="quantize the tables further (model.table_precision: int4), use fewer or smaller tables, or more nodes",
        )

    if needed_total > available_total:
        raise refuse("")
    if w.partitioning.placement == "size":
        order = np.argsort(-sizes, kind="stable")
    else:
        order = np.lexsort((-sizes, -loads))
    held = np.zeros(cards)
    lk = np.zeros(cards)
    where = [0] * len(ts)
    for t in order:
        fits = np.flatnonzero(held + sizes[t] <= room)
        if fits.size == 0:
            raise refuse(
                f"; table {t} ({ts[t].group}, {sizes[t] / GB:.2f} GB) fits on no {unit_name} (most room left on one: "
                f"{(room - held.min()) / GB:.2f} GB)"
            )
        if w.partitioning.placement == "size":
            c = int(fits[np.argmin(held[fits])])
        else:
            c = int(fits[np.lexsort((held[fits], lk[fits]))[0]])
        where[t] = c
        held[c] += sizes[t]
        lk[c] += loads[t]
    return NodePlacement(tuple(where), tuple(held.tolist()), dense, reserved, capacity_bytes, tuple(lk.tolist()))
