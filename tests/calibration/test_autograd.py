"""Autograd's cost per MLP layer (benchmarks/autograd.py -> fit.fit_autograd -> one "autograd" task per layer's
backward of an implementation whose dense_autograd is set)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlrmsim.calibration.benchmarks.autograd import chain_sizes, chains, layer_elements
from dlrmsim.calibration.fit import FittedModel, fit_autograd, predict_s
from dlrmsim.calibration.schema import AutogradFit, Calibration, Measurement
from dlrmsim.calibration.validate import load_cases, predict
from dlrmsim.training.implementations import PRESET_DIR
from dlrmsim.training.simulate import TrainingConfig, load_inputs, load_training_topology
from dlrmsim.training.taskgraph import Task, build_iteration
from dlrmsim.workloads import model
from tests.calibration.conftest import SpecsByImplementation

PER_CALL_US, PER_LAYER_US, PER_ELEMENT_NS = 50.0, 80.0, 0.3
FITS = [AutogradFit(cores=c, per_call_us=PER_CALL_US, per_layer_us=PER_LAYER_US, per_element_ns=PER_ELEMENT_NS) for c in (1, 2)]


def _rows(per_call_us: float, per_layer_us: float, per_element_ns: float, cores: int = 1) -> list[Measurement]:
    rows = []
    for (batch, fan_in, fan_out), layers in chains():
        elements = sum(layer_elements(batch, i, o) for i, o in chain_sizes(fan_in, fan_out, layers))
        extra = (per_call_us + layers * per_layer_us) * 1e-6 + elements * per_element_ns * 1e-9
        rows.append(
            Measurement(
                benchmark="autograd",
                name=f"autograd layers{layers} b{batch} {fan_in}x{fan_out} c{cores}",
                cores=cores,
                params={"batch": batch, "layers": layers, "elements": elements, "autograd_s": 10 * extra},
                time_s=extra,
                repeats=15,
            )
        )
    return rows


def test_fit_recovers_the_per_call_per_layer_and_per_element_costs() -> None:
    # Because rows built as per_call + layers x per_layer + elements x per_element are what the fit's three terms
    # describe, and chains of 1 and several layers tell the call from the layer, it gives them back per core
    # count, and the fitted model predicts each row; NumPy calibrations have no rows and no fit.
    fits = fit_autograd(_rows(PER_CALL_US, PER_LAYER_US, PER_ELEMENT_NS, 1) + _rows(0.0, 100.0, 0.0, 2))
    assert [f.cores for f in fits] == [1, 2]
    assert fits[0].per_call_us == pytest.approx(PER_CALL_US, rel=1e-3)
    assert fits[0].per_layer_us == pytest.approx(PER_LAYER_US, rel=1e-4)
    assert fits[0].per_element_ns == pytest.approx(PER_ELEMENT_NS, rel=1e-3)
    # a host where a term is absent cannot get a negative one
    assert fits[1].per_layer_us == pytest.approx(100.0, rel=1e-4) and fits[1].per_call_us == 0.0 and fits[1].per_element_ns == 0.0
    fitted = FittedModel(gemm=None, memory=None, autograd=fits)  # type: ignore[arg-type]
    for m in _rows(PER_CALL_US, PER_LAYER_US, PER_ELEMENT_NS, 1):
        assert predict_s(m, fitted) == pytest.approx(m.time_s, rel=1e-6)
    assert fit_autograd([]) == []


def test_rows_of_one_layer_alone_put_the_call_into_the_layer() -> None:
    # Because with one layer per call the call's cost and the layer's are one column twice over: the fit keeps it
    # all as the layer's (as the first calibrations with this benchmark, 2026-11-27 18:33 and 19:00, measured it).
    single = [m for m in _rows(PER_CALL_US, PER_LAYER_US, PER_ELEMENT_NS) if m.params["layers"] == 1]
    (fit,) = fit_autograd(single)
    assert fit.per_call_us == 0.0 and fit.per_layer_us == pytest.approx(PER_CALL_US + PER_LAYER_US, rel=1e-4)


def _autograd_tasks(implementation: str, case_name: str) -> list[Task]:
    case = next(c for c in load_cases() if c.name == case_name)
    cfg = TrainingConfig(topology="host", ranks=case.ranks, workload="small", backend="shm", implementation=implementation)
    inputs = load_inputs(cfg, workload=case.workload, topology=load_training_topology(cfg))
    graph = build_iteration(inputs.workload, inputs.placement, inputs.settings)
    return [s for s in graph.programs[0] if isinstance(s, Task) and s.kind in ("autograd", "autograd_call")]


def test_each_mlp_layer_of_an_autograd_implementation_pays_once_over_its_input_and_output() -> None:
    # Because TorchRec's and the reference DLRM's MLPs are nn.Linear + nn.ReLU modules that autograd differentiates,
    # in one backward() call a step: the base case (batch 1024) gets one call task and one task per layer of its
    # bottom and top MLPs, in its backward, each over batch x (fan_in + fan_out) elements. The project runner writes
    # its backward out: no such task.
    case = next(c for c in load_cases() if c.name == "base")
    layers = model.mlp_layers(case.workload)
    tasks = _autograd_tasks("torchrec-fused", "base")
    calls = [t for t in tasks if t.kind == "autograd_call"]
    assert [(t.name, t.rows, t.ops, t.bytes) for t in calls] == [("autograd.start", 0.0, 0.0, 0.0)]
    tasks = [t for t in tasks if t.kind == "autograd"]
    assert sorted(t.name for t in tasks) == sorted(f"{layer.name}.autograd" for layer in layers)
    by_name = {t.name: t for t in tasks}
    for layer in layers:
        t = by_name[f"{layer.name}.autograd"]
        assert t.rows == case.batch * (layer.fan_in + layer.fan_out) and t.ops == 0 and t.flops == 0 and t.bytes == 0
    assert len(_autograd_tasks("reference-dlrm", "base")) == len(layers) + 1
    assert _autograd_tasks("project-runner", "base") == []


def test_apply_charges_the_fit_only_to_an_implementation_whose_mlps_autograd_differentiates(
    quick_cal: Calibration, torchrec_and_runner_specs: SpecsByImplementation
) -> None:
    # Because the written-out runner records no graph: TorchRec's calibrated spec pays the fit per layer on the kind
    # and per element on its rows, the runner's spec neither.
    torchrec, runner = torchrec_and_runner_specs(quick_cal.model_copy(update={"autograd": FITS}), 1)
    assert torchrec.fixed_time_s_by_kind["autograd"] == pytest.approx(PER_LAYER_US * 1e-6)
    assert torchrec.fixed_time_s_by_kind["autograd_call"] == pytest.approx(PER_CALL_US * 1e-6)
    assert torchrec.row_time_s_by_kind["autograd"] == pytest.approx(PER_ELEMENT_NS * 1e-9)
    assert not {"autograd", "autograd_call"} & (set(runner.fixed_time_s_by_kind) | set(runner.row_time_s_by_kind))


def test_a_one_rank_step_is_longer_by_exactly_autograd_over_its_layers(quick_cal: Calibration, tmp_path: Path) -> None:
    # Because one rank runs its step's tasks one after another and the autograd tasks move no bytes and dispatch no
    # op (the next task's first op still follows the previous op's traffic): against the same profile without
    # dense_autograd, the step grows by per_call plus the sum over the MLP layers of per_layer + batch x (fan_in +
    # fan_out) x per_element; the layers' share is booked in the MLPs' backward, the call's under other (where the
    # phase pass books the loss's backward and autograd's start). A first op after little traffic costs far less
    # than one after a flush here (50 against 2 us), so a task that reset the traffic count would make the next op
    # cheaper and the step grow by less.
    case = next(c for c in load_cases() if c.name == "batch-256")
    assert quick_cal.overhead is not None
    overhead = quick_cal.overhead.model_copy(
        update={"task_overhead_us_by_cores": [(1, 50.0), (2, 50.0)], "op_overhead_us_by_cores": [(1, 2.0), (2, 2.0)]}
    )
    cal = quick_cal.model_copy(update={"overhead": overhead, "autograd": FITS})
    profile = (PRESET_DIR / "torchrec-fused.yaml").read_text()
    assert "dense_autograd: true" in profile
    written_out = tmp_path / "torchrec-without-autograd.yaml"
    written_out.write_text(profile.replace("dense_autograd: true", "dense_autograd: false"))
    without, before = predict(case, cal, str(written_out))
    with_fit, after = predict(case, cal, "torchrec-fused")
    layers = model.mlp_layers(case.workload)
    per_layers = sum(
        PER_LAYER_US * 1e-6 + case.batch * (layer.fan_in + layer.fan_out) * PER_ELEMENT_NS * 1e-9 for layer in layers
    )
    assert with_fit - without == pytest.approx(PER_CALL_US * 1e-6 + per_layers, rel=1e-6)
    grew = {k: after[k] - before.get(k, 0.0) for k in after if abs(after[k] - before.get(k, 0.0)) > 1e-12}
    assert set(grew) == {"bottom_mlp_bwd", "top_mlp_bwd", "other"}
    assert grew["other"] == pytest.approx(PER_CALL_US * 1e-6, rel=1e-6)
    assert grew["bottom_mlp_bwd"] + grew["top_mlp_bwd"] == pytest.approx(per_layers, rel=1e-6)


@pytest.mark.torch
def test_the_benchmark_times_both_versions_of_each_layer_shape() -> None:
    # Because the measurement is autograd's version less the written-out one, paired by round: every shape gives a
    # row per chain length whose two medians are positive times, at the core count asked for; the difference is
    # floored just above 0.
    pytest.importorskip("torch")
    from dlrmsim.calibration.benchmarks.autograd import autograd_task
    from dlrmsim.calibration.benchmarks.timing import TimingPolicy
    from dlrmsim.calibration.ops import get_ops

    rows = autograd_task(get_ops("torch"), 1, TimingPolicy(warmup=1, repeats=1, min_sample_s=0.001)).run()
    expected = [(*shape, layers) for shape, layers in chains()]
    assert [(m.params["batch"], m.params["fan_in"], m.params["fan_out"], m.params["layers"]) for m in rows] == expected
    for m in rows:
        assert m.cores == 1 and m.time_s > 0 and m.repeats == 3
        assert float(m.params["autograd_s"]) > 0 and float(m.params["written_s"]) > 0
