"""Host drift: has the host changed since it was calibrated?

A shared or virtualised host does not stay one machine: a neighbour's memory traffic can make random-access
kernels twice as slow for minutes (seen on the 2-vCPU VM this project is developed on). A validation that
runs in such a spell compares the model with a different machine than the one it was fitted to, and its error
is then partly the host's. So `dlrmsim validate` re-runs a few of the calibration's own micro-benchmarks (a
GEMM, the saturated triad, one embedding-bag configuration, the per-op dispatch, a thread-pool fork) before each
round and reports each one's time now against the calibration's: a ratio far from 1 says how much of an error is
drift rather than model.

Nothing here feeds a prediction; it is a diagnostic printed beside the errors.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from dlrmsim.calibration.benchmarks.embedding import EmbeddingConfig, clear_table_cache, embedding_task
from dlrmsim.calibration.benchmarks.gemm import gemm_task
from dlrmsim.calibration.benchmarks.memory import stream_task
from dlrmsim.calibration.benchmarks.overhead import dispatch_task, fork_task
from dlrmsim.calibration.benchmarks.plan import combine_passes
from dlrmsim.calibration.benchmarks.tbe import TbeConfig, calibrated_module, tbe_available, tbe_task
from dlrmsim.calibration.benchmarks.timing import QUICK_POLICY, BenchTask
from dlrmsim.calibration.ops import Ops
from dlrmsim.calibration.schema import Calibration, Measurement

PROBE_GEMM_MAX_DIM = 512  # the largest calibrated square GEMM up to this size: compute-bound, ~10 ms a sweep

# |ratio - 1| beyond which a validation warns that the host drifted (a quiet host repeats these within ~10 %).
DRIFT_WARN = 0.15


@dataclass(frozen=True)
class DriftSample:
    """One probe benchmark, measured now against the calibration (seconds per call)."""

    name: str
    calibrated_s: float
    now_s: float

    @property
    def ratio(self) -> float:
        """now / calibrated: above 1, the host is slower than when it was calibrated."""
        return self.now_s / self.calibrated_s


def without_cores(name: str) -> str:
    """A benchmark's name without its trailing core count (" c16"): the same configuration at every count."""
    return name.rsplit(" c", 1)[0]


def tbe_probe(cal: Calibration) -> BenchTask | None:
    """fbgemm's TBE (TorchRec's fused embedding) at its smallest calibrated uniform configuration, timed as the
    calibration times it (benchmarks/tbe.py), on the one thread its kernels run on; None where the calibration has
    no TBE rows or fbgemm is not installed.

    TorchRec's base case on the VM spent 5.97 ms a step in the TBE backward where its calibration had timed the
    same call at 4.58 ms, and 5.6-6.4 ms when timed alone again two hours later: the host had moved, and without
    this probe nothing in the validation said so."""
    rows = [m for m in cal.measurements if m.benchmark == "tbe" and m.params.get("op") == "update"]
    rows = [m for m in rows if m.params.get("distribution") == "uniform" and not m.params.get("between_bytes")]
    if not rows or not tbe_available():
        return None
    p = min(rows, key=lambda m: tuple(int(m.params[k]) for k in ("rows", "dim", "pooling", "batch"))).params
    # The module the calibration timed (calibrations before 2026-11-26 timed the kernel alone), where it can run.
    module = "sparse_arch" if p.get("module") == "sparse_arch" and calibrated_module() == "sparse_arch" else "tbe"
    cfg = TbeConfig(int(p["rows"]), int(p["dim"]), int(p["pooling"]), int(p["batch"]), int(p["tables"]), module=module)
    return tbe_task(cfg, QUICK_POLICY)


def probe_tasks(cal: Calibration, ops: Ops, counts: Sequence[int] = (), tbe: bool = False) -> list[BenchTask]:
    """The calibration benchmarks to measure again, rebuilt from their recorded parameters, at all cores (and
    the embedding configuration at one core before); the GEMM and the embedding configuration also at each of
    ``counts`` (the thread counts a validation runs) where the calibration measured them; with ``tbe``, fbgemm's
    TBE too (:func:`tbe_probe`).

    A probe only at the ends says nothing of the counts between: on a 16-core host a validation at 2-8 threads ran
    15-39 % slower than predicted with no probe there to say whether the host or the model had moved.

    ``ops`` flushes as the calibration's benchmarks did (``cal.host.flush_bytes``), so a probe repeats their
    conditions."""
    ops.limit_flush(cal.host.flush_bytes)
    cores = cal.host.cores
    mine = [m for m in cal.measurements if m.cores == cores]
    tasks: list[BenchTask] = []
    gemms = [m for m in mine if m.benchmark == "gemm" and int(m.params["m"]) <= PROBE_GEMM_MAX_DIM]
    if gemms:
        n = int(max(gemms, key=lambda m: int(m.params["m"])).params["m"])
        measured_at = {m.cores for m in cal.measurements if m.benchmark == "gemm" and int(m.params["m"]) == n}
        tasks += [gemm_task(ops, n, c, QUICK_POLICY) for c in sorted({cores, *counts} & measured_at)]
    triad = [m for m in mine if m.benchmark == "stream" and m.params["kind"] == "triad"]
    if triad:
        tasks.append(stream_task(ops, "triad", cores, int(triad[0].params["elements"]), QUICK_POLICY))
    # The framework's per-op dispatch: small, Python-heavy steps (a TorchRec step at batch 256) are mostly this.
    # Before the embedding benchmarks, as in the calibration's plan: in a process that has run them, this VM
    # measured the same tiny ops 1.3-1.6x slower for as long as it was watched (not grad mode, thread count,
    # the table cache or garbage; the state is not identified), which is context, not drift.
    if any(m.benchmark == "dispatch" for m in mine):
        tasks.append(dispatch_task(ops, cores, QUICK_POLICY))
    # A just-above-grain op on the whole thread pool, for the spells that slow small multi-threaded steps (its
    # first validation, 2026-11-25 17:01, read 0.89-1.40 through such a spell: it does not catch all of them).
    if any(m.benchmark == "fork" for m in mine):
        tasks.append(fork_task(ops, cores, QUICK_POLICY))
    # The smallest uniform table configuration: its update is the most drift-prone op the model has. At one
    # core first, then all, as the plan runs it: measured alone at all cores, its forward ran ~1.5x slower
    # than in the plan (tables and thread pool as the one-core run leaves them), which is not drift.
    emb = [m for m in mine if m.benchmark == "embedding" and m.params["op"] == "update" and m.params["distribution"] == "uniform"]
    if emb:
        chosen = min(emb, key=lambda m: (int(m.params["rows"]) * int(m.params["dim"]), int(m.params["pooling"])))
        p = chosen.params
        cfg = EmbeddingConfig(
            int(p["rows"]), int(p["dim"]), int(p["pooling"]), str(p["distribution"]), int(p["batch"]), int(p.get("tables", 0))
        )
        stem = without_cores(chosen.name)
        measured_at = {m.cores for m in cal.measurements if m.benchmark == "embedding" and without_cores(m.name) == stem}
        tasks += [embedding_task(ops, cfg, c, QUICK_POLICY) for c in sorted({1, cores} | (set(counts) & measured_at))]
    probe = tbe_probe(cal) if tbe else None
    return tasks + ([probe] if probe is not None else [])


def compare(cal: Calibration, measured: list[Measurement]) -> list[DriftSample]:
    """Each re-measured benchmark against the calibration's row of the same name."""
    by_name = {m.name: m for m in cal.measurements}
    return [DriftSample(m.name, by_name[m.name].time_s, m.time_s) for m in measured if m.name in by_name]


# Passes of the probe at most: the calibration's own pass count, up to this (each pass is a second or two).
MAX_PROBE_PASSES = 3


def measure_drift(cal: Calibration, ops: Ops, counts: Sequence[int] = (), tbe: bool = False) -> list[DriftSample]:
    """Run the probe now (a few seconds) and compare it with the calibration.

    The probe takes as many passes over its benchmarks as the calibration took (up to
    :data:`MAX_PROBE_PASSES`) and keeps each one's pass as the calibration does (``combine_passes``: the fastest,
    the median for streams). One pass against the fastest of two is a biased comparison: this VM's dispatch
    benchmark measured 1.66 and 3.2 us in the two passes of one calibration, so a single probe pass read up to
    1.7x "drift" on a host that had not changed. ``counts`` and ``tbe``: see :func:`probe_tasks`."""
    tasks = probe_tasks(cal, ops, counts, tbe)
    passes = min(MAX_PROBE_PASSES, max((m.passes for m in cal.measurements), default=1))
    try:
        return compare(cal, combine_passes([m for _ in range(passes) for t in tasks for m in t.run()]))
    finally:
        clear_table_cache()


def kind(name: str) -> str:
    """A probe's family, the first word of its benchmark's name: gemm, stream, dispatch, fork, embedding or tbe."""
    return name.split(maxsplit=1)[0]


def by_kind(samples: list[DriftSample]) -> dict[str, float]:
    """The median now / calibrated ratio of each probe family, in the probe's order.

    The worst single probe (:func:`worst`) says *whether* the host moved; this says *what* moved, which is what
    tells an error's part apart: on the 16-core hosts of 2026-11-26 a calibration that had caught a fast spell of
    its 16-core GEMMs read gemm 1.58 during the validation that missed the GEMM-heavy case by -32 %, and another
    machine read embedding 1.15-1.54 and dispatch 1.2-1.7 with gemm 1.0 while every case there ran 15-25 % slow."""
    groups: dict[str, list[float]] = {}
    for s in samples:
        groups.setdefault(kind(s.name), []).append(s.ratio)
    return {k: statistics.median(v) for k, v in groups.items()}


def worst(samples: list[DriftSample]) -> DriftSample | None:
    """The probe furthest from its calibrated time (in log ratio: twice as slow and twice as fast weigh alike)."""
    return max(samples, key=lambda s: abs(math.log(s.ratio)), default=None)
