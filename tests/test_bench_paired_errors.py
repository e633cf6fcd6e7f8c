"""benchmarks/paired_errors.py: TorchRec's error less the runner's, case by case."""

from __future__ import annotations

import pytest

from benchmarks.paired_errors import paired_differences


def test_paired_differences_cancel_what_both_targets_share() -> None:
    # Because a calibration's slow spell moves both targets' errors alike: +20 % on both is no difference, and a case
    # only one target ran has no pair.
    d = paired_differences({"base": 0.20, "batch-256": 0.05, "ranks-2": 0.1}, {"base": 0.20, "batch-256": 0.15})
    assert set(d) == {"base", "batch-256"}
    assert d["base"] == pytest.approx(0.0) and d["batch-256"] == pytest.approx(-0.10)
