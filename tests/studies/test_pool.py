"""Worker processes for independent simulations (studies.pool): same results and counters as one process."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time

import dask.system
import pytest

from dlrmsim.engine import RUN_TOTALS
from dlrmsim.errors import DlrmsimError
from dlrmsim.host import usable_cores
from dlrmsim.studies.pool import WATCH_S, WorkerPool


def _square_counted(x: int) -> tuple[int, int]:
    RUN_TOTALS["test_jobs"] += 1
    RUN_TOTALS["test_sum"] += x
    return x * x, os.getpid()


def _fails_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("three")
    return x


def test_results_and_counters_do_not_depend_on_the_workers() -> None:
    items = list(range(7))
    runs = {}
    for workers in (1, 2):
        RUN_TOTALS.clear()
        with WorkerPool(_square_counted, workers) as pool:
            got = dict(pool.run(items, order=[6, 5, 4, 3, 2, 1, 0]))
            parallel = pool.parallel
        runs[workers] = ({i: sq for i, (sq, _pid) in got.items()}, dict(RUN_TOTALS), {pid for _sq, pid in got.values()})
        assert parallel == (workers > 1), "because two workers make a pool on Linux, one runs here"
    # because every item is done exactly once wherever it ran, and each job's counter increments come back to this
    # process (benchmarks read RUN_TOTALS around a command)
    assert runs[1][0] == runs[2][0] == {i: i * i for i in items}
    assert runs[1][1] == runs[2][1] == {"test_jobs": 7, "test_sum": 21}
    assert runs[1][2] == {os.getpid()} and os.getpid() not in runs[2][2], "because workers=2 runs the jobs elsewhere"


def test_spawned_workers_as_on_macos_give_the_same_results_and_counters() -> None:
    RUN_TOTALS.clear()
    with WorkerPool(_square_counted, 2, method="spawn") as pool:
        got = dict(pool.run([3, 4]))
    # because macOS and Windows have no safe fork: their workers start afresh, import the job's module by name and
    # must still send back every result and counter
    assert {i: sq for i, (sq, _) in got.items()} == {0: 9, 1: 16} and RUN_TOTALS["test_sum"] == 7


def test_one_worker_runs_the_jobs_here_in_the_given_order() -> None:
    with WorkerPool(_fails_on_three, 1) as pool:
        # because without a pool the jobs run in this process one after another, in the order asked
        assert [i for i, _ in pool.run([10, 11, 12], order=[2, 0, 1])] == [2, 0, 1]


def test_a_workers_exception_reaches_the_caller() -> None:
    # because a job that raises is a bug to show, not a result to drop (studies turn refusals into rows themselves)
    with WorkerPool(_fails_on_three, 2) as pool, pytest.raises(ValueError, match="three"):
        list(pool.run([1, 2, 3, 4]))


def test_without_posix_semaphores_the_jobs_run_here(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoSemaphores:
        def Pool(self, *_a: object, **_k: object) -> None:  # noqa: N802 - multiprocessing's name
            raise OSError(38, "Function not implemented")

    monkeypatch.setattr(multiprocessing, "get_context", lambda _method: NoSemaphores())
    RUN_TOTALS.clear()
    with WorkerPool(_square_counted, 2) as pool:
        got = dict(pool.run([1, 2, 3]))
        parallel = pool.parallel
    # because a host without POSIX semaphores (some containers lack /dev/shm) cannot make a pool, and the demo and
    # studies must still run there: in this process, every job, with its counters
    assert not parallel and {i: sq for i, (sq, _) in got.items()} == {0: 1, 1: 4, 2: 9} and RUN_TOTALS["test_jobs"] == 3


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_usable_cores_are_this_process_affinity() -> None:
    cpus = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(cpus)})
        pinned = usable_cores()
    finally:
        os.sched_setaffinity(0, cpus)
    # because the default worker counts are sized to the cores this process may run on (a job pinned by taskset or a
    # container's cpuset), not the machine's
    assert pinned == 1 and 1 <= usable_cores() <= len(cpus)


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2 if sys.platform == "linux" else True,
    reason="cgroup quotas are Linux's; a quota below the affinity needs an affinity of 2 cores or more",
)
def test_usable_cores_keep_to_the_cgroup_cpu_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    # A container limited to half a CPU (cgroup cpu.max "50000 100000") on a node whose cores all stay in its affinity.
    monkeypatch.setattr(dask.system, "_try_extract_cgroup_cpu_quota", lambda: (50_000, 100_000))
    # because such a process gets one core's time at most (rounded up), however many cores its affinity lists: as
    # many worker processes or threads as the node's cores would thrash, or run a small pod out of memory
    assert usable_cores() == 1


def _dies_on_two(x: int) -> int:
    if x == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer would
    time.sleep(0.2)
    return x


def test_a_worker_killed_by_the_system_stops_the_run_with_one_line() -> None:
    t0 = time.monotonic()
    with WorkerPool(_dies_on_two, 2) as pool, pytest.raises(DlrmsimError, match="worker process died") as err:
        list(pool.run([0, 1, 2, 3, 4, 5]))
    # because multiprocessing.Pool would wait forever for the killed worker's job: the pool notices the death within
    # its watch period and says what to do
    assert "--workers" in err.value.one_line() and time.monotonic() - t0 < 10 * WATCH_S + 5
