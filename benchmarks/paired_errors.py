"""TorchRec's prediction error less the project runner's, case by case in the same validation runs, with and without
a calibration's autograd fit: what differs between the two implementations once the calibration's state cancels.

Both targets of one ``dlrmsim validate --against project,torchrec`` run share a calibration and ran minutes apart, so
a calibration that caught a slow or fast spell of the host moves both errors alike; their difference is what the
model says about TorchRec's step against a written-out one with the same GEMMs (its autograd, its kernels). Each run
is predicted again (``validate.repredict``) under its own calibration with ``--fits``' autograd fit put in, and with
none.

    .venv/bin/python -m benchmarks.paired_errors --fits validation/results/20261127T1925-vm-calibration.yaml \
        20261127T162037 20261127T164245 ...   (run stamps of validation/results/<stamp>-vm-torchrec.csv)
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from dlrmsim.calibration.schema import Calibration, load_calibration
from dlrmsim.calibration.validate import read_results_rows, repredict


def paired_differences(torchrec: dict[str, float], runner: dict[str, float]) -> dict[str, float]:
    """TorchRec's error less the runner's for every case both predicted (relative errors)."""
    return {case: e - runner[case] for case, e in torchrec.items() if case in runner}


def errors(csv: Path, cal_path: Path, cal: Calibration) -> dict[str, float]:
    """Each case's error of ``csv`` predicted again under ``cal`` (loaded from ``cal_path``, perhaps changed since)."""
    return {c.name: c.error for c in repredict(csv, cal_path, warn_other_host=False, calibration=cal).cases}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stamps", nargs="+", help="run stamps: <stamp>-vm-torchrec.csv under --results")
    ap.add_argument("--fits", type=Path, required=True, help="the calibration whose autograd fit is put in")
    ap.add_argument("--results", type=Path, default=Path("validation/results"))
    args = ap.parse_args(argv)
    fits = load_calibration(args.fits, False).autograd
    pooled: dict[str, list[float]] = {"with": [], "without": []}
    for stamp in args.stamps:
        torchrec_csv = args.results / f"{stamp}-vm-torchrec.csv"
        # the runner's CSV of the same run is written a second or so earlier, under its own stamp
        runner_csv = next(iter(sorted(args.results.glob(f"{stamp[:-2]}*-vm-torch.csv"))))
        cal_path = Path(str(read_results_rows(torchrec_csv, ("calibration",), "--fits")[0]["calibration"]))
        cal = load_calibration(cal_path, False)
        runner = errors(runner_csv, cal_path, cal)
        for label, autograd in (("with", fits), ("without", [])):
            torchrec = errors(torchrec_csv, cal_path, cal.model_copy(update={"autograd": autograd}))
            diff = paired_differences(torchrec, runner)
            pooled[label] += diff.values()
            own = statistics.median(abs(e) for e in torchrec.values())
            print(
                f"{stamp} {label:7s} TorchRec median |error| {own * 100:.1f} %"
                f", TorchRec - runner median {statistics.median(diff.values()) * 100:+.1f} %: "
                + " ".join(f"{c}:{d * 100:+.0f}" for c, d in diff.items()),
                flush=True,
            )
    for label, diffs in pooled.items():
        print(
            f"pooled {label}: median(TorchRec - runner) {statistics.median(diffs) * 100:+.1f} %, "
            f"median |TorchRec - runner| {statistics.median(abs(d) for d in diffs) * 100:.1f} % ({len(diffs)} cases)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
