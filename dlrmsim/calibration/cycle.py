"""The MLP cycle the GEMM benchmarks time in training-step order (benchmarks.gemm.time_mlp_cycle), as a rank
program: what each of its GEMMs finds in the caches, computed the way the simulator computes it for a training step
(taskgraph.operand_traffic), so that the fit reads the cycle's GEMMs in the form the simulator charges.

The cycle: a flush of ``flush_bytes``, each layer's addmm and ReLU, then from the last layer its weight gradient,
bias gradient, input gradient and (but for the first layer) ReLU gradient, as ``dlrm_runner.mlp_forward`` /
``mlp_backward`` run them. The MLP's input and the last layer's output gradient are the same tensors every cycle,
and the weights are never updated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from dlrmsim.training.taskgraph import GemmReuse, Step, Task, Touches, layer_touches, operand_traffic
from dlrmsim.workloads.model import Layer, Pass, activation_bytes, layer_gemm

FP32_BYTES = 4.0


@dataclass(frozen=True)
class CycleGemm:
    """One GEMM of the cycle: what it finds in the caches, and the bytes of the op just before it (bytes)."""

    reuse: GemmReuse
    prev_bytes: float


def mlp_layers_of(widths: Sequence[int]) -> list[Layer]:
    """The cycle's layers, named as the simulator names a bottom MLP's (taskgraph.layer_input reads the names)."""
    return [Layer(f"bot{i}", widths[i], widths[i + 1], "bottom", i) for i in range(len(widths) - 1)]


def cycle_program(batch: int, widths: Sequence[int], flush_bytes: float) -> tuple[list[Step], dict[int, Touches]]:
    """The cycle's ops as tasks (bytes as the simulator counts them) and the tensors each touches, by index."""
    program: list[Step] = [Task("flush", "copy", 0.0, flush_bytes)]
    touches: dict[int, Touches] = {}

    def add(task: Task, touched: Touches) -> None:
        touches[len(program)] = touched
        program.append(task)

    layers = mlp_layers_of(widths)
    for layer in layers:
        g = layer_gemm(layer, batch, Pass.FORWARD)
        task = Task(f"{layer.name}.fwd", "gemm", g.flops, g.bytes_moved(FP32_BYTES))
        add(task, layer_touches(layer, batch, Pass.FORWARD, FP32_BYTES))
        relu = activation_bytes(batch, layer.fan_out, FP32_BYTES)
        add(Task(f"{layer.name}.act.fwd", "elementwise", 0.0, relu), layer_touches(layer, batch, "act_fwd", FP32_BYTES))
    for layer in reversed(layers):
        for which in (Pass.BACKWARD_WEIGHTS, Pass.BACKWARD_DATA):
            g = layer_gemm(layer, batch, which)
            task = Task(f"{layer.name}.{which.value}", "gemm", g.flops, g.bytes_moved(FP32_BYTES))
            add(task, layer_touches(layer, batch, which, FP32_BYTES))
            if which is Pass.BACKWARD_WEIGHTS:  # the bias gradient, dz.sum(0), reads the output gradient
                add(
                    Task(f"{layer.name}.bias_grad", "elementwise", 0.0, batch * layer.fan_out * FP32_BYTES),
                    Touches(writes=(f"g:{layer.name}",)),
                )
        if layer.index > 0:
            below = layers[layer.index - 1]
            relu = activation_bytes(batch, below.fan_out, FP32_BYTES, backward=True)
            add(Task(f"{below.name}.act.bwd", "elementwise", 0.0, relu), layer_touches(below, batch, "act_bwd", FP32_BYTES))
    return program, touches


@lru_cache(maxsize=64)
def cycle_gemms(batch: int, widths: tuple[int, ...], flush_bytes: float) -> dict[tuple[str, int], CycleGemm]:
    """Each GEMM of the cycle, keyed (pass, layer index) as time_mlp_cycle keys its times."""
    program, touches = cycle_program(batch, widths, flush_bytes)
    # each GEMM task's key, from the layers and passes cycle_program names its tasks after
    keys = {f"{layer.name}.{which.value}": (which.value, layer.index) for layer in mlp_layers_of(widths) for which in Pass}
    out: dict[tuple[str, int], CycleGemm] = {}
    for i, r in operand_traffic(program, touches).items():
        task, prev = program[i], program[i - 1]
        assert isinstance(task, Task)
        if task.kind != "gemm":  # the activations' inputs: not what the GEMM fit reads
            continue
        out[keys[task.name]] = CycleGemm(r, prev.bytes if isinstance(prev, Task) else 0.0)
    return out
