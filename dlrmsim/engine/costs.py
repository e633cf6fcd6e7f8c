"""Closed-form costs: the roofline of one task and textbook collective times, as small pure functions.

The engine uses :func:`task_flop_rate` and :func:`task_bandwidth_cap` to set a task's rate caps; tests
compare simulated times against the other formulas here. Units: seconds, bytes, B/s, flop/s.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dlrmsim.topologies.topology import ComputeSpec
from dlrmsim.workloads.schema import BYTES_PER_ELEMENT

# Kinds whose arithmetic is a few operations per byte streamed (lookups, scatter-adds, activations, copies,
# optimizer sweeps): the GEMM efficiency table, which describes blocked matrix kernels, does not apply to
# them; their flops run at the vector peak and memory bandwidth decides their time.
STREAMING_KINDS = frozenset(
    {"embedding", "embedding_bwd", "update", "elementwise", "activation", "batchnorm", "copy", "optimizer", "reduce", "lookup"}
)

# Kinds whose flops run at the workload's precision (matrix units); the rest compute in fp32.
MATRIX_KINDS = frozenset({"gemm", "conv", "interaction", "interaction_bwd"})


def gemm_aspect(flops: float, nbytes: float, element_bytes: float) -> float:
    """How far a GEMM's shape is from a cube: its arithmetic intensity (flops per byte of compulsory traffic,
    ``model.Gemm.bytes_moved``) over that of the cube of the same flops, (flops / 2)^(1/3) / (2 x element_bytes).
    1 for a cube; a GEMM with one short side (a 32-wide layer, a small batch) has less reuse, and a smaller
    aspect. 1 when the task moves no bytes."""
    if flops <= 0 or nbytes <= 0:
        return 1.0
    return flops / nbytes * 2.0 * element_bytes / (flops / 2.0) ** (1.0 / 3.0)


def block_passes(columns: int, block: int, remainder: str) -> int:
    """Passes a GEMM kernel makes over ``columns`` output columns with a ``block``-wide micro-kernel: one per full
    block, then for the rest either one per set bit of it ("binary": narrower kernels of block/2, block/4, ...
    down to 1 column, each as slow as a full pass) or one padded pass ("padded")."""
    full, rest = divmod(columns, block)
    if rest == 0:
        return full
    return full + (bin(rest).count("1") if remainder == "binary" else 1)


def block_efficiency(columns: int, block: int, remainder: str) -> float:
    """Share of its passes a GEMM with ``columns`` output columns (n of C[m, n] = A[m, k] B[k, n], row-major)
    spends on real columns: columns / (block x :func:`block_passes`). 1 when not modelled (block 0), when the
    columns are unknown (0), or narrower than one block (a different code path: matrix-vector at 1 column, and
    no calibration times those widths)."""
    if block <= 0 or columns < block:
        return 1.0
    return columns / (block * block_passes(columns, block, remainder))


def vector_block_efficiency(spec: ComputeSpec, columns: int) -> float:
    """:func:`block_efficiency` with the spec's ``gemm_vector_block`` and ``gemm_remainder``."""
    return block_efficiency(columns, spec.gemm_vector_block, spec.gemm_remainder)


def matrix_efficiency(spec: ComputeSpec, flops: float, nbytes: float, precision: str, columns: int = 0) -> float:
    """Achieved fraction of peak of a matrix task: b x gemm_efficiency(f) x gemm_aspect_efficiency(aspect at f),
    the product of the last two at most 1, with b the :func:`vector_block_efficiency` of its ``columns`` (1 when not
    given) and f = flops / b the flops its passes compute, padding included: the tables describe full blocks."""
    block = vector_block_efficiency(spec, columns)
    work = flops / block
    eff = spec.gemm_efficiency(work)
    if nbytes > 0:
        eff *= spec.gemm_aspect_efficiency(gemm_aspect(work, nbytes, BYTES_PER_ELEMENT.get(precision, 4.0)))
    return min(eff, 1.0) * block


def task_flop_rate(
    spec: ComputeSpec,
    flops: float,
    cores: float,
    precision: str = "fp32",
    share: float = 1.0,
    kind: str = "gemm",
    nbytes: float = 0.0,
    columns: int = 0,
) -> float:
    """Achieved flop/s of a task on ``cores`` of ``spec``: cores/spec.cores * peak * efficiency * share.

    The efficiency is :func:`matrix_efficiency` for matrix kinds (``nbytes``, the task's compulsory traffic,
    gives its shape, 0 = flops alone; ``columns`` its output's columns) and 1 for :data:`STREAMING_KINDS`; a kind
    in ``spec.flop_rate_by_kind`` runs at that measured all-core rate instead of the peak. ``share`` (0..1] is the
    fraction of each core's time the task's threads get (an unpinned progress thread takes the rest while
    communication is in flight).
    """
    if kind in spec.flop_rate_by_kind:
        return cores / spec.cores * spec.flop_rate_by_kind[kind] * share
    eff = 1.0 if kind in STREAMING_KINDS else matrix_efficiency(spec, flops, nbytes, precision, columns)
    return cores / spec.cores * spec.flops_rate(precision) * eff * share


def gemm_time_s(flops_s: float, bytes_s: float, overlap: float) -> float:
    """Time (s) of a matrix task whose arithmetic alone takes ``flops_s`` and whose compulsory traffic alone
    takes ``bytes_s``, when a fraction ``overlap`` (0..1) of the shorter runs under the longer: 1 is the
    roofline max, 0 their sum."""
    return max(flops_s, bytes_s) + (1.0 - overlap) * min(flops_s, bytes_s)


def saturation_fraction(spec: ComputeSpec, cores: float) -> float:
    """Fraction of the achieved memory bandwidth that ``cores`` cores can pull: min(cores / saturation_cores, 1).

    ``saturation_cores=None`` means any number of cores reaches it (fraction 1).
    """
    if spec.saturation_cores is None or spec.saturation_cores <= 0:
        return 1.0
    return min(cores / spec.saturation_cores, 1.0)


def task_bandwidth_cap(spec: ComputeSpec, nbytes: float, cores: float) -> float:
    """Memory bandwidth (B/s) one task streaming ``nbytes`` on ``cores`` cores can reach alone:

    min(cores / saturation_cores, 1) * memory_bandwidth_Bps * memory_efficiency(nbytes).
    """
    return saturation_fraction(spec, cores) * spec.memory_bandwidth_Bps * spec.memory_efficiency(nbytes)


def domain_bandwidth(spec: ComputeSpec) -> float:
    """Capacity (B/s) of the shared memory-bandwidth resource: memory_bandwidth_Bps * memory_efficiency(inf)."""
    return spec.memory_bandwidth_Bps * spec.memory_efficiency(math.inf)


@dataclass(frozen=True)
class MemoryDemand:
    """What a task asks of its memory domain: the bytes it moves through it, and the fraction of its cores'
    bandwidth cap it can reach."""

    domain_bytes: float
    rate_fraction: float


def memory_demand(spec: ComputeSpec, kind: str, nbytes: float) -> MemoryDemand:
    """A task of ``kind`` touching ``nbytes`` achieves ``bandwidth_fraction_by_kind[kind]`` (f, default 1) of
    stream bandwidth, for one of two reasons. Below 1 its own rate is the limit: random row gathers and
    scatter-adds wait on memory latency, one row at a time per core, so they run at f x the cap but load the
    shared domain only with the bytes they move (two ranks' gathers on this project's 2-core host slowed each
    other by no more than the noise; charged as stream-equivalent bytes, both were predicted ~50 % slower). Above 1
    part of the bytes hit in cache (skewed indices): the task streams at the cap, and only nbytes / f reach
    memory. Alone, either way, it takes nbytes / (f x cap)."""
    f = spec.bandwidth_fraction_by_kind.get(kind, 1.0)
    return MemoryDemand(nbytes / max(f, 1.0), min(f, 1.0))


def dispatch_time_s(first_op_s: float, further_op_s: float, ops: float) -> float:
    """Software time (s) of ``ops`` framework operations of one task: the first (or a fraction of one) at
    ``first_op_s``, every further one at ``further_op_s``."""
    return min(ops, 1.0) * first_op_s + max(ops - 1.0, 0.0) * further_op_s


def first_op_s(spec: ComputeSpec, prev_bytes: float = math.inf) -> float:
    """Time (s) of a task's first framework op after ``prev_bytes`` of traffic since the rank's previous op.

    ``spec.task_overhead_s`` was measured after ``spec.task_overhead_after_bytes`` of traffic; less traffic
    evicts less of the framework's code and metadata, so the surcharge over ``op_overhead_s`` scales with the
    share of the last-level cache it pushed out, ``cache_miss_share(prev) / cache_miss_share(after)``, capped
    at 1. (On the 2-vCPU VM, 32 MiB LLC: a tiny op took 1.6 us after 1 MiB of traffic, 3.5 after 4, 6 after 16,
    8.4-11.4 after 64 MiB; this gives 2.0, 3.2, 6.5 and 11.4 with the flush's 64 MiB as the full surcharge.)"""
    return first_op_time_s(spec.task_overhead_s, spec.op_overhead_s, prev_bytes, spec.task_overhead_after_bytes, spec.llc_bytes)


def first_op_time_s(full_s: float, further_s: float, prev_bytes: float, after_bytes: float, cache_bytes: float) -> float:
    """:func:`first_op_s` from its parts: a first op measured at ``full_s`` after ``after_bytes`` of traffic and
    each further op at ``further_s``, after ``prev_bytes`` of traffic in a ``cache_bytes`` cache."""
    if full_s <= further_s or prev_bytes >= after_bytes or not math.isfinite(after_bytes):
        return full_s
    return further_s + (full_s - further_s) * traffic_share(prev_bytes, after_bytes, cache_bytes)


def traffic_share(traffic_bytes: float, after_bytes: float, cache_bytes: float) -> float:
    """How much of what a flush of ``after_bytes`` evicts from a ``cache_bytes`` cache ``traffic_bytes`` of
    traffic evicts: ``cache_miss_share(traffic) / cache_miss_share(after)``, capped at 1 (inf traffic: 1; an
    infinite flush: the miss share itself)."""
    if not math.isfinite(traffic_bytes):
        return 1.0
    full = cache_miss_share(after_bytes, cache_bytes) if math.isfinite(after_bytes) else 1.0
    return min(cache_miss_share(traffic_bytes, cache_bytes) / full, 1.0)


def dispatch_overhead_s(spec: ComputeSpec, ops: float, prev_bytes: float = math.inf) -> float:
    """:func:`dispatch_time_s` at :func:`first_op_s` (first op, after ``prev_bytes`` of the rank's traffic) and
    ``op_overhead_s`` (each further op)."""
    return dispatch_time_s(first_op_s(spec, prev_bytes), spec.op_overhead_s, ops)


def op_class_extra_s(spec: ComputeSpec, scalar_ops: float, reduce_ops: float) -> float:
    """What ``scalar_ops`` ops with a Python scalar operand and ``reduce_ops`` reductions among a task's ops cost
    beyond the dispatch of as many multiplies (s): ``spec.scalar_op_extra_s`` and ``spec.reduce_op_extra_s`` each."""
    return scalar_ops * spec.scalar_op_extra_s + reduce_ops * spec.reduce_op_extra_s


def fork_join_time_s(spec: ComputeSpec, op_elements: Sequence[float], cores: float) -> float:
    """Thread-pool time (s) of a task's element-wise ops of ``op_elements`` elements each, run on ``cores`` cores:
    every op above ``spec.parallel_grain_elements`` splits over the pool and pays ``spec.fork_join_s`` (waking the
    pool's threads, handing out the chunks, waiting at the join); on one core nothing forks."""
    if cores <= 1.0 or spec.fork_join_s <= 0.0:
        return 0.0
    grain = spec.parallel_grain_elements
    return spec.fork_join_s * sum(1 for e in op_elements if e > grain)


def evicted_share(spec: ComputeSpec, traffic_bytes: float) -> float:
    """Share (0..1) of data that ``traffic_bytes`` of traffic since it was last touched evicted, relative to the
    flush the calibration timed evicted GEMMs after (``spec.gemm_evicted_after_bytes``), in the rank's share of the
    last-level cache: :func:`traffic_share`."""
    return traffic_share(traffic_bytes, spec.gemm_evicted_after_bytes, spec.llc_bytes)


def evicted_operand_share(spec: ComputeSpec, operands: Sequence[tuple[float, float]]) -> float:
    """Byte-weighted :func:`evicted_share` of a GEMM's inputs, ``operands`` = ((bytes, traffic since it was last
    touched), ...) in bytes: :func:`inputs_traffic_share` with the spec's flush and cache."""
    return inputs_traffic_share(operands, spec.gemm_evicted_after_bytes, spec.llc_bytes)


def inputs_traffic_share(operands: Sequence[tuple[float, float]], after_bytes: float, cache_bytes: float) -> float:
    """Byte-weighted :func:`traffic_share` of inputs ``operands`` = ((bytes, traffic since last touched), ...); 0
    without inputs."""
    total = sum(b for b, _ in operands)
    if total <= 0:
        return 0.0
    return sum(b * traffic_share(d, after_bytes, cache_bytes) for b, d in operands) / total


def charges_evicted_gemms(spec: ComputeSpec) -> bool:
    """Whether ``spec`` has a calibrated eviction cost for GEMMs (:func:`evicted_operand_time_s` is not 0)."""
    return spec.gemm_evicted_call_s > 0.0 or spec.gemm_evicted_traffic_factor > 0.0 or spec.gemm_evicted_compute_factor > 0.0


def evicted_operand_time_s(
    spec: ComputeSpec,
    nbytes: float,
    cores: float,
    operands: Sequence[tuple[float, float]],
    kernel_traffic: float,
    arithmetic_s: float = 0.0,
) -> float:
    """Time (s) a GEMM moving ``nbytes`` of compulsory traffic on ``cores`` cores pays beyond its warm roofline for
    what the traffic since its last use evicted. The calibration's fit of GEMMs timed right after a flush splits
    that cost in a part that grows with the GEMM's bytes, ``spec.gemm_evicted_traffic_factor`` x its traffic time
    at :func:`task_bandwidth_cap`, charged at its inputs' :func:`evicted_operand_share`, and one that does not,
    ``spec.gemm_evicted_call_s`` (the kernel's code and packing buffers), charged at the :func:`evicted_share` of
    ``kernel_traffic``, the traffic since the rank's previous GEMM. A third part grows with the GEMM's arithmetic,
    ``spec.gemm_evicted_compute_factor`` x ``arithmetic_s`` (its flops at the warm efficiency), at the inputs'
    share: a kernel whose tiles stream from beyond its cores' caches for the whole call. A fixed time of the task:
    it holds the cores but does not draw on the shared memory domain beside other tasks."""
    if not charges_evicted_gemms(spec):
        return 0.0
    call, factor = spec.gemm_evicted_call_s, spec.gemm_evicted_traffic_factor
    traffic_s = nbytes / task_bandwidth_cap(spec, nbytes, cores) if nbytes > 0 and factor > 0 else 0.0
    # Where the spec prices a call by the time since the previous one (gemm_idle_time_s), traffic does not price it.
    kernel = evicted_share(spec, kernel_traffic) if call > 0 and not spec.gemm_idle_extra_s else 0.0
    inputs = evicted_operand_share(spec, operands)
    return kernel * call + inputs * (factor * traffic_s + spec.gemm_evicted_compute_factor * arithmetic_s)


def sequence_bytes(nbytes: float, cores: float, l2_bytes: float) -> float:
    """The part of a GEMM's ``nbytes`` of compulsory traffic that its ``cores`` cores' L2 caches of ``l2_bytes``
    each hold: what it refills after other ops (:func:`sequence_time_s`)."""
    return min(nbytes, cores * l2_bytes)


def sequence_time_s(spec: ComputeSpec, nbytes: float, cores: float) -> float:
    """Time (s) a GEMM moving ``nbytes`` of compulsory traffic on ``cores`` cores pays for following other ops
    rather than itself: ``spec.gemm_sequence_l2_factor`` x the traffic time, at :func:`task_bandwidth_cap`, of
    its :func:`sequence_bytes`. A fixed time of the task; 0 where not calibrated."""
    if spec.gemm_sequence_l2_factor <= 0.0 or nbytes <= 0.0:
        return 0.0
    refill = sequence_bytes(nbytes, cores, spec.l2_bytes)
    return spec.gemm_sequence_l2_factor * refill / task_bandwidth_cap(spec, nbytes, cores)


def gemm_idle_time_s(spec: ComputeSpec, gap_s: float) -> float:
    """Time (s) a GEMM pays over its back-to-back time when its rank's previous GEMM ended ``gap_s`` seconds before:
    ``spec.gemm_idle_extra_s`` interpolated linearly in the gap, from 0 at no gap, held at its last value past the
    last gap measured; 0 where not calibrated."""
    return idle_extra_s(spec.gemm_idle_extra_s, gap_s)


def cold_gemm_time_s(idle_s: float, evicted_s: float) -> float:
    """Time (s) a GEMM pays for finding its warm state gone, given what the time since its previous call alone
    would cost (``idle_s``, :func:`gemm_idle_time_s`) and what the traffic since alone would (``evicted_s``: its
    :func:`evicted_operand_time_s` and :func:`sequence_time_s`): the larger of the two, not their sum. Both price
    one loss, of what a GEMM keeps warm between back-to-back calls, and it can be lost only once: the validation
    base case's first layer (1024 x 64 by 64 x 256) on the 2-vCPU AMD VM cost about the same after a flush of
    twice the last-level cache (some 3 ms), after an 8 ms spin and after both, while right after a flush it cost
    more than after a 3 ms spin (benchmarks/bench_gemm_cold_contexts.py; docs/calibration.md)."""
    return max(idle_s, evicted_s)


def idle_extra_s(points: Sequence[tuple[float, float]], gap_s: float) -> float:
    """:func:`gemm_idle_time_s` of a curve ``points`` ((gap s, extra s), ...), gap increasing."""
    if not points or gap_s <= 0.0:
        return 0.0
    prev_gap, prev_extra = 0.0, 0.0
    for gap, extra in points:
        if gap_s <= gap:
            return prev_extra + (extra - prev_extra) * (gap_s - prev_gap) / (gap - prev_gap)
        prev_gap, prev_extra = gap, extra
    return prev_extra


def cold_output_time_s(spec: ComputeSpec, kind: str, out_bytes: float, traffic_bytes: float) -> float:
    """Time (s) a task of ``kind`` ("gemm" or "elementwise") pays to write ``out_bytes`` of result into memory that
    ``traffic_bytes`` of traffic went through since its last use: ``spec.cold_output_s_per_byte_by_kind[kind]`` x
    bytes, at :func:`traffic_share` of that traffic against the calibration's cold buffers
    (``spec.cold_output_after_bytes``) in the rank's last-level cache. 0 where not calibrated."""
    per = spec.cold_output_s_per_byte_by_kind.get(kind, 0.0)
    if per <= 0.0 or out_bytes <= 0.0:
        return 0.0
    return per * out_bytes * traffic_share(traffic_bytes, spec.cold_output_after_bytes, spec.llc_bytes)


def operand_miss_share(nbytes: float, traffic_bytes: float, cache_bytes: float) -> float:
    """Share of an ``nbytes`` tensor no longer in a ``cache_bytes`` cache after ``traffic_bytes`` of other traffic
    since it was last touched: :func:`cache_miss_share` of both (the tensor's own bytes went through the cache
    too); 1 when never touched (inf)."""
    return cache_miss_share(nbytes + traffic_bytes, cache_bytes) if math.isfinite(traffic_bytes) else 1.0


def elementwise_cached_split(spec: ComputeSpec, nbytes: float, operands: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(bytes through the memory domain, seconds at the cache rate) of an element-wise task moving ``nbytes``
    whose inputs are ``operands`` = ((bytes, traffic since last touched), ...). The inputs' missing shares
    (:func:`operand_miss_share` in the rank's last-level cache) come from memory; the rest of its bytes, the cached
    inputs and its output, stream at ``spec.elementwise_cache_Bps`` (what writing the output into evicted memory
    adds is :func:`cold_output_time_s`'s). Unchanged, (nbytes, 0), where the spec has no cache rate or the task no
    inputs."""
    if spec.elementwise_cache_Bps <= 0.0 or not operands or nbytes <= 0.0:
        return nbytes, 0.0
    missed = min(nbytes, sum(b * operand_miss_share(b, d, spec.llc_bytes) for b, d in operands))
    return missed, (nbytes - missed) / spec.elementwise_cache_Bps


PAGE_TABLE_ENTRY_BYTES = 8  # one last-level page-table entry (x86-64, AArch64)


def cache_miss_share(footprint_bytes: float, cache_bytes: float) -> float:
    """Share of accesses to data a ``footprint_bytes`` working set revisits that miss a ``cache_bytes`` cache:
    fp / (fp + cache), a smooth stand-in for the capacity misses of random reuse (~0 when the working set is
    far smaller than the cache, 1/2 when equal, towards 1 when far larger)."""
    return footprint_bytes / (footprint_bytes + cache_bytes) if footprint_bytes > 0 else 0.0


def page_walk_miss_share(tables_bytes: float, page_bytes: float, l2_bytes: float) -> float:
    """Share of random lookups into ``tables_bytes`` of tables whose page-table walk misses a core's L2 cache.

    Tables far beyond the TLB's reach make nearly every random lookup walk the page table; the walk is cheap
    while the tables' page-table entries (8 bytes per page) stay in L2, and costs a trip to the last-level
    cache or memory once they do not: :func:`cache_miss_share` of the entries' bytes in L2.
    """
    return cache_miss_share(tables_bytes / page_bytes * PAGE_TABLE_ENTRY_BYTES, l2_bytes)


def sorted_visits(unique_rows: float, table_rows: float, row_bytes: float, page_bytes: float) -> tuple[float, float]:
    """Page-table walks and cache-missing row fetches of one pass over ``unique_rows`` distinct rows of a
    ``table_rows`` table (rows of ``row_bytes``) visited in ascending row order, as fbgemm's fused update visits
    them after sorting the lookups by row (csr2csc): (pages touched, rows not adjacent to the previous one).

    Rows drawn at random with density rho = unique_rows / table_rows: the next touched row is the adjacent one
    with probability rho, and a hardware prefetcher streams such runs, so only the (1 - rho) share that jumps
    pays a miss; a page of ``page_bytes / row_bytes`` rows is walked once when any of its rows is touched,
    ``1 - (1 - rho)^rows_per_page`` of the table's pages. Far below full density both counts tend to
    ``unique_rows``, the random visit's."""
    if table_rows <= 0 or unique_rows <= 0:
        return 0.0, 0.0
    rho = min(unique_rows / table_rows, 1.0)
    per_page = max(page_bytes / row_bytes, 1.0) if row_bytes > 0 else 1.0
    pages = table_rows / per_page * -math.expm1(per_page * math.log1p(-rho)) if rho < 1.0 else table_rows / per_page
    return pages, unique_rows * (1.0 - rho)


@dataclass(frozen=True)
class RowVisit:
    """The rows an update task visits in ascending order (``ComputeSpec.sorted_visit_kinds``): the distinct rows
    it touches, its table's (or shard's) rows and a row's bytes."""

    unique_rows: float
    table_rows: float
    row_bytes: float


def evicted_fixed_time_s(spec: ComputeSpec, kind: str, traffic_bytes: float = math.inf) -> float:
    """Time (s) a task of ``kind`` pays to refetch what ``traffic_bytes`` of the rank's traffic since it last ran a
    task of the kind's family evicted (its code, framework state, buffers): ``spec.evicted_fixed_l2_s_by_kind`` at
    :func:`traffic_share` in a core's L2 and ``spec.evicted_fixed_llc_s_by_kind`` at that in the last-level cache,
    both against the flush the calibration timed the kind after (``spec.evicted_fixed_after_bytes``). Unknown
    traffic (inf) pays both in full, as right after that flush. 0 where not calibrated."""
    l2 = spec.evicted_fixed_l2_s_by_kind.get(kind, 0.0)
    llc = spec.evicted_fixed_llc_s_by_kind.get(kind, 0.0)
    if l2 <= 0.0 and llc <= 0.0:
        return 0.0
    after = spec.evicted_fixed_after_bytes
    return l2 * traffic_share(traffic_bytes, after, spec.l2_bytes) + llc * traffic_share(traffic_bytes, after, spec.llc_bytes)


def tracks_kernel_traffic(spec: ComputeSpec) -> bool:
    """Whether a task's cost on ``spec`` depends on the traffic since its kernel last ran (Task.kernel_traffic):
    evicted GEMMs (:func:`charges_evicted_gemms`) or a kind's evicted fixed time (:func:`evicted_fixed_time_s`)."""
    return charges_evicted_gemms(spec) or bool(spec.evicted_fixed_l2_s_by_kind) or bool(spec.evicted_fixed_llc_s_by_kind)


def tracks_operand_traffic(spec: ComputeSpec) -> bool:
    """Whether the task graph must follow each task's inputs' traffic since their last touch (Task.operands,
    Task.kernel_traffic) for ``spec``: its GEMMs or a kind's fixed time pay for evictions (:func:`tracks_kernel_traffic`),
    or its activations stream their cached inputs at a cache rate (:func:`elementwise_cached_split`)."""
    return tracks_kernel_traffic(spec) or spec.elementwise_cache_Bps > 0.0


def fixed_time_s(
    spec: ComputeSpec,
    kind: str,
    ops: float,
    rows: float,
    tables_bytes: float = 0.0,
    reuse_bytes: float = 0.0,
    run_start: bool = False,
    visit: RowVisit | None = None,
    prev_bytes: float = math.inf,
    kernel_traffic: float = math.inf,
) -> float:
    """Time (s) of a task that neither flops nor bytes explain: dispatch of its ``ops`` framework ops, the
    kind's fixed time per task, its run-start time when it is the first of a run of its kind (``run_start``),
    and per item of its ``rows``: the kind's time per item, the share of lookups into ``tables_bytes`` of
    tables whose page walk misses L2 at the kind's walk time, and the share of items whose data a
    ``reuse_bytes`` working set has pushed out of the last-level cache at its reload time.

    A kind the spec marks as visiting its rows in ascending order (``sorted_visit_kinds``, with the task's
    ``visit``) walks each touched page once and reloads only the rows a prefetcher cannot stream
    (:func:`sorted_visits`), instead of walking and reloading per lookup. ``prev_bytes``: the traffic of the
    rank's previous task, which sets the first op's dispatch time (:func:`first_op_s`). ``kernel_traffic``: the
    rank's traffic since it last ran a task of the kind's family, which sets what of the kind's code and state the
    task refetches (:func:`evicted_fixed_time_s`; inf: all of it)."""
    per_row = spec.row_time_s_by_kind.get(kind, 0.0)
    walk = spec.walk_time_s_by_kind.get(kind, 0.0)
    reload = spec.reload_time_s_by_kind.get(kind, 0.0)
    walk_share = page_walk_miss_share(tables_bytes, spec.page_bytes, spec.l2_bytes) if walk > 0 else 0.0
    reload_share = cache_miss_share(reuse_bytes, spec.llc_bytes) if reload > 0 else 0.0
    first = spec.run_start_s_by_kind.get(kind, 0.0) if run_start else 0.0
    fixed = spec.fixed_time_s_by_kind.get(kind, 0.0) + evicted_fixed_time_s(spec, kind, kernel_traffic)
    if visit is not None and kind in spec.sorted_visit_kinds:
        pages, jumps = sorted_visits(visit.unique_rows, visit.table_rows, visit.row_bytes, spec.page_bytes)
        per_task = pages * walk * walk_share + jumps * reload * reload_share
        return dispatch_overhead_s(spec, ops, prev_bytes) + rows * per_row + per_task + fixed + first
    if walk > 0:
        per_row += walk * walk_share
    if reload > 0:
        per_row += reload * reload_share
    return dispatch_overhead_s(spec, ops, prev_bytes) + rows * per_row + fixed + first


def task_time(
    flops: float,
    nbytes: float,
    spec: ComputeSpec,
    cores: float | None = None,
    precision: str = "fp32",
    kind: str = "",
    columns: int = 0,
) -> float:
    """Time (s) of a task running alone: its flops at :func:`task_flop_rate` and its bytes at its bandwidth
    cap, combined as the roofline max, or for a matrix kind by :func:`gemm_time_s` at the spec's overlap."""
    demand = memory_demand(spec, kind, nbytes)
    c = spec.cores if cores is None else cores
    t_f = flops / task_flop_rate(spec, flops, c, precision, kind=kind, nbytes=nbytes, columns=columns) if flops > 0 else 0.0
    domain = demand.domain_bytes
    t_b = domain / min(demand.rate_fraction * task_bandwidth_cap(spec, domain, c), domain_bandwidth(spec)) if domain > 0 else 0.0
    return gemm_time_s(t_f, t_b, overlap_of(spec, kind))


def overlap_of(spec: ComputeSpec, kind: str) -> float:
    """The fraction of a task's memory time hidden under its arithmetic: the spec's GEMM overlap for matrix
    kinds, 1 (the roofline) for the rest."""
    return 1.0 if kind in STREAMING_KINDS or kind in spec.flop_rate_by_kind else spec.gemm_memory_overlap


def shared_bandwidth_rates(demands: list[float], capacity: float) -> list[float]:
    """Max-min fair split of ``capacity`` among streams each wanting at most ``demands[i]`` (same units)."""
    rates = [0.0] * len(demands)
    left = capacity
    order = sorted(range(len(demands)), key=lambda i: demands[i])
    for k, i in enumerate(order):
        fair = left / (len(demands) - k)
        rates[i] = min(demands[i], fair)
        left -= rates[i]
    return rates


@dataclass(frozen=True)
class ProgressThreadInterference:
    """What an unpinned communication progress thread and the compute threads cost each other while both run.

    ``compute_share``: fraction (0..1] of each compute core's speed left to compute tasks while communication
    is in flight. ``comm_slowdown`` (>= 1): divisor of a flow's rate while compute runs beside the thread.
    """

    compute_share: float
    comm_slowdown: float


def progress_thread_interference(
    stolen_cores: float, compute_cores: float, barrier_synchronized: bool
) -> ProgressThreadInterference:
    """The interference formula: an unpinned progress thread takes ``stolen_cores`` (0..1 of one core when it
    time-slices one core with a compute thread; 0.5 for a fair OS scheduler) from ``compute_cores`` compute cores.

    Without barriers only that CPU time is lost: compute runs at ``1 - stolen_cores / compute_cores``. With
    ``barrier_synchronized`` kernels (static partitioning ending in a barrier) every thread waits for the one
    sharing its core, so the whole kernel runs at ``1 - min(stolen_cores, 1)``. The progress thread in turn gets
    only ``1 - min(stolen_cores, 1)`` of its core while compute is busy, which stretches its message processing
    by the inverse (``comm_slowdown``).
    """
    taken = min(stolen_cores, 1.0)
    if barrier_synchronized:
        share = max(1.0 - taken, 0.0)
    else:
        share = max(1.0 - stolen_cores / compute_cores, 0.0)
    return ProgressThreadInterference(compute_share=share, comm_slowdown=1.0 / (1.0 - taken) if taken < 1.0 else math.inf)


@functools.lru_cache(maxsize=256)
def expected_max_normal(ranks: int) -> float:
    """E[max of ``ranks`` independent standard normal variables]: 0 for one, 1/sqrt(pi) for two, about 1.03 for
    four, 1.42 for eight, 2.34 for 64. By quadrature of ``ranks * x * phi(x) * Phi(x)^(ranks - 1)`` on [-12, 12]."""
    if ranks <= 1:
        return 0.0
    x = np.linspace(-12.0, 12.0, 24001)
    phi = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    f = ranks * x * phi * cdf ** (ranks - 1)
    return float(np.sum((f[1:] + f[:-1]) * 0.5 * (x[1] - x[0])))


def arrival_excess_s(spec: ComputeSpec, segment_s: float, ranks: int) -> float:
    """How much later than a typical rank the last of ``ranks`` ranks reaches a synchronisation point after
    ``segment_s`` seconds of equal compute since they were last together (s): the spec's measured fraction of the
    segment (``ComputeSpec.arrival_excess`` at ``arrival_excess_ranks`` ranks), scaled to ``ranks`` as the
    expected maximum of that many independent normal deviations scales (:func:`expected_max_normal`): each rank's
    stretch is taken to vary independently with the same spread. 0 for one rank or a non-positive segment."""
    if ranks <= 1 or segment_s <= 0.0:
        return 0.0
    fraction = spec.arrival_excess(segment_s)
    if fraction <= 0.0:
        return 0.0
    scale = expected_max_normal(ranks) / expected_max_normal(max(spec.arrival_excess_ranks, 2))
    return fraction * segment_s * scale


def p2p_time(nbytes: float, bandwidth: float, latency: float) -> float:
    """One uncontended flow: latency + bytes / bandwidth."""
    return latency + nbytes / bandwidth


def ring_allreduce_time(p: int, nbytes: float, bandwidth: float, alpha: float) -> float:
    """Ring allreduce of an ``nbytes`` buffer on p ranks: 2(p-1)/p * S/B + 2(p-1) * alpha (no reduction cost)."""
    if p <= 1:
        return 0.0
    return 2 * (p - 1) / p * nbytes / bandwidth + 2 * (p - 1) * alpha


def rhd_allreduce_time(p: int, nbytes: float, bandwidth: float, alpha: float) -> float:
    """Recursive halving-doubling (p a power of two): 2 log2(p) * alpha + 2(p-1)/p * S/B."""
    if p <= 1:
        return 0.0
    return 2 * math.log2(p) * alpha + 2 * (p - 1) / p * nbytes / bandwidth


def direct_alltoall_bisection_time(total_cross_bytes: float, bisection_bandwidth: float) -> float:
    """Lower bound of an alltoall: bytes that must cross a cut / the cut's bandwidth in that direction."""
    return total_cross_bytes / bisection_bandwidth
