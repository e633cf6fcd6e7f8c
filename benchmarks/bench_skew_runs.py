"""How repeatable is the calibration's arrival-skew benchmark? Its runs back to back, each split into its parts.

The calibration measures the skew (``dlrmsim/calibration/benchmarks/skew.py``) with its own rank processes and
communicator. This runs that same benchmark ``--runs`` times in a row (fresh rank processes each time) and reports,
per run and segment length, as fractions of the ranks' mean segment:

- ``mean_excess``: the calibration's statistic, the mean over barriers of the slowest rank's segment less the ranks'
  mean (``skew.arrival_excess``);
- ``median_excess``: the same with the median over barriers (is a robust statistic more repeatable?);
- ``rank_gap``: half the difference between the slowest and the fastest rank's mean segment: the part of the
  excess that one rank being slower for the whole run gives.

If the runs disagree by more than their barriers' sampling explains, the skew is a state of the host that changes
between runs, and one run cannot estimate it (docs/calibration.md, "How repeatable the skew is").

    .venv/bin/python -m benchmarks.bench_skew_runs [--runs 3] [--ranks 2] [--implementation gloo] [--out DIR]

Needs torch (the gloo communicator).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from benchmarks.evidence import write_evidence
from dlrmsim.calibration.benchmarks.skew import SKEW_BARRIERS, SKEW_SEGMENTS_S, arrival_excess, skew_rank
from dlrmsim.calibration.collectives_host import run_ranks


def parts(per_rank: list[list[float]]) -> dict[str, float]:
    """The three statistics of the module docstring, as fractions, and the ranks' mean segment (ms), from each rank's
    segment times (s). ``bench_sync`` reports the same excess and gap in ms."""
    n = min(len(t) for t in per_rank)
    typical = [statistics.fmean(t[i] for t in per_rank) for i in range(n)]
    mean_last, mean_typical, _ = arrival_excess(per_rank)
    excess = [max(t[i] for t in per_rank) - typical[i] for i in range(n)]
    means = [statistics.fmean(t[:n]) for t in per_rank]
    return {
        "segment_ms": mean_typical * 1e3,
        "mean_excess": mean_last / mean_typical - 1.0,
        "median_excess": statistics.median(excess) / mean_typical,
        "rank_gap": (max(means) - min(means)) / 2 / mean_typical,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--implementation", choices=("gloo", "shm"), default="gloo")
    ap.add_argument("--out", type=Path, default=Path("validation/results"))
    args = ap.parse_args()
    barriers = tuple(SKEW_BARRIERS[s] for s in SKEW_SEGMENTS_S)
    runs: list[list[dict[str, Any]]] = []
    for r in range(args.runs):
        got = run_ranks(skew_rank, args.ranks, args.implementation, args=(SKEW_SEGMENTS_S, barriers), threads_per_rank=1)
        row = [parts([rank[i] for rank in got]) for i in range(len(SKEW_SEGMENTS_S))]
        runs.append(row)
        print(
            f"run {r + 1}: "
            + " | ".join(
                f"{p['segment_ms']:.1f} ms: mean {100 * p['mean_excess']:.1f} %, median {100 * p['median_excess']:.1f} %, "
                f"gap {100 * p['rank_gap']:.1f} %"
                for p in row
            ),
            flush=True,
        )
    write_evidence(
        args.out,
        "skew-runs",
        {"ranks": args.ranks, "implementation": args.implementation, "barriers": list(barriers), "runs": runs},
    )


if __name__ == "__main__":
    main()
