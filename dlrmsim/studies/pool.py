"""Independent simulations on the cores of this machine: worker processes for the demo and for `dlrmsim study`.

A simulation is one single-threaded Python process's work, so a grid of points runs on every core only in
separate processes. :class:`WorkerPool` is the one way this package starts them (Dask sweeps aside, which
schedule across machines: :mod:`dlrmsim.studies.runner`):

- **Started before any progress bar.** On Linux the workers are forked (no re-import, so they are ready in
  milliseconds), and a fork copies only the calling thread: a rich progress bar's refresh thread, running
  during the fork, could leave a lock held in the child. Callers create the pool first, then the bar.
  Elsewhere the workers are spawned (fork is unsafe on macOS and absent on Windows).
- **Ctrl-C is the parent's.** The terminal sends SIGINT to the whole process group; the workers ignore it, and
  the parent, on its KeyboardInterrupt, terminates them on the way out (no traceback from each worker).
- **The engine's counters come back.** :data:`dlrmsim.engine.RUN_TOTALS` counts solves and events in the
  process that ran them; each result carries its worker's increments, which are added to the parent's, so a
  benchmark reading the counters around a command sees the same totals as in one process.
- **No pool, no harm.** One worker, a single job, or a host without POSIX semaphores (a container without
  ``/dev/shm``: the pool cannot be made) run the jobs in this process, in the same order.
- **A worker that dies is an error, not a hang.** ``multiprocessing.Pool`` replaces a worker the kernel killed (the
  OOM killer, when too many large simulations run at once) but never returns the job it held; the pool watches its
  workers while it waits and stops with a one-line error saying to run fewer at once.
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.pool import Pool
from types import TracebackType
from typing import Generic, TypeVar

from dlrmsim.engine import RUN_TOTALS
from dlrmsim.errors import DlrmsimError

# s between checks that every worker is alive while waiting for a result
WATCH_S = 0.5

T = TypeVar("T")
R = TypeVar("R")


class WorkerPool(Generic[T, R]):
    """``workers`` processes that apply ``fn`` to items, created now (see the module docstring for why now);
    ``method``: multiprocessing's start method (default: fork on Linux, spawn elsewhere).

    Use as a context manager; :meth:`run` yields ``(index, result)`` as results arrive. ``fn`` must be a module-level
    function (spawned workers import it by name) whose items and results pickle.
    """

    def __init__(self, fn: Callable[[T], R], workers: int, method: str | None = None) -> None:
        self.fn = fn
        self.workers = max(1, workers)
        self._pool: Pool | None = None
        self._pids: set[int] = set()  # the workers this pool started (a replacement means one died)
        if self.workers > 1:
            method = method or ("fork" if sys.platform == "linux" else "spawn")
            before = _children()
            try:
                self._pool = multiprocessing.get_context(method).Pool(self.workers, initializer=_ignore_sigint)
            except OSError:  # no POSIX semaphores: the jobs run in this process
                self._pool = None
            else:
                self._pids = _children() - before

    @property
    def parallel(self) -> bool:
        """Whether jobs run in worker processes (False: in this one)."""
        return self._pool is not None

    def run(self, items: Sequence[T], order: Sequence[int] | None = None) -> Iterator[tuple[int, R]]:
        """``(i, fn(items[i]))`` for every item, started in ``order`` (default: as given; put the costliest first so
        that it runs beside the others) and yielded as each finishes."""
        order = list(range(len(items))) if order is None else list(order)
        if self._pool is None or len(order) < 2:
            for i in order:
                yield i, self.fn(items[i])
            return
        results = self._pool.imap_unordered(_counted, [(self.fn, i, items[i]) for i in order])
        for _ in order:
            while True:
                try:
                    i, result, counted = results.next(timeout=WATCH_S)
                    break
                except multiprocessing.TimeoutError:
                    self._check_workers()
            RUN_TOTALS.update(counted)
            yield i, result

    def _check_workers(self) -> None:
        """Raise when one of the pool's workers has died (its job will never come back)."""
        if not self._pids <= _children():
            self.close()
            raise DlrmsimError(
                "a simulation worker process died (killed by the system, most likely out of memory)",
                field="--workers",
                fix=f"run fewer simulations at once than {self.workers}, e.g. --workers 1",
            )

    def close(self) -> None:
        """Stop the workers (at once: on Ctrl-C a worker may be mid-simulation)."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def __enter__(self) -> WorkerPool[T, R]:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _children() -> set[int]:
    """Process ids of this process's live multiprocessing children."""
    return {p.pid for p in multiprocessing.active_children() if p.pid is not None}


def _counted(job: tuple[Callable[[T], R], int, T]) -> tuple[int, R, Counter[str]]:
    """In a worker: the job's result and the engine counters it added there."""
    fn, i, item = job
    before = Counter(RUN_TOTALS)
    result = fn(item)
    return i, result, Counter(RUN_TOTALS) - before


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
