"""Fixed work quantum (FWQ): how much this host's noise stretches a fixed piece of compute, one process per core.

The standard OS-noise benchmark: every process times the same ~0.2 ms of single-threaded GEMM work many times; a
quantum slower than the median is time the process lost to something else (the kernel, the hypervisor, another
process). With ``--procs`` equal to the core count every core computes, as in a validation run of that many ranks.
It answers whether rank-to-rank jitter at synchronisation points can explain a multi-rank step slower than
predicted: the expected later-of-two-ranks arrival grows with the spread printed here.

    .venv/bin/python -m benchmarks.bench_fwq [--procs 2] [--quanta 10000] [--out validation/results]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.evidence import in_processes, write_evidence

QUANTUM_S = 0.2e-3  # work per quantum: long against the timer, short against a step's compute between collectives
MATRIX = 64  # a GEMM that stays in the core's caches: the quantum measures lost time, not memory


def _quanta(queue: Any, count: int) -> None:
    with threadpool_limits(1):
        a = np.full((MATRIX, MATRIX), 0.5, dtype=np.float32)
        t0, calls = time.perf_counter(), 0
        while time.perf_counter() - t0 < 0.05:
            a @ a
            calls += 1
        reps = max(1, round(calls * QUANTUM_S / 0.05))
        out = np.empty(count)
        for i in range(count):
            t = time.perf_counter()
            for _ in range(reps):
                a @ a
            out[i] = time.perf_counter() - t
    queue.put(out)


def summary(times_s: np.ndarray) -> dict[str, float]:
    """Median quantum and what noise adds to it (us): mean excess, standard deviation, tail percentiles."""
    med = float(np.median(times_s))
    us = 1e6
    return {
        "median_us": round(med * us, 1),
        "mean_excess_us": round(float(times_s.mean() - med) * us, 2),
        "std_us": round(float(times_s.std()) * us, 2),
        "p99_us": round(float(np.percentile(times_s, 99)) * us, 1),
        "p99.9_us": round(float(np.percentile(times_s, 99.9)) * us, 1),
        "max_us": round(float(times_s.max()) * us, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--quanta", type=int, default=10_000)
    ap.add_argument("--out", type=Path, default=Path("validation/results"))
    args = ap.parse_args()
    per_proc = [summary(t) for t in in_processes(_quanta, [(args.quanta,)] * args.procs)]
    for s in per_proc:
        print(json.dumps(s))
    write_evidence(args.out, "fwq", {"procs": per_proc})


if __name__ == "__main__":
    main()
