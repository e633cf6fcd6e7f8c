"""A GEMM after its rank has gone a while without one (fit.fit_gemm_idle -> gemm.tables[].idle_extra_us).

In a training step a few GEMMs follow a long stretch of other work: the first bottom-MLP forward comes after the
previous step's sparse update (2-35 ms in the validation cases). On the 2-vCPU VM such a GEMM paid 0 after 2.5-3.9 ms
and 0.1-0.2 ms after 8-13 ms, and the same whether the stretch was the update (its traffic) or a spin of the same
length (no traffic): the time since its previous call sets it, not the traffic (benchmarks/bench_gap_in_step.py,
docs/accuracy.md). This times a small layer's GEMM back to back and after the main thread spins for each of
:data:`IDLE_GAPS_MS`, the gaps interleaved repeat by repeat; each row is the median over the repeats.
"""

from __future__ import annotations

import time

from dlrmsim.calibration.benchmarks.timing import BenchTask, TimingPolicy, median_spread
from dlrmsim.calibration.ops import Ops
from dlrmsim.calibration.schema import Measurement

# Gaps (ms) a GEMM is timed after, besides none: the stretches a DLRM step leaves between GEMMs, to where the cost
# stopped growing on the VM (a 32^3 GEMM after spins of 10 and 30 ms paid about the same).
IDLE_GAPS_MS = (1.0, 3.0, 10.0, 30.0)
# The layer: the validation base case's first bottom-MLP layer, a forward of batch 1024 from 64 to 256 features.
IDLE_LAYER = (1024, 64, 256)
# Repeats at least: each gap's median wants more samples than a quick policy's 7 (some 45 ms a repeat).
IDLE_MIN_REPEATS = 15


def spin(seconds: float) -> None:
    """Keep the calling thread busy for ``seconds`` (the pool's other threads idle meanwhile, as in a step's serial
    stretches)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def time_after_gaps(k: Ops, policy: TimingPolicy) -> dict[float, list[float]]:
    """Seconds of each call of the layer's GEMM after each gap (ms, 0 = back to back), one sample per gap and repeat."""
    batch, fan_in, fan_out = IDLE_LAYER
    gemm = k.make_linear(batch, fan_in, fan_out, "fwd")
    gaps = (0.0, *IDLE_GAPS_MS)
    out: dict[float, list[float]] = {g: [] for g in gaps}
    for i in range(policy.warmup + max(policy.repeats, IDLE_MIN_REPEATS)):
        for g in gaps:
            gemm()  # the previous call: the gap runs from its end
            if g > 0:
                spin(g / 1e3)
            t0 = time.perf_counter()
            gemm()
            if i >= policy.warmup:
                out[g].append(time.perf_counter() - t0)
    return out


def idle_gemm_task(k: Ops, cores: int, policy: TimingPolicy) -> BenchTask:
    """The layer's GEMM at ``cores`` threads back to back and after each of :data:`IDLE_GAPS_MS`: one row a gap."""
    batch, fan_in, fan_out = IDLE_LAYER

    def run() -> list[Measurement]:
        with k.threads(cores):
            samples = time_after_gaps(k, policy)
        rows = []
        for gap, ts in samples.items():
            med, spread = median_spread(ts)
            rows.append(
                Measurement(
                    benchmark="gemm_idle",
                    name=f"gemm idle {fan_in}->{fan_out} b{batch} gap{gap:g}ms c{cores}",
                    cores=cores,
                    params={"gap_ms": gap, "batch": batch, "fan_in": fan_in, "fan_out": fan_out},
                    flops=2.0 * batch * fan_in * fan_out,
                    time_s=med,
                    spread_pct=spread,
                    repeats=len(ts),
                )
            )
        return rows

    return BenchTask("GEMM after idle gaps", f"gemm idle c{cores}", run)
