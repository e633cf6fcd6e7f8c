"""The arrival-skew benchmark's statistic, its fit, and the host spec it gives the simulator."""

from __future__ import annotations

import pytest

from dlrmsim.calibration.apply import arrival_skew_fields
from dlrmsim.calibration.benchmarks.skew import arrival_excess
from dlrmsim.calibration.fit import fit_arrival_skew
from dlrmsim.calibration.schema import ArrivalSkewFit, Calibration, Measurement
from dlrmsim.calibration.validate import load_cases, predict, simulate_case
from tests.engine.handmade import simple_spec


def test_the_last_arrival_is_taken_against_the_ranks_mean() -> None:
    # Because at each barrier the collective waits for the slower rank: here 3 s both times, while the ranks' mean
    # stretch is 2 s; the spread is that of the slowest rank's times (none).
    last, typical, spread = arrival_excess([[1.0, 3.0], [3.0, 1.0]])
    assert (last, typical, spread) == (3.0, 2.0, 0.0)
    # Ranks in step never wait: the last arrives with the mean.
    last, typical, _ = arrival_excess([[2.0, 4.0], [2.0, 4.0]])
    assert last == typical == 3.0


def _skew(seg_ms: float, last_ms: float) -> Measurement:
    return Measurement(
        benchmark="skew",
        name=f"arrival skew {seg_ms:g}ms R2",
        cores=2,
        params={"ranks": 2, "implementation": "shm", "threads_per_rank": 1, "segment_s": seg_ms * 1e-3},
        time_s=last_ms * 1e-3,
        repeats=20,
    )


def test_fit_gives_each_stretch_its_fraction_in_length_order() -> None:
    fit = fit_arrival_skew([_skew(40.0, 46.0), _skew(2.0, 2.1)])
    # Because the fraction is the slowest rank's mean stretch over the ranks' mean, less 1, sorted by length.
    assert fit is not None and fit.ranks == 2 and fit.threads_per_rank == 1
    assert fit.points == [(2.0, pytest.approx(0.05)), (40.0, pytest.approx(0.15))]
    # No benchmark, no fit (one rank, older files): the simulator then charges nothing.
    assert fit_arrival_skew([]) is None


def test_the_host_spec_takes_the_table_in_seconds(quick_cal: Calibration) -> None:
    skew = ArrivalSkewFit(ranks=2, threads_per_rank=1, implementation="shm", points=[(2.0, 0.05), (40.0, 0.15)])
    cal = quick_cal.model_copy(update={"arrival_skew": skew})
    fields = arrival_skew_fields(cal, simple_spec())
    table = fields["arrival_excess"]
    # Because the table is kept in milliseconds and the simulator works in seconds, interpolated in log(length).
    assert fields["arrival_excess_ranks"] == 2
    assert table(2e-3) == pytest.approx(0.05) and table(40e-3) == pytest.approx(0.15) and table(1.0) == pytest.approx(0.15)
    assert 0.05 < table(10e-3) < 0.15
    # Without the benchmark the spec keeps its own (none).
    assert arrival_skew_fields(quick_cal.model_copy(update={"arrival_skew": None}), simple_spec())["arrival_excess"](0.01) == 0.0


def test_the_predicted_arrival_wait_is_the_first_ranks_wait_for_the_last(quick_cal: Calibration) -> None:
    skew = ArrivalSkewFit(ranks=2, threads_per_rank=1, implementation="shm", points=[(1.0, 0.1)])
    cal = quick_cal.model_copy(update={"arrival_skew": skew})
    case = next(c for c in load_cases() if c.name == "ranks-2")
    res = simulate_case(case, cal, "project-runner")
    _, phases = predict(case, cal, "project-runner")
    delays = {cid: t for cid, t in res.arrival_wait_s.items() if cid != "iteration_end"}
    # Because the runner reports, per collective, the earliest rank's wait for the latest, and the first arrives as
    # far ahead of the mean as the last arrives behind it: twice the simulator's delays, over the collectives only
    # (the iteration's end meets the runner's barrier, which it does not count).
    assert delays and phases["arrival_wait"] == pytest.approx(2 * sum(delays.values()))
    assert res.arrival_wait_s["iteration_end"] > 0
