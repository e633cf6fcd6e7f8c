"""One calibration per test session (numpy backend, so it runs without torch), reused by every test.

It runs the tiny plan: every benchmark kind and every fit, in one pass (about 25 s on 2 cores against about
130 s for the quick plan), so the suite checks the whole calibration path on any host within its time budget.
The quick plan's own agreement check is `slow` (tests/calibration/test_quick_calibration.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlrmsim.calibration.calibrate import run_calibration
from dlrmsim.calibration.schema import Calibration


@pytest.fixture(scope="session")
def quick_cal_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cal") / "host-test.yaml"
    run_calibration(quick=True, backend="numpy", out=out, progress=False, tiny=True)
    return out


@pytest.fixture(scope="session")
def quick_cal(quick_cal_path: Path) -> Calibration:
    from dlrmsim.calibration.schema import load_calibration

    return load_calibration(quick_cal_path)
