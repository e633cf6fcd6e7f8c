"""What writing an op's result into memory the rest of a step evicted costs: the cold-output benchmark.

A framework op returns a new tensor, and the allocator hands it memory that an earlier op of the step (or the
previous step) used: by then other traffic has evicted it, and the op's stores first read each line back in
(write-allocate) and push out dirty lines. On the 2-vCPU VM a 1 MiB GEMM output written cold took 230 us against
173 warm at 2 threads (438 against 336 at 1), and a 1 MiB ReLU 43 against 15 (58 against 24), with no page
faults: the memory was mapped. The benchmark writes one op's result into one buffer over and over (warm), then
into buffers cycled over twice the last-level cache (each one cold when it comes round again).
"""

from __future__ import annotations

import math
import statistics
import time

from dlrmsim.calibration.benchmarks.timing import BenchTask, TimingPolicy
from dlrmsim.calibration.ops import Ops
from dlrmsim.calibration.schema import Measurement

OUTPUT_ROWS, OUTPUT_COLS = 1024, 256  # a 1 MiB fp32 result: a DLRM layer's activation at batch 1024
OUTPUT_KINDS = ("gemm", "elementwise")
CALLS_PER_REPEAT = 24


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
    """Both op kinds at ``cores`` threads: a "warm" and a "cold" row each (benchmark ``cold_output``)."""

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
        return rows

    return BenchTask("cold outputs", f"cold outputs c{cores}", run, repeat=True)
