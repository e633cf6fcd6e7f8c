"""Property tests of the workload model: Eq. 1 / Eq. 2 invariants and placement conservation laws."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlrmsim.workloads import load_workload, model
from dlrmsim.workloads.placement import PlacementSpec, place
from dlrmsim.workloads.schema import Workload, ZipfIndices

SMALL = load_workload("small")
MLPERF = load_workload("mlperf")


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    e = draw(st.sampled_from([4, 8, 16, 32, 64]))
    bottom = [draw(st.integers(1, 64)), *draw(st.lists(st.integers(1, 64), max_size=3)), e]
    return Workload(
        name="gen",
        tables={"rows": draw(st.lists(st.integers(1, 10_000), min_size=1, max_size=12))},
        embedding_dim=e,
        lookups_per_sample=draw(st.integers(1, 20)),
        bottom_mlp=bottom,
        top_mlp=draw(st.lists(st.integers(1, 64), min_size=1, max_size=4)),
        minibatch={"strong_global": 64, "weak_local": 8},
    )


@given(w=workloads(), batch=st.integers(1, 10**6))
def test_eq1_is_the_weight_gradient_size_whatever_the_batch(w: Workload, batch: int) -> None:
    # The backward-by-weights GEMM output is fo x fi for any batch; Eq. 1 adds the bias gradients.
    grads = sum(
        (
            model.layer_gemm(layer, batch, model.Pass.BACKWARD_WEIGHTS).m
            * model.layer_gemm(layer, batch, model.Pass.BACKWARD_WEIGHTS).n
        )
        + layer.fan_out
        for layer in model.mlp_layers(w)
    )
    assert model.allreduce_bytes(w) == grads * w.element_bytes


@given(w=workloads(), ranks=st.integers(1, 12))
def test_eq1_does_not_depend_on_ranks_or_minibatch(w: Workload, ranks: int) -> None:
    bigger = w.model_copy(update={"minibatch": w.minibatch.model_copy(update={"strong_global": 4096 * ranks})})
    assert model.allreduce_bytes(bigger) == model.allreduce_bytes(w)


@given(w=workloads(), a=st.integers(1, 10**6), b=st.integers(1, 10**6))
def test_eq2_is_linear_in_the_global_minibatch(w: Workload, a: int, b: int) -> None:
    assert model.alltoall_bytes(w, a + b) == pytest.approx(model.alltoall_bytes(w, a) + model.alltoall_bytes(w, b))
    assert model.alltoall_bytes(w, 3 * a) == pytest.approx(3 * model.alltoall_bytes(w, a))


@settings(max_examples=60)
@given(w=workloads(), data=st.data())
def test_eq2_equals_what_the_placement_sends(w: Workload, data: st.DataObject) -> None:
    """Every rank sends its shards' columns for the whole global batch: summed, that is Eq. 2."""
    strategy = data.draw(st.sampled_from(["table_wise", "column_wise"]))
    spec = PlacementSpec(strategy=strategy)
    limit = w.num_tables if strategy == "table_wise" else w.num_tables * w.embedding_dim
    ranks = data.draw(st.integers(1, min(limit, 40)))
    n = data.draw(st.integers(1, 5000))
    p = place(w, spec, ranks)
    sent = sum(s.columns * n * w.element_bytes for s in p.shards)
    assert sent == pytest.approx(model.alltoall_bytes(w, n))


@settings(max_examples=60)
@given(w=workloads(), g=st.sampled_from([1, 2, 4]))
def test_column_split_keeps_total_bytes_and_divides_per_rank_bytes(w: Workload, g: int) -> None:
    ranks = w.num_tables * g
    p = place(w, PlacementSpec(strategy="column_wise"), ranks)
    total = sum(model.table_bytes(w, s.rows, s.columns) for s in p.shards)
    assert total == pytest.approx(model.tables_bytes(w))
    if w.embedding_dim % g == 0:
        per_table = sorted(model.table_bytes(w, r) / g for r in w.table_rows)
        per_rank = sorted(p.table_bytes_on(w, r) for r in range(ranks))
        # one piece per rank, each 1/g of a whole table
        assert sorted(s.columns for s in p.shards) == [w.embedding_dim // g] * ranks
        assert sum(per_rank) == pytest.approx(sum(per_table) * g)
        assert max(per_rank) == pytest.approx(max(per_table))


def test_mlperf_column_split_at_64_ranks_gives_32_columns() -> None:
    # [MLPerf21]: 10 small tables replicated, 16 large ones split g = 64/16 = 4 ways into E/4 = 32 columns.
    p = place(MLPERF, PlacementSpec(strategy="column_wise", replicate_below_rows=2048), 64)
    assert len(p.replicated_tables) == 10 and len(p.sharded_tables) == 16
    assert {s.columns for s in p.shards} == {32}
    assert len(p.shards) == 64 and {s.rank for s in p.shards} == set(range(64))


def test_row_wise_keeps_every_row_once() -> None:
    p = place(SMALL, PlacementSpec(strategy="row_wise"), 3)
    for t, rows in enumerate(SMALL.table_rows):
        assert sum(s.rows for s in p.shards if s.table == t) == rows


def test_fewest_sockets_for_capacity() -> None:
    from dlrmsim.workloads.placement import min_ranks_for_capacity

    large = load_workload("large")
    # 384 GiB of tables over 64 equal tables: 96 GB sockets hold 14 tables (84 GiB) -> ceil(64/14) = 5 sockets
    assert min_ranks_for_capacity(large, PlacementSpec(), 96e9) == 5
    assert min_ranks_for_capacity(large, PlacementSpec(), 192e9) == 3
    assert min_ranks_for_capacity(SMALL, PlacementSpec(), 192e9) == 1


def test_expected_unique_rows_closed_forms() -> None:
    # Uniform: M (1 - (1 - 1/M)^k); one draw touches one row; zipf touches fewer rows than uniform.
    assert model.expected_unique_rows(1000, 1, SMALL.index_distribution) == pytest.approx(1.0)
    assert model.expected_unique_rows(1000, 1000, SMALL.index_distribution) == pytest.approx(1000 * (1 - (1 - 1e-3) ** 1000))
    zipf = ZipfIndices(kind="zipf", exponent=1.05)
    for rows in (100, 10_000, 40_000_000):
        assert model.expected_unique_rows(rows, 16384, zipf) < model.expected_unique_rows(rows, 16384, SMALL.index_distribution)
    # blocked evaluation agrees with the exact sum on a table just above the exact threshold
    import numpy as np

    rows = 20_000
    p = np.arange(1, rows + 1, dtype=float) ** -1.05
    p /= p.sum()
    exact = float(np.sum(1 - (1 - p) ** 5000))
    assert model.expected_unique_rows(rows, 5000, zipf) == pytest.approx(exact, rel=2e-3)
