"""The one interference formula of an unpinned progress thread (dlrmsim.engine.costs)."""

from __future__ import annotations

import pytest

from dlrmsim.engine.costs import progress_thread_interference


def test_barrier_synchronised_kernels_run_at_the_pace_of_the_shared_core() -> None:
    # Because every thread of a barrier-synchronised kernel waits for the one that shares its core with the
    # progress thread, the whole kernel loses the stolen share, however many cores it has.
    got = progress_thread_interference(0.5, 28, barrier_synchronized=True)
    assert got.compute_share == pytest.approx(0.5)
    assert got.comm_slowdown == pytest.approx(2.0)


def test_without_barriers_only_the_stolen_cpu_time_is_lost() -> None:
    # Because independent threads do not wait for each other, only half a core of 28 is lost.
    got = progress_thread_interference(0.5, 28, barrier_synchronized=False)
    assert got.compute_share == pytest.approx(1 - 0.5 / 28)
