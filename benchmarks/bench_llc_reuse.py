"""How much of a random-reuse working set misses the last-level cache on this host, against the cost model's
``costs.cache_miss_share`` (fp / (fp + LLC)).

Every cost the model charges for data pushed out between uses (a GEMM's evicted operands, an embedding update's
reloaded rows, a task's first op) reads ``cache_miss_share(footprint, llc_bytes)`` with ``llc_bytes`` from the
host's CPU description, or the capacity the calibration's cache-reuse benchmark measured
(``HostInfo.effective_llc_bytes``). This runs that benchmark's kernel (dlrmsim/calibration/benchmarks/cache.py)
over a wider range, 0.25 MiB to 512 MiB: random 64-byte row gathers, interleaved over rounds, fastest round kept.
The time per access between the smallest footprints' (all hits) and the largest's (all misses) is the measured
miss share, printed beside the model's at the reported and at the fitted capacity.

    .venv/bin/python -m benchmarks.bench_llc_reuse [--rounds 5] [--out validation/results]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from benchmarks.evidence import write_evidence
from dlrmsim.calibration.benchmarks.cache import ACCESSES, reuse_footprints, time_reuse
from dlrmsim.calibration.fit import fit_effective_llc
from dlrmsim.calibration.host import current_host_stub
from dlrmsim.calibration.schema import Measurement
from dlrmsim.engine.costs import cache_miss_share
from dlrmsim.host import l2_cache_bytes, last_level_cache_bytes

MIB = 1 << 20
FOOTPRINTS_MIB = (0.25, 0.5, 1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256, 512)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("validation/results"))
    args = ap.parse_args()
    # the calibration's kernel (benchmarks/cache.py), over a wider range of footprints than it measures
    footprints = [int(mib * MIB) // 64 * 64 for mib in FOOTPRINTS_MIB]
    best = time_reuse(footprints, args.rounds)
    t = np.array([best[f] for f in footprints])
    hit, miss = float(np.median(t[:4])), float(np.median(t[-4:]))  # <= 2 MiB: hits; >= 64 MiB: misses
    llc = last_level_cache_bytes()
    # the capacity the calibration would fit from its own footprints' times (read off this sweep's)
    l2 = l2_cache_bytes()
    own = reuse_footprints(l2, llc)
    rows_c = [
        Measurement(benchmark="cache_reuse", name=f"f{f}", cores=1, params={"footprint_bytes": f, "llc_bytes": llc},
                    time_s=float(np.interp(f, footprints, t)) * 1e-9, repeats=args.rounds)
        for f in own
    ]  # fmt: skip
    effective = fit_effective_llc(rows_c, current_host_stub()) or llc
    rows = []
    for mib, ns in zip(FOOTPRINTS_MIB, t.tolist(), strict=True):
        measured = min(max((ns - hit) / (miss - hit), 0.0), 1.0)
        model = cache_miss_share(mib * MIB, llc)
        fitted = cache_miss_share(mib * MIB, effective)
        rows.append({"footprint_MiB": mib, "access_ns": round(ns, 3), "measured_share": round(measured, 3),
                     "model_share": round(model, 3), "effective_share": round(fitted, 3)})  # fmt: skip
        print(
            f"{mib:7.2f} MiB  {ns:6.2f} ns/access  measured miss share {measured:5.2f}  model {model:5.2f}"
            f"  at the effective capacity {fitted:5.2f}"
        )
    print(f"effective last-level cache {effective / MIB:.3g} MiB (reported {llc / MIB:.3g} MiB)")
    write_evidence(
        args.out,
        "llc-reuse",
        {"llc_bytes": llc, "effective_llc_bytes": effective, "hit_ns": hit, "miss_ns": miss, "rounds": args.rounds,
         "accesses": ACCESSES, "rows": rows},
    )  # fmt: skip


if __name__ == "__main__":
    main()
