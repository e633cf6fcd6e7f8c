"""The Eq. 1 / Eq. 2 benchmark: each preset's real collectives at 2 ranks.

The allreduce runs over a flat buffer packed from the preset's actual MLP weight and bias gradients, the
alltoall over the embedding outputs laid out "my tables, all samples" by destination. Presets too big for the
host are scaled (MLP widths for the allreduce, global minibatch for the alltoall) and the scaling is recorded.
:func:`dlrmsim.calibration.compare.eq_check` sets the bytes the collectives were handed against Eq. 1 / Eq. 2,
and the measured time against the fitted alpha-beta time.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from dlrmsim.calibration.benchmarks.collectives import combine_ranks, time_collective
from dlrmsim.calibration.benchmarks.timing import BenchTask, TimingPolicy
from dlrmsim.calibration.collectives_host import run_ranks
from dlrmsim.calibration.schema import Measurement
from dlrmsim.workloads import load_workload, workload_names
from dlrmsim.workloads.model import allreduce_bytes, alltoall_bytes, mlp_layers

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
        specs = eq_specs(quick, ranks)
        results = run_ranks(eq_check_rank, ranks, implementation, args=(specs, policy), threads_per_rank=threads)
        rows = []
        for i, spec in enumerate(specs):
            ar_bytes = [r[i]["allreduce"][0] for r in results]
            med, spread = combine_ranks([r[i]["allreduce"][1] for r in results])
            rows.append(
                Measurement(
                    benchmark="allreduce",
                    name=f"eq {spec.workload} allreduce",
                    cores=threads * ranks,
                    params={
                        "ranks": ranks,
                        "implementation": implementation,
                        "workload": spec.workload,
                        "scale": spec.allreduce_scale,
                        "equation_bytes": spec.eq1_bytes,
                        "moved_bytes": float(ar_bytes[0]),
                        "cross_rank_bytes": float(ar_bytes[0]) * bus_cross("allreduce", ranks),
                        "pack_s": max(r[i]["allreduce"][2] for r in results),
                    },
                    bytes=float(ar_bytes[0]),
                    time_s=med,
                    spread_pct=spread,
                    repeats=policy.repeats,
                )
            )
            a2a_total = float(sum(r[i]["alltoall"][0] for r in results))
            med, spread = combine_ranks([r[i]["alltoall"][2] for r in results])
            rows.append(
                Measurement(
                    benchmark="alltoall",
                    name=f"eq {spec.workload} alltoall",
                    cores=threads * ranks,
                    params={
                        "ranks": ranks,
                        "implementation": implementation,
                        "workload": spec.workload,
                        "scale": spec.alltoall_scale,
                        "equation_bytes": spec.eq2_bytes,
                        "moved_bytes": a2a_total,
                        "cross_rank_bytes": float(sum(r[i]["alltoall"][1] for r in results)),
                    },
                    bytes=a2a_total / ranks,
                    time_s=med,
                    spread_pct=spread,
                    repeats=policy.repeats,
                )
            )
        return rows

    return BenchTask("Eq. 1 / Eq. 2 check", f"eq check {implementation} R{ranks}", run)


def bus_cross(op: str, ranks: int) -> float:
    """Fraction of an allreduce buffer that leaves each rank in a ring (reduce-scatter + allgather): 2(R-1)/R."""
    return 2.0 * (ranks - 1) / ranks if op == "allreduce" else (ranks - 1) / ranks
