"""Fit quality (predicted against measured for every micro-benchmark) and the Eq. 1 / Eq. 2 check.

The Eq. 1 / Eq. 2 check runs each preset's real collectives at 2 ranks: the allreduce over a flat buffer
packed from the preset's actual MLP weight and bias gradients, the alltoall over the embedding outputs
laid out "my tables, all samples" by destination. Presets too big for the host are scaled (MLP widths for
the allreduce, global minibatch for the alltoall) and the scaling is recorded. It reports the bytes the
collectives were handed against Eq. 1 / Eq. 2, and the measured time against the fitted alpha-beta time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dlrmsim.calibration.bench import BenchTask, TimingPolicy, combine_ranks, time_collective, unstable_benchmarks
from dlrmsim.calibration.fit import FittedModel, predict_collective_s, predict_s
from dlrmsim.calibration.schema import (
    CollectiveFit,
    EqCheckRow,
    FitRow,
    Measurement,
)

# Largest collective each Eq. check may use (bytes per rank for the allreduce, all ranks for the alltoall):
# quick keeps to what a 90-second run affords; full runs every preset at its true size (Large: ~1 GiB).
QUICK_CAP_BYTES = 32 * 2**20
FULL_CAP_BYTES = 1200 * 2**20


@dataclass(frozen=True)
class EqSpec:
    """One preset's collectives, scaled to the host."""

    workload: str
    layers: tuple[tuple[int, int], ...]  # (fan_in, fan_out) after scaling
    allreduce_scale: str
    tables: int
    global_batch: int
    dim: int
    alltoall_scale: str
    element_bytes: float

    @property
    def eq1_bytes(self) -> float:
        return sum((fi * fo + fo) for fi, fo in self.layers) * self.element_bytes

    @property
    def eq2_bytes(self) -> float:
        return self.tables * self.global_batch * self.dim * self.element_bytes


def eq_specs(quick: bool, ranks: int = 2) -> list[EqSpec]:
    """Every preset, with MLP widths and global minibatch scaled down until the collectives fit the cap."""
    from dlrmsim.workloads import load_workload, workload_names
    from dlrmsim.workloads.model import allreduce_bytes, alltoall_bytes, mlp_layers

    cap = QUICK_CAP_BYTES if quick else FULL_CAP_BYTES
    out = []
    for name in workload_names():
        w = load_workload(name)
        layers = [(layer.fan_in, layer.fan_out) for layer in mlp_layers(w)]
        ar = allreduce_bytes(w)
        f = 1.0 if ar <= cap else math.sqrt(cap / ar)
        while True:  # rounding widths can overshoot: shrink 5% at a time until under the cap
            scaled = layers if f == 1.0 else [(max(1, round(fi * f)), max(1, round(fo * f))) for fi, fo in layers]
            if sum(fi * fo + fo for fi, fo in scaled) * w.element_bytes <= cap:
                break
            f *= 0.95
        ar_scale = "none" if f == 1.0 else f"MLP widths x{f:.3g}"
        n = w.minibatch.strong_global
        a2a = alltoall_bytes(w, n)
        if a2a > cap:
            n_scaled = max(ranks, int(n * cap / a2a) // ranks * ranks)
            a2a_scale = f"global batch {n}->{n_scaled}"
            n = n_scaled
        else:
            a2a_scale = "none"
        tables = w.num_tables // ranks * ranks  # whole tables per rank, equal shares
        out.append(EqSpec(name, tuple(scaled), ar_scale, tables, n, w.embedding_dim, a2a_scale, w.element_bytes))
    return out


def eq_check_rank(comm, specs: list[EqSpec], policy: TimingPolicy) -> list[dict]:  # noqa: ANN001
    """Rank body: per spec, pack the real gradients and time the allreduce; lay out embeddings and time the alltoall."""
    rng = np.random.default_rng(comm.rank)
    out = []
    for spec in specs:
        grads = []
        for fi, fo in spec.layers:
            grads += [rng.random((fo, fi), dtype=np.float32), rng.random(fo, dtype=np.float32)]
        t0 = time.perf_counter()
        flat = np.concatenate([g.ravel() for g in grads])  # pre-processing: copy into one flat buffer
        pack_s = time.perf_counter() - t0
        ar_bytes = comm.allreduce(flat.copy())
        flat[:] = 0.0  # repeated in-place sums of the timed loop must not overflow
        ar_times = time_collective(comm, "allreduce", flat, None, policy)
        del grads, flat
        per_rank_tables = spec.tables // comm.size
        local = spec.global_batch // comm.size
        # "my tables, all samples", grouped by the rank that owns the samples.
        send = np.ones((comm.size, local, per_rank_tables, spec.dim), dtype=np.float32)
        recv = np.full_like(send, 0.0)
        a2a_bytes = comm.alltoall(send, recv)
        a2a_cross = a2a_bytes * (comm.size - 1) / comm.size
        a2a_times = time_collective(comm, "alltoall", send, recv, policy)
        del send, recv
        out.append({"allreduce": (ar_bytes, ar_times, pack_s), "alltoall": (a2a_bytes, a2a_cross, a2a_times)})
    return out


def eq_check_task(quick: bool, ranks: int, implementation: str, threads: int, policy: TimingPolicy) -> BenchTask:
    """Benchmark task measuring every preset's collectives; rows named "eq <workload> <op>"."""

    def run() -> list[Measurement]:
        from dlrmsim.calibration.collectives_host import run_ranks

        specs = eq_specs(quick, ranks)
        results = run_ranks(eq_check_rank, ranks, implementation, args=(specs, policy), threads_per_rank=threads)
        rows = []
        for i, spec in enumerate(specs):
            ar_bytes = [r[i]["allreduce"][0] for r in results]
            med, spread = combine_ranks([r[i]["allreduce"][1] for r in results])
            rows.append(Measurement(
                benchmark="allreduce", name=f"eq {spec.workload} allreduce", cores=threads * ranks,
                params={"ranks": ranks, "implementation": implementation, "workload": spec.workload,
                        "scale": spec.allreduce_scale, "equation_bytes": spec.eq1_bytes,
                        "moved_bytes": float(ar_bytes[0]), "cross_rank_bytes": float(ar_bytes[0]) * bus_cross("allreduce", ranks),
                        "pack_s": max(r[i]["allreduce"][2] for r in results)},
                bytes=float(ar_bytes[0]), time_s=med, spread_pct=spread, repeats=policy.repeats))
            a2a_total = float(sum(r[i]["alltoall"][0] for r in results))
            med, spread = combine_ranks([r[i]["alltoall"][2] for r in results])
            rows.append(Measurement(
                benchmark="alltoall", name=f"eq {spec.workload} alltoall", cores=threads * ranks,
                params={"ranks": ranks, "implementation": implementation, "workload": spec.workload,
                        "scale": spec.alltoall_scale, "equation_bytes": spec.eq2_bytes, "moved_bytes": a2a_total,
                        "cross_rank_bytes": float(sum(r[i]["alltoall"][1] for r in results))},
                bytes=a2a_total / ranks, time_s=med, spread_pct=spread, repeats=policy.repeats))
        return rows

    return BenchTask("Eq. 1 / Eq. 2 check", f"eq check {implementation} R{ranks}", run)


def bus_cross(op: str, ranks: int) -> float:
    """Fraction of an allreduce buffer that leaves each rank in a ring (reduce-scatter + allgather): 2(R-1)/R."""
    return 2.0 * (ranks - 1) / ranks if op == "allreduce" else (ranks - 1) / ranks


def fit_quality(measurements: Sequence[Measurement], model: FittedModel) -> list[FitRow]:
    rows = []
    for m in measurements:
        if m.name.startswith("eq "):
            continue
        pred = predict_s(m, model)
        if pred is None or pred <= 0:
            continue
        rows.append(FitRow(benchmark=m.benchmark, name=m.name, measured_s=float(f"{m.time_s:.6g}"),
                           predicted_s=float(f"{pred:.6g}"), error_pct=round(100.0 * (pred - m.time_s) / m.time_s, 2)))
    return rows


def eq_check(measurements: Sequence[Measurement], collectives: Sequence[CollectiveFit]) -> list[EqCheckRow]:
    fits = {c.op: c for c in collectives}
    rows = []
    for m in measurements:
        if not m.name.startswith("eq ") or m.benchmark not in fits:
            continue
        model = predict_collective_s(fits[m.benchmark], m.bytes)
        rows.append(EqCheckRow(
            workload=str(m.params["workload"]), collective=m.benchmark, scale=str(m.params["scale"]),  # type: ignore[arg-type]
            equation_bytes=float(m.params["equation_bytes"]), moved_bytes=float(m.params["moved_bytes"]),
            cross_rank_bytes=float(m.params["cross_rank_bytes"]), measured_s=float(f"{m.time_s:.6g}"),
            model_s=float(f"{model:.6g}"), error_pct=round(100.0 * (model - m.time_s) / m.time_s, 2)))
    return rows


@dataclass(frozen=True)
class ErrorSummary:
    """Fit quality of one benchmark kind: how many runs, their median and maximum |error| (%), and how many
    of them the host moved under (passes more than bench.UNSTABLE_PASS_RATIO apart)."""

    runs: int
    median_abs_pct: float
    max_abs_pct: float
    host_moved: int


def error_summary(rows: Sequence[FitRow], measurements: Sequence[Measurement]) -> dict[str, ErrorSummary]:
    """Per benchmark kind, the :class:`ErrorSummary` of its fit-quality rows (``measurements``: the
    calibration's, whose passes say which rows the host moved under)."""
    moved = {m.name for m in unstable_benchmarks(measurements)}
    out: dict[str, ErrorSummary] = {}
    for bench in sorted({r.benchmark for r in rows}):
        mine = [r for r in rows if r.benchmark == bench]
        errs = [abs(r.error_pct) for r in mine]
        out[bench] = ErrorSummary(len(errs), float(np.median(errs)), float(max(errs)), sum(r.name in moved for r in mine))
    return out
