"""Per-op overhead benchmarks (fit.fit_overhead): the fixed cost of a framework op, first after a flush and
further ops after it."""

from __future__ import annotations

import time

from dlrmsim.calibration.benchmarks.timing import POSITIONS, BenchTask, TimingPolicy, median_spread
from dlrmsim.calibration.ops import Ops
from dlrmsim.calibration.schema import Measurement

DISPATCH_ELEMENTS = (1, 16, 256)
DISPATCH_FOLLOWERS = 16  # ops timed after the first one, each on its own tensors


def time_dispatch(k: Ops, elements: int, policy: TimingPolicy) -> tuple[list[float], list[float]]:
    """Per repeat: seconds of the first tiny op after a cache flush, and seconds per op of the
    ``DISPATCH_FOLLOWERS`` distinct tiny ops run right after it."""
    first, rest = [], []
    for i in range(policy.warmup + policy.repeats):
        ops = [k.make_tiny(elements) for _ in range(1 + DISPATCH_FOLLOWERS)]
        k.flush()
        t0 = time.perf_counter()
        ops[0]()
        t1 = time.perf_counter()
        for op in ops[1:]:
            op()
        t2 = time.perf_counter()
        if i >= policy.warmup:
            first.append(t1 - t0)
            rest.append((t2 - t1) / DISPATCH_FOLLOWERS)
    return first, rest


def dispatch_task(k: Ops, cores: int, policy: TimingPolicy) -> BenchTask:
    """The fixed cost of framework ops inside a training iteration, at ``cores`` threads: out-of-place
    multiplies of a few elements (dispatch, output allocation, no memory traffic to speak of).

    "first": one op right after a cache flush - a task's first op, after the previous task's data evicted
    the framework's code and metadata from the private caches. "rest": each of the distinct ops that follow
    it - a task's further ops (an optimizer's sweep over parameter tensors). A tight loop of one op on the
    same tensors is faster than both, and no iteration runs one."""
    name = f"dispatch c{cores}"

    def run() -> list[Measurement]:
        out = []
        with k.threads(cores):
            for n in DISPATCH_ELEMENTS:
                for position, ts in zip(POSITIONS, time_dispatch(k, n, policy), strict=True):
                    med, spread = median_spread(ts)
                    out.append(
                        Measurement(
                            benchmark="dispatch",
                            name=f"dispatch {position} mul n{n} c{cores}",
                            cores=cores,
                            params={"elements": n, "position": position},
                            bytes=12.0 * n,
                            time_s=med,
                            spread_pct=spread,
                            repeats=len(ts),
                        )
                    )
        return out

    return BenchTask("op dispatch", name, run, repeat=True)
