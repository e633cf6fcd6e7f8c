"""Dense optimizers come from YAML: the optimizer task streams and dispatches what the preset says."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlrmsim.errors import DlrmsimError
from dlrmsim.training.optimizers import load_optimizer, optimizer_names
from dlrmsim.training.simulate import TrainingConfig, load_inputs
from dlrmsim.training.taskgraph import IterationSettings, Task, build_iteration
from dlrmsim.workloads import load_workload, model
from dlrmsim.workloads.placement import PlacementSpec, place

SMALL = load_workload("small")


def optimizer_task(name_or_path: str | Path) -> Task:
    pl = place(SMALL, PlacementSpec(strategy="table_wise"), 2)
    s = IterationSettings(global_batch=SMALL.minibatch.strong_global, optimizer=load_optimizer(name_or_path))
    (task,) = [t for t in build_iteration(SMALL, pl, s).tasks(0) if t.kind == "optimizer"]
    return task


@pytest.mark.parametrize("name", ["sgd", "lamb"])
def test_optimizer_task_follows_the_preset(name: str) -> None:
    spec = load_optimizer(name)
    params = sum(layer.params for layer in model.mlp_layers(SMALL))
    tensors = 2 * len(model.mlp_layers(SMALL))  # a weight and a bias per layer
    task = optimizer_task(name)
    assert task.bytes == pytest.approx(spec.bytes_per_param * params)
    assert task.ops == pytest.approx(spec.ops_per_tensor * tensors)
    assert task.flops == pytest.approx(2.0 * params)


def test_presets_sgd_streams_three_arrays_and_lamb_seven() -> None:
    assert set(optimizer_names()) >= {"sgd", "lamb"}
    sgd, lamb = load_optimizer("sgd"), load_optimizer("lamb")
    assert (sgd.bytes_per_param, sgd.state_bytes_per_param) == (12, 4)
    assert (lamb.bytes_per_param, lamb.state_bytes_per_param) == (28, 12)
    assert lamb.ops_per_tensor > sgd.ops_per_tensor


def test_a_users_optimizer_yaml(tmp_path: Path) -> None:
    path = tmp_path / "adagrad.yaml"
    path.write_text("name: adagrad\nbytes_per_param: 20\nops_per_tensor: 4\nstate_bytes_per_param: 8\n")
    assert optimizer_task(path).bytes == pytest.approx(20 * sum(layer.params for layer in model.mlp_layers(SMALL)))
    cfg = TrainingConfig(topology="skx-8s-upi", workload="small", ranks=2, optimizer=str(path))
    assert load_inputs(cfg).settings.optimizer.name == "adagrad"


def test_unknown_optimizer_and_bad_field_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(DlrmsimError, match="optimizer"):
        load_optimizer("adamw")
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nbytes_per_param: -4\nops_per_tensor: 1\nstate_bytes_per_param: 4\n")
    with pytest.raises(DlrmsimError, match="bytes_per_param"):
        load_optimizer(path)


def test_lamb_state_costs_eight_more_bytes_per_dense_parameter() -> None:
    """LAMB keeps 12 bytes per dense parameter against SGD's 4; a rank's memory need counts the preset's state."""
    pl = place(SMALL, PlacementSpec(strategy="table_wise"), 2)
    sgd, lamb = (pl.max_memory(SMALL, load_optimizer(n).state_bytes_per_param) for n in ("sgd", "lamb"))
    assert lamb - sgd == pytest.approx(8.0 * pl.dense_params(SMALL))
