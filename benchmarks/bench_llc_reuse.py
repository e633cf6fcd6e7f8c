"""How much of a random-reuse working set misses the last-level cache on this host, against the cost model's
``costs.cache_miss_share`` (fp / (fp + LLC)).

Every cost the model charges for data pushed out between uses (a GEMM's evicted operands, an embedding update's
reloaded rows, a task's first op) reads ``cache_miss_share(footprint, llc_bytes)`` with ``llc_bytes`` from the
host's CPU description. This benchmark measures the share instead: random 64-byte row gathers (one cache line
each) over footprints from 0.25 MiB to 512 MiB, interleaved over rounds, fastest round kept. The time per access
between the smallest footprints' (all hits) and the largest's (all misses) is the measured miss share.

    .venv/bin/python -m benchmarks.bench_llc_reuse [--rounds 5] [--out validation/results]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks.evidence import write_evidence
from dlrmsim.engine.costs import cache_miss_share
from dlrmsim.host import last_level_cache_bytes

MIB = 1 << 20
FOOTPRINTS_MIB = (0.25, 0.5, 1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256, 512)
ACCESSES = 1 << 20
LINE_FLOATS = 16  # a 64-byte row of float32: one cache line per access


def access_ns(table: np.ndarray, idx: np.ndarray, out: np.ndarray) -> float:
    """Time per random row gather (ns), one timed pass after a warm one."""
    np.take(table, idx, axis=0, out=out)
    t0 = time.perf_counter()
    np.take(table, idx, axis=0, out=out)
    return (time.perf_counter() - t0) / idx.size * 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("validation/results"))
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    out = np.empty((ACCESSES, LINE_FLOATS), dtype=np.float32)
    best = {mib: np.inf for mib in FOOTPRINTS_MIB}
    for r in range(args.rounds):
        # interleaved, alternating direction: a slow spell of the host falls on every footprint alike
        order = FOOTPRINTS_MIB if r % 2 == 0 else FOOTPRINTS_MIB[::-1]
        for mib in order:
            rows = int(mib * MIB / (4 * LINE_FLOATS))
            table = np.ones((rows, LINE_FLOATS), dtype=np.float32)
            idx = rng.integers(0, rows, ACCESSES)
            best[mib] = min(best[mib], access_ns(table, idx, out))
    t = np.array([best[m] for m in FOOTPRINTS_MIB])
    hit, miss = float(np.median(t[:4])), float(np.median(t[-4:]))  # <= 2 MiB: hits; >= 64 MiB: misses
    llc = last_level_cache_bytes()
    rows = []
    for mib, ns in zip(FOOTPRINTS_MIB, t.tolist(), strict=True):
        measured = min(max((ns - hit) / (miss - hit), 0.0), 1.0)
        model = cache_miss_share(mib * MIB, llc)
        rows.append({"footprint_MiB": mib, "access_ns": round(ns, 3), "measured_share": round(measured, 3),
                     "model_share": round(model, 3)})  # fmt: skip
        print(f"{mib:7.2f} MiB  {ns:6.2f} ns/access  measured miss share {measured:5.2f}  model {model:5.2f}")
    write_evidence(
        args.out,
        "llc-reuse",
        {"llc_bytes": llc, "hit_ns": hit, "miss_ns": miss, "rounds": args.rounds, "accesses": ACCESSES, "rows": rows},
    )


if __name__ == "__main__":
    main()
