"""Memory-stream benchmarks (fit.fit_memory): STREAM copy and triad at each core count."""

from __future__ import annotations

from dlrmsim.calibration.benchmarks.timing import BenchTask, TimingPolicy, time_op
from dlrmsim.calibration.ops import Ops
from dlrmsim.calibration.schema import Measurement


def stream_elements(quick: bool) -> int:
    # Each array far larger than any last-level cache here (32 MiB): 64 MiB quick, 256 MiB full.
    return (16 if quick else 64) * 2**20


STREAM_STAGE = "memory streams"


def stream_task(k: Ops, kind: str, cores: int, elements: int, policy: TimingPolicy) -> BenchTask:
    name = f"stream {kind} c{cores}"
    arrays = 2 if kind == "copy" else 3  # STREAM counting: bytes read + written, no write-allocate

    # STREAM keeps the best of its trials: a memory bus shared with other jobs only ever slows a trial down,
    # so the fastest one is the hardware's. Trials are cheap (tens of ms), so take at least 15.
    best_of = TimingPolicy(policy.warmup, max(policy.repeats, 15), policy.min_sample_s)

    def run() -> list[Measurement]:
        with k.threads(cores):
            t, spread, reps = time_op(k.make_stream(kind, elements, cores), best_of, statistic="min")
        return [
            Measurement(
                benchmark="stream",
                name=name,
                cores=cores,
                params={"kind": kind, "elements": elements},
                bytes=4.0 * arrays * elements,
                time_s=t,
                statistic="min",
                spread_pct=spread,
                repeats=reps,
            )
        ]

    return BenchTask(STREAM_STAGE, name, run, repeat=True)
