"""What a step's other framework work gives back of a flush: the calibration's contexts, side by side.

The calibration times TorchRec's interaction, the runner's interaction and ``torch.optim.SGD``'s step each right
after a flush of twice the last-level cache, standing for the rest of a step's traffic. A flush also evicts what
every framework op shares (the dispatcher's code, autograd's engine, the allocator's state), which in a step the
ops just before the call keep warm. Since 2026-11-27 the calibration runs a small layer's forward and backward after
the flush (``Ops.then_rewarm``). This benchmark times the three calls, interleaved round by round, in four
contexts:

- ``warm``: right after a call of itself;
- ``flush``: after the calibration's flush alone (its protocol until 2026-11-27);
- ``flush_rewarm``: after the flush and the rewarm (``Ops.then_rewarm``, the protocol since);
- ``flush_adds``: after the flush and five tiny element-wise ops (framework dispatch without autograd).

    .venv/bin/python -m benchmarks.bench_rewarm [--threads 1] [--rounds 12] [--out JSON]

Needs torch; TorchRec's interaction is left out where torchrec is not installed. Shapes: the validation cases'
base (batch 1024, 4 tables, E=32); the optimizer over TorchRec's base model's 10 dense tensors, 64 elements each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dlrmsim.calibration.benchmarks.interaction import (
    InteractionConfig,
    torchrec_interaction_available,
    torchrec_interaction_inputs,
)
from dlrmsim.calibration.dlrm_runner import dot_interaction_bwd, dot_interaction_fwd
from dlrmsim.calibration.ops import get_ops

BATCH, TABLES, DIM = 1024, 4, 32
OPTIMIZER_TENSORS = 10
REPEATS = 3  # calls per context and round; the first is a warm-up after the previous context


def measure(threads: int, rounds: int) -> dict[str, dict[str, float]]:
    """Median ms per context and call."""
    import torch

    ops = get_ops("torch")
    rng = np.random.default_rng(0)
    calls: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {}  # name -> (prepare, timed call)

    # the runner's interaction, forward then backward on the same inputs
    bot = ops.tensor(rng.standard_normal((BATCH, DIM), dtype=np.float32))
    emb = [ops.tensor(rng.standard_normal((BATCH, DIM), dtype=np.float32)) for _ in range(TABLES)]
    li, lj = (ops.tensor(a.astype(np.int64)) for a in np.tril_indices(TABLES + 1, k=-1))
    d_out = ops.tensor(rng.standard_normal((BATCH, DIM + TABLES * (TABLES + 1) // 2), dtype=np.float32))
    feats, _ = dot_interaction_fwd(ops, bot, emb, li, lj)
    calls["runner_fwd"] = (lambda: None, lambda: dot_interaction_fwd(ops, bot, emb, li, lj))
    calls["runner_bwd"] = (lambda: None, lambda: dot_interaction_bwd(ops, d_out, feats, li, lj))

    if torchrec_interaction_available():
        arch, dense, sparse, grad = torchrec_interaction_inputs(InteractionConfig(BATCH, TABLES, DIM), rng)
        held: dict[str, torch.Tensor] = {}

        def trec_fwd() -> None:
            with torch.enable_grad():
                held["y"] = arch(dense, sparse)

        def trec_prepare_bwd() -> None:
            dense.grad = sparse.grad = None
            trec_fwd()

        calls["torchrec_fwd"] = (lambda: None, trec_fwd)
        calls["torchrec_bwd"] = (trec_prepare_bwd, lambda: held["y"].backward(grad))

    params = [torch.zeros(64, requires_grad=True) for _ in range(OPTIMIZER_TENSORS)]
    grads = [torch.full((64,), 1e-3) for _ in range(OPTIMIZER_TENSORS)]
    opt = torch.optim.SGD(params, lr=0.01)

    def give_grads() -> None:
        for p, g in zip(params, grads, strict=True):
            p.grad = g

    def sgd() -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    calls["sgd_step"] = (give_grads, sgd)

    tiny = [torch.randn(1000) for _ in range(2)]

    def flush_adds() -> None:
        ops.flush()
        for _ in range(5):
            torch.add(tiny[0], tiny[1])

    contexts: dict[str, Callable[[], None]] = {
        "warm": lambda: None,
        "flush": ops.flush,
        "flush_rewarm": ops.then_rewarm(ops.flush),
        "flush_adds": flush_adds,
    }
    times: dict[str, dict[str, list[float]]] = {c: {n: [] for n in calls} for c in contexts}
    clock = time.perf_counter
    names = list(contexts)
    with ops.threads(threads):
        for r in range(rounds):
            for c in names[r % len(names) :] + names[: r % len(names)]:
                for n, (prepare, call) in calls.items():
                    for i in range(REPEATS):
                        prepare()
                        contexts[c]()
                        t0 = clock()
                        call()
                        if i > 0:
                            times[c][n].append(clock() - t0)
    return {c: {n: 1e3 * statistics.median(ts) for n, ts in by.items()} for c, by in times.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    got = measure(args.threads, args.rounds)
    calls = list(next(iter(got.values())))
    print(f"median ms, {args.threads} thread(s), {args.rounds} rounds")
    print(f"{'context':14s}" + "".join(f"{n:>14s}" for n in calls))
    for c, by in got.items():
        print(f"{c:14s}" + "".join(f"{by[n]:14.3f}" for n in calls))
    if args.out:
        args.out.write_text(json.dumps({"threads": args.threads, "rounds": args.rounds, "median_ms": got}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
