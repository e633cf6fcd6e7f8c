"""Fit the cost-model parameters the simulator reads from micro-benchmark measurements.

- GEMM: efficiency = achieved / physical peak(cores), against flops, per core count; the table is the cubes'
  median efficiency in each quarter-decade of flops (EfficiencyTable interpolates in log(flops) between). Other
  shapes give the aspect factor: their efficiency over the cubes' at the same flops, against costs.gemm_aspect.
  GEMMs timed in training-step order give the overlap of compulsory traffic with arithmetic. A GEMM is
  predicted as the simulator runs it: its flops at that rate and its compulsory bytes at the memory bandwidth,
  combined by costs.gemm_time_s (matrix-vector shapes are bound by the bytes).
- Memory: bw(c) = min(c x per_core, bandwidth) from STREAM triad at 1..all cores.
- Embedding: per (op, distribution, cores), t = fixed + lookups x row time + walk-missing lookups x walk time
  + reload-missing lookups x reload time + bytes / bandwidth, NNLS on relative error, over the later calls of
  a run; the first call of a run costs a run start more (median first - rest).
- Interaction: per (direction, cores) a fixed time, a per-sample time and the small matrices' flop rate.
- Collectives: t(n) = alpha + n / beta per op: beta from the MiB-sized messages, alpha from the smallest.
Every ``predict_s`` evaluates the fitted model for one measurement, for the fit-quality table.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from dlrmsim.calibration.benchmarks.outputs import OUTPUT_KINDS
from dlrmsim.calibration.cycle import cycle_gemms
from dlrmsim.calibration.host import peak_gflops, raise_peak_to
from dlrmsim.calibration.ops.base import OP_CLASSES, TORCH_GRAIN_ELEMENTS
from dlrmsim.calibration.schema import (
    ArrivalSkewFit,
    AutogradFit,
    ColdOutputFit,
    CollectiveFit,
    CoreAvailabilityFit,
    EmbeddingFit,
    GemmFit,
    GemmTable,
    HostInfo,
    InteractionFit,
    Measurement,
    MemoryFit,
    OptimizerFit,
    OverheadFit,
    ShardedSoftwareFit,
    memory_bandwidth_GBps,  # evaluates a MemoryFit; imported from here by notebooks and tests too
    nearest_cores,
    select_embedding_fit,
    select_interaction_fit,
)
from dlrmsim.engine.costs import (
    block_efficiency,
    cache_miss_share,
    dispatch_time_s,
    first_op_time_s,
    gemm_aspect,
    gemm_time_s,
    inputs_traffic_share,
    page_walk_miss_share,
    sequence_bytes,
    sorted_visits,
    traffic_share,
)
from dlrmsim.topologies.topology import EfficiencyTable
from dlrmsim.workloads.model import Gemm, Layer, Pass, layer_gemm

BIN_DECADES = 0.25
# Aspect bins: a tenth of a decade, so the sweep's narrow layers (aspect ~0.3-0.7) and the presets' land in
# several bins.
ASPECT_BIN_DECADES = 0.1


def _sig(x: float, digits: int = 5) -> float:
    return float(f"{x:.{digits}g}")


# --- GEMM ----------------------------------------------------------------------------------------------------


# GEMMs with a dimension below this (a 1-wide output layer, a 13-feature input) are matrix-vector products
# bound by memory, not flops; a flops-keyed efficiency table cannot describe them, so they are left out of
# the table (their fit quality is still reported).
MIN_TABLE_DIM = 16


def _min_dim(m: Measurement) -> int:
    p = m.params
    if m.benchmark == "gemm":
        return int(min(int(p["m"]), int(p["n"]), int(p["k"])))
    return int(min(int(p["batch"]), int(p["fan_in"]), int(p["fan_out"])))


def gemm_efficiency(m: Measurement, host: HostInfo) -> float:
    return m.flops / m.time_s / (peak_gflops(host, m.cores) * 1e9)


# Relative slack for floating-point rounding when a measurement sits exactly at a peak raised to meet it.
PEAK_ROUNDING = 1e-9


def peak_bound_host(measurements: Sequence[Measurement], host: HostInfo) -> HostInfo:
    """``host`` with a peak that bounds every GEMM measured: where the fastest GEMM per core beats cores x
    clock x flops/cycle, the clock is raised to meet it, with a warning (:func:`raise_peak_to`)."""
    gemms = [m for m in measurements if m.benchmark in ("gemm", "linear") and m.flops > 0 and m.time_s > 0]
    if not gemms:
        return host
    best = max(gemms, key=lambda m: m.flops / m.time_s / m.cores)
    return raise_peak_to(host, best.flops / best.time_s / best.cores / 1e9, best.name)


def fit_effective_llc(measurements: Sequence[Measurement], host: HostInfo) -> int | None:
    """The capacity C (bytes) for which the model's miss share, costs.cache_miss_share(F, C), best explains the
    cache-reuse benchmark (benchmarks/cache.py); None without its rows or where missing costs no measurable time.

    A gather's time is a hit's plus the share that misses times a miss's extra cost: t(F) = a + b x share(F, C).
    For each C on a grid from a core's L2 to twice the reported cache, a and b are the least-squares line of the
    times on the shares; the C with the smallest residual is the capacity, at most the reported cache. (Fitting the
    times, not shares normalised by a hit and a miss footprint, keeps the model's form, whose share only nears 1.)

    C is at least one core's L2 (since 2026-11-28): whatever other tenants do to a shared cache, a process's data
    stays in its core's private L2, so what it reuses is never served by less. Before, 3 of 26 calibrations of one
    2-vCPU VM (0.5 MiB of L2 a core) fitted 0.12-0.25 MiB, the grid's lower end, where the others read 1.3-15 MiB:
    their times rose from hit to miss within the two or three smallest footprints, a steeper knee than the model's
    form makes at any C, and the flat tail fitted best with C as small as the grid allowed."""
    rows = sorted((m for m in measurements if m.benchmark == "cache_reuse"), key=lambda m: float(m.params["footprint_bytes"]))
    if len(rows) < 4:
        return None
    f = np.array([float(m.params["footprint_bytes"]) for m in rows])
    t = np.array([m.time_s for m in rows])
    if t.max() <= 1.05 * t.min():  # no visible step from cache to memory: nothing to fit
        return None
    reported = float(rows[0].params.get("llc_bytes", host.llc_bytes))
    # the benchmark's footprints start at twice a core's L2 (benchmarks/cache.py, reuse_footprints)
    l2 = float(rows[0].params.get("l2_bytes", f[0] / 2))
    best: tuple[float, float] | None = None
    for c in np.geomspace(l2, 2 * reported, 400):
        share = np.array([cache_miss_share(x, c) for x in f])
        a = np.column_stack([np.ones_like(share), share])
        coef = np.linalg.lstsq(a, t, rcond=None)[0]
        residual = float(np.sum((a @ coef - t) ** 2))
        if coef[1] > 0 and (best is None or residual < best[0]):
            best = (residual, float(c))
    # A process gets at most the cache the CPU has; a fit above it reads noise, not capacity.
    return int(min(best[1], reported)) if best is not None else None


def cache_bound_host(measurements: Sequence[Measurement], host: HostInfo) -> HostInfo:
    """``host`` with the last-level cache capacity the cache-reuse benchmark measured (``effective_llc_bytes``)."""
    c = fit_effective_llc(measurements, host)
    return host.model_copy(update={"effective_llc_bytes": c}) if c is not None else host


def in_step_order(m: Measurement) -> bool:
    """A GEMM timed inside an MLP cycle in training-step order, the cycle flushed once at its start
    (benchmarks.gemm.time_mlp_cycle), not in a warm loop."""
    return m.params.get("context") == "step"


def with_evicted_operands(m: Measurement) -> bool:
    """A GEMM timed inside an MLP cycle right after a flush of its own: all its operands evicted."""
    return m.params.get("context") == "evicted"


def in_warm_loop(m: Measurement) -> bool:
    """A GEMM timed in a loop of itself (not inside an MLP cycle)."""
    return m.params.get("context") not in ("step", "evicted")


def _is_cube(m: Measurement) -> bool:
    g = measured_gemm(m)
    return g.m == g.n == g.k


def measured_aspect(m: Measurement, block_share: float = 1.0) -> float:
    """costs.gemm_aspect of a "gemm" or "linear" measurement's GEMM, from its shape as the simulator sees it, at
    the flops its passes compute (its flops over ``block_share``, costs.block_efficiency)."""
    g = measured_gemm(m)
    return gemm_aspect(g.flops / block_share, g.bytes_moved(4.0), 4.0)


def _binned_table(points: Sequence[tuple[float, float]], decades: float) -> list[tuple[float, float]]:
    """(geometric-mean size, median value) per ``decades``-wide bin of log10(size), sizes increasing."""
    bins: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for size, value in points:
        bins[math.floor(math.log10(size) / decades)].append((size, value))
    return [
        (_sig(float(np.exp(np.mean([math.log(x) for x, _ in bins[b]])))), _sig(float(np.median([v for _, v in bins[b]])), 4))
        for b in sorted(bins)
    ]


# The micro-kernel widths (output columns) and remainder rules the output-columns sweep is tested against.
VECTOR_BLOCKS = (4, 8, 16, 32, 64)
Remainder = Literal["binary", "padded"]
REMAINDER_RULES: tuple[Remainder, ...] = ("binary", "padded")


def fit_vector_block(rows: Sequence[Measurement]) -> tuple[int | None, Remainder | None]:
    """(block, remainder rule) that best explains the output-columns sweep's times ("gemm_columns": C[m, n] =
    A[m, k] B[k, n] at fixed m, k over n): time = c x the columns the kernel computes, n / block_efficiency(n),
    c by median, scored by the mean relative error (the rules differ only at widths whose remainder has
    several set bits). Each block and rule is tried against no block (time
    proportional to n), which wins ties; (None, None) when it wins or fewer than 4 widths were timed."""
    if len(rows) < 4:
        return None, None
    cols = np.array([int(m.params["n"]) for m in rows])
    t = np.array([m.time_s for m in rows])

    def score(work: np.ndarray) -> float:
        c = float(np.median(t / work))
        return float(np.mean(np.abs(c * work / t - 1.0)))

    best: tuple[float, int | None, Remainder | None] = (score(cols.astype(float)), None, None)
    for block in VECTOR_BLOCKS:
        for rule in REMAINDER_RULES:
            work = np.array([n / block_efficiency(int(n), block, rule) for n in cols])
            err = score(work)
            if err < best[0] - 1e-12:
                best = (err, block, rule)
    return best[1], best[2]


def _block_share(m: Measurement, block: int | None, rule: str | None) -> float:
    """costs.block_efficiency of a measurement's GEMM with a fitted block and rule (1 without)."""
    return block_efficiency(measured_gemm(m).n, block or 0, rule or "binary")


def fit_gemm(
    measurements: Sequence[Measurement], host: HostInfo, memory: MemoryFit | None = None, overhead: OverheadFit | None = None
) -> GemmFit:
    """Per core count, the cubes' efficiency against flops and, from the other shapes timed in a warm loop, the
    aspect factor (median efficiency over the cubes' at the same flops, per tenth of a decade of aspect). With
    ``memory``, from the GEMMs timed in training-step order, what a GEMM costs there beyond its warm time
    (:func:`fit_cold_gemm`), and from those timed with their operands evicted what eviction adds
    (:func:`fit_evicted_gemm`)."""
    usable = [m for m in measurements if m.benchmark in ("gemm", "linear") and m.flops > 0 and _min_dim(m) >= MIN_TABLE_DIM]
    warm = [m for m in usable if in_warm_loop(m)]
    by_cores: dict[int, list[Measurement]] = defaultdict(list)
    for m in warm:
        by_cores[m.cores].append(m)
    if not any(_is_cube(m) for m in warm):
        raise ValueError("no GEMM measurements to fit")
    over = [m.name for m in usable if gemm_efficiency(m, host) > 1 + PEAK_ROUNDING]
    if over:  # never clip: an efficiency above 1 means the peak is wrong, and the host record must say so
        raise ValueError(
            f"{over[0]} ran above the host's peak {host.peak_fp32_GFLOPs:g} GFLOP/s: bound the peak first (fit.peak_bound_host)"
        )
    tables = []
    achieved = []
    # The tables are at full vector blocks: each measurement's remainder passes are divided out.
    block, rule = fit_vector_block([m for m in measurements if m.benchmark == "gemm_columns"])

    def work(m: Measurement) -> float:  # the flops the kernel's passes compute, padding included
        return m.flops / _block_share(m, block, rule)

    def efficiency(m: Measurement) -> float:  # at full blocks
        return gemm_efficiency(m, host) / _block_share(m, block, rule)

    for cores in sorted(by_cores):
        cubes = [m for m in by_cores[cores] if _is_cube(m)]
        if not cubes:
            continue
        # min: rounding only, anything above 1 + PEAK_ROUNDING was refused above
        points = [(f, min(1.0, e)) for f, e in _binned_table([(work(m), efficiency(m)) for m in cubes], BIN_DECADES)]
        flops_table = EfficiencyTable(tuple(points))
        # The cubes define aspect 1 (factor 1); a shape of aspect 1 or more runs as a cube does.
        ratios = [
            (a, efficiency(m) / flops_table(work(m)))
            for m in by_cores[cores]
            if (a := measured_aspect(m, _block_share(m, block, rule))) < 1.0
        ]
        aspect = [*_binned_table(ratios, ASPECT_BIN_DECADES), (1.0, 1.0)] if ratios else []
        tables.append(GemmTable(cores=cores, peak_GFLOPs=_sig(peak_gflops(host, cores)), points=points, aspect_points=aspect))
        achieved.append((cores, _sig(max(m.flops / m.time_s for m in by_cores[cores]) / 1e9)))
    # The best single measurement at all cores: on a shared host the maximum over many shapes finds the
    # quietest moment, so it is far steadier between runs than any one bin's median.
    most = max(t.cores for t in tables)
    best = max(gemm_efficiency(m, host) for m in by_cores[most])
    fit = GemmFit(
        peak_efficiency=_sig(min(1.0, best), 4),
        tables=tables,
        achieved_GFLOPs_by_cores=achieved,
        vector_block=block,
        remainder=rule,
    )
    if memory is None:
        return fit
    cold = []
    for table in fit.tables:
        step = [m for m in usable if in_step_order(m) and m.cores == table.cores]
        if step:
            call_s, overlap = fit_cold_gemm(step, fit, memory, overhead)
            table = table.model_copy(update={"cold_call_us": _sig(call_s * 1e6, 4), "memory_overlap": _sig(overlap, 3)})
        idle = fit_gemm_idle([m for m in measurements if m.benchmark == "gemm_idle" and m.cores == table.cores])
        evicted = [m for m in usable if with_evicted_operands(m) and m.cores == table.cores]
        if evicted:
            call_s, factor, compute, sequence = fit_evicted_gemm(evicted, step, fit, memory, overhead, host, bool(idle))
            table = table.model_copy(
                update={
                    "evicted_call_us": _sig(call_s * 1e6, 4),
                    "evicted_traffic_factor": _sig(factor, 3),
                    "evicted_compute_factor": _sig(compute, 3),
                    "sequence_call_us": 0.0,
                    "sequence_l2_factor": _sig(sequence, 3),
                }
            )
        if idle:
            table = table.model_copy(update={"idle_extra_us": idle})
        cold.append(table)
    return fit.model_copy(update={"tables": cold})


def fit_gemm_idle(rows: Sequence[Measurement]) -> list[tuple[float, float]]:
    """[(gap ms, us), ...] of one core count's idle-gap GEMM rows (benchmarks/idle.py): each gap's time over the
    GEMM's time with the least idle, at least 0 and never less than at a shorter gap (a longer stretch leaves no
    more of the call's state warm; a dip is the host's noise); [] without a back-to-back row or any gap. The least
    idle is the faster of back to back and the shortest gap: back to back, the call sometimes ran slower than after
    1 ms (379 against 256 us at 2 threads on the 2-vCPU VM, spreads 63 and 23 %), which would make every gap's
    excess the noise of that one median."""
    by_gap = {float(m.params["gap_ms"]): m.time_s for m in rows}
    loop = by_gap.pop(0.0, None)
    if loop is None or not by_gap:
        return []
    loop = min(loop, by_gap[min(by_gap)])
    out, floor = [], 0.0
    for gap in sorted(by_gap):
        floor = max(floor, by_gap[gap] - loop)
        out.append((gap, _sig(floor * 1e6, 4)))
    return out


def fit_cold_gemm(
    step: Sequence[Measurement], fit: GemmFit, memory: MemoryFit, overhead: OverheadFit | None
) -> tuple[float, float]:
    """(fixed time per call in s, overlap) of GEMMs timed in training-step order, beyond their warm (roofline) time
    and a first op's dispatch: measured - max(arithmetic, traffic) - dispatch = cold call + (1 - overlap) x the
    shorter of the two, by least squares on relative error, both terms non-negative and the overlap at least 0
    (at most all of the traffic unhidden)."""
    t_f, t_b = np.array([gemm_parts_s(fit, memory, m) for m in step]).T
    t = np.array([m.time_s for m in step])
    shorter = np.minimum(t_f, t_b)
    excess = t - np.maximum(t_f, t_b) - np.array([dispatch_s(overhead, m.cores, 1.0) for m in step])
    x = np.column_stack([np.ones(len(step)), shorter])
    call_s, unhidden = nonnegative_least_squares(x / t[:, None], excess / t)
    if unhidden > 1.0:  # the traffic cannot be more than all unhidden: refit the call time alone
        unhidden = 1.0
        call_s = max(0.0, float(np.sum((excess - shorter) / t**2) / np.sum(1.0 / t**2)))
    return float(call_s), 1.0 - float(unhidden)


def fit_evicted_gemm(
    evicted: Sequence[Measurement],
    step: Sequence[Measurement],
    fit: GemmFit,
    memory: MemoryFit,
    overhead: OverheadFit | None,
    host: HostInfo,
    priced_by_gap: bool = False,
) -> tuple[float, float, float, float]:
    """(fixed time per call in s, traffic factor, compute factor, sequence factor) of what a GEMM among other ops
    costs beyond its warm roofline and its first op's dispatch, in the form the simulator charges it
    (costs.evicted_operand_time_s and costs.sequence_time_s): kernel share x call + inputs' share x (factor x
    traffic time (compulsory bytes at the stream bandwidth of the GEMM's cores) + compute factor x arithmetic time at
    the warm efficiency) + sequence factor x the traffic time of the part of its bytes its cores' L2 caches hold.
    The last term is paid whatever the traffic: a GEMM right after other ops, even a few small ones, ran slower than
    the same GEMM called back to back in a warm loop, on the 2-vCPU Intel VM (2026-11-27, 1 thread, 512 x 512 by
    512 x 32: 190 us back to back, 231 us after a GEMM of another shape, 218 us after a 1 MiB ReLU). It was a fixed
    time per call until 2026-11-28; timed in the cycle without its flush against the same GEMM in a loop
    (benchmarks/bench_gemm_sequence.py, 2-vCPU AMD VM, 2 threads), it grew with the GEMM up to about its cores' L2:
    +2.6 to +8 us for GEMMs moving 66-129 KiB, +8 to +30 us for 350-640 KiB, +8 to +75 us (median about 30) past
    1.2 MiB, so a fixed 20-60 us fitted on the cycles' 1-5.3 MiB GEMMs charged a validation step's 5-us output layer
    ten times over. The compute term is there because on a 16-core host the excess grew with a GEMM's flops, not its
    bytes (+20, +93 and +346 us for 67, 268 and 537 MFLOP reading 1.5, 5.3 and 5 MB at 16 cores), which the first
    two could not fit (docs/calibration.md). GEMMs timed right after a flush of their own have both shares 1; GEMMs
    timed in a step-order cycle flushed once (with their MLP recorded) have the shares the simulator would give them
    in that cycle (cycle.cycle_gemms). Least squares on relative error, every term non-negative. The factor is not
    capped at 1: operands the kernel packs from memory in its own access order may stream slower than STREAM's
    triad, and caches it had warm refill on top.

    With ``priced_by_gap`` (the calibration has an idle curve at these cores, fit_gemm_idle) the call is no column of
    its own: the simulator then charges the time since the previous GEMM (costs.gemm_idle_time_s) and these terms as
    one loss, paying the larger (costs.cold_gemm_time_s), and returns a call of 0. A row's excess is then these terms
    alone: a GEMM right after a flush has gone the flush's duration without a call, but the flush's traffic costs it
    more than that gap does (the base case's first layer, 2-vCPU AMD VM: +57 / +92 us over a 3 ms spin at 2 / 1
    threads), and one right after another op of its cycle has no gap. Until 2026-11-28 the curve's value at the
    flush's duration was taken off a flushed row's excess, as if the two added; after a flush and an 8 ms spin the
    layer cost what the spin alone did (benchmarks/bench_gemm_cold_contexts.py). The call's own column had left it and
    a fixed sequence call to share one cost by the kernel shares, which the effective cache's capacity sets: at 0.12
    MiB every step-order row's share was near 1, and two calibrations half an hour apart put 55 and 11 us in the call,
    0 and 60 us in the sequence call."""
    rows = [(m, *reuse_in_cycle(m, host)) for m in (*evicted, *step)]
    rows = [(m, k, o, prev) for m, k, o, prev in rows if k is not None]
    t_f, t_b = np.array([gemm_parts_s(fit, memory, m) for m, *_ in rows]).T
    t = np.array([m.time_s for m, *_ in rows])
    first = np.array([first_op_dispatch_s(overhead, m.cores, prev, host) for m, _, _, prev in rows])
    operands = np.array([o for _, _, o, _ in rows])
    excess = t - np.maximum(t_f, t_b) - first
    # the sequence term's column: the traffic time of what of its bytes the GEMM's cores' L2 caches hold
    refill = np.array([sequence_part(m, host) for m, *_ in rows]) * t_b
    if priced_by_gap:
        x = np.column_stack([operands * t_b, operands * t_f, refill])
        coef = nonnegative_least_squares(x / t[:, None], excess / t)
        return 0.0, float(coef[0]), float(coef[1]), float(coef[2])
    kernel = np.array([k for _, k, _, _ in rows])
    columns = [kernel, operands * t_b, operands * t_f]
    # The sequence term is told from the eviction terms only by rows whose shares are below 1 (step order); GEMMs
    # timed after a flush of their own pay all of them.
    separable = bool(np.any(kernel < 1.0))
    if separable:
        columns.append(refill)
    x = np.column_stack(columns)
    coef = nonnegative_least_squares(x / t[:, None], excess / t)
    sequence = float(coef[3]) if separable else 0.0
    return float(coef[0]), float(coef[1]), float(coef[2]), sequence


def reuse_in_cycle(m: Measurement, host: HostInfo) -> tuple[float | None, float, float]:
    """(kernel share, inputs' share, bytes before it) of a GEMM row timed in an MLP cycle: 1, 1 and a flush for one
    timed right after its own flush; the shares the simulator's cost model gives it in its cycle for one in step
    order with its MLP recorded; None for others (step-order rows from before the MLP was recorded)."""
    flush = float(host.flushed_bytes)
    if with_evicted_operands(m):
        return 1.0, 1.0, flush
    if not in_step_order(m) or "mlp" not in m.params:
        return None, 0.0, 0.0
    widths = tuple(int(v) for v in str(m.params["mlp"]).split("-"))
    layer = next(i for i in range(len(widths) - 1) if (widths[i], widths[i + 1]) == (m.params["fan_in"], m.params["fan_out"]))
    g = cycle_gemms(int(m.params["batch"]), widths, flush)[(str(m.params["pass"]), layer)]
    # The benchmark process ran alone, so its GEMMs had the whole cache whatever their thread count (as a one-rank
    # step has: calibration.apply); a thread count's share of it was wrong for a 1-thread row on a 2-core host.
    llc = float(host.model_llc_bytes)
    operands = inputs_traffic_share(g.reuse.operands, flush, llc)
    return traffic_share(g.reuse.kernel_traffic, flush, llc), operands, g.prev_bytes


def sequence_part(m: Measurement, host: HostInfo) -> float:
    """The share of measurement ``m``'s GEMM's compulsory bytes that its cores' L2 caches hold (costs.sequence_bytes)."""
    nbytes = measured_gemm(m).bytes_moved(4.0)
    return sequence_bytes(nbytes, m.cores, float(host.l2_bytes)) / nbytes


def first_op_dispatch_s(overhead: OverheadFit | None, cores: int, prev_bytes: float, host: HostInfo) -> float:
    """A one-op task's dispatch after ``prev_bytes`` of traffic, as costs.first_op_s charges it with this fit."""
    if overhead is None:
        return 0.0
    after = float(host.flushed_bytes)
    llc = float(host.model_llc_bytes)  # the benchmark process's: all of it (reuse_in_cycle)
    return first_op_time_s(overhead.task_overhead_s(cores), overhead.op_overhead_s(cores), prev_bytes, after, llc)


def gemm_flops_s(fit: GemmFit, m: Measurement) -> float:
    """The arithmetic time of measurement ``m``'s GEMM at the fitted efficiency (costs.matrix_efficiency): the
    flops its vector-block passes compute, at the cubes' table times the aspect factor (at most 1) there."""
    table = fit.table(m.cores)
    share = _block_share(m, fit.vector_block, fit.remainder)
    eff = EfficiencyTable(tuple(table.points))(m.flops / share)
    if table.aspect_points:
        eff *= EfficiencyTable(tuple(table.aspect_points))(measured_aspect(m, share))
    peak = table.peak_GFLOPs * 1e9 * m.cores / table.cores  # the physical peak is linear in cores
    return m.flops / (peak * min(eff, 1.0) * share)


def predict_gemm_s(fit: GemmFit, flops: float, cores: int) -> float:
    """A cube of ``flops`` on ``cores``: flops at the cubes' efficiency table's rate."""
    table = fit.table(cores)
    eff = EfficiencyTable(tuple(table.points))(flops)
    peak = table.peak_GFLOPs * 1e9 * cores / table.cores
    return flops / (peak * eff)


def measured_gemm(m: Measurement) -> Gemm:
    """The GEMM a "gemm", "gemm_columns" or "linear" measurement ran (a linear pass has the shape the simulator gives it)."""
    p = m.params
    if m.benchmark in ("gemm", "gemm_columns"):
        return Gemm(m=int(p["m"]), n=int(p["n"]), k=int(p["k"]))
    layer = Layer("measured", int(p["fan_in"]), int(p["fan_out"]), "top", 0)
    return layer_gemm(layer, int(p["batch"]), Pass(str(p["pass"])))


def gemm_parts_s(gemm: GemmFit, memory: MemoryFit, m: Measurement) -> tuple[float, float]:
    """(arithmetic time, compulsory-traffic time) of measurement ``m``'s GEMM alone: :func:`gemm_flops_s`, and
    ``Gemm.bytes_moved`` at the memory bandwidth of its cores."""
    return gemm_flops_s(gemm, m), measured_gemm(m).bytes_moved(4.0) / (memory_bandwidth_GBps(memory, m.cores) * 1e9)


def predict_gemm_roofline_s(
    gemm: GemmFit, memory: MemoryFit, m: Measurement, overhead: OverheadFit | None = None, host: HostInfo | None = None
) -> float:
    """What the simulator charges the GEMM of measurement ``m`` running alone (``costs.task_time``): its
    arithmetic and traffic times combined by costs.gemm_time_s. A GEMM timed in a warm loop finds its operands
    in cache, so it is compared with the roofline (overlap 1): a matrix-vector shape (a 1-wide output layer) is
    bound by the bytes; the flops-keyed table alone would call it 5x faster. One timed in an MLP cycle (right after
    a flush of its own, or in step order with its MLP recorded), where the calibration fitted the eviction cost,
    takes the roofline, its first op's dispatch and that cost at the shares the simulator gives it there
    (costs.evicted_operand_time_s). Otherwise one timed in step order takes the fitted overlap, plus a first op's
    dispatch and the fitted cold-call time (costs.fixed_time_s), as a calibration without the eviction fit charges
    a training step's GEMM."""
    t_f, t_b = gemm_parts_s(gemm, memory, m)
    table = gemm.table(m.cores)
    if table.evicted_call_us is not None and host is not None:
        kernel, operands, prev = reuse_in_cycle(m, host)
        if kernel is not None:
            # the parts fit_evicted_gemm fitted, as costs.evicted_operand_time_s and the gemm kind's fixed time
            # (calibration.apply) charge them
            traffic = (table.evicted_traffic_factor or 0.0) * t_b
            compute = (table.evicted_compute_factor or 0.0) * t_f
            sequence = (table.sequence_call_us or 0.0) * 1e-6 + (table.sequence_l2_factor or 0.0) * sequence_part(m, host) * t_b
            evicted = kernel * table.evicted_call_us * 1e-6 + operands * (traffic + compute) + sequence
            return first_op_dispatch_s(overhead, m.cores, prev, host) + gemm_time_s(t_f, t_b, 1.0) + evicted
    if not in_step_order(m) and not with_evicted_operands(m):
        return gemm_time_s(t_f, t_b, 1.0)
    return dispatch_s(overhead, m.cores, 1.0) + table.cold_call_us * 1e-6 + gemm_time_s(t_f, t_b, table.memory_overlap)


# --- memory --------------------------------------------------------------------------------------------------


def fit_memory(measurements: Sequence[Measurement], host: HostInfo) -> MemoryFit:
    curves: dict[str, dict[int, float]] = {"copy": {}, "triad": {}}
    for m in measurements:
        if m.benchmark == "stream":
            curves[str(m.params["kind"])][m.cores] = m.bytes / m.time_s / 1e9
    triad = curves["triad"]
    if not triad:
        raise ValueError("no stream triad measurements to fit")
    per_core = triad.get(1, min(triad.values()))
    bandwidth = max(triad.values())
    most = max(triad)
    saturation = min(float(most), max(1.0, bandwidth / per_core))
    return MemoryFit(
        bandwidth_GBps=_sig(bandwidth),
        per_core_GBps=_sig(per_core),
        saturation_cores=_sig(saturation, 3),
        # Flattened: all cores give less than 90% of linear scaling from one core.
        saturated=bandwidth < 0.9 * most * per_core,
        copy_GBps_by_cores=[(c, _sig(v)) for c, v in sorted(curves["copy"].items())],
        triad_GBps_by_cores=[(c, _sig(v)) for c, v in sorted(triad.items())],
    )


# --- embedding -----------------------------------------------------------------------------------------------


def _lookups(m: Measurement) -> float:
    p = m.params
    if "lookups" in p:
        return float(p["lookups"])
    if "batch" in p and "pooling" in p:
        return float(p["batch"]) * float(p["pooling"])
    return 0.0  # no lookup count recorded: bandwidth only


def _sorted_visits(m: Measurement, host: HostInfo) -> tuple[float, float]:
    """costs.sorted_visits of one table of an update measurement: (pages walked, rows not adjacent)."""
    p = m.params
    return sorted_visits(float(p["unique_rows"]), float(p["rows"]), float(p["dim"]) * 4.0, host.page_bytes)


def walk_lookups(m: Measurement, host: HostInfo | None, sorted_rows: bool = False) -> float:
    """Lookups of an embedding measurement weighted by the share whose page walk misses L2
    (costs.page_walk_miss_share over the tables its cycle walks); 0 for the backward, which never reads the
    table, and for rows that do not record their tables or host. An update that visits its rows in ascending
    order (``sorted_rows``) walks each touched page once: its pages, not its lookups, are weighted."""
    p = m.params
    if host is None or p.get("op") == "backward" or "tables" not in p:
        return 0.0
    tables_bytes = float(p["tables"]) * float(p["rows"]) * float(p["dim"]) * 4.0
    walks = _sorted_visits(m, host)[0] if sorted_rows and p.get("op") == "update" else _lookups(m)
    return walks * page_walk_miss_share(tables_bytes, host.page_bytes, host.l2_bytes)


def reload_lookups(m: Measurement, host: HostInfo | None, sorted_rows: bool = False) -> float:
    """Lookups of an update measurement weighted by the share whose rows its cycle pushed out of the last-level
    cache between the forward and the update (costs.cache_miss_share of the cycle's tables' update working
    sets, taskgraph.update_reuse_bytes, plus the bytes the benchmark swept between them, ``between_bytes``, as
    taskgraph.bytes_since_lookups counts a step's dense work); 0 for the forward and backward, and rows without
    tables or host. With ``sorted_rows``, the rows a prefetcher cannot stream are weighted instead of the lookups
    (costs.sorted_visits)."""
    p = m.params
    if host is None or p.get("op") != "update" or "tables" not in p:
        return 0.0
    per_table = (float(p["unique_rows"]) + _lookups(m)) * float(p["dim"]) * 4.0
    reuse = float(p["tables"]) * per_table + float(p.get("between_bytes", 0.0))
    reloads = _sorted_visits(m, host)[1] if sorted_rows else _lookups(m)
    return reloads * cache_miss_share(reuse, host.model_llc_bytes)


def embedding_features(m: Measurement, host: HostInfo | None, sorted_rows: bool = False) -> np.ndarray:
    """The embedding cost's terms for one measurement, in EmbeddingFit's order: 1 (per op: the bag offsets,
    autograd and sparse-gradient set-up, waking the thread pool), lookups (work that does not grow with a
    row's width, one kernel call per gradient row), walk-missing lookups (pages, for an update that visits its
    rows in order), reload-missing lookups (rows a prefetcher cannot stream, ditto), bytes."""
    return np.array([1.0, _lookups(m), walk_lookups(m, host, sorted_rows), reload_lookups(m, host, sorted_rows), m.bytes])


def embedding_coefficients(e: EmbeddingFit) -> np.ndarray:
    """``e``'s coefficients in SI units, in :func:`embedding_features`' order: the time of a call beyond its dispatch
    and run start is their dot product with a measurement's features."""
    return np.array(
        [e.fixed_us * 1e-6, e.row_time_ns * 1e-9, e.walk_time_ns * 1e-9, e.reload_time_ns * 1e-9, 1.0 / (e.bandwidth_GBps * 1e9)]
    )


def fit_embedding_terms(features: np.ndarray, times: np.ndarray, max_bandwidth_Bps: float = math.inf) -> np.ndarray:
    """Non-negative coefficients c of t = features . c (rows of :func:`embedding_features`), least squares on
    the relative time error. A term the data does not need, or never exercises (an all-zero column), is 0.

    The byte term is s/B: a value below 1 / max_bandwidth_Bps would be a stream faster than the host can move
    bytes at all (its L1 ports), so it is not a bandwidth but noise on a term the data does not resolve (the
    other terms already explain the time); such a fit is not admitted, and the best fit without it wins."""
    floors = np.zeros(features.shape[1])
    floors[-1] = 1.0 / max_bandwidth_Bps
    c = nonnegative_least_squares(features / times[:, None], np.ones_like(times), floors)
    c[~features.any(axis=0)] = 0.0  # least squares leaves rounding noise on a column it cannot see
    return c


def _is_run_start(m: Measurement) -> bool:
    """An embedding row timing the first call of a run (older files time every call together: not one)."""
    return m.params.get("position") == "first"


def run_start_s(measurements: Sequence[Measurement]) -> float:
    """Extra time (s) of the first call of a run over the later calls of the same run: the median over
    configurations of first - rest (rows paired by cores, bytes and parameters), at least 0; 0 without
    first-call rows."""

    def key(m: Measurement) -> tuple[object, ...]:
        return (m.cores, m.bytes, *sorted((k, str(v)) for k, v in m.params.items() if k != "position"))

    rest = {key(m): m.time_s for m in measurements if not _is_run_start(m)}
    extra = [m.time_s - rest[key(m)] for m in measurements if _is_run_start(m) and key(m) in rest]
    return max(float(np.median(extra)), 0.0) if extra else 0.0


# The bandwidth recorded for an embedding fit whose data needs no byte term (least squares gave it 0): far above
# any stream, so the simulator never caps the op by it. Its own value so a reader tells it from a measured rate.
NO_BYTE_TERM_GBPS = 1e6


def _stream_bound_Bps(host: HostInfo | None, cores: int) -> float:
    """The fastest stream (B/s) an embedding fit on `cores` cores may claim: those cores' share of the host's
    physical bound on any stream (L1 ports), or without host facts the unbounded rate (older files)."""
    return host.memory_bound_GBps * 1e9 * min(cores / host.cores, 1.0) if host is not None else math.inf


def fit_embedding(
    measurements: Sequence[Measurement],
    memory: MemoryFit,
    overhead: OverheadFit | None = None,
    host: HostInfo | None = None,
    sorted_update: bool = False,
) -> list[EmbeddingFit]:
    """Per (op, distribution, cores): the fixed, per-row, page-walk and bandwidth terms of the later calls of a
    run, once the op's cold start (the dispatch fit's first-op cost, which the simulator charges each task) is
    taken off, and what the first call of a run costs beyond them (:func:`run_start_s`). ``sorted_update``: the
    kernel's update visits its rows in ascending order (EmbeddingFit.sorted_rows)."""
    groups: dict[tuple[str, str, int], list[Measurement]] = defaultdict(list)
    for m in measurements:
        if m.benchmark == "embedding":
            groups[(str(m.params["op"]), str(m.params["distribution"]), m.cores)].append(m)
    out = []
    for (op, dist, cores), rows in sorted(groups.items()):
        ms = [m for m in rows if not _is_run_start(m)]
        start = dispatch_s(overhead, cores, 1.0)
        # The cold start is a small part of any benchmarked lookup; the floor only guards a noisy dispatch fit.
        work = np.array([max(m.time_s - start, 0.5 * m.time_s) for m in ms])
        in_order = sorted_update and op == "update"
        features = np.stack([embedding_features(m, host, in_order) for m in ms])
        fixed, a, walk, reload, inv_bw = fit_embedding_terms(features, work, _stream_bound_Bps(host, cores))
        bw = 1.0 / max(float(inv_bw), 1.0 / (NO_BYTE_TERM_GBPS * 1e9))
        out.append(
            EmbeddingFit(
                op=op,
                distribution=dist,
                cores=cores,
                bandwidth_GBps=_sig(bw / 1e9),  # type: ignore[arg-type]
                stream_fraction=_sig(bw / 1e9 / memory.bandwidth_GBps, 4),
                row_time_ns=_sig(a * 1e9),
                walk_time_ns=_sig(walk * 1e9),
                reload_time_ns=_sig(reload * 1e9),
                fixed_us=_sig(fixed * 1e6),
                run_start_us=_sig(run_start_s(rows) * 1e6),
                sorted_rows=in_order,
            )
        )
    return out


def fit_tbe(
    measurements: Sequence[Measurement], memory: MemoryFit, overhead: OverheadFit | None = None, host: HostInfo | None = None
) -> list[EmbeddingFit]:
    """:func:`fit_embedding` of the fbgemm TBE rows (benchmarks/tbe.py): the same terms, per table, for its forward
    and its backward with the update fused in (op "update"); empty when the calibration ran no TBE benchmark."""
    rows = [m.model_copy(update={"benchmark": "embedding"}) for m in measurements if m.benchmark == "tbe"]
    # fbgemm's CPU backward sorts each table's lookups by row (csr2csc) and then updates the touched rows in that
    # order ([FBGEMM-1.8] embedding_backward_split_cpu_template.cpp), where torch's sparse SGD adds the gradient rows
    # in lookup order.
    return fit_embedding(rows, memory, overhead, host, sorted_update=True) if rows else []


def fit_overhead(measurements: Sequence[Measurement], backend: str | None = None) -> OverheadFit | None:
    """Per-op fixed costs at each core count: the median over element counts of the dispatch benchmark's
    first-op-after-flush times (a task's first op) and of its following ops' times (each further op); the thread
    pool's fork and join per parallel element-wise op (:func:`fork_join_table`); and what a further op with a Python
    scalar operand and a reduction cost beyond a multiply (the median over element counts of the difference, at
    least 0; none where the benchmark did not time them)."""
    by_position: dict[str, dict[int, list[float]]] = {"first": defaultdict(list), "rest": defaultdict(list)}
    # further ops of the costlier classes, by class, cores and element count (seconds per op)
    by_class: dict[str, dict[int, dict[int, float]]] = {c: defaultdict(dict) for c in OP_CLASSES}
    for m in measurements:
        if m.benchmark != "dispatch":
            continue
        op_class = str(m.params.get("op", "mul"))
        if op_class == "mul":
            by_position[str(m.params.get("position", "first"))][m.cores].append(m.time_s)
        if m.params.get("position") == "rest" and op_class in by_class:
            by_class[op_class][m.cores][int(m.params.get("elements", 0))] = m.time_s
    if not by_position["first"]:
        return None

    def table(rows: dict[int, list[float]]) -> list[tuple[int, float]]:
        return [(c, _sig(float(np.median(v)) * 1e6, 4)) for c, v in sorted(rows.items())]

    def extra(op_class: str) -> list[tuple[int, float]]:
        """Per core count: the median over element counts of the class's further op less the multiply's, at least 0."""
        out = []
        for cores, times in sorted(by_class[op_class].items()):
            muls = by_class["mul"].get(cores, {})
            diffs = [t - muls[n] for n, t in times.items() if n in muls]
            if diffs:
                out.append((cores, _sig(max(float(np.median(diffs)), 0.0) * 1e6, 4)))
        return out

    forks, grain = fork_join_table(measurements, TORCH_GRAIN_ELEMENTS if backend == "torch" else math.inf)
    return OverheadFit(
        task_overhead_us_by_cores=table(by_position["first"]),
        op_overhead_us_by_cores=table(by_position["rest"]),
        fork_join_us_by_cores=forks,
        parallel_grain_elements=grain,
        scalar_op_extra_us_by_cores=extra("scalar"),
        reduce_op_extra_us_by_cores=extra("reduce"),
    )


def fit_cold_output(measurements: Sequence[Measurement], overhead: OverheadFit | None = None) -> list[ColdOutputFit]:
    """Per core count: (cold - warm) / output bytes of each op kind of the cold-output benchmark, at least 0; and
    the cached ReLU's rate (:func:`cached_elementwise_GBps`); empty without the benchmark."""
    rows: dict[tuple[int, str, str], float] = {}
    cached: dict[int, Measurement] = {}
    for m in measurements:
        if m.benchmark == "cold_output":
            rows[(m.cores, str(m.params["op"]), str(m.params["position"]))] = m.time_s / (m.bytes / 1024.0) * 1e9
            if m.params["position"] == "cached":
                cached[m.cores] = m
    out = []
    for cores in sorted({c for c, _, _ in rows}):
        per = {op: max(0.0, rows.get((cores, op, "cold"), 0.0) - rows.get((cores, op, "warm"), 0.0)) for op in OUTPUT_KINDS}
        gemm, elementwise = _sig(per["gemm"]), _sig(per["elementwise"])
        rate = cached_elementwise_GBps(cached[cores], overhead) if cores in cached else None
        out.append(
            ColdOutputFit(
                cores=cores,
                gemm_ns_per_KiB=gemm,
                elementwise_ns_per_KiB=elementwise,
                elementwise_cached_GBps=None if rate is None else _sig(rate),
            )
        )
    return out


def cached_elementwise_GBps(row: Measurement, overhead: OverheadFit | None) -> float | None:
    """The cached ReLU's bytes (it reads its input and writes its output, ``row.bytes`` each) per second of the call
    beyond what the simulator charges an activation task apart from its bytes: one further op's dispatch and, on
    several cores, the thread pool's fork and join (its 262,144 elements are far above any grain). None where that
    leaves no time."""
    software = 0.0
    if overhead is not None:
        software = overhead.op_overhead_s(row.cores)
        if row.cores > 1 and row.bytes / 4.0 > (overhead.parallel_grain_elements or 0):
            software += overhead.fork_join_s(row.cores)
    streaming = row.time_s - software
    return 2.0 * row.bytes / streaming / 1e9 if streaming > 0 else None


def fit_optimizer(measurements: Sequence[Measurement], overhead: OverheadFit | None) -> list[OptimizerFit]:
    """Per (optimizer, cores): a torch.optim object's cost per step and per tensor beyond its updates' dispatch,
    non-negative least squares on the relative error over the benchmark's tensor counts (benchmarks/optimizer.py);
    empty when the calibration ran no optimizer benchmark."""
    groups: dict[tuple[str, int], list[Measurement]] = defaultdict(list)
    for m in measurements:
        if m.benchmark == "optimizer":
            groups[(str(m.params["optimizer"]), m.cores)].append(m)
    out = []
    for (name, cores), rows in sorted(groups.items()):
        n = np.array([float(m.params["tensors"]) for m in rows])
        t = np.array([m.time_s for m in rows])
        # The simulator already charges the updates' dispatch, one op per tensor (sgd), the first cold: the optimizer
        # task follows the backward as the benchmark's call follows its flush.
        excess = np.maximum(t - np.array([dispatch_s(overhead, cores, x) for x in n]), 0.0)
        call, per = nonnegative_least_squares(np.column_stack([np.ones_like(n), n]) / t[:, None], excess / t)
        out.append(OptimizerFit(optimizer=name, cores=cores, call_us=_sig(call * 1e6), per_tensor_us=_sig(per * 1e6)))  # type: ignore[arg-type]
    return out


def fit_autograd(measurements: Sequence[Measurement]) -> list[AutogradFit]:
    """Autograd's cost per ``backward()`` call, per MLP layer and per element of a layer's input and output, per core
    count: non-negative least squares over the benchmark's chains (benchmarks/autograd.py: one layer and several,
    which separate the call from the layer), each row's error relative to the chain's whole time with autograd,
    which sets its noise (a difference of two timings of the chain, the GEMMs' noise in both); empty without the
    benchmark (NumPy). Rows without a layer count are one layer's."""
    groups: dict[int, list[Measurement]] = defaultdict(list)
    for m in measurements:
        if m.benchmark == "autograd":
            groups[m.cores].append(m)
    out = []
    for cores, rows in sorted(groups.items()):
        layers = np.array([float(m.params.get("layers", 1)) for m in rows])
        elements = np.array([float(m.params["elements"]) for m in rows])
        t = np.array([m.time_s for m in rows])
        scale = np.array([float(m.params["autograd_s"]) for m in rows])
        x = np.column_stack([np.ones_like(t), layers, elements]) / scale[:, None]
        if len(set(layers)) < 2:  # one layer per call only: the call's cost cannot be told from the layer's
            x[:, 0] = 0.0
        per_call, per_layer, per_element = nonnegative_least_squares(x, t / scale)
        out.append(
            AutogradFit(
                cores=cores,
                per_call_us=_sig(per_call * 1e6),
                per_layer_us=_sig(per_layer * 1e6),
                per_element_ns=_sig(per_element * 1e9),
            )
        )
    return out


def fit_sharded_software(measurements: Sequence[Measurement]) -> ShardedSoftwareFit | None:
    """A sharded step's software on the compute thread, per step and per index value of the rank's local batch:
    non-negative least squares on the relative error over the benchmark's sizes (benchmarks/sharded.py); None
    when the calibration ran no such benchmark (torchrec not installed)."""
    rows = [m for m in measurements if m.benchmark == "sharded"]
    if not rows:
        return None
    ids = np.array([float(m.params["ids"]) for m in rows])
    t = np.array([m.time_s for m in rows])
    per_step, per_id = nonnegative_least_squares(np.column_stack([np.ones_like(ids), ids]) / t[:, None], np.ones_like(t))
    return ShardedSoftwareFit(ranks=int(rows[0].params["ranks"]), per_step_us=_sig(per_step * 1e6), per_id_ns=_sig(per_id * 1e9))


def fork_join_table(
    measurements: Sequence[Measurement], default_grain: float = math.inf
) -> tuple[list[tuple[int, float]], float | None]:
    """The fork and join of one parallel element-wise op per core count (microseconds), and the grain it applies
    above: the fork benchmark's warm op at c cores less its 1-core time / c, which is the op's own work split
    perfectly (its vectors sit in the cores' private caches), floored at 0. Empty without the benchmark's 1-core
    row, or where the backend's element-wise ops never split (grain inf). Measurements from before the grain was
    recorded take ``default_grain`` (the calibration's backend's)."""
    warm = {m.cores: m for m in measurements if m.benchmark == "fork" and m.params.get("position") == "warm"}
    grain = float(warm[1].params.get("grain", default_grain)) if 1 in warm else math.inf
    if not math.isfinite(grain):
        return [], None
    one = warm[1].time_s
    return [(c, _sig(max(0.0, m.time_s - one / c) * 1e6, 4)) for c, m in sorted(warm.items()) if c > 1], grain


def dispatch_s(overhead: OverheadFit | None, cores: int, ops: float) -> float:
    """What the simulator charges ``ops`` framework ops of one task at ``cores`` cores (0 without a dispatch fit)."""
    if overhead is None:
        return 0.0
    return dispatch_time_s(overhead.task_overhead_s(cores), overhead.op_overhead_s(cores), ops)


def nonnegative_least_squares(x: np.ndarray, y: np.ndarray, floors: np.ndarray | None = None) -> np.ndarray:
    """argmin |x c - y|^2 subject to c >= 0, exactly, by trying every subset of free columns (a handful here).

    With floors, a column in the fit must also reach its floor (c_i = 0 or c_i >= floors_i): a subset whose
    unconstrained solution puts a column below it is not admitted."""
    return nonnegative_least_squares_many(x, np.asarray(y, dtype=float)[:, None], floors)[:, 0]


def nonnegative_least_squares_many(x: np.ndarray, ys: np.ndarray, floors: np.ndarray | None = None) -> np.ndarray:
    """:func:`nonnegative_least_squares` of each column of ``ys`` (m x g) against the one ``x`` (m x k): a k x g
    array of coefficients. Each subset of columns is solved for every right-hand side in one ``lstsq`` call, so a
    fit that tries many targets against the same features (the interaction fit's rate grid: some 4,000 per
    direction and core count) pays a handful of factorisations instead of thousands."""
    k, g = x.shape[1], ys.shape[1]
    low = np.zeros(k) if floors is None else np.asarray(floors, dtype=float)
    best_err, best = np.full(g, math.inf), np.zeros((k, g))
    for n in range(1, k + 1):
        for cols in itertools.combinations(range(k), n):
            sol, *_ = np.linalg.lstsq(x[:, cols], ys, rcond=None)
            admitted = ~((sol < 0).any(axis=0) | (sol < low[list(cols), None]).any(axis=0))
            c = np.zeros((k, g))
            c[list(cols)] = sol
            err = np.sum((x @ c - ys) ** 2, axis=0)
            better = admitted & (err < best_err)
            best_err = np.where(better, err, best_err)
            best[:, better] = c[:, better]
    return best


def interaction_time_s(
    fixed_s: float,
    sample_s: float,
    flop_rate: float,
    bandwidth: float,
    batch: float,
    flops: float,
    nbytes: float,
    dispatch: float,
) -> float:
    """The simulator's time of one interaction task alone (s): dispatch + fixed + batch x per-sample time, then
    the roofline max(flops / flop_rate, bytes / bandwidth)."""
    return dispatch + fixed_s + batch * sample_s + max(flops / flop_rate, nbytes / bandwidth)


RATE_GRID_POINTS = 161  # log-spaced flop rates tried by the interaction fit, 1e-3 x peak .. peak
# Log-spaced byte rates tried by the interaction fit, INTERACTION_BANDWIDTH_FLOOR x stream bandwidth .. stream
# bandwidth: its tensors are small (S+1 rows of E floats a sample) and its gathers strided, so its bytes move well
# below a stream's rate (the runner's backward on this project's 2-core host: 18 GB/s on one core against 35).
BANDWIDTH_GRID_POINTS = 25
INTERACTION_BANDWIDTH_FLOOR = 1e-2


def fit_interaction(
    measurements: Sequence[Measurement],
    memory: MemoryFit,
    host: HostInfo,
    overhead: OverheadFit | None = None,
    benchmark: str = "interaction",
) -> list[InteractionFit]:
    """Per (direction, cores): the flop rate and the byte rate (searched on log grids, up to the physical peak
    and to stream bandwidth) and, for each pair, the fixed and per-sample times (non-negative least squares) that
    minimise the relative error of :func:`interaction_time_s` over the measured shapes. ``benchmark``: the rows of
    the runner's kernel ("interaction") or of TorchRec's ("interaction_torchrec"). Where the calibration timed the
    interaction's contexts too, the part of the fixed time a warm call does not pay (:func:`fit_interaction_context`,
    at most all of it)."""
    groups: dict[tuple[str, int], list[Measurement]] = defaultdict(list)
    for m in measurements:
        if m.benchmark == benchmark:
            groups[(str(m.params["direction"]), m.cores)].append(m)
    contexts = fit_interaction_context(measurements, host, benchmark)
    out = []
    for (direction, cores), ms in sorted(groups.items()):
        t = np.array([m.time_s for m in ms])
        n = np.array([float(m.params["batch"]) for m in ms])
        flops = np.array([m.flops for m in ms])
        nbytes = np.array([m.bytes for m in ms])
        disp = np.array([dispatch_s(overhead, cores, float(m.params["ops"])) for m in ms])
        stream = memory_bandwidth_GBps(memory, cores) * 1e9
        peak = peak_gflops(host, cores) * 1e9
        x = np.stack([1.0 / t, n / t], axis=1)
        # Every (byte rate, flop rate) pair of the grids, byte rate outer, in the order the search takes them: the
        # first pair reaching the least error wins.
        bws = np.repeat(np.geomspace(stream * INTERACTION_BANDWIDTH_FLOOR, stream, BANDWIDTH_GRID_POINTS), RATE_GRID_POINTS)
        rates = np.tile(np.geomspace(peak * 1e-3, peak, RATE_GRID_POINTS), BANDWIDTH_GRID_POINTS)
        rests = (t[:, None] - disp[:, None] - np.maximum(flops[:, None] / rates, nbytes[:, None] / bws)) / t[:, None]
        c = nonnegative_least_squares_many(x, rests)
        errs = np.sum((x @ c - rests) ** 2, axis=0)
        i = int(np.argmin(errs))
        fixed, sample, rate, bw = float(c[0, i]), float(c[1, i]), float(rates[i]), float(bws[i])
        evicted = contexts.get((direction, cores))
        if evicted is not None and sum(evicted) > fixed:
            # the contexts' excess beyond the fitted intercept: at most all of it is what a warm call saves
            evicted = tuple(e * fixed / sum(evicted) for e in evicted)
        out.append(
            InteractionFit(
                direction=direction,  # type: ignore[arg-type]
                cores=cores,
                fixed_us=_sig(fixed * 1e6),
                sample_time_ns=_sig(sample * 1e9),  # type: ignore[arg-type]
                GFLOPs=_sig(rate / 1e9),
                bandwidth_GBps=_sig(bw / 1e9),
                evicted_l2_us=None if evicted is None else _sig(evicted[0] * 1e6),
                evicted_llc_us=None if evicted is None else _sig(evicted[1] * 1e6),
            )
        )
    return out


def fit_interaction_context(
    measurements: Sequence[Measurement], host: HostInfo, benchmark: str = "interaction"
) -> dict[tuple[str, int], tuple[float, float]]:
    """Per (direction, cores) with context rows (benchmarks.interaction.interaction_context_task): what the flush
    adds to a call, split as (L2 part, last-level part) in seconds. A call after ``T`` bytes of traffic pays
    ``e2 x traffic_share(T, flush, l2) + e3 x traffic_share(T, flush, llc)`` of what the flush adds (the simulator's
    costs.evicted_fixed_time_s), so its time below the flushed call's is ``e2 (1 - s2) + e3 (1 - s3)``: non-negative
    least squares over the warm and traffic contexts."""
    groups: dict[tuple[str, int], dict[str, Measurement]] = defaultdict(dict)
    for m in measurements:
        if m.benchmark == f"{benchmark}_context":
            groups[(str(m.params["direction"]), m.cores)][str(m.params["context"])] = m
    l2, llc = float(host.l2_bytes), float(host.model_llc_bytes)
    out: dict[tuple[str, int], tuple[float, float]] = {}
    for key, rows in groups.items():
        flush = rows.get("flush")
        others = [m for c, m in rows.items() if c != "flush"]
        if flush is None or not others:
            continue
        after = float(flush.params["traffic_bytes"])
        x = np.array(
            [
                [1.0 - traffic_share(float(m.params["traffic_bytes"]), after, l2),
                 1.0 - traffic_share(float(m.params["traffic_bytes"]), after, llc)]
                for m in others
            ]
        )  # fmt: skip
        y = np.array([flush.time_s - m.time_s for m in others])
        e2, e3 = (float(v) for v in nonnegative_least_squares(x, y))
        out[key] = (e2, e3)
    return out


def predict_interaction_s(fit: InteractionFit, m: Measurement, memory: MemoryFit, overhead: OverheadFit | None) -> float:
    return interaction_time_s(
        fit.fixed_us * 1e-6,
        fit.sample_time_ns * 1e-9,
        fit.GFLOPs * 1e9,
        (fit.bandwidth_GBps if fit.bandwidth_GBps is not None else memory_bandwidth_GBps(memory, m.cores)) * 1e9,
        float(m.params["batch"]),
        m.flops,
        m.bytes,
        dispatch_s(overhead, m.cores, float(m.params["ops"])),
    )


# --- collectives ---------------------------------------------------------------------------------------------


# Messages at least this large are in the bandwidth regime (out of L2, many pages): beta is fitted on them.
BANDWIDTH_REGIME_BYTES = 1 << 20


def fit_alpha_beta(nbytes: Sequence[float], times: Sequence[float]) -> tuple[float, float]:
    """(alpha seconds, beta bytes/s) of t = alpha + n / beta.

    A single least-squares line over six decades of sizes is dominated by the many small messages, which
    live in cache and run faster per byte than the MiB-sized messages DLRM sends. So: beta is the slope of
    a least-squares line through the bandwidth-regime points (n >= 1 MiB; all points if fewer than two are
    that large), and alpha the mean, over the latency-regime messages (n < 1 MiB; the three smallest if
    fewer), of t - n / beta (at least 0).

    Every latency-regime size measures the same alpha plus its own noise, so alpha averages all of them. On a
    host whose cores all compute, a small collective's time is mostly its helper threads' wake-ups
    (benchmarks/collectives.py), which spread a size's median by 100-400 %; the median of the three smallest
    sizes moved alpha by 20-30 % between back-to-back calibrations of the 2-vCPU VM, the mean of the five
    latency-regime sizes by 4-7 % (validation/results/*-vm-agreement-*.json).
    """
    n = np.asarray(nbytes, dtype=float)
    t = np.asarray(times, dtype=float)
    order = np.argsort(n)
    n, t = n[order], t[order]
    big = n >= BANDWIDTH_REGIME_BYTES
    if big.sum() < 2:
        big = np.ones_like(n, dtype=bool)
    if big.sum() >= 2 and np.ptp(n[big]) > 0:
        slope = float(np.polyfit(n[big], t[big], 1)[0])
    else:
        slope = 0.0
    if slope <= 0:  # no bandwidth visible: the largest message's own rate
        slope = float(t[-1] / n[-1])
    small = n < BANDWIDTH_REGIME_BYTES
    if small.sum() < 3:
        small = np.arange(len(n)) < 3
    alpha = float(np.mean(t[small] - n[small] * slope))
    return max(alpha, 0.0), 1.0 / slope


def bus_factor(op: str, ranks: int) -> float:
    """Bytes each rank moves across its link per message byte (ring allreduce 2(R-1)/R, alltoall (R-1)/R)."""
    return 2.0 * (ranks - 1) / ranks if op == "allreduce" else (ranks - 1) / ranks


def fit_collectives(measurements: Sequence[Measurement]) -> list[CollectiveFit]:
    groups: dict[tuple[str, int, str], list[Measurement]] = defaultdict(list)
    for m in measurements:
        if m.benchmark in ("allreduce", "alltoall") and not m.name.startswith("eq "):
            groups[(m.benchmark, int(m.params["ranks"]), str(m.params["implementation"]))].append(m)
    out = []
    for (op, ranks, impl), ms in sorted(groups.items()):
        alpha, beta = fit_alpha_beta([m.bytes for m in ms], [m.time_s for m in ms])
        out.append(
            CollectiveFit(
                op=op,
                ranks=ranks,
                implementation=impl,
                alpha_us=_sig(alpha * 1e6),  # type: ignore[arg-type]
                beta_GBps=_sig(beta / 1e9),
                bus_bandwidth_GBps=_sig(beta / 1e9 * bus_factor(op, ranks)),
                min_bytes=min(m.bytes for m in ms),
                max_bytes=max(m.bytes for m in ms),
            )
        )
    return out


def fit_collectives_at_once(measurements: Sequence[Measurement]) -> float | None:
    """How many collectives a rank's process group progresses at once: the time of two alltoalls run one after
    another over the time of the same two posted together (benchmarks/collectives.py, ``together_task``); 1: they
    run in series, 2: fully at once. None where the benchmark did not run (one rank, older files)."""
    times = {str(m.params.get("mode")): m.time_s for m in measurements if m.benchmark == "alltoall_together"}
    if "series" not in times or "together" not in times:  # a Measurement's time is positive
        return None
    return _sig(times["series"] / times["together"])


def fit_arrival_skew(measurements: Sequence[Measurement]) -> ArrivalSkewFit | None:
    """The arrival-skew table (benchmarks/skew.py): per segment length, the slowest rank's mean segment over the
    ranks' mean segment, less 1. None where the benchmark did not run."""
    ms = sorted((m for m in measurements if m.benchmark == "skew"), key=lambda m: float(m.params["segment_s"]))
    if not ms:
        return None
    segments = [float(m.params["segment_s"]) for m in ms]
    points = [(_sig(seg * 1e3), _sig(max(m.time_s / seg - 1.0, 0.0))) for m, seg in zip(ms, segments, strict=True)]
    return ArrivalSkewFit(
        ranks=int(ms[0].params["ranks"]),
        threads_per_rank=int(ms[0].params["threads_per_rank"]),
        implementation=str(ms[0].params["implementation"]),  # type: ignore[arg-type]
        points=points,
    )


def fit_core_availability(measurements: Sequence[Measurement]) -> list[CoreAvailabilityFit]:
    """Per kernel and core count above one, the availability pairs (benchmarks/availability.py): the runs' mean
    median speedup, the best of their upper-decile speedups and the ratio of the two (availability.combine_runs,
    through plan.combine_passes). Empty where the benchmark did not run; rows without a kernel are the GEMM's."""
    out = []
    rows = (m for m in measurements if m.benchmark == "availability" and m.cores > 1)
    for m in sorted(rows, key=lambda m: (str(m.params.get("kernel", "gemm")), m.cores)):
        out.append(
            CoreAvailabilityFit(
                kernel=str(m.params.get("kernel", "gemm")),  # type: ignore[arg-type]
                cores=m.cores,
                availability=_sig(min(1.0, float(m.params["availability"]))),
                speedup_median=_sig(float(m.params["speedup_median"])),
                speedup_best=_sig(float(m.params["speedup_best"])),
                runs=m.passes,
            )
        )
    return out


def predict_collective_s(fit: CollectiveFit, nbytes: float) -> float:
    return fit.alpha_us * 1e-6 + nbytes / (fit.beta_GBps * 1e9)


# --- one measurement -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FittedModel:
    """Every fitted part of the cost model, as the fit-quality table evaluates them together."""

    gemm: GemmFit
    memory: MemoryFit
    embedding: Sequence[EmbeddingFit] = ()
    collectives: Sequence[CollectiveFit] = ()
    overhead: OverheadFit | None = None
    interaction: Sequence[InteractionFit] = ()
    host: HostInfo | None = None  # page and cache sizes for the embedding walk and reload terms
    tbe: Sequence[EmbeddingFit] = ()  # fbgemm's table-batched embedding, per table
    interaction_torchrec: Sequence[InteractionFit] = ()
    optimizer: Sequence[OptimizerFit] = ()  # torch.optim's step and zero_grad
    sharded_software: ShardedSoftwareFit | None = None  # a sharded multi-rank step's software
    autograd: Sequence[AutogradFit] = ()  # autograd's cost per MLP layer


def predict_s(m: Measurement, model: FittedModel) -> float | None:
    """The fitted model's time for measurement ``m`` (None when no fitted parameter covers it)."""
    memory, overhead = model.memory, model.overhead
    if m.benchmark in ("gemm", "linear", "gemm_columns"):
        return predict_gemm_roofline_s(model.gemm, memory, m, overhead, model.host)
    if m.benchmark == "stream":
        return m.bytes / (memory_bandwidth_GBps(memory, m.cores) * 1e9)
    if m.benchmark in ("embedding", "tbe"):
        fits = model.embedding if m.benchmark == "embedding" else model.tbe
        try:
            e = select_embedding_fit(fits, str(m.params["op"]), str(m.params["distribution"]), m.cores)
        except KeyError:
            return None
        first = e.run_start_us * 1e-6 if _is_run_start(m) else 0.0
        work = float(embedding_features(m, model.host, e.sorted_rows) @ embedding_coefficients(e))
        return dispatch_s(overhead, m.cores, 1.0) + work + first
    if m.benchmark in ("interaction", "interaction_torchrec"):
        fits = model.interaction if m.benchmark == "interaction" else model.interaction_torchrec
        fit = select_interaction_fit(fits, str(m.params["direction"]), m.cores)
        return predict_interaction_s(fit, m, memory, overhead) if fit is not None else None
    if m.benchmark == "dispatch":
        return None
    if m.benchmark == "optimizer":
        if not model.optimizer:
            return None
        o = nearest_cores(list(model.optimizer), m.cores)
        n = float(m.params["tensors"])
        return dispatch_s(overhead, m.cores, n) + (o.call_us + n * o.per_tensor_us) * 1e-6
    if m.benchmark == "autograd":
        if not model.autograd:
            return None
        a = nearest_cores(list(model.autograd), m.cores)
        layers = float(m.params.get("layers", 1))
        return (a.per_call_us + layers * a.per_layer_us + float(m.params["elements"]) * a.per_element_ns * 1e-3) * 1e-6
    if m.benchmark == "sharded":
        s = model.sharded_software
        return None if s is None else (s.per_step_us * 1e-6 + float(m.params["ids"]) * s.per_id_ns * 1e-9)
    for c in model.collectives:
        if c.op == m.benchmark:
            return predict_collective_s(c, m.bytes)
    return None
