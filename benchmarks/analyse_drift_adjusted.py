"""Would a validation's error shrink if the prediction used the host's rates as the drift probe found them?

For each single-rank case of a kept validation (its results CSV and the ``--json`` output beside it, which holds
every probe sample of every round), the calibration's measurements of each probed benchmark family (gemm, stream,
dispatch, fork, embedding) at each probed core count are scaled by the median probe ratio of the case's kept
round, refitted, and the case predicted again. Both errors are printed against a plain refit of the same
measurements, so only the scaling differs. Families and counts the probe did not measure stay as calibrated.

    .venv/bin/python -m benchmarks.analyse_drift_adjusted CAL.yaml gemm,embedding RESULTS.csv [RESULTS.csv ...]

The JSON is ``RESULTS.json`` or ``RESULTS-phases.json``. docs/calibration.md ("Thread scaling on a 16-core host")
reports what it gave on the 16-core evidence; it is an analysis, not a prediction mode.
"""

from __future__ import annotations

import csv
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from dlrmsim.calibration import validate as v
from dlrmsim.calibration.calibrate import fit_calibration, refitted
from dlrmsim.calibration.schema import Calibration, load_calibration


def family_cores(probe_name: str) -> tuple[str, int]:
    """("embedding", 16) from "embedding update r262144 d32 p1 uniform b2048 t4 c16"."""
    m = re.search(r" c(\d+)$", probe_name)
    if m is None:
        raise ValueError(f"probe name without a core count: {probe_name}")
    return probe_name.split()[0], int(m.group(1))


def round_ratios(samples: list[dict[str, Any]], families: set[str]) -> tuple[tuple[tuple[str, int], float], ...]:
    """Median now / calibrated ratio per (family, cores) of one probe round, for ``families`` only."""
    groups: dict[tuple[str, int], list[float]] = {}
    for s in samples:
        key = family_cores(s["name"])
        if key[0] in families:
            groups.setdefault(key, []).append(s["now_s"] / s["calibrated_s"])
    return tuple(sorted((k, round(statistics.median(x), 4)) for k, x in groups.items()))


def rescaled(cal: Calibration, ratios: tuple[tuple[tuple[str, int], float], ...]) -> Calibration:
    """The calibration fitted again with each (benchmark, cores) row's time multiplied by its ratio."""
    by = dict(ratios)
    rows = [m.model_copy(update={"time_s": m.time_s * by.get((m.benchmark, m.cores), 1.0)}) for m in cal.measurements]
    return fit_calibration(cal.host, rows)


def main() -> None:
    cal = load_calibration(Path(sys.argv[1]))
    families = set(sys.argv[2].split(","))
    plain = refitted(cal)
    fits: dict[tuple[tuple[tuple[str, int], float], ...], Calibration] = {}
    errors: list[tuple[float, float]] = []
    for results in map(Path, sys.argv[3:]):
        doc = next(p for p in (results.with_suffix(".json"), results.with_name(results.stem + "-phases.json")) if p.exists())
        report = json.loads(doc.read_text())
        kept = {c["name"]: c.get("kept_round", 0) for c in report["cases"]}
        rows = list(csv.DictReader(results.open(newline="")))
        bases = {c.name: c for c in v.load_cases(only=sorted({v.base_case_name(r["case"]) for r in rows}))}
        for r in rows:
            if int(r["ranks"]) > 1:
                continue
            case = v.ValidationCase(r["case"], bases[v.base_case_name(r["case"])].workload, int(r["batch"]), 1, int(r["threads"]))
            implementation = v.TARGET_IMPLEMENTATIONS[r["target"] if r["target"] in v.TARGETS else "project"]
            ratios = round_ratios(report["host_drift"][kept[r["case"]]], families)
            if ratios not in fits:
                fits[ratios] = rescaled(cal, ratios)
            measured = float(r["measured_median_s"])
            e0 = v.predict(case, plain, implementation)[0] / measured - 1
            e1 = v.predict(case, fits[ratios], implementation)[0] / measured - 1
            errors.append((e0, e1))
            print(f"{results.name[:40]:42s} {r['case']:18s} refit {100 * e0:+6.1f} %  drift-adjusted {100 * e1:+6.1f} %")
    for label, i in (("refit", 0), ("drift-adjusted", 1)):
        xs = [abs(e[i]) for e in errors]
        print(f"{label}: median |error| {100 * statistics.median(xs):.1f} %, max {100 * max(xs):.1f} %")


if __name__ == "__main__":
    main()
