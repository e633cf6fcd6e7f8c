"""A GEMM kernel computes its output in passes of a fixed number of columns: a width that is not a multiple of the
micro-kernel's pays whole passes for its remainder. The cost model, the calibration's fit of the block, and a
task given its columns through the engine's API."""

from __future__ import annotations

import dataclasses

import pytest

from dlrmsim.calibration.fit import fit_vector_block
from dlrmsim.calibration.schema import Measurement
from dlrmsim.engine import Simulation, costs
from dlrmsim.training.taskgraph import gemm_task
from dlrmsim.workloads import load_workload, model
from dlrmsim.workloads.model import Pass
from tests.engine.handmade import simple_spec, two_node


def test_a_remainder_costs_a_pass_per_set_bit_or_one_padded_pass() -> None:
    # 42 = 16 + 16 + 10, and 10 = 8 + 2: two full passes and two narrower ones, each as slow as a full pass.
    assert costs.block_passes(42, 16, "binary") == 4
    assert costs.block_efficiency(42, 16, "binary") == pytest.approx(42 / 64)
    # Padded: the remainder in one full-width pass.
    assert costs.block_passes(42, 16, "padded") == 3
    assert costs.block_efficiency(42, 16, "padded") == pytest.approx(42 / 48)
    # Whole blocks lose nothing; below one block, unknown columns and no block are not modelled.
    assert costs.block_efficiency(64, 16, "binary") == 1.0
    assert costs.block_efficiency(8, 16, "binary") == 1.0
    assert costs.block_efficiency(0, 16, "binary") == 1.0
    assert costs.block_efficiency(42, 0, "binary") == 1.0


def _columns_rows(seconds_per_column: float, block: int, rule: str) -> list[Measurement]:
    widths = (16, 17, 20, 24, 28, 31, 32, 33, 36, 40, 42, 44, 48, 52, 56, 60, 64)
    return [
        Measurement(
            benchmark="gemm_columns",
            name=f"gemm columns 1024x{n}x256 c1",
            cores=1,
            params={"m": 1024, "n": n, "k": 256},
            flops=2.0 * 1024 * n * 256,
            # what the model charges: n columns at the rate of one, over the block efficiency
            time_s=seconds_per_column * n / costs.block_efficiency(n, block, rule),
            repeats=5,
        )
        for n in widths
    ]


@pytest.mark.parametrize(("block", "rule"), [(16, "binary"), (8, "padded"), (32, "binary")])
def test_the_fit_finds_the_block_and_rule_the_times_were_made_with(block: int, rule: str) -> None:
    assert fit_vector_block(_columns_rows(6e-6, block, rule)) == (block, rule)


def test_times_proportional_to_the_columns_have_no_block() -> None:
    # Because a kernel with no remainder cost takes time in proportion to n, no block explains it better.
    rows = [m.model_copy(update={"time_s": 1e-6 * int(m.params["n"])}) for m in _columns_rows(1e-6, 16, "binary")]
    assert fit_vector_block(rows) == (None, None)
    assert fit_vector_block(rows[:3]) == (None, None)  # too few widths to tell


def test_a_gemm_given_its_columns_runs_at_the_share_of_its_passes() -> None:
    spec = dataclasses.replace(simple_spec(cores=28, peak_flops=4.3e12), gemm_vector_block=16, gemm_remainder="binary")
    ends = []
    for columns in (0, 48, 42):
        sim = Simulation(two_node(spec=spec))
        sim.compute(0, "gemm", flops=4.3e9, bytes=1e6, columns=columns)
        sim.run()
        ends.append(sim.now)
    # Because the memory is so fast it never binds, the time is the flops at peak x the pass share: 1 ms for
    # unknown or whole-block columns, 64/42 ms for 42 columns.
    assert ends == pytest.approx([1e-3, 1e-3, 1e-3 * 64 / 42], rel=1e-12)


def test_the_task_graph_gives_each_gemm_the_columns_of_its_output() -> None:
    w = load_workload("small")
    layer = model.mlp_layers(w)[1]
    n = 64
    # Forward writes (batch, fan_out); the input gradient (batch, fan_in); the weight gradient (fan_out, fan_in).
    expected = {Pass.FORWARD: layer.fan_out, Pass.BACKWARD_DATA: layer.fan_in, Pass.BACKWARD_WEIGHTS: layer.fan_in}
    for which, columns in expected.items():
        task = gemm_task(w, layer, n, which)
        assert task is not None and task.columns == columns
