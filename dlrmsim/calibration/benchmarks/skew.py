"""Arrival skew (fit.fit_arrival_skew): ranks with equal work meeting at a barrier. How much later than a typical
rank does the last one arrive?

A multi-rank step synchronises at every collective, and each one waits for its last rank. The rank processes of one
host run the same program, but each rank's stretch of compute between two collectives takes its own time: scheduler
ticks, interrupts, the hypervisor taking a vCPU, one core slower than the other. The simulator's identical ranks
arrive together. This benchmark gives the size of the gap. The calibration's ranks (its collective benchmarks'
processes, threads and communicator) repeat a fixed amount of GEMM work, a *segment*, and meet at a barrier before
each one. For each segment length it reports the mean over barriers of the slowest rank's segment, against the
ranks' mean segment.

On the 2-vCPU Intel VM (2026-11-26, ``benchmarks/bench_sync.py``, two processes of one thread) the last rank's
excess was 7-9 % of a 2-ms segment, 9-10 % of a 10-ms segment and 12-15 % of a 40-ms segment. Blocks with the other
core idle ran at the same speed as blocks with both cores computing (0.97-1.01x). So the ranks did not slow each
other down. They only drifted apart.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from dlrmsim.calibration.benchmarks.collectives import gap_count, gemm_work
from dlrmsim.calibration.benchmarks.timing import BenchTask, median_spread
from dlrmsim.calibration.collectives_host import run_ranks
from dlrmsim.calibration.schema import Measurement

# Lengths of compute between synchronisations in the validation's 2-rank steps: a forward's few milliseconds up to a
# wide top MLP's tens. The fit interpolates between them in log(length) and holds the end values beyond.
SKEW_SEGMENTS_S = (2e-3, 10e-3, 40e-3)
TINY_SKEW_SEGMENTS_S = (10e-3,)
# Barriers per segment length: enough that the mean over them settles. 200 x 2 ms, 80 x 10 ms, 40 x 40 ms is about
# 3 s a calibration (quick and full alike); the tiny plan times 20.
SKEW_BARRIERS = {2e-3: 200, 10e-3: 80, 40e-3: 40}
TINY_SKEW_BARRIERS = 20
# The skew is measured several times across a calibration and averaged. On the 2-vCPU Intel VM most of it is one rank
# running slower than the other throughout a run of a few seconds, by an amount that changes from run to run: seven
# runs back to back (2026-11-26, 23:50, benchmarks/bench_skew_runs.py) gave a 10-ms excess of 2.8-15.3 %, much of it
# the ranks' gap. More barriers in one run would pin down that run's gap, not the host's. A validation's steps meet
# the gap of their own minute, so the expectation over the host's states is the estimate: the mean of runs spread
# over the calibration.
SKEW_STAGE = "arrival skew"


def skew_rank(comm, segments_s: tuple[float, ...], barriers: tuple[int, ...]) -> list[list[float]]:  # noqa: ANN001
    """Rank body: per segment length, ``barriers`` times a barrier and then the segment, timed. Every rank runs the
    same number of GEMMs: each sizes the work on its own threads, and the ranks take the mean count (an allreduce)."""
    out: list[list[float]] = []
    for seg, n in zip(segments_s, barriers, strict=True):
        counts = np.array([gap_count(seg)], dtype=np.float32)  # GEMMs that last ``seg`` on this rank
        comm.allreduce(counts)
        work = gemm_work(max(1, round(float(counts[0]) / comm.size)))
        work()  # warm
        times: list[float] = []
        for _ in range(n):
            comm.barrier()
            t = time.perf_counter()
            work()
            times.append(time.perf_counter() - t)
        out.append(times)
    return out


def arrival_excess(per_rank: list[list[float]]) -> tuple[float, float, float]:
    """(mean over barriers of the slowest rank's segment, mean over barriers of the ranks' mean segment, spread % of
    the slowest's: (max - min) / median) from each rank's segment times (s) after the same barriers.

    Means, not medians: a step's wait at its synchronisations adds up over several of them and over iterations, and
    a rank's occasional long detour (a hypervisor's steal of some milliseconds) is a real part of what the others
    wait for. The ranks' own mean is the reference, so what a one-rank step pays for its tail is not counted again."""
    n = min(len(t) for t in per_rank)
    last = [max(t[i] for t in per_rank) for i in range(n)]
    typical = statistics.fmean(statistics.fmean(t[i] for t in per_rank) for i in range(n))
    return statistics.fmean(last), typical, median_spread(last)[1]


def skew_task(ranks: int, implementation: str, threads: int, tiny: bool = False) -> BenchTask:
    """The arrival-skew benchmark at the calibration's rank layout: one measurement per segment length, its time the
    slowest rank's mean segment and ``params["segment_s"]`` the ranks' mean segment (:func:`arrival_excess`)."""
    segments = TINY_SKEW_SEGMENTS_S if tiny else SKEW_SEGMENTS_S
    barriers = tuple(TINY_SKEW_BARRIERS if tiny else SKEW_BARRIERS[s] for s in segments)
    name = f"arrival skew {implementation} R{ranks}"

    def run() -> list[Measurement]:
        results = run_ranks(skew_rank, ranks, implementation, args=(segments, barriers), threads_per_rank=threads)
        out = []
        for i, (seg, n) in enumerate(zip(segments, barriers, strict=True)):
            last, typical, spread = arrival_excess([r[i] for r in results])
            out.append(
                Measurement(
                    benchmark="skew",
                    name=f"arrival skew {seg * 1e3:g}ms R{ranks}",
                    cores=threads * ranks,
                    params={
                        "ranks": ranks,
                        "implementation": implementation,
                        "threads_per_rank": threads,
                        "segment_s": typical,
                    },
                    time_s=last,
                    spread_pct=spread,
                    repeats=n,
                )
            )
        return out

    # Measured again in every pass and at the start, after the collectives and at the end (plan.SPREAD_STAGES; the
    # tiny plan has one pass), combined by the mean (plan.MEAN_PASS_BENCHMARKS): see SKEW_STAGE.
    return BenchTask(SKEW_STAGE, name, run, repeat=True)
