"""A/B of a benchmark protocol on the same validation measurements.

When a benchmark changes how it times (a context before each call, say), a fresh calibration holds the new rows and
an older one the old rows, measured at another hour. Predicting a validation with the two calibrations mixes the
protocol with the host's drift between them. This script keeps one calibration (``new``) and swaps only the named
benchmarks' rows for those of another (``old``), refits both with this checkout's fit, and predicts the same kept
validation CSVs with each: per case, and per phase for the one-rank cases (median of (predicted - measured) /
measured).

    .venv/bin/python -m benchmarks.swap_rows NEW.yaml OLD.yaml RESULTS.csv [RESULTS.csv ...]
        [--benchmarks interaction,interaction_context,interaction_torchrec,interaction_torchrec_context,optimizer]
        [--phases interaction_fwd,interaction_bwd,mlp_update]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from dlrmsim.calibration.calibrate import fit_calibration, refitted
from dlrmsim.calibration.schema import Calibration, load_calibration
from dlrmsim.calibration.validate import ValidationReport, repredict

DEFAULT_BENCHMARKS = "interaction,interaction_context,interaction_torchrec,interaction_torchrec_context,optimizer"
DEFAULT_PHASES = "interaction_fwd,interaction_bwd,mlp_update"


def swapped(new: Calibration, old: Calibration, benchmarks: set[str]) -> tuple[Calibration, Calibration]:
    """(``new`` refitted as measured, ``new`` refitted with ``benchmarks``' rows taken from ``old``)."""
    keep = [m for m in new.measurements if m.benchmark not in benchmarks]
    other = [m for m in old.measurements if m.benchmark in benchmarks]
    return refitted(new), fit_calibration(new.host, keep + other)


def phase_errors(report: ValidationReport, phase: str) -> list[float]:
    """(predicted - measured) / measured of ``phase`` over the one-rank cases that measured it."""
    return [
        (c.predicted_phases_s[phase] - c.measured_phases_s[phase]) / c.measured_phases_s[phase]
        for c in report.cases
        if c.ranks == 1 and c.measured_phases_s.get(phase) and phase in c.predicted_phases_s
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("new", type=Path)
    ap.add_argument("old", type=Path)
    ap.add_argument("results", type=Path, nargs="+")
    ap.add_argument("--benchmarks", default=DEFAULT_BENCHMARKS)
    ap.add_argument("--phases", default=DEFAULT_PHASES, help="phases whose errors to print")
    args = ap.parse_args(argv)
    names = set(args.benchmarks.split(","))
    new, old = load_calibration(args.new, warn_other_host=False), load_calibration(args.old, warn_other_host=False)
    as_measured, with_old = swapped(new, old, names)
    moved = sum(m.benchmark in names for m in new.measurements), sum(m.benchmark in names for m in old.measurements)
    print(f"{args.new.name} as measured ('new'), and with its {moved[0]} rows of {sorted(names)}")
    print(f"  replaced by the {moved[1]} of {args.old.name} ('old')")
    for csv in args.results:
        a = repredict(csv, args.new, warn_other_host=False, calibration=as_measured)
        b = repredict(csv, args.new, warn_other_host=False, calibration=with_old)
        print(
            f"\n{csv.name}: median / max |error| new {100 * a.median_abs_error:.1f} / {100 * a.max_abs_error:.1f} %, "
            f"old {100 * b.median_abs_error:.1f} / {100 * b.max_abs_error:.1f} %"
        )
        for ca, cb in zip(a.cases, b.cases, strict=True):
            errors = f"new {100 * ca.error:6.1f} %  old {100 * cb.error:6.1f} %"
            print(f"  {ca.name:18s} measured {1e3 * ca.measured_s:7.2f} ms  {errors}")
        for phase in args.phases.split(","):
            ea, eb = phase_errors(a, phase), phase_errors(b, phase)
            if ea:
                print(
                    f"  phase {phase:16s} median error new {100 * statistics.median(ea):6.1f} %  "
                    f"old {100 * statistics.median(eb):6.1f} %  ({len(ea)} rows)"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
