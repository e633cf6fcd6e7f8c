"""Fit a cut-off calibration measured on a machine that is gone (a lent host whose lease ended mid-run).

``dlrmsim calibrate --finish`` fits an interrupted run on the machine that measured it. When that machine is gone,
its partial-results file can still be fitted here, given a host record of a machine of the same kind: the record's
cache key (CPU model, cores, ISA, memory, libraries, method) must equal the key of the file's lines, so
measurements of one kind of machine are never fitted under another's. The record's clock (from its own FMA probe,
raised by the fit where a kernel beats it) stands in for the measuring machine's, which is the one field the partial
file cannot give.

    .venv/bin/python -m benchmarks.fit_partial PARTIAL.jsonl HOST_FROM.yaml OUT.yaml [--date ISO]

docs/calibration.md ("A fourth 16-core machine (D)") used it on the 2026-11-26 lease's calibration.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from dlrmsim.calibration.benchmarks.plan import build_plan, combine_passes
from dlrmsim.calibration.calibrate import PartialCache, check_first_pass, fit_calibration, not_taken, partial_key, run_plan
from dlrmsim.calibration.collectives_host import implementation_for
from dlrmsim.calibration.ops import get_ops
from dlrmsim.calibration.schema import load_calibration, save_calibration


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("partial", type=Path)
    ap.add_argument("host_from", type=Path, help="a calibration of a machine of the same kind (its host record)")
    ap.add_argument("out", type=Path)
    ap.add_argument("--date", default="", help="when the measuring machine's run ended (ISO 8601)")
    args = ap.parse_args()
    host = load_calibration(args.host_from).host
    host = host.model_copy(update={"date": args.date, "load_average": 0.0, "flush_bytes": host.flushed_bytes})
    keys = {json.loads(line)["key"] for line in args.partial.read_text().splitlines() if line.strip()}
    key = partial_key(host)
    if keys != {key}:
        raise SystemExit(f"{args.partial}: keys {sorted(keys)} are not this host record's {key!r}: another kind of machine")
    # The plan of the measuring machine: its cores and this library's plan (task ids must all be known).
    tasks = build_plan(get_ops(host.backend), host.quick, host.cores, implementation_for(host.backend))
    cache = PartialCache(args.partial, key)
    unknown = set(cache.done) - {t.id for t in tasks}
    if unknown:
        raise SystemExit(f"{args.partial}: {len(unknown)} tasks this version does not plan (e.g. {min(unknown)})")
    check_first_pass(tasks, cache)
    # As calibrate --finish: every task the run did not take is skipped, a deadline already past.
    rows = run_plan(tasks, cache, progress=False, later_passes_until=-math.inf)
    cal = fit_calibration(host, combine_passes(rows))
    save_calibration(cal, args.out)
    skipped = not_taken(tasks, cache)
    print(f"wrote {args.out}: {len(cache.done)} of {len(tasks)} planned measurements ({skipped} later passes not taken)")


if __name__ == "__main__":
    main()
