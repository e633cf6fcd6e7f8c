"""Training iterations: closed forms at 1 rank, overlap vs blocking, backends, and volumes vs Eq. 1 / Eq. 2."""

from __future__ import annotations

import pytest

from dlrmsim.engine import costs
from dlrmsim.engine.frames import records_frame
from dlrmsim.training.simulate import TrainingConfig, load_inputs, run_iteration, simulate_training
from dlrmsim.training.taskgraph import Task, build_iteration
from dlrmsim.workloads import model


def sim(**kw):
    base = dict(topology="skx-8s-upi", workload="small", ranks=4)
    base.update(kw)
    return simulate_training(TrainingConfig(**base))


def test_one_rank_iteration_is_the_sum_of_its_task_times() -> None:
    cfg = TrainingConfig(topology="skx-8s-upi", workload="small", ranks=1, scaling="single")
    inputs = load_inputs(cfg)
    res = run_iteration(inputs, cfg)
    spec = inputs.topology.compute(0)
    cores = spec.cores - inputs.backend.comm_cores
    graph = build_iteration(inputs.workload, inputs.placement, inputs.settings)
    expected = 0.0
    for t in graph.programs[0]:
        assert isinstance(t, Task)
        prec = inputs.workload.precision if t.kind in costs.MATRIX_KINDS else "fp32"
        expected += max(costs.task_time(t.flops, t.bytes, spec, cores, precision=prec, kind=t.kind), t.serial_s)
    assert res.iteration_s == pytest.approx(expected, rel=1e-9)
    assert res.breakdown.exposed_allreduce_s == res.breakdown.exposed_alltoall_s == 0.0
    assert res.breakdown.compute_s + res.breakdown.prepost_s == pytest.approx(res.iteration_s)


@pytest.mark.parametrize("workload,ranks,topology", [("small", 8, "skx-8s-upi"), ("mlperf", 16, "clx-64s-opa")])
def test_overlapping_is_never_slower_than_blocking(workload: str, ranks: int, topology: str) -> None:
    overlap = sim(workload=workload, ranks=ranks, topology=topology)
    blocking = sim(workload=workload, ranks=ranks, topology=topology, blocking=True)
    assert overlap.iteration_s <= blocking.iteration_s
    exposed = lambda r: r.breakdown.exposed_allreduce_s + r.breakdown.exposed_alltoall_s  # noqa: E731
    assert exposed(overlap) < exposed(blocking)


def test_breakdown_adds_up_to_the_iteration() -> None:
    res = sim(workload="mlperf", topology="clx-64s-opa", ranks=8)
    for b in res.per_rank:
        total = b.compute_s + b.prepost_s + b.exposed_allreduce_s + b.exposed_alltoall_s + b.other_s
        assert total == pytest.approx(res.iteration_s, rel=1e-9)


def test_more_pinned_comm_cores_slow_compute_and_speed_up_communication() -> None:
    few = sim(workload="mlperf", topology="clx-64s-opa", ranks=16, comm_cores=1)
    many = sim(workload="mlperf", topology="clx-64s-opa", ranks=16, comm_cores=8)
    assert many.breakdown.compute_s > few.breakdown.compute_s

    # Reductions run on the communication cores: the allreduce itself finishes sooner.
    def allreduce_time(res):
        df = records_frame(res.records)
        ar = df[(df.kind == "allreduce")]
        return float((ar.end - ar.start).sum())

    assert allreduce_time(many) < allreduce_time(few)


def test_mpi_interference_stretches_compute_but_ccl_does_not() -> None:
    # Large: the 1 GB allreduce overlaps long backward GEMMs. Same compute cores in all three runs (none
    # pinned), so only the unpinned progress thread differs.
    kw = dict(workload="large", topology="clx-64s-opa", ranks=8)
    ccl = sim(backend="ccl", comm_cores=0, **kw)
    quiet_mpi = sim(backend="mpi", backend_overrides={"interference.core_share": 1e-9}, **kw)
    mpi = sim(backend="mpi", **kw)
    assert mpi.breakdown.compute_s > 1.05 * quiet_mpi.breakdown.compute_s
    assert ccl.breakdown.compute_s == pytest.approx(quiet_mpi.breakdown.compute_s, rel=0.02)


def test_collective_bytes_match_eq1_and_eq2() -> None:
    res = sim(workload="small", topology="skx-8s-upi", ranks=8)
    df = records_frame(res.records)
    w = load_inputs(TrainingConfig(topology="skx-8s-upi", workload="small", ranks=8)).workload
    p = 8
    n = w.minibatch.strong_global
    # Alltoall: every byte of Eq. 2 except each rank's own 1/p share crosses the fabric, in each direction.
    a2a_flows = df[(df.kind == "flow") & (df.category == "alltoall")]
    assert a2a_flows.bytes.sum() == pytest.approx(2 * model.alltoall_bytes(w, n) * (p - 1) / p)
    # Allreduce: each rank's buffers sum to Eq. 1; a ring moves 2 (p-1)/p of it per rank.
    ar = df[df.kind == "allreduce"]
    assert ar.groupby("rank").bytes.sum().to_numpy() == pytest.approx([model.allreduce_bytes(w)] * p)
    ar_flows = df[(df.kind == "flow") & (df.category == "allreduce")]
    assert ar_flows.bytes.sum() == pytest.approx(p * 2 * (p - 1) / p * model.allreduce_bytes(w))


def test_bf16_is_faster_only_where_the_processor_has_bf16() -> None:
    fp32 = sim(workload="mlperf", topology="cpx-64s", ranks=16)
    bf16 = sim(workload="mlperf", topology="cpx-64s", ranks=16, precision="bf16")
    assert bf16.breakdown.compute_s < fp32.breakdown.compute_s


def test_zipf_atomic_update_is_slower_than_race_free() -> None:
    atomic = sim(workload="mlperf", topology="clx-64s-opa", ranks=8, update_strategy="atomic")
    race_free = sim(workload="mlperf", topology="clx-64s-opa", ranks=8, update_strategy="race_free")
    assert atomic.breakdown.compute_s > race_free.breakdown.compute_s


def test_time_to_train_uses_the_convergence_runs() -> None:
    res = sim(workload="mlperf", topology="clx-64s-opa", ranks=16, workload_overrides={"minibatch.strong_global": 65536})
    assert res.epochs == 0.75
    assert res.time_to_train_s == pytest.approx(0.75 * 4195197692 / 65536 * res.iteration_s)


def test_refuses_more_ranks_than_tables_and_names_smallest_valid(cli) -> None:
    from tests.conftest import assert_one_line_error

    assert_one_line_error(cli("simulate", "-t", "clx-64s-opa", "-w", "small", "-r", "16"), "small.yaml", "16 ranks exceed the 8")
    assert_one_line_error(
        cli("simulate", "-t", "clx-64s-opa", "-w", "large", "-r", "2"), "large.yaml", "at least 3 ranks"
    )  # 3 of the 192 GB sockets


def test_simulate_json(cli) -> None:
    import json

    res = cli("simulate", "-t", "skx-8s-upi", "-w", "small", "-r", "4", "--json")
    assert res.code == 0, res.err
    data = json.loads(res.out)
    assert data["iteration_s"] > 0
    assert set(data["breakdown"]) >= {"compute_s", "exposed_allreduce_s", "exposed_alltoall_s", "prepost_s"}


def test_scaling_json_baseline_is_fewest_ranks_that_fit(cli) -> None:
    import json

    res = cli("scaling", "-t", "clx-64s-opa", "-w", "large", "-r", "8,16", "--json")
    assert res.code == 0, res.err
    rows = json.loads(res.out)
    assert [r["ranks"] for r in rows] == [8, 16]
    assert all(set(r) >= {"ranks", "iteration_s", "speedup", "efficiency"} for r in rows)
    assert rows[0]["speedup"] > 1.0  # against 3 ranks, the fewest sockets (192 GB) that hold Large
