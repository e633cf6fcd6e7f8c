"""How collectives are timed: in a training loop's rhythm, from the last rank's arrival to the last exit.

Closed forms on synthetic entry/exit times, so every number here is known in advance.
"""

from __future__ import annotations

import numpy as np
import pytest

from dlrmsim.calibration.benchmarks.collectives import _inner_calls, combine_ranks, time_collective
from dlrmsim.calibration.benchmarks.timing import TimingPolicy
from dlrmsim.calibration.dlrm_runner import COLLECTIVE_PHASES, PHASES, iteration_phases


def test_combine_takes_last_arrival_to_last_exit_and_averages_each_repeats_calls() -> None:
    # Repeat 1: call a: rank 0 enters at 0, rank 1 at 2 (rank 0 waits 2: skew, not the collective's);
    # both leave at 3 -> 1. Call b: both enter at 10, rank 1 leaves at 15 (a late wake-up) -> 5. Mean 3.
    # Repeat 2: calls of 1 and 1 -> 1. Repeat 3: 2 and 4 -> 3. Median of (3, 1, 3) = 3.
    rank0 = [[(0.0, 3.0), (10.0, 11.0)], [(20.0, 21.0), (30.0, 31.0)], [(40.0, 42.0), (50.0, 54.0)]]
    rank1 = [[(2.0, 3.0), (10.0, 15.0)], [(20.0, 21.0), (30.0, 31.0)], [(40.0, 42.0), (50.0, 54.0)]]
    med, spread = combine_ranks([rank0, rank1])
    assert med == pytest.approx(3.0)
    assert spread == pytest.approx(100.0 * (3.0 - 1.0) / 3.0)


class _FakeComm:
    """Records the order of barriers and calls; the collective itself does nothing."""

    size, rank = 2, 0

    def __init__(self) -> None:
        self.events: list[str] = []

    def barrier(self) -> None:
        self.events.append("barrier")

    def allreduce(self, buf: np.ndarray) -> int:
        self.events.append("call")
        return buf.nbytes


def test_time_collective_keeps_the_training_rhythm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each timed call follows its compute gap, and repeats start at a barrier. The gap's work is replaced by a
    marker, because how long real GEMM work lasts depends on the host's speed at that moment (a gap sized in
    one second ran at half length the next on a shared VM): the order of events is what the method promises."""
    import dlrmsim.calibration.benchmarks.collectives as bench

    comm = _FakeComm()
    sized: list[float] = []

    def marker_gap(gap_s: float):  # noqa: ANN202
        sized.append(gap_s)
        return lambda: comm.events.append("gap")

    monkeypatch.setattr(bench, "_gap_work", marker_gap)
    send = np.zeros(1024, dtype=np.float32)
    policy = TimingPolicy(warmup=1, repeats=3, min_sample_s=0.0)
    samples = time_collective(comm, "allreduce", send, None, policy, gap_s=1e-4)
    inner = _inner_calls(send.nbytes)
    assert sized == [1e-4]
    # One barrier per repeat, not per call: a call follows the other rank's compute, not a barrier.
    assert comm.events == ["gap", "call"] + (["barrier"] + ["gap", "call"] * inner) * policy.repeats
    assert [len(s) for s in samples] == [inner] * policy.repeats
    for calls in samples:
        assert all(t0 <= t1 for t0, t1 in calls)
        assert all(t1 <= n0 for (_, t1), (n0, _) in zip(calls, calls[1:], strict=False))  # calls never overlap


def _rank_result(phase_s: dict[str, float], calls: list[tuple[float, float]]) -> dict:
    return {"phases": [{ph: phase_s.get(ph, 1.0) for ph in PHASES if ph != "arrival_wait"}], "calls": [calls]}


def test_iteration_phases_move_arrival_waits_out_of_the_collectives() -> None:
    # Rank 0 enters the three collectives at 0, 10, 20; rank 1 at 1, 10, 23 (rank 0 waits 1, 0, 3).
    r0 = _rank_result({"alltoall_fwd": 2.0, "alltoall_bwd": 1.5, "allreduce": 5.0}, [(0, 2), (10, 11.5), (20, 25)])
    r1 = _rank_result({"alltoall_fwd": 1.2, "alltoall_bwd": 1.5, "allreduce": 2.5}, [(1, 2), (10, 11.5), (23, 25)])
    out = iteration_phases([r0, r1], 0)
    assert out["alltoall_fwd"] == pytest.approx(max(2.0 - 1.0, 1.2))
    assert out["alltoall_bwd"] == pytest.approx(1.5)
    assert out["allreduce"] == pytest.approx(max(5.0 - 3.0, 2.5))
    assert out["arrival_wait"] == pytest.approx(1.0 + 0.0 + 3.0)
    assert out["top_mlp_fwd"] == 1.0  # compute phases: the slowest rank's, untouched
    assert set(COLLECTIVE_PHASES) < set(out)


def test_one_rank_has_no_arrival_wait() -> None:
    out = iteration_phases([_rank_result({}, [])], 0)
    assert out["arrival_wait"] == 0.0


def test_collectives_at_once_is_series_over_together() -> None:
    from dlrmsim.calibration.fit import fit_collectives_at_once
    from dlrmsim.calibration.schema import Measurement

    def row(mode: str, t: float) -> Measurement:
        params = {"ranks": 2, "implementation": "gloo", "mode": mode}
        return Measurement(benchmark="alltoall_together", name=f"alltoall {mode}", cores=2, params=params, time_s=t, repeats=3)

    # because two alltoalls in series take the sum of their times and two fully at once the longer one's, the
    # ratio reads 1 for a group that runs one collective at a time and 2 for one that runs two equal ones at once
    assert fit_collectives_at_once([row("series", 2.0e-3), row("together", 1.9e-3)]) == pytest.approx(2.0 / 1.9, rel=1e-3)
    assert fit_collectives_at_once([row("series", 2.0e-3), row("together", 1.0e-3)]) == pytest.approx(2.0)
    assert fit_collectives_at_once([row("series", 2.0e-3)]) is None  # not measured: no limit is claimed


def test_the_together_benchmark_times_both_modes_on_the_shm_group() -> None:
    from dlrmsim.calibration.benchmarks.collectives import together_task

    policy = TimingPolicy(warmup=1, repeats=3, min_sample_s=0.0)
    rows = together_task(2, "shm", 1, policy).run()
    assert [m.params["mode"] for m in rows] == ["series", "together"]
    series, together = (m.time_s for m in rows)
    # because the shared-memory group is driven by the calling thread, "together" runs the two one after another
    # too: the two modes time the same work (within a factor of two on a shared host)
    assert 0.5 < series / together < 2.0, (series, together)
