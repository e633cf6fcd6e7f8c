"""benchmarks/swap_rows.py: a protocol A/B that changes only the named benchmarks' rows."""

from __future__ import annotations

import pytest

from benchmarks.swap_rows import swapped
from dlrmsim.calibration.calibrate import fit_calibration
from dlrmsim.calibration.schema import Calibration


def test_only_the_named_benchmarks_rows_come_from_the_other_calibration(quick_cal: Calibration) -> None:
    # because the A/B must isolate a protocol from the host's drift, the swapped calibration must keep every other
    # row of the new one: make an "old" calibration whose interaction rows took twice as long and whose GEMMs took
    # three times as long; swapping only "interaction" slows the interaction's fits and leaves the GEMM fits the new
    # ones, and the calibration "as measured" is the plain refit
    slower = {"interaction": 2.0, "gemm": 3.0}
    old = quick_cal.model_copy(
        update={
            "measurements": [
                m.model_copy(update={"time_s": m.time_s * slower.get(m.benchmark, 1.0)}) for m in quick_cal.measurements
            ]
        }
    )
    as_measured, with_old = swapped(quick_cal, old, {"interaction"})
    same = fit_calibration(quick_cal.host, list(quick_cal.measurements))
    assert as_measured == same
    assert with_old.gemm == same.gemm and with_old.memory == same.memory
    assert with_old.interaction != same.interaction

    def measured(cal: Calibration, benchmark: str) -> dict[str, float]:
        return {q.name: q.measured_s for q in cal.fit_quality if q.benchmark == benchmark}

    # the swapped fit saw the old interaction rows (twice as long) and the new GEMM rows
    new_rows, old_rows = measured(same, "interaction"), measured(with_old, "interaction")
    assert new_rows and old_rows.keys() == new_rows.keys()
    assert all(old_rows[n] == pytest.approx(2.0 * t, rel=1e-3) for n, t in new_rows.items())
    assert measured(with_old, "gemm") == measured(same, "gemm")
