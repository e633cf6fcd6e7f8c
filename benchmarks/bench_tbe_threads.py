"""fbgemm's CPU table-batched embedding (TorchRec's fused embedding kernel) at 1 and 2 threads, timed alone.

The evidence behind ``training/presets/implementations/torchrec-fused.yaml``: whether the TBE forward and its
fused SGD backward run faster on more threads, and how many threads they keep busy (process CPU time / wall
time). Thread counts are interleaved within each round, and every row carries the load average beside it, since
other jobs on a shared host slow a multi-threaded run most. Needs torch and fbgemm-gpu-cpu (make torchrec).

    .venv/bin/python -m benchmarks.bench_tbe_threads [--rounds 3] [--out validation/results]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
from pathlib import Path

from dlrmsim.calibration.benchmarks.tbe import TbeConfig, time_tbe

CONFIGS = (
    TbeConfig(rows=200_000, dim=32, pooling=16, batch=1024),  # the validation's base case
    TbeConfig(rows=200_000, dim=32, pooling=64, batch=1024),
    TbeConfig(rows=200_000, dim=128, pooling=16, batch=1024),
    TbeConfig(rows=200_000, dim=32, pooling=16, batch=4096),
)
COLUMNS = ("date", "host", "round", "load_average", "tables", "rows", "dim", "pooling", "batch", "threads")
COLUMNS += ("forward_ms", "backward_ms", "forward_busy_threads", "backward_busy_threads", "samples")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--out", type=Path, default=Path("validation/results"))
    args = ap.parse_args()
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{now:%Y%m%dT%H%M%S}-{platform.node() or 'host'}-tbe-threads.csv"
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(COLUMNS)
        for r in range(args.rounds):
            for cfg in CONFIGS:
                for threads in (1, 2) if r % 2 == 0 else (2, 1):
                    t = time_tbe(cfg, threads, samples=args.samples)
                    load = os.getloadavg()[0]
                    row = (now.isoformat(), platform.node(), r, f"{load:.2f}", cfg.tables, cfg.rows, cfg.dim, cfg.pooling)
                    row += (cfg.batch, threads, f"{t.forward_s * 1e3:.3f}", f"{t.backward_s * 1e3:.3f}")
                    row += (f"{t.forward_busy_threads:.2f}", f"{t.backward_busy_threads:.2f}", t.samples)
                    out.writerow(row)
                    print(" ".join(f"{k}={v}" for k, v in zip(COLUMNS[2:], row[2:], strict=True)), flush=True)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
