"""Kernels compute the right numbers; host collectives move the right data; the DLRM runner runs real iterations."""

from __future__ import annotations

import numpy as np
import pytest

from dlrmsim.calibration import collectives_host
from dlrmsim.calibration.benchmarks import embedding as emb_bench
from dlrmsim.calibration.benchmarks.embedding import EmbeddingConfig, embedding_configs, tables_per_cycle
from dlrmsim.calibration.benchmarks.overhead import DISPATCH_ELEMENTS, dispatch_task
from dlrmsim.calibration.benchmarks.timing import TimingPolicy, time_op
from dlrmsim.calibration.collectives_host import run_ranks
from dlrmsim.calibration.dlrm_runner import PHASES, _Rank, run_dlrm_iteration
from dlrmsim.calibration.ops import NumpyOps, embedding_bytes, get_ops, make_indices
from dlrmsim.errors import DlrmsimError
from dlrmsim.workloads import load_workload
from dlrmsim.workloads.model import allreduce_bytes, alltoall_bytes, embedding_backward_bytes, embedding_forward_bytes
from dlrmsim.workloads.schema import Tables, ZipfIndices

BACKENDS = ["numpy", pytest.param("torch", marks=pytest.mark.torch)]


def _kernels(backend: str):  # noqa: ANN202
    if backend == "torch":
        pytest.importorskip("torch", reason="torch is an optional extra (pip install 'dlrmsim[torch]')")
    return get_ops(backend)


def _tiny(tables: int = 4, rows: int = 512, zipf: bool = False):  # noqa: ANN202
    w = load_workload("small")
    update = {
        "name": "tiny",
        "tables": Tables(count=tables, rows=rows),
        "embedding_dim": 16,
        "lookups_per_sample": 4,
        "bottom_mlp": [32, 24, 16],
        "top_mlp": [32, 16, 1],
    }
    if zipf:
        update["index_distribution"] = ZipfIndices(kind="zipf", exponent=1.05)
    return w.model_copy(update=update)


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_ops_match_a_reference(backend: str) -> None:
    """The EmbeddingBag ops the benchmarks time and the runner trains with compute a sum-pooled lookup, its
    gradient and a sparse SGD step that accumulates repeated rows, on both backends."""
    ops = _kernels(backend)
    rows, dim, batch, pool = 64, 8, 16, 5
    idx = make_indices(rows, batch * pool, "zipf", 1.2, np.random.default_rng(1)).reshape(batch, pool)
    assert len(np.unique(idx)) < batch * pool  # repeats exercise the update's accumulation
    with ops.threads(1):
        table = ops.new_table(rows, dim, np.random.default_rng(0))
        start = np.array(ops.table_array(table), copy=True)
        pooled = ops.numpy(ops.emb_forward(table, idx))
        assert pooled == pytest.approx(start[idx].sum(axis=1), rel=1e-5, abs=1e-7)
        # d(pooled) = 1e-3 everywhere, so row r's gradient is 1e-3 x (its lookup count)
        grad = ops.emb_backward(table, idx, ops.tensor(np.full((batch, dim), 1e-3, dtype=np.float32)))
        ops.emb_update(table, idx, grad, 0.01)
    expected = start - 0.01 * 1e-3 * np.bincount(idx.reshape(-1), minlength=rows)[:, None]
    assert ops.table_array(table) == pytest.approx(expected, rel=1e-5, abs=1e-7)
    nb = embedding_bytes(batch, pool, dim, len(np.unique(idx)))
    assert nb["forward"] == pytest.approx(pool * batch * dim * 4 + pool * batch * 8 + batch * dim * 4)


def test_embedding_byte_counts_match_the_simulator_model() -> None:
    w = _tiny()
    b = 128
    nb = embedding_bytes(b, w.lookups_per_sample, w.embedding_dim, unique_rows=100)
    assert nb["forward"] == pytest.approx(embedding_forward_bytes(w, b))
    assert nb["backward"] == pytest.approx(embedding_backward_bytes(w, b))


def test_numpy_embedding_update_accumulates_repeated_rows() -> None:
    ops = NumpyOps()
    table = np.zeros((10, 3), dtype=np.float32)
    idx = np.array([[1, 1, 2], [1, 3, 3]])
    dpooled = np.array([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]], dtype=np.float32)
    grad = ops.emb_backward(table, idx, dpooled)
    ops.emb_update(table, idx, grad, lr=1.0)
    assert table[:, 0].tolist() == [0, -4, -1, -4, 0, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_gemm_and_streams_run_and_time(backend: str) -> None:
    k = _kernels(backend)
    policy = TimingPolicy(warmup=1, repeats=3, min_sample_s=0.001)
    with k.threads(1):
        for op in (
            k.make_gemm(64, 32, 16),
            k.make_linear(8, 16, 4, "fwd"),
            k.make_linear(8, 16, 4, "bwd_data"),
            k.make_linear(8, 16, 4, "bwd_weights"),
            k.make_stream("copy", 1 << 16, 1),
            k.make_stream("triad", 1 << 16, 1),
        ):
            t, spread, reps = time_op(op, policy)
            assert t > 0 and spread >= 0 and reps == 3


def test_zipf_indices_are_skewed_and_in_range() -> None:
    rng = np.random.default_rng(0)
    z = make_indices(10_000, 50_000, "zipf", 1.05, rng)
    u = make_indices(10_000, 50_000, "uniform", 1.05, rng)
    assert z.min() >= 0 and z.max() < 10_000 and u.min() >= 0 and u.max() < 10_000
    # Distinct rows touched match the simulator's closed form for both distributions.
    from dlrmsim.workloads.model import expected_unique_rows
    from dlrmsim.workloads.schema import UniformIndices

    assert len(np.unique(z)) == pytest.approx(
        expected_unique_rows(10_000, 50_000, ZipfIndices(kind="zipf", exponent=1.05)), rel=0.03
    )
    assert len(np.unique(u)) == pytest.approx(expected_unique_rows(10_000, 50_000, UniformIndices()), rel=0.01)


def _collective_body(comm) -> dict:  # noqa: ANN001
    r, size = comm.rank, comm.size
    buf = np.arange(10, dtype=np.float32) + 100 * r
    comm.allreduce(buf)
    big = np.full(3_000_001, float(r + 1), dtype=np.float32)  # spans several staging pieces
    comm.allreduce(big)
    send = np.stack([np.full(5, 10 * r + d, dtype=np.float32) for d in range(size)])
    recv = np.zeros_like(send)
    nbytes = comm.alltoall(send, recv)
    return {"sum": buf.tolist(), "big": (float(big.min()), float(big.max())), "recv": recv[:, 0].tolist(), "bytes": nbytes}


@pytest.mark.parametrize("impl", ["shm", pytest.param("gloo", marks=pytest.mark.torch)])
def test_host_collectives_move_the_right_data(impl: str) -> None:
    if impl == "gloo":
        pytest.importorskip("torch", reason="gloo needs the optional torch extra")
    res = run_ranks(_collective_body, 2, impl, slot_bytes=4 * 2**20)
    for r, out in enumerate(res):
        assert out["sum"] == [2 * i + 100.0 for i in range(10)]
        assert out["big"] == (3.0, 3.0)
        assert out["recv"] == [10.0 * s + r for s in range(2)]
        assert out["bytes"] == 2 * 5 * 4


def test_host_collectives_fit_a_small_shared_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    # A container's /dev/shm: 64 MiB by default (Docker), here 16 MiB. Segments are created sparse, so the default
    # slots (3 x 64 MiB for 2 ranks) were created without error and the first write past the space killed a rank.
    monkeypatch.setattr(collectives_host, "shm_free_bytes", lambda: 16 * 2**20)
    res = run_ranks(_collective_body, 2, "shm")
    # because the slots shrink to what half the free space holds (2 MiB here), the same data moves, in more pieces
    assert all(out["big"] == (3.0, 3.0) and out["sum"] == [2 * i + 100.0 for i in range(10)] for out in res)


def test_the_staging_slot_fits_the_shared_memory_or_says_why_not() -> None:
    fit = collectives_host.fitting_slot_bytes
    slot = collectives_host.SLOT_BYTES
    # because a roomy /dev/shm keeps the full slot; Docker's default 64 MiB holds three 10 MiB slots in its half
    assert fit(2, slot, 24 * 2**30) == slot
    assert fit(2, slot, 64 * 2**20) == 10 * 2**20
    assert collectives_host.shm_bytes(2, fit(2, slot, 64 * 2**20)) <= 32 * 2**20
    # and where not even 1 MiB slots fit, a one-line error names /dev/shm and the fix
    with pytest.raises(DlrmsimError, match="only 2 MiB free") as err:
        fit(2, slot, 2 * 2**20)
    assert err.value.field == "/dev/shm" and "--shm-size" in (err.value.fix or "")


def _failing_body(comm) -> None:  # noqa: ANN001
    raise ValueError(f"boom on rank {comm.rank}")


def test_a_failing_rank_raises_with_its_traceback() -> None:
    with pytest.raises(RuntimeError, match="boom on rank"):
        run_ranks(_failing_body, 2, "shm")


@pytest.mark.parametrize("backend", BACKENDS)
def test_dlrm_iteration_one_rank(backend: str) -> None:
    _kernels(backend)
    w = _tiny(zipf=True)
    m = run_dlrm_iteration(w, batch=64, ranks=1, threads=1, backend=backend, iterations=3, warmup=1)
    assert set(m.phases_s) == set(PHASES)
    # No communication on one rank: no bytes, and the phase is a bookkeeping sliver of the step (a bound relative
    # to the step, since a loaded host's scheduler tick can land in any phase, empty or not).
    assert m.allreduce_bytes == 0 and m.phases_s["alltoall_fwd"] < 0.1 * m.iteration_s
    for ph in ("bottom_mlp_fwd", "embedding_fwd", "top_mlp_fwd", "top_mlp_bwd", "embedding_update", "mlp_update"):
        assert m.phases_s[ph] > 0
    # Blocking mode: the phases tile the iteration. The median of sums and the sum of per-phase medians differ
    # by up to the iterations' own spread (a slow spell on a loaded host lands on one iteration): allow that,
    # plus 30% + 1 ms.
    spread = max(m.iteration_samples_s) - min(m.iteration_samples_s)
    assert abs(m.phase_sum_s - m.iteration_s) < 0.3 * m.iteration_s + 1e-3 + spread
    assert np.isfinite(m.final_loss) and 0 < m.final_loss < 5
    assert len(m.iteration_samples_s) == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_dlrm_iteration_two_ranks_moves_eq1_eq2_bytes(backend: str) -> None:
    _kernels(backend)
    w = _tiny(tables=4)
    m = run_dlrm_iteration(w, batch=64, ranks=2, threads=1, backend=backend, iterations=2, warmup=1)
    assert m.implementation == ("gloo" if backend == "torch" else "shm")
    assert m.allreduce_bytes == pytest.approx(allreduce_bytes(w))  # Eq. 1, per rank
    assert m.alltoall_bytes == pytest.approx(alltoall_bytes(w, 64))  # Eq. 2, all ranks, one direction
    assert m.phases_s["alltoall_fwd"] > 0 and m.phases_s["allreduce"] > 0
    assert np.isfinite(m.final_loss)


def test_dlrm_runner_draws_a_fresh_minibatch_for_every_step() -> None:
    """No step revisits another's indices: cycling a few minibatches could keep the validation's rows in the
    last-level cache from one step to the next, a reuse training over large tables does not have."""
    w = _tiny(tables=2)
    rank = _Rank(w, 64, get_ops("numpy"), None, seed=0, steps=5)
    assert len(rank.inputs) == 5
    idx = [np.concatenate([i.reshape(-1) for i in step[2]]) for step in rank.inputs]
    assert all(i.shape == (2 * 64 * w.lookups_per_sample,) for i in idx)
    assert all(not np.array_equal(idx[a], idx[b]) for a in range(5) for b in range(a))


def test_dlrm_runner_rejects_bad_inputs() -> None:
    from dlrmsim.errors import DlrmsimError

    w = _tiny(tables=2)
    with pytest.raises(DlrmsimError, match="multiple of ranks"):
        run_dlrm_iteration(w, batch=63, ranks=2)
    with pytest.raises(DlrmsimError, match="exceed the 2 tables"):
        run_dlrm_iteration(w, batch=64, ranks=4)
    with pytest.raises(DlrmsimError, match="needs .* GB of tables"):
        run_dlrm_iteration(load_workload("large"), batch=64, ranks=1)


def test_embedding_cycle_walks_tables_beyond_the_cache() -> None:
    mib = 1 << 20
    assert tables_per_cycle(EmbeddingConfig(2**18, 32, 4, "uniform", 2048), 32 * mib) == 2  # 32 MiB tables: 2 x 32 >= 64
    assert tables_per_cycle(EmbeddingConfig(2**16, 32, 4, "uniform", 2048), 32 * mib) == 4  # 8 MiB tables: capped at 4
    assert tables_per_cycle(EmbeddingConfig(2**21, 32, 4, "uniform", 2048), 32 * mib) == 2  # never fewer than 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_benchmark_times_a_run_s_first_call_apart(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emb_bench, "last_level_cache_bytes", lambda: 1 << 20)  # 4 tables of 256 KiB per cycle
    cfg = EmbeddingConfig(2**11, 32, 4, "uniform", 64)
    rows = emb_bench.embedding_task(_kernels(backend), cfg, 1, TimingPolicy(warmup=1, repeats=3, min_sample_s=0.0)).run()
    by_name = {m.name: m for m in rows}
    assert len(by_name) == 6 and all(m.time_s > 0 and m.params["tables"] == 4 for m in rows)
    for op in ("forward", "backward", "update"):
        rest, first = (
            by_name[f"embedding {op} r2048 d32 p4 uniform b64 t4 c1"],
            by_name[f"embedding {op} first r2048 d32 p4 uniform b64 t4 c1"],
        )
        assert (rest.params["position"], first.params["position"]) == ("rest", "first")
        assert {k: v for k, v in rest.params.items() if k != "position"} == {
            k: v for k, v in first.params.items() if k != "position"
        }
    with pytest.raises(ValueError, match="at least 2 tables"):
        emb_bench.time_embedding_cycle(
            _kernels(backend), cfg, [np.zeros(256, dtype=np.int64)], TimingPolicy(0, 1, 0.0), lambda: None, 1
        )


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_embedding_config_s_own_table_count_overrides_the_cache_rule(backend: str) -> None:
    cfg = EmbeddingConfig(2**11, 32, 4, "uniform", 64, tables=3)
    rows = emb_bench.embedding_task(_kernels(backend), cfg, 1, TimingPolicy(warmup=1, repeats=2, min_sample_s=0.0)).run()
    assert all(m.params["tables"] == 3 and " t3 c1" in m.name for m in rows)


@pytest.mark.parametrize("quick", [True, False])
@pytest.mark.parametrize("cache_mib", [32, 300])
def test_the_plan_cycles_its_first_table_shape_over_two_table_counts(quick: bool, cache_mib: int) -> None:
    configs = embedding_configs(quick, cache_mib << 20)
    first = (configs[0].rows, configs[0].dim)
    counts = {(c.rows, c.dim, c.pooling, c.distribution): set() for c in configs}
    for c in configs:
        counts[(c.rows, c.dim, c.pooling, c.distribution)].add(c.tables)
    # because the fit sees the cycle's traffic change at equal lookups only where one shape runs at two table
    # counts: the first shape at two, every other at the one tables_per_cycle chooses
    assert all(len(v) == (2 if k[:2] == first else 1) for k, v in counts.items())
    # because at a 32 MiB cache the rule gives the first shape 2 tables (and the plan adds 4), at 300 MiB it
    # gives 4 (and the plan adds 2): the same two benchmarks, never the same one twice
    assert all(v == {2, 4} for k, v in counts.items() if k[:2] == first)
    assert len(configs) == len(set(configs))


@pytest.mark.parametrize("backend", BACKENDS)
def test_dispatch_benchmark_reports_first_and_further_ops(backend: str) -> None:
    rows = dispatch_task(_kernels(backend), 1, TimingPolicy(warmup=1, repeats=3, min_sample_s=0.001)).run()
    assert sorted({str(m.params["position"]) for m in rows}) == ["first", "rest"]
    # because the multiplies time a task's first and further ops, and the costlier classes (a Python scalar operand,
    # a reduction) each time further ops beside them, at every element count
    muls = [m for m in rows if "op" not in m.params]
    assert len(muls) == 2 * len(DISPATCH_ELEMENTS) and all(m.time_s > 0 for m in rows)
    classes = sorted((str(m.params["op"]), int(m.params["elements"])) for m in rows if "op" in m.params)
    assert classes == sorted((c, n) for c in ("reduce", "scalar") for n in DISPATCH_ELEMENTS)
    assert all(
        m.params["position"] == "rest" and m.name.startswith(f"dispatch rest {m.params['op']} ") for m in rows if "op" in m.params
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_flush_streams_twice_the_last_level_cache(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    k = _kernels(backend)
    sizes: list[int] = []
    make = k.make_flush

    def spy(nbytes: int):  # noqa: ANN202
        sizes.append(nbytes)
        return make(nbytes)

    monkeypatch.setattr(k, "make_flush", spy)
    from dlrmsim.host import last_level_cache_bytes

    k.flush()
    k.flush()
    assert sizes == [2 * last_level_cache_bytes()]  # built once, reused by every later flush


def test_a_limited_flush_moves_at_most_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlrmsim.host import last_level_cache_bytes

    k = NumpyOps()
    sizes: list[int] = []
    make = k.make_flush
    monkeypatch.setattr(k, "make_flush", lambda n: sizes.append(n) or make(n))
    k.limit_flush(2 << 20)
    k.flush()
    k.limit_flush(1 << 20)
    k.flush()
    # because a tiny calibration limits its flushes (calibrate.TINY_FLUSH_BYTES), and any host's cache is over 1 MiB
    assert k.flush_bytes() == min(2 * last_level_cache_bytes(), 1 << 20) == 1 << 20
    # because a buffer built for one limit must not serve another (a drift probe repeats its calibration's flush)
    assert sizes == [2 << 20, 1 << 20]
