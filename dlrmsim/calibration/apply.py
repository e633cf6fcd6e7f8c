"""Apply a calibration to a topology: rank compute specs and "shm" links take the fitted rates.

Consistency rule: achieved GEMM rate = peak_flops["fp32"] x gemm_efficiency(flops), with the peak the
*physical* one of the rank's cores (cores x clock x flops/cycle) and the efficiency table fitted against it
at the core count nearest the rank's, then, for ranks sharing the host's busy cores, taken to the cores'
typical availability where the calibration measured it (:func:`available_gemm_points`). Memory:
memory_bandwidth_Bps is the fitted saturated (all-core) triad bandwidth of the socket, memory_efficiency is 1
(the bandwidth already is an achieved one), and saturation_cores the fitted knee. Links of kind "shm" carry the
alltoall fit: bandwidth = bytes each rank moves across ranks per second (bus bandwidth), latency 0 (no wire) and
the fitted alpha as per-message software overhead.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from dlrmsim.calibration.schema import (
    Calibration,
    CoreAvailabilityFit,
    EmbeddingFit,
    memory_bandwidth_GBps,
    select_embedding_fit,
)
from dlrmsim.topologies.topology import ComputeSpec, EfficiencyTable, Link, Topology
from dlrmsim.training.implementations import ImplementationProfile

SHM_LINK_KIND = "shm"
SHM_BACKEND = "shm"  # the backend preset of processes on one host, whose collectives the calibrated shm links carry


def busy_availability_fit(cal: Calibration, cores: int, ranks: int, kernel: str) -> CoreAvailabilityFit | None:
    """The ``kernel``'s core-availability fit for the cores ``ranks`` rank processes of ``cores`` threads keep busy
    (at most the host's); None on one busy core or where the calibration did not measure it."""
    return cal.availability_fit(min(cal.host.cores, cores * max(ranks, 1)), kernel)


def available_gemm_points(cal: Calibration, cores: int, ranks: int = 1) -> list[tuple[float, float]]:
    """The GEMM efficiency points of a rank on ``cores`` cores with ``ranks`` rank processes on the host, at the
    cores' typical availability (``Calibration.core_availability``, benchmarks/availability.py).

    Several ranks compete for the busy cores, so each rank's rate is the ``availability`` (median over best speedup)
    of their cores together. A lone rank's team keeps its tables' rates: the steps' own speedup says so. Over 65 kept
    validations on two 2-vCPU VMs (2026-11-26..28), the runner's top-MLP phases ran 1.85x (Intel) and 1.87x (AMD)
    faster on 2 threads than on one (medians, benchmarks/analyse_step_speedups.py), where the GEMM tables gained 1.90x
    and 1.94x at those sizes and the pairs' typical moment would have kept 1.67-1.68x; the sparse update's steps do lose
    what its pairs say (:func:`typical_update_fit`). Not yet checked beyond 2 cores. Unchanged on one busy core and
    where the calibration did not measure the availability."""
    points = [(float(f), float(e)) for f, e in cal.gemm.table(cores).points]
    fit = busy_availability_fit(cal, cores, ranks, "gemm")
    if fit is None or ranks <= 1:
        return points
    return [(f, e * fit.availability) for f, e in points]


# The embedding fit's time terms (EmbeddingFit), each a cost the op's cores share.
_EMBEDDING_TIME_TERMS = ("row_time_ns", "walk_time_ns", "reload_time_ns", "fixed_us", "run_start_us")


def kept_gain_rate(r_many: float, r_one: float, gain: float) -> float:
    """A rate on several cores that keeps ``gain`` of its gain over the one-core rate ``r_one``; a rate that did not
    gain stays as fitted."""
    return r_one + gain * (r_many - r_one) if r_many > r_one else r_many


def typical_rate(avail: CoreAvailabilityFit, ranks: int, r_many: float, r_one: float) -> float:
    """A rate its benchmark measured at ``r_many`` on the busy cores (``r_one`` on one core) at the cores' typical
    availability: ``ranks`` > 1 rank processes sharing them keep ``avail.availability`` of it, a lone rank its
    one-core rate plus the ``retained_gain`` of the gain over it (:func:`kept_gain_rate`)."""
    return r_many * avail.availability if ranks > 1 else kept_gain_rate(r_many, r_one, avail.retained_gain)


def kept_gain_time(t_many: float, t_one: float, gain: float) -> float:
    """A cost term on several cores that keeps ``gain`` of its speed-up over one core: the rate 1/t moves from the
    one-core rate toward the several-core one by ``gain`` (:func:`kept_gain_rate`). A term that did not speed up (or
    has no one-core counterpart) stays as fitted."""
    if t_many <= 0.0 or t_one <= t_many:
        return t_many
    return 1.0 / kept_gain_rate(1.0 / t_many, 1.0 / t_one, gain)


def available_update_fit(fit: EmbeddingFit, one: EmbeddingFit, gain: float) -> EmbeddingFit:
    """The sparse update's fit on ``fit.cores`` cores at the cores' typical availability: each time term and the
    bandwidth keep ``gain`` (the update's ``retained_gain``, benchmarks/availability.py) of their speed-up over the
    one-core fit ``one``. Its benchmark kept the fastest pass, the moments all the cores were there; a step's update
    meets the typical moment (on the 2-vCPU VMs its steps gained 1.07x (Intel) and 1.57x (AMD) from the second
    thread, against 1.49x and 1.67x in the fit and 1.26x and 1.54x kept: benchmarks/analyse_step_speedups.py)."""
    terms = {name: kept_gain_time(getattr(fit, name), getattr(one, name), gain) for name in _EMBEDDING_TIME_TERMS}
    bandwidth = kept_gain_rate(fit.bandwidth_GBps, one.bandwidth_GBps, gain)
    scale = bandwidth / fit.bandwidth_GBps
    return fit.model_copy(update={**terms, "bandwidth_GBps": bandwidth, "stream_fraction": fit.stream_fraction * scale})


# The task kinds whose bytes stream element by element through one parallel region an op: activations and their
# gradients ("elementwise") and the dense optimizer's update ("optimizer"), which the "elementwise" availability
# kernel stands for (benchmarks/availability.py).
ELEMENTWISE_KINDS = ("elementwise", "optimizer")


def available_stream_fraction(cal: Calibration, cores: int, ranks: int = 1) -> float:
    """The share of its ``cores`` cores' stream bandwidth an element-wise op gets at the cores' typical availability
    (``Calibration.core_availability``, kernel "elementwise"), with ``ranks`` rank processes on the host.

    The memory fit keeps the long triad's bandwidth, whose ~100-ms samples average the moments a core is away. A
    step's element-wise op lasts tens of microseconds and ends with its slowest thread, so a lone rank keeps its
    1-core bandwidth plus the pairs' ``retained_gain`` of the gain over it (:func:`kept_gain_rate`), as its sparse
    update does (:func:`typical_update_fit`); ranks sharing the busy cores keep the ``availability``. 1 on one busy core
    and where the calibration did not measure it (numpy calibrations, calibrations before 2026-11-27)."""
    fit = busy_availability_fit(cal, cores, ranks, "elementwise")
    if fit is None:
        return 1.0
    many = memory_bandwidth_GBps(cal.memory, cores)
    return typical_rate(fit, ranks, many, memory_bandwidth_GBps(cal.memory, 1)) / many


def elementwise_cache_Bps(cal: Calibration, cores: int, ranks: int = 1) -> float:
    """The rate (B/s) of an element-wise op on tensors in the last-level cache on ``cores`` cores
    (``ColdOutputFit.elementwise_cached_GBps``), at the cores' typical availability as :func:`available_stream_fraction`
    takes the memory's: a lone rank keeps its 1-core rate plus the element-wise pairs' ``retained_gain`` of the gain
    over it, ranks sharing the busy cores the ``availability``. 0 where the calibration has no cached rate."""
    fit = cal.cold_output_fit(cores)
    if fit is None or fit.elementwise_cached_GBps is None:
        return 0.0
    rate = fit.elementwise_cached_GBps
    avail = busy_availability_fit(cal, cores, ranks, "elementwise")
    if avail is not None:
        one = cal.cold_output_fit(1)
        # without a 1-core rate, a lone rank's rate keeps what was measured (kept_gain_rate of a rate over itself)
        r_one = one.elementwise_cached_GBps if one is not None and one.cores == 1 else None
        rate = typical_rate(avail, ranks, rate, rate if r_one is None else r_one)
    return rate * 1e9


def slowed_fit(fit: EmbeddingFit, availability: float) -> EmbeddingFit:
    """``fit`` at ``availability`` of its speed: every time term over it, the bandwidth times it."""
    terms = {name: getattr(fit, name) / availability for name in _EMBEDDING_TIME_TERMS}
    rates = {"bandwidth_GBps": fit.bandwidth_GBps * availability, "stream_fraction": fit.stream_fraction * availability}
    return fit.model_copy(update={**terms, **rates})


def typical_update_fit(
    cal: Calibration, fits: Sequence[EmbeddingFit], distribution: str, fit: EmbeddingFit, ranks: int
) -> EmbeddingFit:
    """The sparse update's ``fit`` (one of ``fits``, for ``distribution``) at the busy cores' typical availability
    for the update (``Calibration.core_availability``, kernel "update"), with ``ranks`` rank processes on the host.

    A lone rank on several cores keeps its pairs' share of the gain over its one-core fit
    (:func:`available_update_fit`). Ranks that share the busy cores run as a team of that many threads does, each
    rank's update ending with the slowest core's, so each rank's update runs at ``availability`` (median over best
    speedup) of its fit (:func:`slowed_fit`), as their GEMMs do (:func:`available_gemm_points`). On the 2-vCPU Intel
    VM one vCPU at a time ran the update 1.75x slower than the other, pinned, where the GEMM ran 1.22x slower.
    Unchanged on one busy core and where the calibration did not measure the update's availability."""
    avail = busy_availability_fit(cal, fit.cores, ranks, "update")
    if avail is None:
        return fit
    if ranks > 1:
        return slowed_fit(fit, avail.availability)
    one = select_embedding_fit(fits, "update", distribution, 1)
    if fit.cores == 1 or one.cores != 1:
        return fit
    return available_update_fit(fit, one, avail.retained_gain)


def calibrated_compute(
    spec: ComputeSpec,
    cal: Calibration,
    distribution: str = "uniform",
    threads_by_kind: Mapping[str, int] | None = None,
    embedding_kernel: str = "framework",
    interaction_kernel: str = "framework",
    sharing_ranks: int = 1,
    optimizer_object: bool = False,
    sharded_software: bool = False,
    dense_autograd: bool = False,
) -> ComputeSpec:
    """``spec`` with the host's fitted fp32 GEMM, memory bandwidth and saturation, embedding costs for the
    workload's index ``distribution``, interaction costs (TorchRec's kernel for ``interaction_kernel``
    "torchrec"), and per-op overheads.

    ``threads_by_kind`` (an implementation profile's, training.implementations): task kinds whose kernels run on
    fewer threads than the rank's cores take the embedding fit measured at that thread count, as the simulator
    runs those tasks on that many cores (a fit at the rank's cores would already hold the other cores' share).
    ``embedding_kernel`` "tbe": the embedding kinds take the fits of fbgemm's table-batched embedding (``cal.tbe``)
    where the calibration measured it, the framework's embedding-bag fits elsewhere. ``sharing_ranks``: how many
    rank processes share the host's last-level cache (the topology's ranks). ``optimizer_object``: the
    implementation steps parameters with a torch.optim object, whose fitted cost per call and per tensor (``cal.optimizer``)
    the optimizer task then pays. ``sharded_software``: the implementation's sharded modules run software of their
    own each multi-rank step, whose fitted cost per step and per id (``cal.sharded_software``) a task of kind
    "sharded" pays. ``dense_autograd``: autograd differentiates the implementation's MLPs, whose fitted cost per
    layer and per element (``cal.autograd``) a task of kind "autograd" per layer pays, and its cost per ``backward()``
    call one task of kind "autograd_call" a step."""
    host = cal.host
    cores = max(1, min(spec.cores, host.cores))
    inter = interaction_costs(cal, cores, interaction_kernel)
    emb = embedding_costs(cal, distribution, cores, threads_by_kind, embedding_kernel, sharing_ranks)
    table = cal.gemm.table(cores)
    evicted = table.evicted_call_us is not None
    opt = cal.optimizer_fit(cores) if optimizer_object else None
    cold = cal.cold_output_fit(cores)
    stream = available_stream_fraction(cal, cores, sharing_ranks)
    stream_fraction = {kind: stream for kind in ELEMENTWISE_KINDS} if stream < 1.0 else {}
    per_KiB = 1e-9 / 1024.0  # ns per KiB -> s per byte
    cold_out = {"gemm": cold.gemm_ns_per_KiB * per_KiB, "elementwise": cold.elementwise_ns_per_KiB * per_KiB} if cold else {}
    opt_fixed = {"optimizer": opt.call_us * 1e-6} if opt is not None and opt.call_us > 0 else {}
    opt_rows = {"optimizer": opt.per_tensor_us * 1e-6} if opt is not None and opt.per_tensor_us > 0 else {}
    shard = cal.sharded_software if sharded_software else None
    shard_fixed = {"sharded": shard.per_step_us * 1e-6} if shard is not None else {}
    shard_rows = {"sharded": shard.per_id_ns * 1e-9} if shard is not None else {}
    grad = cal.autograd_fit(cores) if dense_autograd else None
    grad_fixed = {"autograd": grad.per_layer_us * 1e-6, "autograd_call": grad.per_call_us * 1e-6} if grad is not None else {}
    grad_rows = {"autograd": grad.per_element_ns * 1e-9} if grad is not None else {}
    peak = cores * host.clock_GHz * 1e9 * host.flops_per_cycle_fp32
    return dataclasses.replace(
        spec,
        cores=cores,
        clock_hz=host.clock_GHz * 1e9,
        peak_flops={**spec.peak_flops, "fp32": peak},
        gemm_efficiency=EfficiencyTable(tuple(available_gemm_points(cal, cores, sharing_ranks))),
        gemm_aspect_efficiency=EfficiencyTable(tuple((float(a), float(e)) for a, e in table.aspect_points)),
        gemm_vector_block=cal.gemm.vector_block or 0,
        gemm_remainder=cal.gemm.remainder or "binary",
        # With GEMMs timed after a flush of their own, a step's GEMM pays the warm roofline plus what its evicted
        # inputs cost (costs.evicted_operand_time_s); the step-order fit, which averages one flushed cycle, is
        # then not charged on top.
        gemm_memory_overlap=1.0 if evicted else table.memory_overlap,
        gemm_evicted_call_s=(table.evicted_call_us or 0.0) * 1e-6,
        # A GEMM after a gap in its rank's GEMMs pays by the gap's length (benchmarks/idle.py), (s, s) pairs
        gemm_idle_extra_s=tuple((g * 1e-3, us * 1e-6) for g, us in table.idle_extra_us),
        gemm_evicted_traffic_factor=table.evicted_traffic_factor or 0.0,
        gemm_evicted_compute_factor=table.evicted_compute_factor or 0.0,
        gemm_sequence_l2_factor=(table.sequence_l2_factor or 0.0) if evicted else 0.0,
        cold_output_s_per_byte_by_kind=cold_out,
        cold_output_after_bytes=host.flushed_bytes if cold else math.inf,
        elementwise_cache_Bps=elementwise_cache_Bps(cal, cores, sharing_ranks),
        gemm_evicted_after_bytes=host.flushed_bytes if evicted else math.inf,
        memory_bandwidth_Bps=cal.memory.bandwidth_GBps * 1e9,
        memory_efficiency=EfficiencyTable.constant(1.0),
        saturation_cores=float(cal.memory.saturation_cores),
        bandwidth_fraction_by_kind={**emb.bandwidth_fraction_by_kind, **inter.bandwidth_fraction_by_kind, **stream_fraction},
        row_time_s_by_kind={**emb.row_time_s_by_kind, **inter.row_time_s_by_kind, **opt_rows, **shard_rows, **grad_rows},
        flop_rate_by_kind=inter.flop_rate_by_kind,
        # Without that, a training step's GEMM pays its cold-call time (measured in step order) as a fixed time of its
        # kind; with it, the sequence call fitted beside the eviction terms: a step's GEMM always follows other ops.
        fixed_time_s_by_kind={
            **emb.fixed_time_s_by_kind,
            **inter.fixed_time_s_by_kind,
            **opt_fixed,
            **shard_fixed,
            **grad_fixed,
            "gemm": (table.sequence_call_us or 0.0) * 1e-6 if evicted else table.cold_call_us * 1e-6,
        },
        walk_time_s_by_kind=emb.walk_time_s_by_kind,
        page_bytes=float(host.page_bytes),
        l2_bytes=float(host.l2_bytes),
        reload_time_s_by_kind=emb.reload_time_s_by_kind,
        sorted_visit_kinds=emb.sorted_visit_kinds,
        run_start_s_by_kind=emb.run_start_s_by_kind,
        evicted_fixed_l2_s_by_kind=inter.evicted_l2_s_by_kind,
        evicted_fixed_llc_s_by_kind=inter.evicted_llc_s_by_kind,
        # the interaction's contexts were timed against the ops' flush (benchmarks.interaction.interaction_context_task)
        evicted_fixed_after_bytes=host.flushed_bytes if inter.evicted_l2_s_by_kind else math.inf,
        # The last-level cache is shared by the processes that run: one rank has all of it whatever its thread count
        # (the idle cores evict nothing; the calibration's benchmarks ran that way, see calibration.fit), and
        # ``sharing_ranks`` rank processes get an equal share each (two ranks: half each).
        # The capacity is the measured one where the calibration measured it (fit.fit_effective_llc).
        llc_bytes=host.model_llc_bytes / max(sharing_ranks, 1),
        task_overhead_s=cal.overhead.task_overhead_s(cores) if cal.overhead is not None else spec.task_overhead_s,
        op_overhead_s=cal.overhead.op_overhead_s(cores) if cal.overhead is not None else spec.op_overhead_s,
        scalar_op_extra_s=cal.overhead.scalar_op_extra_s(cores) if cal.overhead is not None else spec.scalar_op_extra_s,
        reduce_op_extra_s=cal.overhead.reduce_op_extra_s(cores) if cal.overhead is not None else spec.reduce_op_extra_s,
        fork_join_s=cal.overhead.fork_join_s(cores) if cal.overhead is not None else spec.fork_join_s,
        parallel_grain_elements=(
            cal.overhead.parallel_grain_elements
            if cal.overhead is not None and cal.overhead.parallel_grain_elements is not None
            else spec.parallel_grain_elements
        ),
        # The dispatch benchmark times its first op after the ops' cache flush (Ops.flush).
        task_overhead_after_bytes=(host.flushed_bytes if cal.overhead is not None else spec.task_overhead_after_bytes),
        **arrival_skew_fields(cal, spec),
    )


def arrival_skew_fields(cal: Calibration, spec: ComputeSpec) -> dict[str, object]:
    """The ComputeSpec fields of the calibration's arrival skew (segment seconds -> lateness fraction, and the ranks
    it was measured with); the spec's own where the calibration did not measure it."""
    skew = cal.arrival_skew
    if skew is None:
        return {"arrival_excess": spec.arrival_excess, "arrival_excess_ranks": spec.arrival_excess_ranks}
    table = EfficiencyTable(tuple((ms * 1e-3, fraction) for ms, fraction in skew.points))
    return {"arrival_excess": table, "arrival_excess_ranks": skew.ranks}


# Simulator task kinds of the embedding ops (dlrmsim.training.taskgraph); their bytes follow the same
# conventions as the calibration kernels' (ops.embedding_bytes), so fitted rates transfer directly.
EMBEDDING_KINDS = {"forward": "embedding", "backward": "embedding_bwd", "update": "update"}


def embedding_fits(
    cal: Calibration,
    distribution: str = "uniform",
    cores: int | None = None,
    threads_by_kind: Mapping[str, int] | None = None,
    embedding_kernel: str = "framework",
    sharing_ranks: int = 1,
) -> dict[str, EmbeddingFit]:
    """The embedding fit per task kind for index ``distribution`` (the uniform fit where the calibration did not
    measure it) at the core count nearest ``cores`` (None: the most cores measured), or for a kind in
    ``threads_by_kind`` nearest its thread count when that is fewer; from the TBE fits (``cal.tbe``) first when
    ``embedding_kernel`` is "tbe". The update takes what its own availability pairs say a step typically gets of
    the busy cores, with ``sharing_ranks`` rank processes on the host (:func:`typical_update_fit`), where the
    calibration measured them.

    Skewed indices hit the cache on their hot rows, so each distribution has its own fit; a zipf workload uses
    the fit measured at the benchmark's exponent (benchmarks.embedding.ZIPF_EXPONENT), whatever its own exponent is.
    """
    out: dict[str, EmbeddingFit] = {}
    for op, kind in EMBEDDING_KINDS.items():
        threads = (threads_by_kind or {}).get(kind)
        at = threads if threads is not None and (cores is None or threads < cores) else cores
        sources = ([cal.tbe] if embedding_kernel == "tbe" else []) + [cal.embedding]
        for fits, dist in ((f, d) for f in sources for d in dict.fromkeys((distribution, "uniform"))):
            try:
                out[kind] = select_embedding_fit(fits, op, dist, at)
            except KeyError:
                continue
            if op == "update" and fits is cal.embedding:  # the framework's update, the kernel its pairs time
                out[kind] = typical_update_fit(cal, fits, dist, out[kind], sharing_ranks)
            break
    return out


@dataclasses.dataclass(frozen=True)
class EmbeddingCosts:
    """The embedding fits as ComputeSpec fields, per task kind (achieved bandwidth as a fraction of the
    stream bandwidth at the fit's core count, s per row, s per L2-missing page walk, s per row reloaded into the last-level
    cache, s per task, s more for the first task of a run)."""

    bandwidth_fraction_by_kind: dict[str, float]
    row_time_s_by_kind: dict[str, float]
    walk_time_s_by_kind: dict[str, float]
    reload_time_s_by_kind: dict[str, float]
    fixed_time_s_by_kind: dict[str, float]
    run_start_s_by_kind: dict[str, float]
    sorted_visit_kinds: tuple[str, ...] = ()  # kinds whose fit visits rows in ascending order (EmbeddingFit.sorted_rows)


def embedding_costs(
    cal: Calibration,
    distribution: str = "uniform",
    cores: int | None = None,
    threads_by_kind: Mapping[str, int] | None = None,
    embedding_kernel: str = "framework",
    sharing_ranks: int = 1,
) -> EmbeddingCosts:
    """Fitted bandwidth fraction, and time per looked-up row, per L2-missing page walk, per reloaded row, per
    op and per run of ops (s), per embedding task kind, at the core count nearest ``cores`` (or a kind's fewer
    threads in ``threads_by_kind``); a kind appears in a time table only where its term is non-zero."""
    out = EmbeddingCosts({}, {}, {}, {}, {}, {})
    fits = embedding_fits(cal, distribution, cores, threads_by_kind, embedding_kernel, sharing_ranks)
    for kind, fit in fits.items():
        # Relative to the stream bandwidth at the fit's own core count: the simulator scales a task's bandwidth
        # cap by its cores' share of the socket's (costs.task_bandwidth_cap), and a fit measured on 1 core
        # already holds that share. Taken over the saturated bandwidth, it was charged twice: a 1-core lookup
        # ran at 0.76 of its fitted rate (threads-1 and ranks-2 embedding forwards predicted 19-60 % slow).
        out.bandwidth_fraction_by_kind[kind] = fit.bandwidth_GBps / memory_bandwidth_GBps(cal.memory, fit.cores)
        for table, value in (
            (out.row_time_s_by_kind, fit.row_time_ns * 1e-9),
            (out.walk_time_s_by_kind, fit.walk_time_ns * 1e-9),
            (out.reload_time_s_by_kind, fit.reload_time_ns * 1e-9),
            (out.fixed_time_s_by_kind, fit.fixed_us * 1e-6),
            (out.run_start_s_by_kind, fit.run_start_us * 1e-6),
        ):
            if value > 0:
                table[kind] = value
    return dataclasses.replace(out, sorted_visit_kinds=tuple(kind for kind, fit in fits.items() if fit.sorted_rows))


# Simulator task kinds of the interaction's two directions (dlrmsim.training.taskgraph).
INTERACTION_KINDS = {"forward": "interaction", "backward": "interaction_bwd"}


@dataclasses.dataclass(frozen=True)
class InteractionCosts:
    """The interaction fits as ComputeSpec fields, per task kind (s per sample, flop/s, s per task, achieved
    bandwidth as a fraction of the stream bandwidth at the fit's core count)."""

    row_time_s_by_kind: dict[str, float]
    flop_rate_by_kind: dict[str, float]
    fixed_time_s_by_kind: dict[str, float]
    bandwidth_fraction_by_kind: dict[str, float] = dataclasses.field(default_factory=dict)
    # the parts of the flushed fixed time a warm call does not pay (ComputeSpec.evicted_fixed_*), where measured
    evicted_l2_s_by_kind: dict[str, float] = dataclasses.field(default_factory=dict)
    evicted_llc_s_by_kind: dict[str, float] = dataclasses.field(default_factory=dict)


def interaction_costs(cal: Calibration, cores: int, kernel: str = "framework") -> InteractionCosts:
    """Fitted interaction costs on ``cores`` cores, from the fit at the nearest core count (its flop rate
    scaled by cores / fit cores), of TorchRec's kernel for ``kernel`` "torchrec" where the calibration measured
    it; empty when the calibration has no interaction benchmark."""
    out = InteractionCosts({}, {}, {})
    for direction, kind in INTERACTION_KINDS.items():
        fit = cal.interaction_fit(direction, cores, kernel)
        if fit is None:
            continue
        out.row_time_s_by_kind[kind] = fit.sample_time_ns * 1e-9
        out.flop_rate_by_kind[kind] = fit.GFLOPs * 1e9 * cores / fit.cores
        l2, llc = fit.evicted_l2_us or 0.0, fit.evicted_llc_us or 0.0
        # fixed_us was timed after the flush: a warm call pays it less what the flush made it refetch, and a step's
        # call pays that back as far as the rank's own traffic evicted it (costs.evicted_fixed_time_s)
        out.fixed_time_s_by_kind[kind] = max(fit.fixed_us - l2 - llc, 0.0) * 1e-6
        if l2 > 0 or llc > 0:
            out.evicted_l2_s_by_kind[kind] = l2 * 1e-6
            out.evicted_llc_s_by_kind[kind] = llc * 1e-6
        if fit.bandwidth_GBps is not None:
            # as an embedding fit's: relative to the stream bandwidth of the cores it was measured on
            out.bandwidth_fraction_by_kind[kind] = fit.bandwidth_GBps / memory_bandwidth_GBps(cal.memory, fit.cores)
    return out


def calibrated_link(link: Link, cal: Calibration) -> Link:
    """An "shm" link with the alltoall alpha-beta fit (pure data movement, no reduction arithmetic)."""
    try:
        fit = cal.collective("alltoall")
    except KeyError:
        fit = cal.collectives[0]
    return dataclasses.replace(link, bandwidth_Bps=fit.bus_bandwidth_GBps * 1e9, latency_s=0.0, overhead_s=fit.alpha_us * 1e-6)


def calibrated_backend_overrides(cal: Calibration, backend: str) -> dict[str, int]:
    """Backend fields a calibration measured, for the backend its shm links stand for: how many collectives a
    rank progresses at once (``progress_engines``), where the calibration timed two alltoalls posted together.
    On the 2-vCPU VM, gloo's two processes ran them nearly in series (series / together 1.04-1.19), so TorchRec's
    KeyedJaggedTensor lengths and values, posted together, cost about two alltoalls, not one."""
    if backend != SHM_BACKEND or cal.collectives_at_once is None:
        return {}
    return {"progress_engines": max(1, round(cal.collectives_at_once))}


def apply_calibration(
    topology: Topology, cal: Calibration, distribution: str = "uniform", implementation: ImplementationProfile | None = None
) -> Topology:
    """A new Topology (same class, ranks and routes) whose compute specs and shm links use ``cal``'s rates
    (embedding costs for the workload's index ``distribution``; with an ``implementation`` profile, at the thread
    counts it runs kinds on and from the embedding kernel it runs: :func:`calibrated_compute`).

    Every node carrying a ComputeSpec is calibrated (ranks and any other endpoint); other links are kept.
    The input topology is not modified.
    """
    threads_by_kind = implementation.threads_by_kind() if implementation is not None else None
    kernel = implementation.embedding_kernel if implementation is not None else "framework"
    inter_kernel = implementation.interaction_kernel if implementation is not None else "framework"
    optimizer_object = implementation is not None and implementation.optimizer_object != "none"
    return topology.with_specs(
        compute=lambda spec: calibrated_compute(
            spec,
            cal,
            distribution,
            threads_by_kind,
            kernel,
            inter_kernel,
            sharing_ranks=topology.num_ranks,
            optimizer_object=optimizer_object,
            sharded_software=implementation is not None and implementation.sharded_software,
            dense_autograd=implementation is not None and implementation.dense_autograd,
        ),
        link=lambda link: calibrated_link(link, cal) if link.kind == SHM_LINK_KIND else link,
        source=f"{topology.source} + calibration {cal.host.name} ({cal.host.date})",
    )
