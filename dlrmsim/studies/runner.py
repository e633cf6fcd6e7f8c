"""Run sweep points on Dask (a local cluster sized to the machine, or an existing scheduler) or serially.

Every finished point is appended to the results file at once by the main process; points already done are
skipped, so re-running an interrupted sweep loses nothing. A point whose evaluator raises is recorded with
``status = "error"`` and its message, and the sweep goes on.
"""

from __future__ import annotations

import itertools
import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from dlrmsim.errors import DlrmsimError, Interrupted
from dlrmsim.host import usable_cores
from dlrmsim.output import err_console
from dlrmsim.studies.evaluate import evaluate_point, flat_outputs
from dlrmsim.studies.results import ResultsStore, point_row, results_path
from dlrmsim.studies.spec import SweepPoint

Evaluator = Callable[[SweepPoint], Mapping[str, Any]]


@dataclass(frozen=True)
class SweepSummary:
    """What one run did: points in the sweep, skipped as already done, run now (ok / failed), wall seconds."""

    total: int
    skipped: int
    ran: int
    ok: int
    failed: int
    wall_s: float
    results: Path
    mode: str


def run_point(evaluator: Evaluator, point: SweepPoint) -> dict[str, Any]:
    """Evaluate one point (on a worker): a results row, with the error recorded instead of raised."""
    start = time.perf_counter()
    try:
        outputs = evaluator(point)
        if not isinstance(outputs, Mapping):
            raise TypeError(f"evaluator returned {type(outputs).__name__}, not a mapping of outputs")
        status, error, flat = "ok", "", flat_outputs(outputs)
    except Exception as exc:  # noqa: BLE001 - a failing point is data, the sweep goes on
        message = exc.one_line() if isinstance(exc, DlrmsimError) else str(exc)
        status, error, flat = "error", f"{type(exc).__name__}: {message}", {}
    return point_row(point, status, error, time.perf_counter() - start, flat)


def run_sweep(
    points: Sequence[SweepPoint],
    out: str | Path,
    evaluator: Evaluator | None = None,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    serial: bool = False,
    progress: bool = True,
    retry_failed: bool = True,
) -> SweepSummary:
    """Run every point not yet done, appending each result to ``out``/results.csv as it finishes.

    ``scheduler``: address of an existing Dask scheduler (used as is); otherwise a LocalCluster of ``workers``
    single-threaded processes (default: one per CPU) is started and closed. ``serial`` runs in this process,
    without Dask. Failed points from earlier runs are tried again unless ``retry_failed`` is False.
    """
    if evaluator is None:
        evaluator = evaluate_point
    if workers is not None and workers < 1:
        raise DlrmsimError("worker count must be at least 1", field="--workers", fix="give a positive number")
    overrides = list(dict.fromkeys(c for p in points for c in p.columns() if c.startswith(("topology.", "workload."))))
    start = time.perf_counter()
    with ResultsStore(out, overrides) as store:
        done = store.done_ids(include_failed=not retry_failed)
        todo = [p for p in points if p.point_id not in done]
        bar = _Progress(total=len(points), done=len(points) - len(todo), enabled=progress)
        try:
            with bar:
                if not todo:
                    mode = "nothing to do"
                elif serial:
                    mode = "serial"
                    for point in todo:
                        row = run_point(evaluator, point)
                        store.append(row)
                        bar.advance(row["status"] == "ok")
                else:
                    mode = _run_dask(todo, evaluator, store, bar, scheduler, workers)
        except KeyboardInterrupt:
            # Every finished point is already appended (and flushed) by the store, so a re-run resumes.
            saved = len(points) - len(todo) + bar.ok + bar.failed
            raise Interrupted(f"interrupted: {saved} of {len(points)} points saved; re-run to resume") from None
    return SweepSummary(
        total=len(points),
        skipped=len(points) - len(todo),
        ran=bar.ok + bar.failed,
        ok=bar.ok,
        failed=bar.failed,
        wall_s=time.perf_counter() - start,
        results=results_path(out),
        mode=mode,
    )


def quiet_dask() -> None:
    """Keep cluster start-up and shutdown chatter (INFO lines) off the user's terminal."""
    for name in (
        "distributed",
        "distributed.scheduler",
        "distributed.nanny",
        "distributed.worker",
        "distributed.core",
        "distributed.http.proxy",
        "distributed.utils_perf",
        "bokeh",
        "tornado",
    ):
        logging.getLogger(name).setLevel(logging.WARNING)


def _run_dask(
    todo: list[SweepPoint],
    evaluator: Evaluator,
    store: ResultsStore,
    bar: _Progress,
    scheduler: str | None,
    workers: int | None,
) -> str:
    quiet_dask()
    from distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler:
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as exc:
            raise DlrmsimError(
                f"cannot reach the Dask scheduler ({exc})", field="--scheduler", fix="check the address, e.g. tcp://host:8786"
            ) from None
        n = max(1, len(client.scheduler_info().get("workers", {})))
        mode = f"dask scheduler {scheduler} ({n} workers)"
    else:
        n = workers or usable_cores()  # one single-threaded worker per core this process may use
        # Ctrl-C reaches the whole process group: the worker processes would each print a KeyboardInterrupt
        # traceback. They inherit an ignored SIGINT (kept across exec), so only this process sees it and stops.
        main = threading.current_thread() is threading.main_thread()  # only the main thread may set handlers
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            cluster = LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR
            )  # fmt: skip  (cancelled tasks warn on Ctrl-C)
        finally:
            if main:
                signal.signal(signal.SIGINT, previous)
        client = Client(cluster)
        mode = f"dask local cluster ({n} workers)"
    try:
        # A bounded window of submitted points keeps the scheduler small for huge sweeps while workers stay busy.
        window = max(16, 4 * n)
        pending: Iterator[SweepPoint] = iter(todo)
        by_key: dict[str, SweepPoint] = {}

        def submit(point: SweepPoint) -> Any:
            future = client.submit(run_point, evaluator, point, key=f"dlrmsim-point-{point.point_id}")
            by_key[future.key] = point
            return future

        futures = as_completed([submit(p) for p in itertools.islice(pending, window)])
        for future in futures:
            point = by_key.pop(future.key)
            try:
                row = future.result()
            except Exception as exc:  # noqa: BLE001 - e.g. the worker died: record it, go on
                row = point_row(point, "error", f"{type(exc).__name__}: {exc}", math.nan, {})
            future.release()
            store.append(row)
            bar.advance(row["status"] == "ok")
            following = next(pending, None)
            if following is not None:
                futures.add(submit(following))
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    return mode


class _Progress:
    """A rich progress bar on stderr: points done, failed and remaining, elapsed time and ETA."""

    def __init__(self, total: int, done: int, enabled: bool) -> None:
        self.total = total
        self.ok = 0
        self.failed = 0
        self._skipped = done
        self._enabled = enabled
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> _Progress:
        if self._enabled:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("[green]{task.fields[ok]} ok[/] [red]{task.fields[failed]} failed[/] {task.fields[left]} remaining"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=err_console,
                transient=False,
            )
            self._progress.start()
            remaining = self.total - self._skipped
            # Only this run's points go on the bar, so the ETA comes from this run's pace.
            label = f"sweep ({self._skipped} done before)" if self._skipped else "sweep"
            self._task = self._progress.add_task(label, total=remaining, ok=0, failed=0, left=remaining)
        return self

    def advance(self, ok: bool) -> None:
        if ok:
            self.ok += 1
        else:
            self.failed += 1
        if self._progress is not None:
            left = self.total - self._skipped - self.ok - self.failed
            self._progress.update(self._task, advance=1, ok=self.ok, failed=self.failed, left=left)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
