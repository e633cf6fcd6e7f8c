"""How much of a working set the last-level cache keeps on this host: the cache-reuse benchmark.

Every cost the model charges for data pushed out between uses (a GEMM's evicted operands, an embedding update's
reloaded rows, a task's first op, a cold output's share) reads ``costs.cache_miss_share(footprint, capacity)``,
footprint / (footprint + capacity). The capacity the CPU reports is not the capacity a process gets: on the
2-vCPU VM this project is developed on (AMD EPYC, 32 MiB of L3 reported, shared with other tenants' cores) random
reuse over 16 MiB already paid 64 % of the way from a hit to a miss, and over 32 MiB 77 %, where a private 32 MiB
cache would miss 33 % and 50 % (validation/results/20261126T001537-vm-llc-reuse.json).

The benchmark gathers random 64-byte rows (one cache line each) from tables of growing footprint on one core,
interleaving the footprints over rounds and keeping each one's fastest round (a slow spell of a shared host then
falls on every footprint alike). fit.fit_effective_llc turns the times into the capacity that the model's miss
share fits best (``HostInfo.effective_llc_bytes``). numpy's gather is the kernel whatever the calibration's
backend: the capacity is the host's, not a framework's.
"""

from __future__ import annotations

import time

import numpy as np

from dlrmsim.calibration.benchmarks.timing import BenchTask, TimingPolicy
from dlrmsim.calibration.schema import Measurement

MIB = 1 << 20
LINE_FLOATS = 16  # a 64-byte row of float32: one cache line per access
ACCESSES = 1 << 18  # per timed gather: long enough to reach steady state, ~5-30 ms
ROUNDS = 3  # interleaved passes over the footprints; the fastest is kept
MISS_MULTIPLE = 4  # footprints up to this many times the reported last-level cache: those all miss
MAX_FOOTPRINT = 2 << 30  # but no table above 2 GiB (a 1 GiB-cache server): the fit needs the curve's bend, not its end


def reuse_footprints(l2_bytes: int, llc_bytes: int) -> list[int]:
    """Footprints (bytes) from twice a core's L2 (where the last-level cache starts to matter: below, the L2 serves
    the rows) to :data:`MISS_MULTIPLE` x the reported last-level cache (at most :data:`MAX_FOOTPRINT`), in steps
    of sqrt(2)."""
    out, f = [], 2.0 * l2_bytes
    while f <= min(MISS_MULTIPLE * llc_bytes, MAX_FOOTPRINT) * 1.001:
        out.append(int(f) // 64 * 64)
        f *= 2**0.5
    return out


def gather_ns(table: np.ndarray, idx: np.ndarray, out: np.ndarray) -> float:
    """Nanoseconds per random row gather: one timed pass after a warm one."""
    np.take(table, idx, axis=0, out=out)
    t0 = time.perf_counter()
    np.take(table, idx, axis=0, out=out)
    return (time.perf_counter() - t0) / idx.size * 1e9


def time_reuse(footprints: list[int], rounds: int = ROUNDS, seed: int = 0) -> dict[int, float]:
    """Fastest nanoseconds per random row gather over ``rounds`` interleaved passes, per footprint (bytes). One
    table of the largest footprint serves all: a smaller footprint gathers from its first rows."""
    rng = np.random.default_rng(seed)
    out = np.empty((ACCESSES, LINE_FLOATS), dtype=np.float32)
    table = np.ones((max(footprints) // (4 * LINE_FLOATS), LINE_FLOATS), dtype=np.float32)
    best = {f: np.inf for f in footprints}
    for r in range(rounds):
        for f in footprints if r % 2 == 0 else footprints[::-1]:
            rows = max(1, f // (4 * LINE_FLOATS))
            best[f] = min(best[f], gather_ns(table, rng.integers(0, rows, ACCESSES), out))
    return best


def cache_reuse_task(l2_bytes: int, llc_bytes: int, policy: TimingPolicy) -> BenchTask:
    """One row per footprint (benchmark ``cache_reuse``, one core): seconds per 64-byte gather; more interleaved
    rounds for a full calibration than for a quick one."""
    rounds = max(ROUNDS, policy.repeats // 2)

    def run() -> list[Measurement]:
        times = time_reuse(reuse_footprints(l2_bytes, llc_bytes), rounds)
        return [
            Measurement(
                benchmark="cache_reuse",
                name=f"cache reuse f{f} c1",
                cores=1,
                params={"footprint_bytes": f, "l2_bytes": l2_bytes, "llc_bytes": llc_bytes},
                bytes=64.0,
                time_s=ns * 1e-9,
                spread_pct=0.0,
                repeats=rounds,
            )
            for f, ns in times.items()
        ]

    # Measured in one pass, not in each: the plan keeps each row's fastest pass, and a curve assembled from two
    # passes' fastest footprints (a quiet pass's misses, a busy pass's hits) has the shape of neither. On the VM
    # one such curve fitted 2.1 MiB where its passes alone read 3-8.
    return BenchTask("cache reuse", "cache reuse c1", run)
