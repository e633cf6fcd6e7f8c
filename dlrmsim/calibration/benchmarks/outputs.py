"""What writing an op's result into memory the rest of a step evicted costs: the cold-output benchmark.

A framework op returns a new tensor, and the allocator hands it memory that an earlier op of the step (or the
previous step) used: by then other traffic has evicted it, and the op's stores first read each line back in
(write-allocate) and push out dirty lines. On the 2-vCPU VM a 1 MiB GEMM output written cold took 230 us against
173 warm at 2 threads (438 against 336 at 1), and a 1 MiB ReLU 43 against 15 (58 against 24), with no page
faults: the memory was mapped. The benchmark writes one op's result into one buffer over and over (warm), then
into buffers cycled over twice the last-level cache (each one cold when it comes round again).

A third row times the ReLU where a step's activation finds its tensors: past the cores' L2 caches, in the last-level
cache (the input a GEMM wrote a moment before, the output a buffer of the same step). It cycles over (input, output)
pairs whose footprint is several times the cores' L2s and a fraction of the last-level cache (:func:`cached_pairs`);
the warm row's single pair sits in the L2s at two threads and more, and streams several times faster there on a Xeon.
"""

from __future__ import annotations

import math
import statistics
import time

from dlrmsim.calibration.benchmarks.timing import BenchTask, TimingPolicy
from dlrmsim.calibration.ops import Ops
from dlrmsim.calibration.schema import Measurement
from dlrmsim.host import l2_cache_bytes, last_level_cache_bytes

OUTPUT_ROWS, OUTPUT_COLS = 1024, 256  # a 1 MiB fp32 result: a DLRM layer's activation at batch 1024
OUTPUT_KINDS = ("gemm", "elementwise")
CALLS_PER_REPEAT = 24
# The cached pairs' footprint: this many times the cores' L2s together, so that a pair comes round after its lines
# left them, and at most this share of the last-level cache, so that they are still there; 4 MiB at least.
CACHED_L2_MULTIPLE = 2
CACHED_LLC_SHARE = 0.25
CACHED_MIN_BYTES = 4 * 2**20


def cached_pairs(cores: int, l2_bytes: int, llc_bytes: int) -> int:
    """How many (input, output) pairs of one 1 MiB ReLU the cached row cycles over on ``cores`` cores: a footprint of
    ``CACHED_L2_MULTIPLE`` times their L2s, at most ``CACHED_LLC_SHARE`` of the last-level cache, at least
    ``CACHED_MIN_BYTES``; two pairs at least."""
    pair = 2 * 4 * OUTPUT_ROWS * OUTPUT_COLS
    footprint = min(CACHED_L2_MULTIPLE * l2_bytes * cores, CACHED_LLC_SHARE * llc_bytes)
    return max(2, math.ceil(max(footprint, CACHED_MIN_BYTES) / pair))


def time_cached_relu(k: Ops, pairs: int, policy: TimingPolicy) -> float:
    """Median seconds per call of the ReLU cycling over ``pairs`` (input, output) pairs (:func:`cached_pairs`)."""
    op = k.make_relu_pairs(OUTPUT_ROWS, OUTPUT_COLS, pairs)
    for _ in range(max(1, policy.warmup)):
        for j in range(pairs):
            op(j)
    times = []
    i = 0
    for _ in range(policy.repeats * CALLS_PER_REPEAT):
        i = (i + 1) % pairs
        t0 = time.perf_counter()
        op(i)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_outputs(k: Ops, kind: str, policy: TimingPolicy) -> tuple[float, float]:
    """Median seconds per call of one ``kind`` op writing a warm output, and writing a cold one."""
    nbytes = 4 * OUTPUT_ROWS * OUTPUT_COLS
    outputs = max(2, math.ceil(k.flush_bytes() / nbytes) + 1)
    op = k.make_into(kind, OUTPUT_ROWS, OUTPUT_COLS, outputs)
    warm, cold = [], []
    i = 0
    for _ in range(max(1, policy.warmup)):
        for j in range(outputs):  # touch every buffer once (first-touch page faults are not what this times)
            op(j)
    for _ in range(policy.repeats):
        for _ in range(CALLS_PER_REPEAT):
            t0 = time.perf_counter()
            op(0)
            warm.append(time.perf_counter() - t0)
        for _ in range(CALLS_PER_REPEAT):
            i = i % (outputs - 1) + 1  # buffers 1.. in turn: each was last written a whole cycle ago
            t0 = time.perf_counter()
            op(i)
            cold.append(time.perf_counter() - t0)
    return statistics.median(warm), statistics.median(cold)


def cold_output_task(k: Ops, cores: int, policy: TimingPolicy) -> BenchTask:
    """Both op kinds at ``cores`` threads: a "warm" and a "cold" row each, and the ReLU's "cached" row (benchmark
    ``cold_output``)."""

    def run() -> list[Measurement]:
        rows = []
        with k.threads(cores):
            for kind in OUTPUT_KINDS:
                for position, t in zip(("warm", "cold"), time_outputs(k, kind, policy), strict=True):
                    rows.append(
                        Measurement(
                            benchmark="cold_output",
                            name=f"output {kind} {position} {OUTPUT_ROWS}x{OUTPUT_COLS} c{cores}",
                            cores=cores,
                            params={"op": kind, "position": position},
                            bytes=4.0 * OUTPUT_ROWS * OUTPUT_COLS,
                            time_s=t,
                            spread_pct=0.0,
                            repeats=policy.repeats * CALLS_PER_REPEAT,
                        )
                    )
            pairs = cached_pairs(cores, l2_cache_bytes(), last_level_cache_bytes())
            rows.append(
                Measurement(
                    benchmark="cold_output",
                    name=f"output elementwise cached {OUTPUT_ROWS}x{OUTPUT_COLS} x{pairs} c{cores}",
                    cores=cores,
                    params={"op": "elementwise", "position": "cached", "pairs": pairs},
                    bytes=4.0 * OUTPUT_ROWS * OUTPUT_COLS,
                    time_s=time_cached_relu(k, pairs, policy),
                    spread_pct=0.0,
                    repeats=policy.repeats * CALLS_PER_REPEAT,
                )
            )
        return rows

    return BenchTask("cold outputs", f"cold outputs c{cores}", run, repeat=True)
