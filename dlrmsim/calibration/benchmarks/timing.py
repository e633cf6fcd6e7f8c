"""Timing primitives every benchmark family shares: the warm-up/repeat policy, the timer, and the task unit.

A calibration is a *plan* (:mod:`.plan`) of small tasks (one GEMM shape at one core count, one stream at one
core count, one embedding configuration, one collective sweep). Each task returns Measurement rows, so a
partial-results cache can keep finished tasks across an interrupted run.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dlrmsim.calibration.ops import Op
from dlrmsim.calibration.schema import Measurement
from dlrmsim.errors import DlrmsimError


@dataclass(frozen=True)
class TimingPolicy:
    """Warm-up calls, timed repeats, and the shortest timed sample (short ops loop until it is reached)."""

    warmup: int
    repeats: int
    min_sample_s: float


QUICK_POLICY = TimingPolicy(warmup=2, repeats=7, min_sample_s=0.01)
FULL_POLICY = TimingPolicy(warmup=2, repeats=9, min_sample_s=0.02)


def policy_for(quick: bool) -> TimingPolicy:
    return QUICK_POLICY if quick else FULL_POLICY


def calls_per_sample(first_s: float, policy: TimingPolicy) -> int:
    """Calls of an op that took ``first_s`` once to loop in one timed sample: enough to last ``policy.min_sample_s``."""
    return max(1, math.ceil(policy.min_sample_s / max(first_s, 1e-9)))


def time_op(op: Op, policy: TimingPolicy, statistic: str = "median") -> tuple[float, float, int]:
    """(seconds per call, (max-min)/median in %, repeats) of ``op`` after warm-up; the median, or the
    minimum (STREAM's "best rate" convention) when ``statistic`` is "min"."""
    t0 = time.perf_counter()
    op()
    first = time.perf_counter() - t0
    for _ in range(max(0, policy.warmup - 1)):
        op()
    inner = calls_per_sample(first, policy)
    samples = []
    for _ in range(policy.repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            op()
        samples.append((time.perf_counter() - t0) / inner)
    med, spread = median_spread(samples)
    return (min(samples) if statistic == "min" else med), spread, policy.repeats


def median_spread(samples: list[float]) -> tuple[float, float]:
    """(median, (max - min) / median in %) of timing samples (seconds)."""
    med = statistics.median(samples)
    return med, 100.0 * (max(samples) - min(samples)) / med


@dataclass(frozen=True)
class BenchTask:
    """One cacheable unit of work: ``run()`` returns its measurements. ``id`` is unique within a plan."""

    stage: str
    id: str
    run: Callable[[], list[Measurement]]
    repeat: bool = False  # measured again in every pass of the plan (see build_plan)
    first_pass: bool = True  # False: a later measurement of a benchmark the first pass already took (plan.measured_again)


def core_counts(cores: int) -> list[int]:
    """1..all cores: every count up to 4, then powers of two and all (enough to see saturation)."""
    counts = {c for c in range(1, min(cores, 4) + 1)}
    c = 8
    while c < cores:
        counts.add(c)
        c *= 2
    counts.add(cores)
    return sorted(counts)


def chosen_core_counts(cores: int, only: Sequence[int] | None = None) -> list[int]:
    """The core counts a calibration measures: :func:`core_counts`, or ``only`` (``calibrate --cores``) with all
    ``cores`` always added, since the fits' "all cores" rows (the preset MLP layers, the collectives' threads) are
    taken there. Fewer counts shorten a run whose time is bounded (a lent machine's lease); the simulator then takes
    each prediction's fit from the nearest count measured."""
    if not only:
        return core_counts(cores)
    bad = [c for c in only if not 1 <= c <= cores]
    if bad:
        raise DlrmsimError(
            f"--cores {bad[0]} is not a core count of this host (1-{cores})",
            field="--cores",
            fix=f"give counts between 1 and {cores}, e.g. 1,{cores}",
        )
    return sorted({*only, cores})


# Where a call sits in its run of same-op calls (the dispatch benchmark's first and further ops, an embedding
# cycle's first and later tables): see benchmarks.embedding for why a run's first call is measured apart.
POSITIONS = ("first", "rest")
