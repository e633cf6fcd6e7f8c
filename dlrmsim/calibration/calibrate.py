"""Run a calibration: detect the host, run the micro-benchmark plan (resuming from a partial-results cache),
fit, check, and write the calibration YAML."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dlrmsim.allocator import steady_allocator
from dlrmsim.calibration.benchmarks.embedding import clear_table_cache
from dlrmsim.calibration.benchmarks.plan import (
    UNSTABLE_PASS_RATIO,
    ScalingAnomaly,
    build_plan,
    combine_passes,
    scaling_check,
    slower_with_more_cores,
    unstable_benchmarks,
)
from dlrmsim.calibration.benchmarks.timing import BenchTask
from dlrmsim.calibration.collectives_host import implementation_for
from dlrmsim.calibration.compare import eq_check, fit_quality
from dlrmsim.calibration.fit import (
    FittedModel,
    cache_bound_host,
    fit_arrival_skew,
    fit_autograd,
    fit_cold_output,
    fit_collectives,
    fit_collectives_at_once,
    fit_core_availability,
    fit_embedding,
    fit_gemm,
    fit_interaction,
    fit_memory,
    fit_optimizer,
    fit_overhead,
    fit_sharded_software,
    fit_tbe,
    peak_bound_host,
)
from dlrmsim.calibration.host import detect_host, host_key
from dlrmsim.calibration.ops import default_backend, get_ops
from dlrmsim.calibration.schema import Calibration, HostInfo, Measurement, load_calibration, save_calibration
from dlrmsim.errors import DlrmsimError
from dlrmsim.output import err_console


def _load_average() -> float:
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return 0.0


def default_out(host: HostInfo | None = None) -> Path:
    name = host.name if host else socket.gethostname()
    return Path("calibration") / f"host-{name}.yaml"


def partial_path(out: Path) -> Path:
    """The partial-results cache next to ``out``: finished benchmark tasks of an interrupted run."""
    return out.with_name(out.name + ".partial.jsonl")


class PartialCache:
    """JSON lines of {"key", "task", "measurements"}; only lines whose key matches this host+backend+mode are reused."""

    def __init__(self, path: Path, key: str) -> None:
        self.path, self.key = path, key
        self.done: dict[str, list[Measurement]] = {}
        if path.is_file():
            for line in path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                    if rec.get("key") == key:
                        self.done[rec["task"]] = [Measurement.model_validate(m) for m in rec["measurements"]]
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut by the interruption, or from an older format: measure again

    def add(self, task: BenchTask, rows: list[Measurement]) -> None:
        self.done[task.id] = rows
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as fh:
            fh.write(
                json.dumps({"key": self.key, "task": task.id, "measurements": [m.model_dump(mode="json") for m in rows]}) + "\n"
            )
            fh.flush()

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def run_plan(
    tasks: list[BenchTask], cache: PartialCache, progress: bool, later_passes_until: float | None = None
) -> list[Measurement]:
    """Run every task not already in the cache, with one rich progress bar per benchmark stage.

    Past ``later_passes_until`` (a ``time.monotonic()`` instant), a task that measures a benchmark again (a later
    pass, a stream's extra sample) is skipped unless the cache has it; first-pass tasks always run, since every
    fit needs its benchmarks measured once."""
    stages: dict[str, list[BenchTask]] = {}
    for t in tasks:
        stages.setdefault(t.stage, []).append(t)
    out: list[Measurement] = []
    bar = Progress(
        TextColumn("{task.description:<24}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[note]}"),
        console=err_console,
        disable=not progress,
        transient=False,
    )
    with bar:
        ids = {stage: bar.add_task(stage, total=len(ts), note="") for stage, ts in stages.items()}
        for t in tasks:
            pid = ids[t.stage]
            if t.id in cache.done:
                rows = cache.done[t.id]
                bar.update(pid, advance=1, note="(cached)")
            elif not t.first_pass and later_passes_until is not None and time.monotonic() > later_passes_until:
                bar.update(pid, advance=1, note="(skipped: time limit)")
                continue
            else:
                bar.update(pid, note=t.id)
                rows = t.run()
                cache.add(t, rows)
                bar.update(pid, advance=1, note="")
            out += rows
    return out


def partial_key(host: HostInfo) -> str:
    """A run's partial-results key: the machine and software (:func:`host_key`) and the flush its benchmarks made
    (measurements after another flush were taken under other conditions, so they are not reused)."""
    return f"{host_key(host)} flush {host.flushed_bytes}"


def check_first_pass(tasks: list[BenchTask], cache: PartialCache) -> None:
    """Refuse to fit an interrupted run (``calibrate --finish``) unless it kept every benchmark's first measurement:
    a fit would lack the points it needs, while a later pass only guards against a slow spell. Raises
    :class:`DlrmsimError`. The kept rows are then what :func:`run_plan` returns with ``later_passes_until`` past."""
    missing = [t for t in tasks if t.first_pass and t.id not in cache.done]
    if missing:
        raise DlrmsimError(
            f"the interrupted run kept {len(cache.done)} finished benchmarks but {len(missing)} of the first pass "
            f"are missing (first: {missing[0].id}), and every fit needs its benchmarks measured once",
            source=cache.path,
            field="--finish",
            fix="run the same command without --finish to measure the rest (it resumes)",
        )


def not_taken(tasks: list[BenchTask], cache: PartialCache) -> int:
    """How many of the plan's measurements the run did not take (later passes skipped past a time limit)."""
    return sum(1 for t in tasks if t.id not in cache.done)


# A tiny run's flush at most (bytes): twice a 32 MiB cache, the host the suite's time budget was set on. A full flush
# is twice the last-level cache: 600 MiB on a 2-vCPU Intel Xeon VM with 300 MiB of L3 (2026-11-26), 62 ms a flush,
# which made each tiny run of the test suite take some 60 s there against 25 s. A tiny run's rates are rough anyway
# (notebooks and smoke tests); its file records the flush it made (host.flush_bytes), which the fits and the
# simulator take as the traffic before each timed call.
TINY_FLUSH_BYTES = 64 << 20


def run_calibration(
    quick: bool,
    backend: str | None,
    out: Path | None,
    progress: bool = True,
    tiny: bool = False,
    finish: bool = False,
    max_s: float | None = None,
    only_cores: Sequence[int] | None = None,
) -> Calibration:
    """Measure this host, fit the cost model, and write the calibration YAML to ``out``.

    ``tiny`` runs a small subset of the quick plan (notebooks and smoke tests; rough rates). Interrupted runs resume:
    finished benchmark tasks are kept in ``<out>.partial.jsonl`` (keyed by host,
    libraries, backend and mode) and reused; the cache is removed once the YAML is written. ``finish`` measures
    nothing more: it fits what an interrupted run kept (:func:`check_first_pass`), for a run that cannot be
    resumed in the time left (a lent machine's lease, a job's limit). ``max_s`` bounds the run ahead of time: past
    it, measurements of later passes are skipped (:func:`run_plan`) and the benchmarks keep the passes they have.
    ``only_cores`` measures the per-count benchmarks at those core counts and all cores only (``--cores``).
    """
    deadline = None if max_s is None else time.monotonic() + max_s
    backend = backend or default_backend()
    ops = get_ops(backend)
    if tiny:
        ops.limit_flush(TINY_FLUSH_BYTES)
    host = detect_host(backend, quick, ops.versions(), date="").model_copy(update={"flush_bytes": ops.flush_bytes()})
    out = Path(out) if out is not None else default_out(host)
    cache = PartialCache(partial_path(out), partial_key(host))
    load = _load_average()
    steady_allocator()  # the kernels see the allocator a training process has (allocator.steady_allocator)
    tasks = build_plan(ops, quick or tiny, host.cores, implementation_for(backend), tiny=tiny, only_cores=only_cores)
    if finish:
        if not cache.done:
            raise DlrmsimError(
                "no finished benchmarks to fit", source=cache.path, field="--finish", fix="run without --finish first"
            )
        check_first_pass(tasks, cache)
        deadline = -math.inf  # measure nothing: every later pass not taken is skipped
    try:
        measured = run_plan(tasks, cache, progress, later_passes_until=deadline)
        measurements = combine_passes(measured)
        disturbed = slower_with_more_cores(measurements)
        if disturbed:
            # Measured again even past --max-minutes (a repair of the first pass, not a later pass); --finish takes
            # only what an interrupted run already measured of it.
            again = scaling_check(tasks, list(disturbed))
            measured += run_plan(again, cache, progress, later_passes_until=-math.inf if finish else None)
            measurements = combine_passes(measured)
            _report_scaling(disturbed, slower_with_more_cores(measurements), len(again) - not_taken(again, cache))
    except KeyboardInterrupt:
        err_console.print(
            f"interrupted: {len(cache.done)} finished benchmarks kept in {cache.path}; run the same command again to resume",
            highlight=False,
            soft_wrap=True,
        )
        raise
    finally:
        clear_table_cache()
    lacking = not_taken(tasks, cache)
    if lacking:
        err_console.print(
            f"[bold yellow]warning:[/] {lacking} of {len(tasks)} planned measurements (later passes) were not taken "
            f"({'--finish' if finish else 'time limit'}), so those benchmarks keep the passes they have and a slow spell "
            "there is not filtered (fix: run without --finish or --max-minutes to measure them)",
            highlight=False,
            soft_wrap=True,
        )
    load = max(load, _load_average())
    host = host.model_copy(update={"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "load_average": round(load, 2)})
    if load > host.cores:
        err_console.print(
            f"[bold yellow]warning:[/] load average {load:.1f} on {host.cores} cores: other jobs shared this host "
            "during calibration, so its rates are low and noisy (fix: calibrate on an idle machine)",
            highlight=False,
            soft_wrap=True,
        )
    unstable = unstable_benchmarks(measurements)
    if unstable:
        worst = ", ".join(f"{m.name} {m.pass_ratio:.1f}x" for m in unstable[:3])
        err_console.print(
            f"[bold yellow]warning:[/] {len(unstable)} of {len(measurements)} benchmarks ran over "
            f"{UNSTABLE_PASS_RATIO}x slower in one pass than in another ({worst}): the host changed speed "
            "during calibration; the fit keeps each one's faster pass, a stream its median one (fix: validate right "
            "after calibrating, "
            "or calibrate again when the host is quiet)",
            highlight=False,
            soft_wrap=True,
        )
    cal = fit_calibration(host, measurements)
    save_calibration(cal, out)
    cache.remove()
    return cal


def _report_scaling(found: dict[int, ScalingAnomaly], left: dict[int, ScalingAnomaly], remeasured: int) -> None:
    """Say which core counts' GEMMs ran slower than at fewer cores, and whether measuring ``remeasured`` of their
    benchmarks again (none under --finish, unless an interrupted run had) cleared it."""
    again = "after measuring them again" if remeasured else "and were not measured again (--finish)"
    for c in sorted(found.keys() | left.keys()):
        if c in left:
            err_console.print(
                f"[bold yellow]warning:[/] GEMMs at {c} cores ran slower than at fewer cores {again} "
                f"({left[c].describe()}): something else ran on this host's cores, so the fits at {c} cores predict "
                "that state (fix: calibrate again when the host is quiet)",
                highlight=False,
                soft_wrap=True,
            )
        else:
            err_console.print(
                f"GEMMs at {c} cores ran slower than at fewer cores ({found[c].describe()}): the host was disturbed; "
                f"{remeasured} GEMM benchmarks at {', '.join(map(str, found))} cores measured again, each keeping "
                "its faster pass",
                highlight=False,
                soft_wrap=True,
            )


def fit_calibration(host: HostInfo, measurements: list[Measurement]) -> Calibration:
    """Fit every part of the cost model to ``measurements`` taken on ``host``; the calibration they make."""
    host = cache_bound_host(measurements, peak_bound_host(measurements, host))
    memory = fit_memory(measurements, host)
    overhead = fit_overhead(measurements, host.backend)
    gemm = fit_gemm(measurements, host, memory, overhead)
    embedding = fit_embedding(measurements, memory, overhead, host)
    collectives = fit_collectives(measurements)
    interaction = fit_interaction(measurements, memory, host, overhead)
    interaction_torchrec = fit_interaction(measurements, memory, host, overhead, benchmark="interaction_torchrec")
    tbe = fit_tbe(measurements, memory, overhead, host)
    optimizer = fit_optimizer(measurements, overhead)
    cold_output = fit_cold_output(measurements, overhead)
    sharded = fit_sharded_software(measurements)
    autograd = fit_autograd(measurements)
    fitted = FittedModel(
        gemm, memory, embedding, collectives, overhead, interaction, host, tbe, interaction_torchrec, optimizer, sharded, autograd
    )
    return Calibration(
        host=host,
        gemm=gemm,
        memory=memory,
        embedding=embedding,
        collectives=collectives,
        overhead=overhead,
        interaction=interaction,
        tbe=tbe,
        interaction_torchrec=interaction_torchrec,
        optimizer=optimizer,
        cold_output=cold_output,
        collectives_at_once=fit_collectives_at_once(measurements),
        sharded_software=sharded,
        autograd=autograd,
        arrival_skew=fit_arrival_skew(measurements),
        core_availability=fit_core_availability(measurements),
        measurements=measurements,
        fit_quality=fit_quality(measurements, fitted),
        eq_check=eq_check(measurements, collectives),
    )


def refitted(cal: Calibration) -> Calibration:
    """``cal``'s kept measurements fitted again with this version's fits, under its host record as kept."""
    return fit_calibration(cal.host, list(cal.measurements))


def refit_calibration(source: Path, out: Path) -> Calibration:
    """Fit the measurements stored in calibration ``source`` again with this version's fits (:func:`refitted`), and
    write the result to ``out``: a fitting change applies to an old calibration without measuring again, and two
    fits compare on the very same measurements."""
    new = refitted(load_calibration(source))
    save_calibration(new, out)
    return new
