"""Does a step's first GEMM after the embedding update pay for the time since its last call, or for the traffic?

In the project runner's step the bottom MLP's first forward GEMM follows the sparse update of every table, a gap of
about 2.3 ms in ``batch-256`` and 8.7 ms in ``base`` (simulated, AMD VM). The model charges what such a GEMM pays
by our own traffic since the rank's previous GEMM (``costs.evicted_operand_time_s``); on the VM a small GEMM paid
more after 10 ms of spinning than after 10 ms of streaming 64 MiB (``bench_gemm_idle.py --small-only``). This times
that GEMM (the validation base's 64 -> 256 layer at batch 1024, the runner's ops) after the gap filled five ways:

- ``loop``: no gap, back to back;
- ``update_short``: the update of 4 tables of 200,000 x 32 rows, 4,096 lookups each (``batch-256``'s);
- ``update_long``: the same with 16,384 lookups each (``base``'s): four times the traffic, and the time it takes;
- ``update_short_then_spin``: the short update, then the main thread spins until ``update_long``'s median time has
  passed: the short update's traffic in the long one's time;
- ``spin_long``: only the spin, for ``update_long``'s median time: the time, without the traffic.

``update_short_then_spin`` against ``update_long`` is the traffic's part (same time, a quarter of the traffic); against
``update_short`` the time's part (same traffic, about four times the time). JSON lines: threads, condition, the
fill's median time (ms), the GEMM's median, p10 and p90 (us) over ``--repeats`` samples, conditions interleaved.

    .venv/bin/python -m benchmarks.bench_gap_in_step [--threads 1,2] [--repeats 40] > rows.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import numpy as np

from dlrmsim.calibration.benchmarks.idle import spin
from dlrmsim.calibration.dlrm_runner import LEARNING_RATE
from dlrmsim.calibration.ops import Ops, get_ops, make_indices
from dlrmsim.host import usable_cores

TABLES, ROWS, DIM = 4, 200_000, 32  # the validation base case's tables
BATCH, FAN_IN, FAN_OUT = 1024, 64, 256  # its bottom MLP's first layer
SHORT, LONG = 4 * 1024, 16 * 1024  # lookups per table: batch-256's and base's (16 a sample)


def update_fill(ops: Ops, tables: list, lookups: int, rng: np.random.Generator, batches: int = 16) -> Callable[[], None]:
    """A fill that applies a sparse SGD update of ``lookups`` fresh rows to each table (the next of ``batches``
    precomputed index batches and gradients each call, as a step's minibatch is new)."""
    pooled = ops.tensor(np.full((lookups, DIM), 1e-3, dtype=np.float32))
    work = []
    for _ in range(batches):
        per_table = []
        for tab in tables:
            idx = np.ascontiguousarray(make_indices(ROWS, lookups, "uniform", 1.05, rng), dtype=np.int64).reshape(lookups, 1)
            ops.emb_forward(tab, idx)  # the backward differentiates the forward's output
            per_table.append((tab, idx, ops.emb_backward(tab, idx, pooled)))
        work.append(per_table)
    state = {"i": 0}

    def fill() -> None:
        for tab, idx, grad in work[state["i"] % batches]:
            ops.emb_update(tab, idx, grad, LEARNING_RATE)
        state["i"] += 1

    return fill


def measure(threads: int, repeats: int) -> list[dict[str, object]]:
    """The five conditions at ``threads``, interleaved sample by sample; one row each."""
    ops = get_ops("torch")
    rng = np.random.default_rng(0)
    with ops.threads(threads):
        tables = [ops.new_table(ROWS, DIM, rng) for _ in range(TABLES)]
        gemm = ops.make_linear(BATCH, FAN_IN, FAN_OUT, "fwd")
        short, long_ = update_fill(ops, tables, SHORT, rng), update_fill(ops, tables, LONG, rng)
        for _ in range(3):
            gemm()
            short()
            long_()
        long_s = []
        for _ in range(5):
            t0 = time.perf_counter()
            long_()
            long_s.append(time.perf_counter() - t0)
        target = statistics.median(long_s)

        def short_then_spin() -> None:
            end = time.perf_counter() + target
            short()
            spin(max(0.0, end - time.perf_counter()))

        fills: dict[str, Callable[[], None] | None] = {
            "loop": None,
            "update_short": short,
            "update_long": long_,
            "update_short_then_spin": short_then_spin,
            "spin_long": lambda: spin(target),
        }
        gemm_s: dict[str, list[float]] = {k: [] for k in fills}
        fill_s: dict[str, list[float]] = {k: [] for k in fills}
        for _ in range(repeats):
            for name, fill in fills.items():
                gemm()  # the GEMM's previous call: the gap runs from its end
                t0 = time.perf_counter()
                if fill is not None:
                    fill()
                t1 = time.perf_counter()
                gemm()
                gemm_s[name].append(time.perf_counter() - t1)
                fill_s[name].append(t1 - t0)
    rows = []
    for name in fills:
        xs = sorted(gemm_s[name])
        rows.append(
            {
                "threads": threads,
                "cond": name,
                "fill_ms": 1e3 * statistics.median(fill_s[name]),
                "gemm_med_us": 1e6 * statistics.median(xs),
                "gemm_p10_us": 1e6 * xs[len(xs) // 10],
                "gemm_p90_us": 1e6 * xs[(9 * len(xs)) // 10],
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default=",".join(str(t) for t in sorted({1, usable_cores()})), help="comma-separated")
    ap.add_argument("--repeats", type=int, default=40)
    args = ap.parse_args(argv)
    for t in (int(s) for s in args.threads.split(",")):
        for row in measure(t, args.repeats):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
