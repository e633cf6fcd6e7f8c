"""Does a multi-threaded GEMM run slower after the thread pool idled, slept or had its cache flushed, or in the
operand layouts nn.Linear uses? Single-call times per condition, as JSON lines, to tell apart the candidate
causes of a GEMM that runs slower in a training step than in the calibration's loop.

Conditions per thread count (each a distribution of ``--repeats`` single calls, median and p10/p90 reported):
- ``loop``: back-to-back calls (the pool spins hot, operands cached);
- ``gap_serial_<ms>``: the main thread busy-spins alone for <ms> first, as a step's Python and one-thread ops do;
- ``gap_sleep_2.0``: the main thread sleeps 2 ms first (idle vCPUs may halt);
- ``wake_then``: after a 2 ms serial gap a small GEMM wakes the pool; only the big one is timed;
- ``flush``: a buffer larger than the last-level cache is written first;
- ``mlp_loop`` / ``mlp_gap_*``: a [512, 1024, 1024, 1] MLP forward and backward at batch 1024 (wide-mlp's top);
- ``layout_*``: 1024^3 with both operands contiguous, as ``addmm(b, x, W.t())`` and as ``mm(g.t(), x)``;
- ``small_loop`` / ``small_gap_<fill>_<ms>``: 32^3 and 256^3 in a loop and after a 1, 3 or 10 ms gap that the main
  thread spends spinning, asleep or streaming through the flush buffer (elapsed time against our own traffic).

OMP_WAIT_POLICY (ACTIVE / PASSIVE) is read at start-up, so compare policies in separate processes:

    OMP_WAIT_POLICY=ACTIVE .venv/bin/python -m benchmarks.bench_gemm_idle --threads 8,16 > rows.jsonl
    .venv/bin/python -m benchmarks.bench_gemm_idle --threads 1,2 --small-only > small.jsonl

The 16-core rows in validation/results/20261126-emr16-C/ (gemm-probe-C.jsonl, gemm-layout-C2.txt) came from the
script this file was made from.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from dlrmsim.calibration.benchmarks.idle import spin
from dlrmsim.host import last_level_cache_bytes, usable_cores

if TYPE_CHECKING:
    import torch


def timed(fn: Callable[[], object], before: Callable[[], object] | None, repeats: int) -> list[float]:
    """Single-call times (s) of ``fn``, each after ``before`` (not timed)."""
    out = []
    for _ in range(repeats):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def row(threads: int, cond: str, n: int, samples: list[float], flop: float) -> dict[str, object]:
    xs = sorted(samples)
    med = statistics.median(xs)
    return {
        "policy": os.environ.get("OMP_WAIT_POLICY", "default"),
        "threads": threads,
        "cond": cond,
        "n": n,
        "med_us": med * 1e6,
        "p10_us": xs[len(xs) // 10] * 1e6,
        "p90_us": xs[(9 * len(xs)) // 10] * 1e6,
        "gflops": flop / med / 1e9,
    }


def conditions(threads: int, repeats: int, flush: torch.Tensor) -> list[dict[str, object]]:
    import torch  # optional extra: imported where it runs

    rows = []
    for n in (512, 1024, 2048):
        a, b, c = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
        rows += gemm_conditions(threads, repeats, flush, a, b, c)
    return rows + mlp_conditions(threads, repeats) + small_gap_conditions(threads, repeats, flush)


def stream(seconds: float, buffer: torch.Tensor) -> None:
    """Stream through ``buffer`` (the main thread's own memory traffic) for about ``seconds``."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        buffer.add_(0.0)


def small_gap_conditions(threads: int, repeats: int, flush: torch.Tensor) -> list[dict[str, object]]:
    """DLRM-sized GEMMs (32^3 and 256^3, operands in the cores' caches) after a gap of 1, 3 or 10 ms filled three
    ways: the main thread busy-spinning (time passes, no traffic of ours), asleep (the vCPUs may halt), or streaming
    through ``flush`` (time passes *and* our own traffic evicts). Which fill costs the next call more tells whether
    what it pays is set by the time since its last call or by our traffic since then (costs.evicted_operand_time_s
    charges the latter)."""
    import torch

    rows = []
    for n in (32, 256):
        a, b, c = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)

        def mm(a: torch.Tensor = a, b: torch.Tensor = b, c: torch.Tensor = c) -> None:
            torch.mm(a, b, out=c)

        for _ in range(3):
            mm()
        flop = 2.0 * n**3
        rows.append(row(threads, "small_loop", n, timed(mm, None, repeats), flop))
        for ms in (1.0, 3.0, 10.0):
            fills = {
                "spin": lambda ms=ms: spin(ms / 1e3),
                "sleep": lambda ms=ms: time.sleep(ms / 1e3),
                "stream": lambda ms=ms: stream(ms / 1e3, flush),
            }
            for fill, before in fills.items():
                rows.append(row(threads, f"small_gap_{fill}_{ms}", n, timed(mm, before, repeats), flop))
    return rows


def gemm_conditions(
    threads: int, repeats: int, flush: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor
) -> list[dict[str, object]]:
    """The n^3 GEMM a @ b -> c in a loop and after a serial gap; at n = 1024 also after a sleep, a wake-up and a
    flush, and in nn.Linear's layouts."""
    import torch

    n = a.shape[0]
    flop = 2.0 * n**3

    def mm() -> None:
        torch.mm(a, b, out=c)

    for _ in range(3):
        mm()
    rows = [row(threads, "loop", n, timed(mm, None, repeats), flop)]
    for ms in (0.2, 2.0, 20.0) if n == 1024 else (2.0,):
        rows.append(row(threads, f"gap_serial_{ms}", n, timed(mm, lambda ms=ms: spin(ms / 1e3), repeats), flop))
    if n != 1024:
        return rows
    rows.append(row(threads, "gap_sleep_2.0", n, timed(mm, lambda: time.sleep(0.002), repeats), flop))
    rows.append(row(threads, "wake_then", n, timed(mm, lambda: (spin(0.002), torch.mm(a[:256], b[:, :256])), repeats), flop))
    rows.append(row(threads, "flush", n, timed(mm, lambda: flush.fill_(1.0), max(3, repeats // 3)), flop))
    w, bias, g = torch.randn(n, n), torch.randn(n), torch.randn(n, n)
    w_t = w.t().contiguous()
    layouts = {
        "layout_contiguous": lambda: torch.mm(a, w_t),
        "layout_linear_addmm": lambda: torch.addmm(bias, a, w.t()),
        "layout_weight_grad": lambda: torch.mm(g.t(), a),
    }
    for name, fn in layouts.items():
        fn()
        rows.append(row(threads, name, n, timed(fn, None, repeats), flop))
    return rows


def mlp_conditions(threads: int, repeats: int) -> list[dict[str, object]]:
    """wide-mlp's top MLP forward and backward at batch 1024, in a loop and after a serial gap or a sleep."""
    import torch

    x = torch.randn(1024, 512)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1)
    )

    def step() -> None:
        mlp(x).sum().backward()

    for _ in range(3):
        step()
    flop = 3 * 2.0 * 1024 * (512 * 1024 + 1024 * 1024 + 1024)
    return [
        row(threads, "mlp_loop", 1024, timed(step, None, repeats), flop),
        row(threads, "mlp_gap_serial_2.0", 1024, timed(step, lambda: spin(0.002), repeats), flop),
        row(threads, "mlp_gap_sleep_2.0", 1024, timed(step, lambda: time.sleep(0.002), repeats), flop),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default=str(usable_cores()), help="comma-separated thread counts")
    ap.add_argument("--repeats", type=int, default=25)
    ap.add_argument("--small-only", action="store_true", help="only the DLRM-sized GEMMs after gaps (small_*)")
    args = ap.parse_args()
    import torch

    flush = torch.empty(2 * last_level_cache_bytes() // 4, dtype=torch.float32)
    with torch.enable_grad():
        for t in (int(s) for s in args.threads.split(",")):
            torch.set_num_threads(t)
            rows = small_gap_conditions(t, args.repeats, flush) if args.small_only else conditions(t, args.repeats, flush)
            for r in rows:
                print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
