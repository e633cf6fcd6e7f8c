"""One quick calibration per test session (numpy backend, so it runs without torch), reused by every test."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlrmsim.calibration.calibrate import run_calibration
from dlrmsim.calibration.schema import Calibration


@pytest.fixture(scope="session")
def quick_cal_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cal") / "host-test.yaml"
    run_calibration(quick=True, backend="numpy", out=out, progress=False)
    return out


@pytest.fixture(scope="session")
def quick_cal(quick_cal_path: Path) -> Calibration:
    from dlrmsim.calibration.schema import load_calibration

    return load_calibration(quick_cal_path)
