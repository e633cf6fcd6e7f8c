"""benchmarks/bench_skew_runs.py splits the calibration's skew statistic into its parts."""

from __future__ import annotations

import pytest

from benchmarks.bench_skew_runs import parts


def test_a_rank_slower_throughout_is_all_gap() -> None:
    # because one rank takes 12 ms every time and the other 10, every barrier's excess is 1 ms over an 11-ms mean,
    # and all of it is the ranks' gap (half their difference), with no jitter on top
    out = parts([[10e-3] * 5, [12e-3] * 5])
    assert out["segment_ms"] == pytest.approx(11.0)
    assert out["mean_excess"] == pytest.approx(1 / 11)
    assert out["median_excess"] == pytest.approx(1 / 11)
    assert out["rank_gap"] == pytest.approx(1 / 11)


def test_jitter_without_a_gap() -> None:
    # because the ranks take turns being 2 ms late, their means are equal (no gap) while every barrier still waits
    # 1 ms past the 11-ms mean; one long detour moves the mean excess but not the median
    a = [10e-3, 12e-3, 10e-3, 12e-3]
    b = [12e-3, 10e-3, 12e-3, 10e-3]
    out = parts([a, b])
    assert out["rank_gap"] == pytest.approx(0.0, abs=1e-12)
    assert out["mean_excess"] == pytest.approx(1 / 11)
    detour = parts([[*a, 10e-3], [*b, 30e-3]])
    assert detour["mean_excess"] > out["mean_excess"]
    assert detour["median_excess"] == pytest.approx(1e-3 / detour["segment_ms"] * 1e3)
