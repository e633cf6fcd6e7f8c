"""benchmarks/analyse_step_speedups.py sets the steps' thread scaling beside the calibration's."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from benchmarks.analyse_step_speedups import kernel_speedups, step_speedups
from dlrmsim.calibration.schema import load_calibration
from dlrmsim.calibration.validate import phases_cell

RESULTS = Path(__file__).resolve().parent.parent / "validation" / "results"


def _row(case: str, phases: dict[str, float]) -> dict[str, str]:
    return {"case": case, "cpu_model": "Test CPU", "measured_phases_s": phases_cell(phases)}


def test_a_runs_speedup_is_its_one_thread_phase_over_its_two_thread_one(tmp_path: Path) -> None:
    # because the 1-thread wide case's top MLP took 30 ms where the 2-thread one took 16, the GEMMs gained 1.875x;
    # the update 12 ms against 8, 1.5x; a run without the pair of cases adds nothing, nor one without two ranks
    rows = [
        _row("wide-mlp", {"top_mlp_fwd": 0.016}),
        _row("threads-1-wide", {"top_mlp_fwd": 0.030}),
        _row("base", {"embedding_update": 0.008}),
        _row("threads-1", {"embedding_update": 0.012}),
    ]
    for name, kept in (("20261128T0000-vm-torch.csv", rows), ("20261128T0001-vm-torch.csv", rows[:1])):
        with (tmp_path / name).open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=["case", "cpu_model", "measured_phases_s"])
            w.writeheader()
            w.writerows(kept)
    got = step_speedups(tmp_path)
    assert got["Test CPU"]["gemm"] == [pytest.approx(1.875)]
    assert got["Test CPU"]["update"] == [pytest.approx(1.5)]
    assert "gemm, 2 ranks" not in got["Test CPU"]


def test_the_typical_moment_keeps_part_of_a_kernels_gain() -> None:
    # because the pairs' typical speedup is below their best, the kept speedup lies between 1 and the fitted one; two
    # one-thread ranks keep the GEMM pairs' availability, below 1, of their tables' 1-core rate
    cal = load_calibration(RESULTS / "20261128T1549-vm-calibration-full.yaml", warn_other_host=False)
    got = kernel_speedups(cal)
    assert got is not None
    for kernel in ("gemm", "update"):
        fitted, kept = got[kernel]
        assert 1.0 < kept < fitted
    assert got["gemm, 2 ranks"] == (1.0, cal.availability_fit(2, "gemm").availability) and got["gemm, 2 ranks"][1] < 1.0
