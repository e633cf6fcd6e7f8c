"""Per-op overhead benchmarks (fit.fit_overhead): the fixed cost of a framework op, first after a flush and
further ops after it; and the thread pool's fork and join on an op just above torch's grain size."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Literal

from dlrmsim.calibration.benchmarks.timing import POSITIONS, BenchTask, TimingPolicy, median_spread
from dlrmsim.calibration.ops import Ops
from dlrmsim.calibration.ops.base import OP_CLASSES, Op
from dlrmsim.calibration.schema import Measurement

DISPATCH_ELEMENTS = (1, 16, 256)
DISPATCH_FOLLOWERS = 16  # ops timed after the first one, each on its own tensors


def time_dispatch(k: Ops, elements: int, policy: TimingPolicy, op_class: str = "mul") -> tuple[list[float], list[float]]:
    """Per repeat: seconds of the first tiny op of ``op_class`` (``Ops.make_tiny_of_class``) after a cache flush, and
    seconds per op of the ``DISPATCH_FOLLOWERS`` distinct tiny ops of that class run right after it."""
    return _time_first_then_rest(
        lambda: [k.make_tiny_of_class(op_class, elements) for _ in range(1 + DISPATCH_FOLLOWERS)], k.flush, policy
    )


def _time_first_then_rest(
    make_ops: Callable[[], list[Op]], before: Callable[[], object], policy: TimingPolicy
) -> tuple[list[float], list[float]]:
    """Per repeat: ``make_ops()``, then ``before()``, then seconds of the first op, and seconds per op of the others
    run right after it."""
    first, rest = [], []
    for i in range(policy.warmup + policy.repeats):
        ops = make_ops()
        before()
        t0 = time.perf_counter()
        ops[0]()
        t1 = time.perf_counter()
        for op in ops[1:]:
            op()
        t2 = time.perf_counter()
        if i >= policy.warmup:
            first.append(t1 - t0)
            rest.append((t2 - t1) / (len(ops) - 1))
    return first, rest


def dispatch_task(k: Ops, cores: int, policy: TimingPolicy) -> BenchTask:
    """The fixed cost of framework ops inside a training iteration, at ``cores`` threads: out-of-place
    multiplies of a few elements (dispatch, output allocation, no memory traffic to speak of).

    "first": one op right after a cache flush - a task's first op, after the previous task's data evicted
    the framework's code and metadata from the private caches. "rest": each of the distinct ops that follow
    it - a task's further ops (an optimizer's sweep over parameter tensors). A tight loop of one op on the
    same tensors is faster than both, and no iteration runs one. Then, as further ops, the classes that cost more
    than a multiply (:data:`~dlrmsim.calibration.ops.base.OP_CLASSES`): an op with a Python scalar operand, which
    the framework wraps into a tensor each call, and a reduction. On the 2-vCPU AMD VM (2026-11-28, 256 elements) a
    multiply took 2.5-4 us, ``x + 1e-7`` and ``1 - x`` 5-10 us and ``x.mean()`` 6-12 us, and the project runner's
    loss, 12 such ops of which 4 add or subtract a float and one is a mean, 86-96 us in a warm loop."""
    name = f"dispatch c{cores}"

    def run() -> list[Measurement]:
        with k.threads(cores):
            rows = [
                m
                for n in DISPATCH_ELEMENTS
                for m in _multiply_measurements("dispatch", POSITIONS, time_dispatch(k, n, policy), n, cores)
            ]
            for n in DISPATCH_ELEMENTS:
                for op_class in OP_CLASSES[1:]:
                    _, ts = time_dispatch(k, n, policy, op_class)
                    rows.extend(_multiply_measurements("dispatch", ("rest",), (ts,), n, cores, {"op": op_class}, op_class))
            return rows

    return BenchTask("op dispatch", name, run, repeat=True)


# Twice torch's grain size (Ops.parallel_grain_elements, at::internal::GRAIN_SIZE): the op splits over the thread
# pool; below the grain it runs on the calling thread, as the dispatch ops above do.
FORK_ELEMENTS = 2 * 32768
# Idle time before a "wake" op: longer than the pool's threads spin before they sleep (libgomp spins for
# GOMP_SPINCOUNT, 300,000 by default, a fraction of a millisecond), as between a step's parallel regions.
FORK_IDLE_S = 0.002


def time_fork(k: Ops, policy: TimingPolicy) -> tuple[list[float], list[float]]:
    """Per repeat: seconds of one just-above-grain op after ``FORK_IDLE_S`` of idling (the pool's threads asleep),
    and per op of ``DISPATCH_FOLLOWERS`` more of it right after (the threads still spinning). One op on one pair
    of vectors (512 KiB, held in L2), into a preallocated output: a new 256 KiB output each call would time the
    allocator (glibc maps blocks above 128 KiB afresh, so every call page-faults), and distinct vectors per call
    their reads from the last-level cache, not the fork."""
    op = k.make_multiply_into(FORK_ELEMENTS)
    return _time_first_then_rest(lambda: [op] * (1 + DISPATCH_FOLLOWERS), lambda: time.sleep(FORK_IDLE_S), policy)


def fork_task(k: Ops, cores: int, policy: TimingPolicy) -> BenchTask:
    """An element-wise op just above torch's grain size at ``cores`` threads, after an idle gap and then warm: at
    one thread the op itself, above it the op's share plus the thread pool's fork and join (and, after the gap,
    waking its threads). fit.fit_overhead takes the warm fork and join from it (``OverheadFit.fork_join_us_by_cores``);
    the drift probe re-times it, because on the 2-vCPU VM the small multi-threaded steps slowed by 40-70 % in spells
    that no single-threaded benchmark saw (docs/calibration.md)."""
    name = f"fork c{cores}"

    def run() -> list[Measurement]:
        # The grain travels with the measurement: the fit charges the fork to ops above it (fit.fit_overhead). A
        # backend that never splits an op (NumPy) records none, and the fit then fits no fork.
        grain = k.parallel_grain_elements
        extra = {"grain": grain} if math.isfinite(grain) else {}
        with k.threads(cores):
            return _multiply_measurements("fork", ("wake", "warm"), time_fork(k, policy), FORK_ELEMENTS, cores, extra)

    return BenchTask("thread-pool fork", name, run, repeat=True)


def _multiply_measurements(
    benchmark: Literal["dispatch", "fork"],
    positions: tuple[str, ...],
    timings: tuple[list[float], ...],
    elements: int,
    cores: int,
    extra: dict[str, float | str] | None = None,
    op_name: str = "mul",
) -> list[Measurement]:
    """One row per position of a tiny op's per-repeat seconds: median and spread, named
    ``"<benchmark> <position> <op_name> n<elements> c<cores>"``; ``extra`` adds to each row's params."""
    out = []
    for position, ts in zip(positions, timings, strict=True):
        med, spread = median_spread(ts)
        out.append(
            Measurement(
                benchmark=benchmark,
                name=f"{benchmark} {position} {op_name} n{elements} c{cores}",
                cores=cores,
                params={"elements": elements, "position": position, **(extra or {})},
                bytes=12.0 * elements,
                time_s=med,
                spread_pct=spread,
                repeats=len(ts),
            )
        )
    return out
