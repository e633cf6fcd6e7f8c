"""The iteration graph moves exactly the Eq. 1 / Eq. 2 volumes and does exactly the workload's flops."""

from __future__ import annotations

import numpy as np
import pytest

from dlrmsim.engine.costs import MATRIX_KINDS
from dlrmsim.training.taskgraph import (
    IterationSettings,
    Post,
    Task,
    UpdateCosts,
    Wait,
    build_iteration,
    local_batches,
    update_reuse_bytes,
)
from dlrmsim.workloads import load_workload, model
from dlrmsim.workloads.placement import PlacementSpec, place

SMALL = load_workload("small")
MLPERF = load_workload("mlperf")


def graph(w, ranks, strategy="table_wise", replicate=None, **kw):
    pl = place(w, PlacementSpec(strategy=strategy, replicate_below_rows=replicate), ranks)
    s = IterationSettings(global_batch=kw.pop("global_batch", w.minibatch.strong_global), **kw)
    return build_iteration(w, pl, s), pl


@pytest.mark.parametrize("comm", ["alltoall", "fused-scatter", "scatter-list"])
@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_exchange_volume_is_eq2_minus_the_local_part(comm: str, ranks: int) -> None:
    g, _ = graph(SMALL, ranks, comm=comm)
    fwd = [c for c in g.collectives.values() if "fwd" in c.cid]
    sent = sum(float(c.matrix.sum()) for c in fwd)
    n = SMALL.minibatch.strong_global
    # Eq. 2 counts every sample's embedding; each rank keeps its own 1/p locally.
    assert sent == pytest.approx(model.alltoall_bytes(SMALL, n) * (ranks - 1) / ranks)
    bwd = [c for c in g.collectives.values() if "bwd" in c.cid]
    assert sum(float(c.matrix.sum()) for c in bwd) == pytest.approx(sent)


@pytest.mark.parametrize("bucket", [1e3, 1e6, 25e6, 1e12])
def test_allreduce_buckets_add_up_to_eq1(bucket: float) -> None:
    g, _ = graph(SMALL, 4, bucket_bytes=bucket)
    ar = [c for c in g.collectives.values() if c.op == "allreduce"]
    assert sum(c.nbytes for c in ar) == model.allreduce_bytes(SMALL)
    if bucket >= 1e12:
        assert len(ar) == 1


def test_replicated_tables_join_the_allreduce() -> None:
    g, pl = graph(MLPERF, 16, replicate=2048)
    extra = sum(MLPERF.table_rows[t] * MLPERF.embedding_dim * 4 for t in pl.replicated_tables)
    ar = sum(c.nbytes for c in g.collectives.values() if c.op == "allreduce")
    assert ar == pytest.approx(model.allreduce_bytes(MLPERF) + extra)


def test_one_rank_has_no_communication_and_all_the_flops() -> None:
    g, _ = graph(SMALL, 1, global_batch=2048)
    assert g.collectives == {}
    prog = g.programs[0]
    assert all(isinstance(s, Task) for s in prog)
    fwd, bwd = model.flops_per_sample(SMALL)
    dense = sum(t.flops for t in prog if t.kind in MATRIX_KINDS)
    assert dense == pytest.approx((fwd + bwd) * 2048)


def test_every_rank_does_its_share_of_dense_flops() -> None:
    g, _ = graph(SMALL, 4)
    fwd, bwd = model.flops_per_sample(SMALL)
    for r, n in enumerate(local_batches(8192, 4)):
        dense = sum(t.flops for t in g.tasks(r) if t.kind in MATRIX_KINDS)
        assert dense == pytest.approx((fwd + bwd) * n)


def test_ranks_with_different_local_batches_each_get_their_own_mlp_work() -> None:
    # Because ranks build their MLP passes from one cache keyed by layer, local batch and pass, a key missing the
    # batch would hand the 256-sample ranks the 257-sample ranks' GEMMs; each rank's dense flops must follow its own
    # batch.
    g, _ = graph(SMALL, 4, global_batch=1026)
    fwd, bwd = model.flops_per_sample(SMALL)
    batches = local_batches(1026, 4)
    assert len(set(batches)) == 2
    for r, n in enumerate(batches):
        dense = sum(t.flops for t in g.tasks(r) if t.kind in MATRIX_KINDS)
        assert dense == pytest.approx((fwd + bwd) * n)


def test_blocking_waits_right_after_each_post() -> None:
    g, _ = graph(SMALL, 4, blocking=True)
    prog = g.programs[0]
    for i, step in enumerate(prog):
        if isinstance(step, Post):
            assert prog[i + 1] == Wait(step.collective)


def test_forward_alltoall_overlaps_only_the_bottom_mlp() -> None:
    g, _ = graph(SMALL, 4)
    prog = g.programs[0]
    names = [s.name if isinstance(s, Task) else type(s).__name__ + ":" + s.collective for s in prog]
    post, wait = names.index("Post:a2a_fwd"), names.index("Wait:a2a_fwd")
    between = [n for n in names[post + 1 : wait]]
    assert between and all(n.startswith("bot") for n in between)
    assert names[wait + 1] == "interaction.fwd"


def test_embedding_lookup_bytes() -> None:
    g, _ = graph(SMALL, 8)
    emb = [t for t in g.tasks(0) if t.name.endswith(".fwd") and t.kind == "embedding"]
    assert len(emb) == 1
    n, p, e = 8192, 50, 64
    assert emb[0].bytes == n * p * (e * 4 + 8) + n * e * 4


def test_lookups_and_updates_walk_every_table_on_their_rank_the_backward_none() -> None:
    """Page walks of a lookup compete with all the tables a rank holds (its shards and replicas)."""
    for ranks, replicate in ((1, None), (8, None), (4, 10**5)):
        g, pl = graph(MLPERF, ranks, replicate=replicate)
        for r in range(ranks):
            held = pl.table_bytes_on(MLPERF, r)
            tasks = g.tasks(r)
            walking = [t for t in tasks if t.kind in ("embedding", "update")]
            assert walking and all(t.tables_bytes == held > 0 for t in walking)
            assert all(t.tables_bytes == 0 for t in tasks if t.kind not in ("embedding", "update"))
            # an update's working set since its forward: every shard's distinct rows and gradient rows, and the
            # bytes of the dense work (MLPs, interaction, copies) run after the rank's last lookup
            shards = pl.shards_on(r)
            reuse = sum(
                update_reuse_bytes(MLPERF, sh.rows, MLPERF.minibatch.strong_global * MLPERF.lookups_per_sample, sh.columns)
                for sh in shards
            )
            last_lookup = max(i for i, t in enumerate(tasks) if t.kind == "embedding")
            for i, t in enumerate(tasks):
                if t.kind == "update":
                    dense = sum(u.bytes for u in tasks[last_lookup + 1 : i] if u.kind not in ("embedding_bwd", "update"))
                    assert dense > 0 and t.reuse_bytes == pytest.approx(reuse + dense)
            assert all(t.reuse_bytes == 0 for t in tasks if t.kind != "update")


def test_update_reuse_bytes_counts_distinct_rows_and_gradient_rows() -> None:
    lookups = 1e5
    unique = model.expected_unique_rows(10**6, lookups, MLPERF.index_distribution)
    assert update_reuse_bytes(MLPERF, 10**6, lookups, 128) == pytest.approx(
        unique * 128 * MLPERF.table_element_bytes + lookups * 128 * 4
    )


COSTS = UpdateCosts(atomic_conflict_s=100e-9, rtm_conflict_s=150e-9, cache_line_bytes=64, core_bandwidth_Bps=10e9)


def test_zipf_atomic_update_has_a_serial_chain_uniform_does_not() -> None:
    kw = dict(update_strategy="atomic", threads=24, update_costs=COSTS)
    g_zipf, pl = graph(MLPERF, 26, **kw)
    rows = pl.shards_on(0)[0].rows
    g_unif, _ = graph(SMALL, 8, **kw)
    zipf_serial = max(t.serial_s for t in g_zipf.tasks(0) if t.kind == "update")
    unif_serial = max(t.serial_s for t in g_unif.tasks(0) if t.kind == "update")
    assert zipf_serial > 100 * max(unif_serial, 1e-12)
    # closed form: (hottest-row lookups - 1) x cache lines per row x conflict time x cross-core share
    hottest = model.hottest_row_share(rows, MLPERF.index_distribution) * 16384
    assert zipf_serial == pytest.approx((hottest - 1) * (128 * 4 / 64) * 100e-9 * (1 - 1 / 24))
    # race-free: the owner of the hottest row reads its gradient rows alone at one core's bandwidth
    race_free, _ = graph(MLPERF, 26, update_strategy="race_free", threads=24, update_costs=COSTS)
    rf_serial = max(t.serial_s for t in race_free.tasks(0))
    assert rf_serial == pytest.approx(hottest * 128 * 4 / 10e9)
    assert zipf_serial > 5 * rf_serial


def test_row_wise_uses_reduce_scatter_of_eq2() -> None:
    g, _ = graph(SMALL, 4, strategy="row_wise")
    assert g.collectives["a2a_fwd"].op == "reduce_scatter"
    assert g.collectives["a2a_fwd"].nbytes == model.alltoall_bytes(SMALL, 8192)
    lookups = sum(t.flops for r in range(4) for t in g.tasks(r) if t.kind == "embedding" and t.name.endswith(".fwd"))
    assert lookups == pytest.approx(8 * 8192 * 50 * 64)


def test_local_batches_sum() -> None:
    assert sum(local_batches(16384, 26)) == 16384
    assert np.ptp(local_batches(16384, 26)) <= 1


@pytest.mark.parametrize("comm", ["alltoall", "fused-scatter", "scatter-list"])
@pytest.mark.parametrize("strategy", ["table_wise", "column_wise", "row_wise"])
def test_every_rank_posts_and_waits_on_every_collective_once(comm: str, strategy: str) -> None:
    # A collective starts only when all ranks have posted it; a rank that skips one deadlocks the run.
    g, _ = graph(MLPERF, 12, strategy=strategy, comm=comm, replicate=2048)
    for prog in g.programs:
        posts = [s.collective for s in prog if isinstance(s, Post)]
        waits = [s.collective for s in prog if isinstance(s, Wait)]
        assert sorted(posts) == sorted(g.collectives) == sorted(waits)
        order = {(type(s).__name__, s.collective): i for i, s in enumerate(prog) if isinstance(s, Post | Wait)}
        for cid in g.collectives:  # waited on only after it was posted
            assert order[("Post", cid)] < order[("Wait", cid)]


def test_every_table_backward_runs_before_any_sparse_update() -> None:
    # Autograd finishes every table's backward before the optimizer's first update (as PyTorch's DLRM and the
    # calibration runner do); only the fused variant interleaves them, one table at a time.
    g, _ = graph(SMALL, 2)
    kinds = [t.kind for t in g.tasks(0) if t.kind in ("embedding_bwd", "update")]
    tables = kinds.count("update")
    assert tables > 1 and kinds == ["embedding_bwd"] * tables + ["update"] * tables
    fused, _ = graph(SMALL, 2, fuse_backward_update=True)
    assert "embedding_bwd" not in {t.kind for t in fused.tasks(0)}


def test_a_run_starts_wherever_the_task_kind_changes() -> None:
    from dlrmsim.training.taskgraph import mark_run_starts

    prog = mark_run_starts(
        [
            Task("e0", "embedding", 0, 0),
            Task("e1", "embedding", 0, 0),
            Post("c"),
            Wait("c"),
            Task("e2", "embedding", 0, 0),
            Task("g", "gemm", 0, 0),
            Task("e3", "embedding", 0, 0),
        ]
    )
    # posts and waits do not break a run; the first task starts one (the previous iteration ended elsewhere)
    assert [s.run_start for s in prog if isinstance(s, Task)] == [True, False, False, True, True]
    g, _ = graph(SMALL, 2)
    starts = [t for t in g.tasks(0) if t.run_start and t.kind in ("embedding", "embedding_bwd", "update")]
    assert [t.kind for t in starts] == ["embedding", "embedding_bwd", "update"]  # one run of each per iteration


@pytest.mark.parametrize("strategy", ["table_wise", "column_wise", "row_wise"])
def test_input_dist_sends_each_ranks_local_ids_to_the_owners_before_any_lookup(strategy: str) -> None:
    """An implementation with an input distribution (TorchRec's KJTAllToAll) adds three alltoalls: because every
    rank's local samples' ids of a table go to each shard's owner, the values exchange carries local batch x
    pooling x index bytes per shard (a row shard its share of the lookups) and the lengths one int32 per sample
    per shard; the sizes go first, the lengths and values are posted together, and all are waited for before the
    first lookup."""
    from dlrmsim.training.implementations import InputDist
    from dlrmsim.training.taskgraph import INPUT_LENGTHS, INPUT_SPLITS, INPUT_VALUES, lookup_fraction

    dist = InputDist(split_bytes_per_table=8, length_bytes=4, source="test")
    ranks = 4
    g, pl = graph(SMALL, ranks, strategy=strategy, input_dist=dist)
    local = local_batches(SMALL.minibatch.strong_global, ranks)
    values = np.zeros((ranks, ranks))
    for sh in pl.shards:
        frac = lookup_fraction(SMALL, sh, strategy == "row_wise")
        for src in range(ranks):
            if src != sh.rank:
                values[src, sh.rank] += local[src] * SMALL.lookups_per_sample * frac * SMALL.index_bytes
    np.testing.assert_allclose(g.collectives[INPUT_VALUES].matrix, values)
    per_dst = np.bincount([sh.rank for sh in pl.shards], minlength=ranks)
    assert g.collectives[INPUT_LENGTHS].matrix[1, 0] == pytest.approx(local[1] * 4 * per_dst[0])
    assert g.collectives[INPUT_SPLITS].matrix[1, 0] == pytest.approx(8 * per_dst[0])
    for r in range(ranks):
        prog = g.programs[r]
        first_lookup = next(i for i, s in enumerate(prog) if isinstance(s, Task) and s.kind == "embedding")
        head = [(type(s).__name__, s.collective) for s in prog[:first_lookup] if isinstance(s, (Post, Wait))]
        assert head == [
            ("Post", INPUT_SPLITS),
            ("Wait", INPUT_SPLITS),
            ("Post", INPUT_LENGTHS),
            ("Post", INPUT_VALUES),
            ("Wait", INPUT_LENGTHS),
            ("Wait", INPUT_VALUES),
        ]
    # One rank holds every table: nothing to distribute.
    g1, _ = graph(SMALL, 1, input_dist=dist)
    assert not any(cid.startswith("input_a2a") for cid in g1.collectives)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("ranks", [1, 4])
def test_dense_first_order_runs_the_bottom_mlp_first_and_its_backward_after_the_embeddings(fused: bool, ranks: int) -> None:
    base, _ = graph(SMALL, ranks, fuse_backward_update=fused)
    dense, _ = graph(SMALL, ranks, fuse_backward_update=fused, dense_first=True)
    order = [s.name for s in dense.programs[0] if isinstance(s, Task)]
    first = {name: order.index(name) for name in order}

    def where(prefix: str, suffix: str) -> list[int]:
        return [i for name, i in first.items() if name.startswith(prefix) and name.endswith(suffix)]

    # Because PyTorch's DLRM, TorchRec and the project runner call the bottom MLP before the embeddings, and
    # autograd runs the later-created embedding nodes first in backward:
    assert max(where("bot", ".fwd")) < min(where("emb", ".fwd"))
    table_backward = where("emb", ".update") if fused else where("emb", ".bwd")
    assert max(table_backward) < min(where("bot", ".bwd_weights"))
    if not fused:  # the separate optimizer step follows the whole backward
        assert max(where("bot", ".bwd_weights")) < min(where("emb", ".update"))
    # The same tasks, only reordered, and every collective still posted and waited for once per rank.
    assert sorted(order) == sorted(s.name for s in base.programs[0] if isinstance(s, Task))
    for program in dense.programs:
        posts = [s.collective for s in program if isinstance(s, Post)]
        waits = [s.collective for s in program if isinstance(s, Wait)]
        assert sorted(posts) == sorted(waits) == sorted(dense.collectives)
        for cid in posts:  # each wait after its post
            assert program.index(Post(cid)) < program.index(Wait(cid))
