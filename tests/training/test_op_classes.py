"""Framework ops that cost more than a multiply (costs.op_class_extra_s): a Python scalar operand and a reduction.
Which tasks have them, and an iteration that charges each exactly once."""

from __future__ import annotations

import dataclasses

import pytest

from dlrmsim.calibration.validate import sim_phase
from dlrmsim.engine.costs import op_class_extra_s
from dlrmsim.engine.frames import records_frame
from dlrmsim.topologies import load_topology
from dlrmsim.training.implementations import load_implementation
from dlrmsim.training.simulate import TrainingConfig, load_inputs, run_iteration
from dlrmsim.training.taskgraph import activation_task, gemm_task, loss_task
from dlrmsim.workloads import load_workload
from dlrmsim.workloads.model import Pass, mlp_layers
from tests.engine.handmade import simple_spec

SCALAR, REDUCE = 5e-6, 7e-6


def test_the_extra_is_each_class_count_times_its_time() -> None:
    spec = dataclasses.replace(simple_spec(cores=2), scalar_op_extra_s=SCALAR, reduce_op_extra_s=REDUCE)
    assert op_class_extra_s(spec, 4.0, 1.0) == pytest.approx(4 * SCALAR + REDUCE)
    assert op_class_extra_s(simple_spec(cores=2), 4.0, 1.0) == 0.0  # not calibrated (built-in presets)


def test_the_written_out_loss_and_the_bias_gradient_have_their_classes_a_loss_module_none() -> None:
    w = load_workload("small")
    top = [ly for ly in mlp_layers(w) if ly.part == "top"]
    last, inner = top[-1], top[0]
    # because the runner's loss adds eps to p and to 1 - p, subtracts p and y from 1, and takes the mean; its
    # backward divides (p - y) by the batch size
    fwd, bwd = activation_task(w, last, 256), activation_task(w, last, 256, backward=True)
    assert (fwd.ops, fwd.scalar_ops, fwd.reduce_ops) == (12.0, 4.0, 1.0)
    assert (bwd.ops, bwd.scalar_ops, bwd.reduce_ops) == (2.0, 1.0, 0.0)
    # because a loss module's call is a task of its own: the last layer keeps its one op, the loss the other 11 (1 of
    # the 2 backward), without the written-out classes; and a ReLU has no scalar operand
    module = activation_task(w, last, 256, written_out_loss=False)
    assert (module.ops, module.scalar_ops, module.reduce_ops) == (1.0, 0.0, 0.0)
    loss_f, loss_b = loss_task(w, 256), loss_task(w, 256, backward=True)
    assert (loss_f.ops + module.ops, loss_b.ops + activation_task(w, last, 256, True, False).ops) == (fwd.ops, bwd.ops)
    assert (loss_f.scalar_ops, loss_f.reduce_ops, loss_b.scalar_ops) == (0.0, 0.0, 0.0)
    relu = activation_task(w, inner, 256)
    assert (relu.scalar_ops, relu.reduce_ops) == (0.0, 0.0)
    # because the weight gradient's task also sums the output gradient over the batch for the bias
    weights = gemm_task(w, inner, 256, Pass.BACKWARD_WEIGHTS)
    assert weights is not None and (weights.ops, weights.reduce_ops) == (2.0, 1.0)
    forward = gemm_task(w, inner, 256, Pass.FORWARD)
    assert forward is not None and forward.reduce_ops == 0.0
    assert load_implementation("project-runner").loss == "written_out"
    assert load_implementation("torchrec-fused").loss == load_implementation("reference-dlrm").loss == "module"


def _iteration(scalar: float, reduce: float, implementation: str | None = None) -> tuple[float, int]:
    """The iteration's time (s) and its weight-gradient GEMMs (each reduces the bias gradient)."""
    cfg = TrainingConfig(
        topology="host", workload="small", ranks=1, scaling="strong", backend="shm", blocking=True, implementation=implementation
    )
    topo = load_topology("host", {"compute.host-cpu.cores": 2}, ranks=1).with_specs(
        compute=lambda s: dataclasses.replace(s, scalar_op_extra_s=scalar, reduce_op_extra_s=reduce)
    )
    inputs = load_inputs(cfg, topology=topo)
    res = run_iteration(inputs, cfg)
    df = records_frame(res.records)
    weights = df[df["rank"].eq(0) & df["name"].str.endswith(".bwd_weights")]
    return res.iteration_s, len(weights)


def test_one_rank_iteration_grows_by_each_tasks_class_extras() -> None:
    base, weights = _iteration(0.0, 0.0)
    timed, _ = _iteration(SCALAR, REDUCE)
    # because on one rank nothing overlaps its compute, each task is longer by its ops' extras and the iteration by
    # their sum: the written-out loss (4 scalar ops and a mean forward, 1 scalar op backward) and a bias reduction
    # per weight gradient
    assert weights >= 2
    assert timed - base == pytest.approx(5 * SCALAR + (1 + weights) * REDUCE, rel=1e-9)
    # because TorchRec calls a loss module: only the bias reductions remain
    base_tr, weights_tr = _iteration(0.0, 0.0, "torchrec-fused")
    timed_tr, _ = _iteration(SCALAR, REDUCE, "torchrec-fused")
    assert timed_tr - base_tr == pytest.approx(weights_tr * REDUCE, rel=1e-9)


def test_a_loss_module_is_booked_outside_the_top_mlp_with_the_ops_of_the_written_out_loss() -> None:
    topo = load_topology("host", {"compute.host-cpu.cores": 2}, ranks=1)

    def frame(implementation: str | None):  # noqa: ANN202
        c = TrainingConfig(
            topology="host",
            workload="small",
            ranks=1,
            scaling="strong",
            backend="shm",
            blocking=True,
            implementation=implementation,
        )
        return records_frame(run_iteration(load_inputs(c, topology=topo), c).records)

    runner, torchrec = frame(None), frame("torchrec-fused")
    loss = torchrec[torchrec["name"].str.startswith("loss.")]
    # because TorchRec calls BCEWithLogitsLoss after its over arch and its backward starts at the loss's node: one
    # task each way, which its phase table (and so the simulator's) books under other, not under the top MLP
    assert sorted(loss["name"]) == ["loss.bwd", "loss.fwd"]
    assert {sim_phase(n, "compute") for n in loss["name"]} == {"other"}
    # and in that order: the loss forward after the top MLP's forward, its backward before the top MLP's backward
    at = torchrec.set_index("name")
    top = torchrec[torchrec["name"].str.startswith("top")]
    top_fwd, top_bwd = top[top["name"].str.endswith("fwd")], top[~top["name"].str.endswith("fwd")]
    assert top_fwd["end"].max() <= at.loc["loss.fwd", "start"] <= at.loc["loss.bwd", "end"] <= top_bwd["start"].min()
    # because the runner writes its loss out inside its top MLP phase, it has no loss task
    assert not runner["name"].str.startswith("loss.").any()
