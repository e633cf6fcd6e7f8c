"""Paper-study benchmark: wall time of ``dlrmsim study cpu-cluster-paper`` (the whole grid, report included).

The study simulates every distinct configuration of the CPU-cluster paper's grid once (``dlrmsim/studies/
cpu-cluster-paper.yaml``) in ``--workers`` processes and writes its HTML report. Target: < 60 s on 2 cores.
Wall time is noisy on a shared machine, so the run is repeated and the median shown beside the deterministic
counts (points, distinct simulations) and the longest single simulation.

    .venv/bin/python -m benchmarks.bench_paper_study [--workers 2] [--repeat 3] [--experiments a,b]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from dlrmsim.studies.paper import run_study
from dlrmsim.studies.paper_report import build_study_report

TARGET_S = 60.0


@dataclass
class Result:
    points: int
    simulations: int
    walls_s: list[float]

    @property
    def median_s(self) -> float:
        return statistics.median(self.walls_s)

    def row(self) -> str:
        runs = ", ".join(f"{w:.1f}" for w in self.walls_s)
        verdict = "ok" if self.median_s < TARGET_S else "OVER TARGET"
        return f"{self.points:>7} {self.simulations:>12} {self.median_s:>9.1f}   [{runs}]  target < {TARGET_S:.0f} s: {verdict}"


def bench(workers: int, repeat: int, only: list[str] | None) -> Result:
    walls: list[float] = []
    points = sims = 0
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeat):
            t0 = time.perf_counter()
            result = run_study("cpu-cluster-paper", workers=workers, only=only)
            build_study_report(result, Path(tmp) / "paper.html")
            walls.append(time.perf_counter() - t0)
            points, sims = len(result.rows), result.simulations
    return Result(points, sims, walls)


def main(argv: list[str] | None = None) -> Result:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2, help="simulation processes (default 2: the target machine's cores)")
    ap.add_argument("--repeat", type=int, default=3, help="runs; the median is the result")
    ap.add_argument("--experiments", default=None, help="comma-separated experiment names (default: all)")
    args = ap.parse_args(argv)
    only = [e for e in args.experiments.split(",") if e] if args.experiments else None
    print(f"{'points':>7} {'simulations':>12} {'median s':>9}   runs (s)")
    res = bench(args.workers, args.repeat, only)
    print(res.row(), flush=True)
    return res


if __name__ == "__main__":
    main()
