"""What an element-wise op costs when its output is a fresh buffer, as in a training step, against a hot one.

A training step keeps every forward activation alive for the backward, and the backward writes new gradient
tensors, so almost every op writes memory that no recent op touched. The calibration's element-wise rates come from
loops whose outputs are reused (hot in cache). This benchmark times a chain of ``--ops`` multiplies on tensors of
``--elements`` fp32 three ways, with the allocator in its steady state (``allocator.steady_allocator``, so no
page faults): each output dropped before the next op (the allocator hands back a hot block), every output kept in a
list (fresh blocks, no autograd), and the same chain under autograd (which keeps them alive for the backward).
Minor page faults per op are reported beside each time. Needs torch.

    .venv/bin/python -m benchmarks.bench_fresh_outputs [--elements 262144] [--ops 64] [--out validation/results]
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.evidence import write_evidence
from dlrmsim.allocator import steady_allocator


def per_op(chain: Callable[[], object], ops: int, rounds: int) -> tuple[float, float]:
    """(fastest round's seconds per op, minor page faults per op over all rounds) of ``chain()``."""
    chain()
    best = float("inf")
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(rounds):
        t0 = time.perf_counter()
        chain()
        best = min(best, time.perf_counter() - t0)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / (rounds * ops)
    return best / ops, faults


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=int, default=262144)
    ap.add_argument("--ops", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("validation/results"))
    args = ap.parse_args()
    import torch

    steady = steady_allocator()
    torch.set_num_threads(args.threads)
    x = torch.randn(args.elements)
    xg = torch.randn(args.elements, requires_grad=True)

    def hot() -> None:
        with torch.no_grad():
            y = x
            for _ in range(args.ops):
                y = y * 1.0001

    def kept() -> None:
        with torch.no_grad():
            y, keep = x, []
            for _ in range(args.ops):
                y = y * 1.0001
                keep.append(y)

    def autograd() -> None:
        y = xg
        for _ in range(args.ops):
            y = y * 1.0001
        y.sum().backward()
        xg.grad = None

    rows = {}
    for name, chain in (("hot", hot), ("kept", kept), ("autograd_forward_and_backward", autograd)):
        s, faults = per_op(chain, args.ops, args.rounds)
        rows[name] = {"us_per_op": round(s * 1e6, 2), "faults_per_op": round(faults, 2)}
        print(f"{name:30s} {s * 1e6:7.2f} us/op  {faults:6.2f} faults/op")
    write_evidence(
        args.out,
        "fresh-outputs",
        {"elements": args.elements, "ops": args.ops, "threads": args.threads, "steady_allocator": steady, "rows": rows},
    )


if __name__ == "__main__":
    main()
