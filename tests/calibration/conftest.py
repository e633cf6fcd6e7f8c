"""Fixtures of the calibration tests. The session's one calibration (``quick_cal_path``, ``quick_cal``) is in
``tests/conftest.py``: the notebook tests read it too."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dlrmsim.calibration.apply import apply_calibration
from dlrmsim.calibration.schema import Calibration
from dlrmsim.topologies.topology import ComputeSpec
from dlrmsim.training.implementations import load_implementation
from dlrmsim.training.simulate import TrainingConfig, load_training_topology

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
