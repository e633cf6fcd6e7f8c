"""What a lone rank's steps gain from their second thread, against what the calibration's kernels gained and what the
cores' availability pairs say a step keeps (apply.available_gemm_points, apply.typical_update_fit).

A speedup of a step's phase between two cases that differ only in their threads (``threads-1-wide`` against
``wide-mlp`` for the top MLP's GEMMs, ``threads-1`` against ``base`` for the sparse update) is a ratio of two
measurements of one run: the host's speed that day cancels, and what is left is the thread scaling the availability
correction models. Per host (the CSV's CPU model), over every kept runner validation (``*-vm-torch.csv``) under the
given directory, it prints the steps' median speedups beside, for every calibration there that measured the
availability: the GEMM tables' speedup at the top MLP's size and the update fit's at the base case's, as fitted and
as the typical moment keeps them. Two ranks on the two cores are checked the same way: a lone 1-thread rank's top
MLP over that of one of two 1-thread ranks running the same GEMMs (``ranks-2-wide``, twice the batch), against the
GEMM pairs' availability, which is what each of those ranks keeps.

    .venv/bin/python -m benchmarks.analyse_step_speedups [validation/results]

docs/calibration.md ("A lone rank's GEMMs keep their tables' speedup") reports what it gave on the 2-vCPU VMs.
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from dlrmsim.calibration.apply import available_update_fit, kept_gain_rate
from dlrmsim.calibration.fit import embedding_coefficients, embedding_features, predict_gemm_s
from dlrmsim.calibration.ops.base import embedding_bytes
from dlrmsim.calibration.schema import Calibration, EmbeddingFit, Measurement, load_calibration, select_embedding_fit
from dlrmsim.calibration.validate import parse_phases_cell
from dlrmsim.workloads.model import expected_unique_rows
from dlrmsim.workloads.schema import UniformIndices

TOP_MLP_GEMM_FLOPS = 2 * 1024 * 1024 * 1024  # wide-mlp's 1024 x 1024 top layers at batch 1024: one GEMM's flops
# The base validation case's tables (validation_cases.yaml): 4 x 200,000 rows of 32 floats, 16 lookups per sample
BASE_UPDATE = {"rows": 200_000, "dim": 32, "batch": 1024, "pooling": 16, "tables": 4}
# Per kernel: (the case on fewer threads, the case on more or beside another rank, the phase compared)
CASE_PAIRS = {
    "gemm": ("threads-1-wide", "wide-mlp", "top_mlp_fwd"),
    "update": ("threads-1", "base", "embedding_update"),
    # one rank of two, each on one thread and half of twice the batch: the same GEMMs as the lone 1-thread rank's
    "gemm, 2 ranks": ("threads-1-wide", "ranks-2-wide", "top_mlp_fwd"),
}


def phase_ratio(slow: dict[str, str], fast: dict[str, str], phase: str) -> float | None:
    """``phase``'s measured time in ``slow`` over that in ``fast`` (rows of one run's CSV); None where not recorded."""
    a, b = parse_phases_cell(slow.get("measured_phases_s")), parse_phases_cell(fast.get("measured_phases_s"))
    return a[phase] / b[phase] if a.get(phase) and b.get(phase) else None


def step_speedups(directory: Path) -> dict[str, dict[str, list[float]]]:
    """Per host, per kernel ("gemm", "update"): each kept runner validation's 1-thread over 2-thread phase time; and
    ("gemm, 2 ranks") a lone 1-thread rank's top MLP over that of one of two 1-thread ranks running the same GEMMs."""
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(directory.glob("*-vm-torch.csv")):
        with path.open() as fh:
            rows = {r["case"]: r for r in csv.DictReader(fh)}
        for kernel, (slow, fast, phase) in CASE_PAIRS.items():
            if slow in rows and fast in rows and (r := phase_ratio(rows[slow], rows[fast], phase)) is not None:
                out[rows[fast]["cpu_model"]][kernel].append(r)
    return out


def update_time_s(fit: EmbeddingFit, cal: Calibration) -> float:
    """The embedding fit's time of one base-case table's sparse update, beyond its dispatch."""
    lookups = BASE_UPDATE["batch"] * BASE_UPDATE["pooling"]
    unique = expected_unique_rows(BASE_UPDATE["rows"], lookups, UniformIndices())
    params = {**BASE_UPDATE, "op": "update", "unique_rows": unique, "lookups": lookups}
    nbytes = embedding_bytes(BASE_UPDATE["batch"], BASE_UPDATE["pooling"], BASE_UPDATE["dim"], unique)["update"]  # type: ignore[arg-type]
    m = Measurement(benchmark="embedding", name="base update", cores=1, params=params, bytes=nbytes, time_s=1.0, repeats=1)
    return float(embedding_features(m, cal.host) @ embedding_coefficients(fit))


def kernel_speedups(cal: Calibration) -> dict[str, tuple[float, float]] | None:
    """Per kernel, (fitted 2-core speedup, the speedup the pairs' typical moment keeps); for two 1-thread ranks, (1, the
    GEMM pairs' availability). None without 2-core pairs."""
    gemm, update = cal.availability_fit(2, "gemm"), cal.availability_fit(2, "update")
    if gemm is None or update is None or cal.gemm.table(1).cores != 1 or cal.gemm.table(2).cores != 2:
        return None
    s = predict_gemm_s(cal.gemm, TOP_MLP_GEMM_FLOPS, 1) / predict_gemm_s(cal.gemm, TOP_MLP_GEMM_FLOPS, 2)
    one, two = (select_embedding_fit(cal.embedding, "update", "uniform", c) for c in (1, 2))
    u1 = update_time_s(one, cal)
    kept = available_update_fit(two, one, update.retained_gain)
    return {
        "gemm": (s, kept_gain_rate(s, 1.0, gemm.retained_gain)),
        "update": (u1 / update_time_s(two, cal), u1 / update_time_s(kept, cal)),
        "gemm, 2 ranks": (1.0, gemm.availability),
    }


def main() -> None:
    directory = Path(sys.argv[1] if len(sys.argv) > 1 else "validation/results")
    steps = step_speedups(directory)
    fitted: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(directory.glob("*-calibration*.yaml")):
        cal = load_calibration(path, warn_other_host=False)
        if (got := kernel_speedups(cal)) is not None:
            for kernel, pair in got.items():
                fitted[cal.host.cpu_model][kernel].append(pair)
    print(
        "host | kernel | steps' speedup, 1 over 2 threads or a lone rank over one of 2 (median, runs) | fitted | "
        "kept by the typical moment (calibrations)"
    )
    for host in sorted(steps):
        for kernel in ("gemm", "update", "gemm, 2 ranks"):
            s, f = steps[host][kernel], fitted[host][kernel]
            if not s or not f:
                continue
            print(
                f"{host} | {kernel} | {statistics.median(s):.2f} ({len(s)}) | {statistics.median(p[0] for p in f):.2f} | "
                f"{statistics.median(p[1] for p in f):.2f} ({len(f)})"
            )


if __name__ == "__main__":
    main()
