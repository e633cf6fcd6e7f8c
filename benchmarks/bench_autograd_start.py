"""Does TorchRec's interaction backward benchmark time autograd's start as well as the interaction?

The calibration times TorchRec's ``InteractionArch`` backward as one ``y.backward(grad)`` call; in a training step
the same nodes run inside one backward over the whole model, timed (``targets.torchrec.measure_phases``) from its
output's gradient to its inputs'. This benchmark times both, warm, on one thread: the call alone, and the
interaction inside a small graph (its inputs made by a multiply, its output feeding a linear layer), from a hook on
its output's gradient to the first hook on an input's. The difference is what a ``backward()`` call pays around
its nodes (the engine's start, the graph task, the hand-back), which a step pays once.

    .venv/bin/python -m benchmarks.bench_autograd_start [--iterations 200] [--threads 1]

Needs torchrec.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from dlrmsim.calibration.benchmarks.interaction import InteractionConfig, torchrec_interaction_inputs

BATCH, TABLES, DIM = 1024, 4, 32


def measure(iterations: int, threads: int) -> dict[str, float]:
    """Median ms of: the interaction's backward() alone; its nodes inside a graph's backward; that whole backward."""
    import torch

    torch.set_num_threads(threads)
    arch, dense, sparse, grad = torchrec_interaction_inputs(InteractionConfig(BATCH, TABLES, DIM), np.random.default_rng(0))
    head = torch.nn.Linear(grad.shape[1], 1)
    clock = time.perf_counter
    alone: list[float] = []
    inside: list[float] = []
    whole: list[float] = []
    marks: dict[str, float] = {}

    def mark(key: str) -> object:
        def hook(_g: object) -> None:  # None: keep the gradient
            marks.setdefault(key, clock())

        return hook

    for _ in range(iterations):
        dense.grad = sparse.grad = None
        y = arch(dense, sparse)
        t0 = clock()
        y.backward(grad)
        alone.append(clock() - t0)

        marks.clear()
        dense.grad = sparse.grad = None
        d, s = dense * 1.0, sparse * 1.0
        d.register_hook(mark("inputs"))
        s.register_hook(mark("inputs"))
        y = arch(d, s)
        y.register_hook(mark("output"))
        loss = head(y).sum()
        t0 = clock()
        loss.backward()
        whole.append(clock() - t0)
        inside.append(marks["inputs"] - marks["output"])
    skip = iterations // 10  # warm-up
    return {
        "backward_alone_ms": 1e3 * statistics.median(alone[skip:]),
        "inside_a_graph_ms": 1e3 * statistics.median(inside[skip:]),
        "whole_graph_backward_ms": 1e3 * statistics.median(whole[skip:]),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    for k, v in measure(args.iterations, args.threads).items():
        print(f"{k:26s} {v:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
