"""A torch.optim optimizer object's software cost (benchmarks/optimizer.py -> fit.fit_optimizer -> the optimizer
task of an implementation that steps its parameters with one)."""

from __future__ import annotations

import pytest

from dlrmsim.calibration.fit import FittedModel, dispatch_s, fit_optimizer, predict_s
from dlrmsim.calibration.schema import Calibration, Measurement, OptimizerFit, OverheadFit
from dlrmsim.training.simulate import TrainingConfig, load_inputs, load_training_topology
from dlrmsim.training.taskgraph import Task, build_iteration
from tests.calibration.conftest import SpecsByImplementation

OVERHEAD = OverheadFit(task_overhead_us_by_cores=[(1, 12.0), (2, 14.0)], op_overhead_us_by_cores=[(1, 1.8), (2, 1.9)])


def _rows(call_us: float, per_us: float, cores: int) -> list[Measurement]:
    return [
        Measurement(
            benchmark="optimizer",
            name=f"optimizer sgd p{n} c{cores}",
            cores=cores,
            params={"optimizer": "sgd", "tensors": n, "elements": 64},
            time_s=dispatch_s(OVERHEAD, cores, n) + (call_us + n * per_us) * 1e-6,
            repeats=7,
        )
        for n in (1, 4, 16, 64)
    ]


def test_fit_recovers_call_and_per_tensor_beyond_the_updates_dispatch() -> None:
    # Because the simulator already charges the optimizer task one op's dispatch per tensor (the first cold), the
    # fit must return exactly the rest: rows built as dispatch + call + n x per_tensor give back call and per_tensor.
    fits = fit_optimizer(_rows(250.0, 3.0, 1) + _rows(180.0, 0.5, 2), OVERHEAD)
    by = {f.cores: f for f in fits}
    assert by[1].call_us == pytest.approx(250.0, rel=1e-4) and by[1].per_tensor_us == pytest.approx(3.0, rel=1e-3)
    assert by[2].call_us == pytest.approx(180.0, rel=1e-4) and by[2].per_tensor_us == pytest.approx(0.5, rel=1e-2)
    model = FittedModel(gemm=None, memory=None, overhead=OVERHEAD, optimizer=fits)  # type: ignore[arg-type]
    for m in _rows(250.0, 3.0, 1):
        assert predict_s(m, model) == pytest.approx(m.time_s, rel=1e-6)
    assert fit_optimizer([], OVERHEAD) == []


@pytest.mark.parametrize(("implementation", "walked"), [("project-runner", 0), ("torchrec-fused", 10), ("reference-dlrm", 14)])
def test_the_optimizer_task_walks_the_tensors_its_object_holds(implementation: str, walked: int) -> None:
    # Because the base validation workload has 5 layers (10 weight and bias tensors) and 4 tables on its one rank:
    # the runner updates by hand (no object), TorchRec's object holds the MLPs, the reference DLRM's everything.
    from dlrmsim.calibration.validate import load_cases

    case = next(c for c in load_cases() if c.name == "base")
    cfg = TrainingConfig(topology="host", ranks=1, workload="small", backend="shm", implementation=implementation)
    inputs = load_inputs(cfg, workload=case.workload, topology=load_training_topology(cfg))
    graph = build_iteration(inputs.workload, inputs.placement, inputs.settings)
    (opt,) = [s for s in graph.programs[0] if isinstance(s, Task) and s.kind == "optimizer"]
    assert opt.rows == walked


def test_apply_charges_the_fit_only_to_an_implementation_with_an_optimizer_object(
    quick_cal: Calibration, torchrec_and_runner_specs: SpecsByImplementation
) -> None:
    # Because the project runner has no optimizer object, its calibrated spec must not pay the object's cost, while
    # TorchRec's gets the fit at the rank's cores: per step on the kind, per tensor on its rows.
    cal = quick_cal.model_copy(
        update={"optimizer": [OptimizerFit(optimizer="sgd", cores=c, call_us=200.0 + c, per_tensor_us=2.0) for c in (1, 2)]}
    )
    torchrec, runner = torchrec_and_runner_specs(cal, 1)
    assert torchrec.fixed_time_s_by_kind["optimizer"] == pytest.approx(201e-6)
    assert torchrec.row_time_s_by_kind["optimizer"] == pytest.approx(2e-6)
    assert "optimizer" not in runner.fixed_time_s_by_kind and "optimizer" not in runner.row_time_s_by_kind


def test_each_timed_optimizer_call_follows_the_flush_and_the_rewarm(monkeypatch: pytest.MonkeyPatch) -> None:
    # Because a step's optimizer follows its backward, which leaves the framework's shared state warm, the benchmark
    # must time each call after the flush *and* a layer's backward (Ops.then_rewarm): every optimizer step the task
    # times comes right after one flush and one rewarm, in that order.
    torch = pytest.importorskip("torch")
    from dlrmsim.calibration.benchmarks.optimizer import optimizer_task
    from dlrmsim.calibration.benchmarks.timing import TimingPolicy
    from dlrmsim.calibration.ops import get_ops

    k = get_ops("torch")
    events: list[str] = []
    k.limit_flush(1 << 20)
    monkeypatch.setattr(k, "flush", lambda: events.append("flush"))
    real_rewarm = type(k).make_rewarm(k)

    def rewarm() -> None:
        real_rewarm()
        events.append("rewarm")

    monkeypatch.setattr(k, "make_rewarm", lambda: rewarm)
    step = torch.optim.SGD.step
    monkeypatch.setattr(torch.optim.SGD, "step", lambda self, *a, **kw: (events.append("step"), step(self, *a, **kw))[1])
    try:
        rows = optimizer_task(k, 1, TimingPolicy(warmup=0, repeats=1, min_sample_s=0.0)).run()
    finally:
        k.limit_flush(None)
    assert len(rows) == 4 and events.count("step") > 0
    steps = [i for i, e in enumerate(events) if e == "step"]
    assert all(events[i - 2 : i] == ["flush", "rewarm"] for i in steps)
