"""What autograd costs an MLP layer beyond the ops the simulator prices (fit.fit_autograd).

The simulator prices an MLP layer's training as the ops a written-out step runs (the project runner's): ``addmm`` and
``relu`` forward; ``threshold_backward``, the weight gradient's ``mm`` and the bias's ``sum``, and the input
gradient's ``mm`` backward, each at the calibrated GEMM and element-wise rates, all timed with autograd off. TorchRec's
and the reference DLRM's MLPs are ``nn.Linear`` and ``nn.ReLU`` differentiated by autograd instead: the forward
records a graph (nodes, saved tensors, version counters), and ``backward()`` runs the engine over it (a ready queue,
one node call per op, gradient buffers, ``AccumulateGrad`` into the parameters). Timed on the 2-vCPU VM
(2026-11-27, AMD EPYC), one Linear+ReLU layer's forward and backward with autograd took 100-160 us longer than the
same ops written out at small shapes, at 1 and at 2 threads, and about 0.3 ns more per element of the layer's input
and output on top (4096 x 256 -> 32: 0.5 ms more of 5 ms); TorchRec's measured MLP phases were longer than the
project runner's (the same GEMMs written out) in 20 of 24 cases of four validations that day.

A step calls ``backward()`` once for all its layers, and part of the excess is that call's start (the graph task, the
engine's ready queue): a chain of layers costs less per layer than one layer alone (75-95 us a layer from the slope of
chains of 1-8 layers, 40-60 us a call, on that VM). So each shape of :data:`LAYER_SHAPES` is timed as one layer, and
the small ones (:data:`CHAIN_SHAPES`) also as a chain of :data:`CHAIN_LAYERS` (``fan_in -> fan_out``, then
``fan_out -> fan_out``), each one ``backward()`` call; the fit separates a cost per call, per layer and per element.
Rounds interleave the two versions of the same chain (``autograd``, ``written``), each sample a loop long enough for
the timing policy; the measurement is the median of the rounds' differences. The input requires a gradient in both (a
top-MLP layer: the input gradient is formed). Torch backend only.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

from dlrmsim.calibration.benchmarks.timing import BenchTask, TimingPolicy, calls_per_sample
from dlrmsim.calibration.ops import Ops
from dlrmsim.calibration.schema import Measurement

# (batch, fan_in, fan_out): small layers, where the fixed cost dominates, and layers with 1M elements of input and
# output at two aspect ratios, where the per-element cost shows above the GEMMs' noise.
LAYER_SHAPES = ((256, 32, 32), (1024, 32, 32), (1024, 64, 256), (4096, 32, 256), (4096, 256, 32))
CHAIN_LAYERS = 4
# The shapes also timed as a chain of CHAIN_LAYERS: the small ones, whose chains stay short enough that the difference
# shows above the GEMMs' noise (a chain of 4096 x 256 x 256 layers takes some 0.1 s a call at 1 thread).
CHAIN_SHAPES = LAYER_SHAPES[:2]
# A sample's shortest time: the difference is 2-10 % of a large layer's time, so its samples must average out
# more of the scheduler's ticks than a kernel's own benchmark does.
MIN_SAMPLE_S = 0.03


def chains() -> list[tuple[tuple[int, int, int], int]]:
    """((batch, fan_in, fan_out), layers) of every chain the benchmark times, in order."""
    return [(shape, 1) for shape in LAYER_SHAPES] + [(shape, CHAIN_LAYERS) for shape in CHAIN_SHAPES]


def chain_sizes(fan_in: int, fan_out: int, layers: int) -> list[tuple[int, int]]:
    """(fan_in, fan_out) of each layer of a chain of ``layers``: the shape, then ``fan_out -> fan_out`` layers."""
    return [(fan_in, fan_out)] + [(fan_out, fan_out)] * (layers - 1)


def layer_elements(batch: int, fan_in: int, fan_out: int) -> int:
    """Elements of a layer's input and output (its activations, and in backward their gradients)."""
    return batch * (fan_in + fan_out)


def chain_versions(batch: int, sizes: list[tuple[int, int]]) -> dict[str, Callable[[], None]]:
    """A chain of Linear+ReLU layers' forward and backward, differentiated by autograd in one ``backward()`` call and
    written out with autograd off (the ops the simulator prices), as zero-argument calls on the same weights and
    input."""
    import torch

    torch.manual_seed(0)
    linears = [torch.nn.Linear(fan_in, fan_out) for fan_in, fan_out in sizes]
    net = torch.nn.Sequential(*[m for linear in linears for m in (linear, torch.nn.ReLU())])
    x = torch.randn(batch, sizes[0][0], requires_grad=True)
    weights = [(linear.weight.detach().clone(), linear.bias.detach().clone()) for linear in linears]
    grad_out = torch.ones(batch, sizes[-1][1])
    params = [*net.parameters(), x]

    def autograd() -> None:
        with torch.enable_grad():
            for p in params:
                p.grad = None  # as zero_grad(set_to_none=True) leaves them: AccumulateGrad takes the new tensor
            net(x).backward(grad_out)

    def written() -> None:
        with torch.no_grad():
            acts = [x]
            for weight, bias in weights:
                acts.append(torch.relu(torch.addmm(bias, acts[-1], weight.t())))
            g = grad_out
            for i in range(len(weights) - 1, -1, -1):
                g = torch.ops.aten.threshold_backward(g, acts[i + 1], 0)
                g.t().mm(acts[i])
                g.sum(0)
                g = g.mm(weights[i][0])

    return {"autograd": autograd, "written": written}


def time_versions(versions: dict[str, Callable[[], None]], policy: TimingPolicy) -> dict[str, list[float]]:
    """Seconds per call of each version, one sample each per round, rounds interleaved (the host's drift lands on
    both alike). Each sample loops the call for the policy's shortest sample."""
    for fn in versions.values():
        for _ in range(policy.warmup + 1):
            fn()
    t0 = time.perf_counter()
    versions["autograd"]()
    calls = calls_per_sample(time.perf_counter() - t0, policy)  # the task raises the policy's sample to MIN_SAMPLE_S
    samples: dict[str, list[float]] = {name: [] for name in versions}
    for _ in range(2 * policy.repeats + 1):  # a difference of two noisy medians: twice the rounds
        for name, fn in versions.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter() - t0) / calls)
    return samples


def autograd_task(k: Ops, cores: int, policy: TimingPolicy) -> BenchTask:
    """Autograd's extra time for the forward and backward of one Linear+ReLU layer at each of :data:`LAYER_SHAPES`,
    and of a chain of :data:`CHAIN_LAYERS` at each of :data:`CHAIN_SHAPES`, on ``cores`` threads (torch backend
    only)."""

    def run() -> list[Measurement]:
        rows = []
        long = dataclasses.replace(policy, min_sample_s=max(policy.min_sample_s, MIN_SAMPLE_S))
        with k.threads(cores):
            for (batch, fan_in, fan_out), layers in chains():
                sizes = chain_sizes(fan_in, fan_out, layers)
                samples = time_versions(chain_versions(batch, sizes), long)
                # Paired by round: a slow spell that covered one round lands on both versions of it.
                diffs = [a - b for a, b in zip(samples["autograd"], samples["written"], strict=True)]
                diff = statistics.median(diffs)
                spread = 100.0 * (max(diffs) - min(diffs)) / max(abs(diff), 1e-9)
                auto, written = (statistics.median(samples[v]) for v in ("autograd", "written"))
                rows.append(
                    Measurement(
                        benchmark="autograd",
                        name=f"autograd layers{layers} b{batch} {fan_in}x{fan_out} c{cores}",
                        cores=cores,
                        params={
                            "batch": batch,
                            "fan_in": fan_in,
                            "fan_out": fan_out,
                            "layers": layers,
                            "elements": sum(layer_elements(batch, i, o) for i, o in sizes),
                            "autograd_s": auto,
                            "written_s": written,
                        },
                        # A noisy pair can put the difference at or below zero: kept just above (a fit weight).
                        time_s=max(diff, 1e-7),
                        spread_pct=spread,
                        repeats=len(diffs),
                    )
                )
        return rows

    return BenchTask("autograd layer", f"autograd c{cores}", run, repeat=True)
