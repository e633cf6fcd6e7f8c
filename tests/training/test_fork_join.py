"""The thread pool's fork and join per element-wise op: measured by the calibration's fork benchmark, charged by
the simulator to every activation and optimizer op above the framework's grain, and nothing on one core."""

from __future__ import annotations

import dataclasses
import math

import pytest

from dlrmsim.calibration.fit import fit_overhead, fork_join_table
from dlrmsim.calibration.ops.base import TORCH_GRAIN_ELEMENTS
from dlrmsim.calibration.schema import Measurement, OverheadFit
from dlrmsim.engine.costs import fork_join_time_s
from dlrmsim.topologies import load_topology
from dlrmsim.topologies.topology import Topology
from dlrmsim.training.simulate import TrainingConfig, load_inputs, run_iteration
from dlrmsim.training.taskgraph import Task, build_iteration
from dlrmsim.workloads import load_workload, model
from tests.engine.handmade import simple_spec

SMALL = load_workload("small")


def _fork(cores: int, position: str, seconds: float, grain: float | None = TORCH_GRAIN_ELEMENTS) -> Measurement:
    params: dict[str, float | int | str] = {"elements": 65536, "position": position}
    if grain is not None:
        params["grain"] = grain
    return Measurement(
        benchmark="fork",
        name=f"fork {position} c{cores}",
        cores=cores,
        params=params,
        bytes=12 * 65536,
        time_s=seconds,
        repeats=5,
    )


def _dispatch(cores: int) -> list[Measurement]:
    return [
        Measurement(
            benchmark="dispatch",
            name=f"dispatch {p} c{cores}",
            cores=cores,
            params={"elements": 1, "position": p},
            bytes=12,
            time_s=3e-6,
            repeats=5,
        )
        for p in ("first", "rest")
    ]


def test_the_fit_takes_the_fork_as_the_warm_op_less_its_one_core_share() -> None:
    # 6 us on one core, 4.4 us on two: half the work is 3 us, so the pool's fork and join cost 1.4 us; on four cores
    # 3.5 us against 1.5 us of work: 2 us. The "wake" rows (after an idle gap) are not the step's case.
    ms = [_fork(1, "warm", 6e-6), _fork(2, "warm", 4.4e-6), _fork(4, "warm", 3.5e-6), _fork(2, "wake", 30e-6)]
    table, grain = fork_join_table(ms)
    assert grain == TORCH_GRAIN_ELEMENTS
    assert dict(table) == pytest.approx({2: 1.4, 4: 2.0})
    fit = fit_overhead(ms + _dispatch(1) + _dispatch(2))
    assert fit is not None and fit.fork_join_s(2) == pytest.approx(1.4e-6) and fit.fork_join_s(1) == 0.0
    # A perfectly parallel op (faster than its share) costs no negative fork.
    assert dict(fork_join_table([_fork(1, "warm", 6e-6), _fork(2, "warm", 2.9e-6)])[0]) == {2: 0.0}


def test_no_fork_is_fitted_where_the_backend_never_splits_an_op_or_one_core_was_not_measured() -> None:
    # Because NumPy's element-wise ops run on the calling thread (grain inf), a slower 2-thread op is not a fork.
    assert fork_join_table([_fork(1, "warm", 6e-6, math.inf), _fork(2, "warm", 6e-6, math.inf)]) == ([], None)
    assert fork_join_table([_fork(2, "warm", 4e-6)]) == ([], None)
    # Measurements from before the grain was recorded take the calibration's backend's (torch here, numpy: none).
    old = [_fork(1, "warm", 6e-6, None), _fork(2, "warm", 4.4e-6, None)]
    assert fork_join_table(old, TORCH_GRAIN_ELEMENTS)[1] == TORCH_GRAIN_ELEMENTS
    assert fork_join_table(old)[0] == []
    # A calibration file from before the field: no fork at any core count.
    assert OverheadFit(task_overhead_us_by_cores=[(2, 3.0)]).fork_join_s(2) == 0.0


def test_only_ops_above_the_grain_fork_and_only_on_more_than_one_core() -> None:
    spec = dataclasses.replace(simple_spec(cores=2), fork_join_s=2e-6, parallel_grain_elements=32768)
    ops = (65536.0, 32768.0, 100.0, 1e6)
    # Because torch splits an op only above its grain, 2 of the 4 ops fork; at the grain itself the op stays serial.
    assert fork_join_time_s(spec, ops, 2.0) == pytest.approx(4e-6)
    assert fork_join_time_s(spec, ops, 1.0) == 0.0
    assert fork_join_time_s(dataclasses.replace(spec, fork_join_s=0.0), ops, 2.0) == 0.0


def _host_with_fork(fork_s: float, cores: int = 2) -> Topology:
    topo = load_topology("host", {"compute.host-cpu.cores": cores}, ranks=1)
    return topo.with_specs(
        compute=lambda spec: dataclasses.replace(spec, fork_join_s=fork_s, parallel_grain_elements=TORCH_GRAIN_ELEMENTS)
    )


def _iteration(fork_s: float, cores: int = 2) -> tuple[float, list[Task]]:
    cfg = TrainingConfig(topology="host", workload="small", ranks=1, scaling="strong", backend="shm", blocking=True)
    inputs = load_inputs(cfg, topology=_host_with_fork(fork_s, cores))
    graph = build_iteration(inputs.workload, inputs.placement, inputs.settings)
    program = [s for s in graph.programs[0] if isinstance(s, Task)]
    return run_iteration(inputs, cfg).iteration_s, program


def test_a_one_rank_iteration_grows_by_each_forking_op() -> None:
    base, program = _iteration(0.0)
    slow, _ = _iteration(50e-6)
    batch = SMALL.minibatch.strong_global
    layers = model.mlp_layers(SMALL)
    # Counted from the workload, not the task graph: each layer's ReLU forward and backward fork when batch x
    # fan_out is above the grain (the last layer's sigmoid and loss run on batch-long vectors, below it at this
    # batch), and SGD's one add per weight and bias tensor forks for the tensors above it.
    last = layers[-1]
    relu = sum(2 for layer in layers if layer is not last and batch * layer.fan_out > TORCH_GRAIN_ELEMENTS)
    assert batch < TORCH_GRAIN_ELEMENTS
    sgd = sum(1 for layer in layers for n in (layer.fan_in * layer.fan_out, layer.fan_out) if n > TORCH_GRAIN_ELEMENTS)
    assert relu > 0 and sgd > 0
    # Because one rank runs its tasks one after another and waits on nothing, every fork adds to the iteration.
    assert slow - base == pytest.approx((relu + sgd) * 50e-6, rel=1e-9)
    assert sum(len(t.op_elements) for t in program if t.kind == "optimizer") == 2 * len(layers)
    # On one core nothing forks, whatever the fitted fork costs.
    assert _iteration(50e-6, cores=1)[0] == pytest.approx(_iteration(0.0, cores=1)[0], rel=1e-12)
