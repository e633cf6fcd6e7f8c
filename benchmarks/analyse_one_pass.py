"""What a calibration loses without its second pass (``calibrate --max-minutes``, or ``--finish`` on a cut-off run).

A two-pass calibration keeps each benchmark's faster pass and records the slower one (``slowest_pass_s``). Refitting
it with one pass per benchmark instead (the streams keep their median of five samples) shows how far the
predictions move: ``random`` keeps one of the two passes at random (seeded), which is what a benchmark measured
once would have given; ``slow`` keeps the slower one (the worst case). Each refit is
compared with a plain refit of the same file as ``dlrmsim agreement`` compares two calibrations.

    .venv/bin/python -m benchmarks.analyse_one_pass CAL.yaml [CAL.yaml ...] [--seed 0]

docs/calibration.md ("Calibrating in limited time") reports what it gave on the Intel VM.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from dlrmsim.calibration.agreement import compare
from dlrmsim.calibration.calibrate import fit_calibration, refitted
from dlrmsim.calibration.schema import Calibration, Measurement, load_calibration
from dlrmsim.calibration.validate import load_cases


def one_pass(cal: Calibration, which: str, seed: int) -> list[Measurement]:
    """``cal``'s measurements with every two-pass benchmark (streams apart) taken from one pass."""
    rng = random.Random(seed)
    rows = []
    for m in cal.measurements:
        if m.slowest_pass_s is None or m.benchmark == "stream":
            rows.append(m)
            continue
        slow = which == "slow" or rng.random() < 0.5
        rows.append(m.model_copy(update={"time_s": m.slowest_pass_s if slow else m.time_s, "passes": 1, "slowest_pass_s": None}))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("calibrations", type=Path, nargs="+")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cases = load_cases()
    for path in args.calibrations:
        cal = load_calibration(path)
        both = refitted(cal)
        for which in ("random", "slow"):
            ag = compare(both, fit_calibration(cal.host, one_pass(cal, which, args.seed)), cases)
            (pm, px), (qm, qx) = ag.parameter_median_max, ag.prediction_median_max
            print(
                f"{path.name}, one pass ({which}): parameters {100 * pm:.1f} / {100 * px:.1f} %, "
                f"{len(ag.predictions)} predictions {100 * qm:.1f} / {100 * qx:.1f} % (median / max difference)"
            )


if __name__ == "__main__":
    main()
