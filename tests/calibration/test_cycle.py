"""The step-order MLP cycle as the fit sees it: what each GEMM finds in the caches, counted from the ops the cycle
runs (benchmarks.gemm.time_mlp_cycle: flush, addmm and ReLU per layer, then per layer from the last the weight
gradient, the bias gradient, the input gradient and the ReLU gradient)."""

from __future__ import annotations

import pytest

from dlrmsim.calibration.cycle import cycle_gemms, cycle_program
from dlrmsim.training.taskgraph import Task

FLUSH = 64.0 * 2**20


def test_the_first_gemms_inputs_and_kernel_are_a_flush_away_and_a_chained_input_is_fresh() -> None:
    n, widths = 512, (128, 512, 32)
    program, _ = cycle_program(n, widths, FLUSH)
    size = {t.name: t.bytes for t in program if isinstance(t, Task)}
    assert [t.name for t in program if isinstance(t, Task)] == [
        "flush",
        "bot0.fwd",
        "bot0.act.fwd",
        "bot1.fwd",
        "bot1.act.fwd",
        "bot1.bwd_weights",
        "bot1.bias_grad",
        "bot1.bwd_data",
        "bot0.act.bwd",
        "bot0.bwd_weights",
        "bot0.bias_grad",
        "bot0.bwd_data",
    ]
    g = cycle_gemms(n, widths, FLUSH)
    # Because the MLP's input was last read by the previous cycle's first-layer weight gradient, its bias gradient,
    # input gradient and the flush lie between; the weights were last read by that input gradient, then the flush.
    x, w = g[("fwd", 0)].reuse.operands
    assert x == (n * 128 * 4.0, size["bot0.bias_grad"] + size["bot0.bwd_data"] + FLUSH)
    assert w == (128 * 512 * 4.0, FLUSH)
    assert g[("fwd", 0)].reuse.kernel_traffic == FLUSH and g[("fwd", 0)].prev_bytes == FLUSH
    # The second layer reads what the ReLU just wrote (no traffic between), and the kernel ran one ReLU ago.
    x, w = g[("fwd", 1)].reuse.operands
    assert x == (n * 512 * 4.0, 0.0)
    assert g[("fwd", 1)].reuse.kernel_traffic == size["bot0.act.fwd"] == g[("fwd", 1)].prev_bytes
    # The input gradient runs after the bias gradient, which read the same output gradient.
    assert g[("bwd_data", 1)].reuse.operands[0] == (n * 32 * 4.0, 0.0)
    assert g[("bwd_data", 1)].reuse.kernel_traffic == size["bot1.bias_grad"]
    assert set(g) == {(p, i) for p in ("fwd", "bwd_weights", "bwd_data") for i in (0, 1)}


@pytest.mark.parametrize("widths", [(128, 512, 32), (512, 512, 512)])
def test_every_gemm_of_the_cycle_is_keyed_as_the_benchmark_keys_its_times(widths: tuple[int, ...]) -> None:
    g = cycle_gemms(1024, widths, FLUSH)
    layers = len(widths) - 1
    # Because the cycle asks for the input gradient of every layer (need_dx), each layer has all three passes.
    assert len(g) == 3 * layers
    assert all(0.0 <= d < float("inf") for c in g.values() for _, d in c.reuse.operands)
