"""Implementation profiles: a kind an implementation runs on one thread holds one core of the rank, whatever the
rank has; the rest of the step still spreads over every core."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dlrmsim.calibration.benchmarks.tbe import fused_update_bytes
from dlrmsim.errors import DlrmsimError
from dlrmsim.topologies import load_topology
from dlrmsim.topologies.topology import Topology
from dlrmsim.training.implementations import implementation_names, load_implementation, task_cores
from dlrmsim.training.simulate import TrainingConfig, load_inputs, run_iteration
from dlrmsim.training.taskgraph import IterationSettings, embedding_backward_update_tasks
from dlrmsim.workloads import load_workload, model

TINY = load_workload("small").model_copy(
    update={"tables": load_workload("small").tables.model_copy(update={"count": 4, "rows": 100_000}), "lookups_per_sample": 16}
)


def test_torchrec_profile_runs_fbgemms_embedding_kernels_on_one_thread_with_the_update_fused() -> None:
    p = load_implementation("torchrec-fused")
    assert "torchrec-fused" in implementation_names()
    # Because fbgemm-gpu-cpu's TBE forward and fused SGD backward run serially (the profile's sources say why).
    assert p.threads_by_kind() == {"embedding": 1, "update": 1}
    assert p.fuse_backward_update
    assert all("[FBGEMM-1.8]" in o.source for o in p.op_threads)
    # Because DMP's input_dist sends int32 lengths and int64 ids after a sizes exchange (KJTAllToAll).
    assert p.input_dist is not None and p.input_dist.length_bytes == 4 and "[TorchRec-1.8]" in p.input_dist.source


def test_task_cores_caps_a_kind_at_its_threads_and_never_above_the_rank() -> None:
    threads = {"embedding": 1, "update": 4}
    assert task_cores(threads, "embedding", 2.0) == 1.0
    assert task_cores(threads, "update", 2.0) == 2.0  # 4 threads on a 2-core rank still get 2 cores
    assert task_cores(threads, "gemm", 2.0) == 2.0  # not listed: every core


def test_bad_profiles_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(DlrmsimError, match="implementation"):
        load_implementation("tensorflow")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nop_threads:\n  - {kind: lookups, threads: 1, source: x}\n")
    with pytest.raises(DlrmsimError, match="unknown task kind"):
        load_implementation(bad)
    dup = tmp_path / "dup.yaml"
    dup.write_text("name: dup\nop_threads:\n  - {kind: gemm, threads: 1, source: x}\n  - {kind: gemm, threads: 2, source: y}\n")
    with pytest.raises(DlrmsimError, match="more than once"):
        load_implementation(dup)


def _host(cores: int) -> Topology:
    """The host model with ``cores`` cores whose memory takes 2 cores to saturate (as this project's calibrated
    2-core host: one core streams about half the socket's bandwidth), so that a streaming task gains from a
    second core unless it is held to one."""
    topo = load_topology("host", {"compute.host-cpu.cores": cores}, ranks=1)
    return topo.with_specs(compute=lambda spec: dataclasses.replace(spec, saturation_cores=2.0))


def _task_times(cores: int, implementation: str | None) -> dict[str, float]:
    """Seconds per task kind (summed) of one 1-rank iteration of TINY on a host model with ``cores`` cores."""
    topo = _host(cores)
    cfg = TrainingConfig(
        topology="host", workload="small", ranks=1, scaling="strong", backend="shm", implementation=implementation
    )
    res = run_iteration(load_inputs(cfg, workload=TINY, topology=topo), cfg)
    out: dict[str, float] = {}
    for r in res.records:
        if r.rank == 0 and r.kind in ("embedding", "update", "gemm"):
            out[r.kind] = out.get(r.kind, 0.0) + r.end - r.start
    return out


def test_a_single_threaded_kind_takes_the_same_time_on_one_core_and_on_two() -> None:
    one, two = _task_times(1, "torchrec-fused"), _task_times(2, "torchrec-fused")
    # Because the profile runs the embedding forward and the fused update on one thread, a second core gives them
    # nothing: they hold one core and one core's share of memory bandwidth either way.
    assert two["embedding"] == pytest.approx(one["embedding"], rel=1e-9)
    assert two["update"] == pytest.approx(one["update"], rel=1e-9)
    # ... while the GEMMs, which the profile leaves on every thread, do run faster on two cores.
    assert two["gemm"] < 0.9 * one["gemm"]
    # Without the profile the same lookups spread over both cores and are faster on two.
    plain_one, plain_two = _task_times(1, None), _task_times(2, None)
    assert plain_two["embedding"] < 0.9 * plain_one["embedding"]


def test_the_profile_fuses_the_update_into_backward() -> None:
    cfg = TrainingConfig(topology="host", workload="small", ranks=1, backend="shm", implementation="torchrec-fused")
    inputs = load_inputs(cfg, workload=TINY, topology=load_topology("host", ranks=1))
    # Because fbgemm applies SGD inside its backward, the step writes no gradient rows to read back.
    assert inputs.settings.fuse_backward_update
    assert dict(inputs.settings.op_threads) == {"embedding": 1, "update": 1}


def test_the_tbe_benchmark_counts_a_fused_updates_bytes_as_the_simulators_task_does() -> None:
    """The TBE fit's per-byte term means something to the simulator only if the benchmark counts the fused
    update's bytes as the fused update task does: pooled gradient, indices, touched rows read and written."""
    batch, rows = 1024, TINY.table_rows[0]
    s = IterationSettings(global_batch=batch, fuse_backward_update=True)
    (task,) = embedding_backward_update_tasks(TINY, "emb0", rows, batch, TINY.embedding_dim, s)
    unique = model.expected_unique_rows(rows, batch * TINY.lookups_per_sample, TINY.index_distribution)
    expected = fused_update_bytes(batch, TINY.lookups_per_sample, TINY.embedding_dim, unique)  # type: ignore[arg-type]
    assert task.kind == "update" and task.bytes == pytest.approx(expected, rel=1e-12)


def test_an_update_task_carries_the_rows_the_tbe_fit_counted_its_visits_on() -> None:
    """The TBE fit's walk and reload terms are per page and per jumping row of an ascending visit over the distinct
    rows of one table (fit.walk_lookups, fit.reload_lookups); the simulator can charge them the same way only if the
    update task says how many distinct rows of how large a table it touches, and how wide they are."""
    batch, rows = 1024, TINY.table_rows[0]
    s = IterationSettings(global_batch=batch, fuse_backward_update=True)
    (task,) = embedding_backward_update_tasks(TINY, "emb0", rows, batch, TINY.embedding_dim, s)
    unique = model.expected_unique_rows(rows, batch * TINY.lookups_per_sample, TINY.index_distribution)
    assert task.visit is not None
    assert task.visit.unique_rows == pytest.approx(unique, rel=1e-12)
    assert task.visit.table_rows == rows
    assert task.visit.row_bytes == TINY.embedding_dim * TINY.table_element_bytes
