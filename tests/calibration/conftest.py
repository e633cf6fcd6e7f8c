"""One calibration per test session (numpy backend, so it runs without torch), reused by every test.

It runs the tiny plan: every benchmark kind and every fit, in one pass (about 25 s on 2 cores against about
130 s for the quick plan), so the suite checks the whole calibration path on any host within its time budget.
The quick plan's own agreement check is `slow` (tests/calibration/test_quick_calibration.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlrmsim.calibration.apply import apply_calibration
from dlrmsim.calibration.calibrate import run_calibration
from dlrmsim.calibration.schema import Calibration
from dlrmsim.topologies.topology import ComputeSpec
from dlrmsim.training.implementations import load_implementation
from dlrmsim.training.simulate import TrainingConfig, load_training_topology


@pytest.fixture(scope="session")
def quick_cal_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cal") / "host-test.yaml"
    run_calibration(quick=True, backend="numpy", out=out, progress=False, tiny=True)
    return out


@pytest.fixture(scope="session")
def quick_cal(quick_cal_path: Path) -> Calibration:
    from dlrmsim.calibration.schema import load_calibration

    return load_calibration(quick_cal_path)


SpecsByImplementation = Callable[[Calibration, int], tuple[ComputeSpec, ComputeSpec]]


@pytest.fixture
def torchrec_and_runner_specs() -> SpecsByImplementation:
    """``specs(cal, ranks)``: rank 0's compute spec calibrated by ``cal`` on ``ranks`` host ranks of one thread, for
    TorchRec's implementation profile and for the project runner's: how a fit charged to one profile is checked
    against the other."""

    def specs(cal: Calibration, ranks: int) -> tuple[ComputeSpec, ComputeSpec]:
        topo = load_training_topology(TrainingConfig(topology="host", ranks=ranks, threads_per_rank=1))
        torchrec, runner = (
            apply_calibration(topo, cal, implementation=load_implementation(name)).compute(0)
            for name in ("torchrec-fused", "project-runner")
        )
        return torchrec, runner

    return specs
