"""How much of the calibrated interaction's time is the flush it is timed after, on this host?

The calibration times the runner's dot interaction (forward and backward) right after a flush of twice the
last-level cache (``Ops.flush``), on the assumption that a step's embedding and MLP traffic evicts everything
between two calls. On a host whose last-level cache holds the validation cases' whole working set (the 2-vCPU
Intel VM: 300 MiB, against some 100 MB of tables) that assumption fails, and the fit's fixed time per call (the
intercept over batches) carries the refill of what the flush evicted into every step.

This benchmark times the interaction at one shape (the validation cases' S=4 tables, E=32, 16 lookups on 200k-row
tables) in contexts interleaved round by round, and reports the median per context and direction:

- ``flush``: right after the calibration's own flush (its protocol);
- ``step``: the forward right after the step's real predecessor, the S embedding-bag forwards that make its inputs,
  and the backward right after that forward (as in a step, where the top MLP between them moves little data);
- ``traffic_<MiB>``: right after reading and writing a private buffer of that size (the flush's own kernel);
- ``hot``: right after a call of itself.

    .venv/bin/python -m benchmarks.bench_interaction_context [--threads 2] [--batches 256,1024,4096] [--rounds 30]
        [--out JSON]

Needs torch (the calibration's torch ops). Batches in a row: the fixed part of each context is the intercept of its
medians over batch (least squares), as the calibration's fit separates a fixed and a per-sample time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from dlrmsim.calibration.dlrm_runner import dot_interaction_bwd, dot_interaction_fwd
from dlrmsim.calibration.ops import get_ops
from dlrmsim.host import last_level_cache_bytes

TABLES, DIM, LOOKUPS, ROWS = 4, 32, 16, 200_000  # the validation cases' base workload
TRAFFIC_MIB = (8, 32, 128)


def measure(threads: int, batch: int, rounds: int, warmup: int = 3) -> dict[str, dict[str, float]]:
    """Median ms per context and direction at ``batch`` on ``threads`` threads."""
    ops = get_ops("torch")
    rng = np.random.default_rng(batch)
    tables = [ops.new_table(ROWS, DIM, rng) for _ in range(TABLES)]
    bot = ops.tensor(rng.standard_normal((batch, DIM), dtype=np.float32))
    li, lj = (ops.tensor(a.astype(np.int64)) for a in np.tril_indices(TABLES + 1, k=-1))
    d_inter = ops.tensor(rng.standard_normal((batch, DIM + TABLES * (TABLES + 1) // 2), dtype=np.float32))
    traffic = {f"traffic_{mb}": ops.make_flush(mb << 20) for mb in TRAFFIC_MIB}
    contexts = ["flush", "step", "hot", *traffic]
    times: dict[str, dict[str, list[float]]] = {c: {"forward": [], "backward": []} for c in contexts}
    clock = time.perf_counter

    def lookups() -> list[Any]:
        return [ops.emb_forward(t, rng.integers(0, ROWS, (batch, LOOKUPS))) for t in tables]

    with ops.threads(threads):
        emb = lookups()
        for rnd in range(warmup + rounds):
            k = rnd % len(contexts)
            for c in contexts[k:] + contexts[:k]:  # each context follows each other one in turn
                if c == "flush":
                    ops.flush()
                elif c == "step":
                    emb = lookups()
                elif c == "hot":
                    dot_interaction_fwd(ops, bot, emb, li, lj)
                else:
                    traffic[c]()
                t0 = clock()
                feats, _ = dot_interaction_fwd(ops, bot, emb, li, lj)
                t1 = clock()
                if c == "flush":
                    ops.flush()
                elif c == "hot":
                    dot_interaction_bwd(ops, d_inter, feats, li, lj)
                elif c != "step":
                    traffic[c]()
                t2 = clock()
                dot_interaction_bwd(ops, d_inter, feats, li, lj)
                t3 = clock()
                if rnd >= warmup:
                    times[c]["forward"].append(t1 - t0)
                    times[c]["backward"].append(t3 - t2)
    return {c: {d: float(np.median(v)) * 1e3 for d, v in ds.items()} for c, ds in times.items()}


def intercepts(batches: list[int], rows: dict[int, dict[str, dict[str, float]]]) -> dict[str, dict[str, list[float]]]:
    """Per context and direction: [fixed ms, ms per 1000 samples], the least-squares line through the medians."""
    out: dict[str, dict[str, list[float]]] = {}
    x = np.array(batches, dtype=float)
    for c in rows[batches[0]]:
        out[c] = {}
        for d in ("forward", "backward"):
            y = np.array([rows[b][c][d] for b in batches])
            slope, icpt = np.polyfit(x, y, 1) if len(batches) > 1 else (0.0, float(y[0]))
            out[c][d] = [round(float(icpt), 4), round(float(slope) * 1e3, 4)]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", default="256,1024,4096")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    batches = [int(b) for b in a.batches.split(",")]
    rows = {b: measure(a.threads, b, a.rounds) for b in batches}
    out = {
        "threads": a.threads,
        "rounds": a.rounds,
        "llc_MiB": last_level_cache_bytes() >> 20,
        "shape": {"tables": TABLES, "dim": DIM, "lookups": LOOKUPS, "rows": ROWS},
        "median_ms": {str(b): {c: {d: round(v, 4) for d, v in ds.items()} for c, ds in r.items()} for b, r in rows.items()},
        "fixed_ms_and_ms_per_1000_samples": intercepts(batches, rows),
    }
    text = json.dumps(out, indent=1)
    print(text)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
