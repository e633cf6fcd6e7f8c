"""The calibration YAML: a host's description, fitted cost-model parameters, raw measurements, fit quality.

Field names carry their units (``_GBps`` = 1e9 bytes/s, ``_us`` = microseconds, ``_s`` = seconds,
``_GFLOPs`` = 1e9 flop/s). Loading validates the file (pydantic) and warns when it was made on another host.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from pathlib import Path
from typing import Annotated, Literal, TypeVar

import yaml
from pydantic import ConfigDict, Field, model_validator

from dlrmsim.calibration.host import HostInfo, warn_if_other_host
from dlrmsim.config import StrictModel, read_yaml, validate

FORMAT_VERSION = 1

Positive = Annotated[float, Field(gt=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]
# [[cores, microseconds], ...]: a per-op time at each core count measured
CoresMicroseconds = list[tuple[Annotated[int, Field(gt=0)], Annotated[float, Field(ge=0)]]]

T = TypeVar("T")


def nearest_cores(rows: Sequence[T], cores: int, of: Callable[[T], int] = attrgetter("cores")) -> T:
    """The row measured at the core count nearest ``cores`` (ties: the larger count)."""
    return min(rows, key=lambda r: (abs(of(r) - cores), -of(r)))


class GemmTable(StrictModel):
    """GEMM efficiency against flops at one core count: achieved = peak(cores) x efficiency(flops)."""

    cores: Annotated[int, Field(gt=0)]
    peak_GFLOPs: Positive = Field(description="physical fp32 peak of these cores")
    points: list[tuple[Positive, Fraction]] = Field(
        min_length=1, description="[[flops, efficiency], ...] of cubic GEMMs, flops increasing"
    )
    aspect_points: list[tuple[Positive, Positive]] = Field(
        default_factory=list,
        description="[[aspect, factor], ...], aspect increasing: a non-cubic GEMM's efficiency over the cubes' at its "
        "flops, against its aspect (costs.gemm_aspect); empty = 1",
    )
    memory_overlap: Annotated[float, Field(ge=0, le=1)] = Field(
        default=1.0,
        description="GEMMs in training-step order: share of a GEMM's compulsory traffic (at stream bandwidth) hidden "
        "under its arithmetic (1 = the roofline max, 0 = the sum); 1 when not measured",
    )
    cold_call_us: Annotated[float, Field(ge=0)] = Field(
        default=0.0,
        description="GEMMs in training-step order: fixed time per call beyond a first op's dispatch (us); 0 when not measured",
    )
    evicted_call_us: Annotated[float, Field(ge=0)] | None = Field(
        default=None,
        description="GEMMs timed right after a cache flush: fixed time per call beyond the warm roofline and a first "
        "op's dispatch (us; packing buffers and code refetched); None when not measured (then the step-order fit "
        "above is charged instead)",
    )
    evicted_traffic_factor: Annotated[float, Field(ge=0)] | None = Field(
        default=None,
        description="GEMMs timed right after a cache flush: added time per second of compulsory traffic at stream "
        "bandwidth (operands fetched from memory in the kernel's packing order); None when not measured",
    )
    evicted_compute_factor: Annotated[float, Field(ge=0)] | None = Field(
        default=None,
        description="GEMMs timed right after a cache flush: added time per second of arithmetic at the warm "
        "efficiency (the kernel's tiles streamed from beyond its cores' L2 for the whole call, not only fetched "
        "once); None when not measured (calibrations before it: 0)",
    )
    sequence_call_us: Annotated[float, Field(ge=0)] | None = Field(
        default=None,
        description="GEMMs timed among other ops (in training-step order, or after a flush): fixed time per call "
        "beyond the warm loop's, whatever the traffic since its last call (us); a training step's GEMM never follows "
        "itself. Fitted with the eviction terms (fit.fit_evicted_gemm); None when not measured (calibrations before "
        "2026-11-27 13:00: 0)",
    )
    sequence_l2_factor: Annotated[float, Field(ge=0)] | None = Field(
        default=None,
        description="GEMMs timed among other ops: added time per second of traffic time (at stream bandwidth) of the "
        "part of the GEMM's compulsory bytes that its cores' L2 caches hold, whatever the traffic since its last call: "
        "what a GEMM refills of its working set after other ops grows with the call up to its cores' L2 (at 2 "
        "threads on the 2-vCPU AMD VM, 2026-11-28: 3-8 us for GEMMs moving 66-129 KiB, 8-30 us for 350-640 KiB, 8-75 "
        "us, median about 30, past 1.2 MiB). Fitted in place of sequence_call_us (fit.fit_evicted_gemm), which is "
        "then 0; None in calibrations before 2026-11-28 03:50",
    )

    idle_extra_us: list[tuple[Positive, Annotated[float, Field(ge=0)]]] = Field(
        default_factory=list,
        description="[[gap_ms, us], ...], gap increasing: what a GEMM pays over its back-to-back time after its rank "
        "went gap_ms without one (benchmarks/idle.py; the time since its previous call, not the traffic, sets it); "
        "where given it replaces evicted_call_us's traffic-keyed charge; empty when not measured",
    )

    @model_validator(mode="after")
    def _increasing(self) -> GemmTable:
        for name, pts in (("points", self.points), ("aspect_points", self.aspect_points), ("idle_extra_us", self.idle_extra_us)):
            sizes = [p[0] for p in pts]
            if sizes != sorted(sizes) or len(set(sizes)) != len(sizes):
                raise ValueError(f"{name} must have strictly increasing first values")
        return self


class GemmFit(StrictModel):
    peak_efficiency: Fraction = Field(description="best measured GEMM efficiency at all cores")
    tables: list[GemmTable] = Field(min_length=1)
    achieved_GFLOPs_by_cores: list[tuple[Annotated[int, Field(gt=0)], Positive]] = Field(
        description="[[cores, best achieved GFLOP/s], ...] for the largest GEMMs"
    )
    vector_block: Annotated[int, Field(gt=0)] | None = Field(
        default=None,
        description="the GEMM kernel's micro-kernel width in output columns (n of C[m, n]), from the output-columns "
        "sweep (fit.fit_vector_block); the tables above are at full blocks; None = not measured or no block found",
    )
    remainder: Literal["binary", "padded"] | None = Field(
        default=None,
        description="how the kernel computes a remainder of columns: one narrower pass per set bit (binary) or one "
        "full-width pass (padded); costs.block_passes",
    )

    def table(self, cores: int) -> GemmTable:
        """The efficiency table measured at the core count nearest ``cores`` (ties: the larger)."""
        return nearest_cores(self.tables, cores)


class MemoryFit(StrictModel):
    """Socket memory bandwidth: bw(c) = min(c x per_core, bandwidth), the STREAM-triad fit."""

    bandwidth_GBps: Positive = Field(description="saturated (all-core) triad bandwidth")
    per_core_GBps: Positive = Field(description="one core's triad bandwidth")
    saturation_cores: Positive = Field(description="bandwidth / per_core, capped at the host's cores")
    saturated: bool = Field(description="true when the curve flattened before all cores")
    copy_GBps_by_cores: list[tuple[Annotated[int, Field(gt=0)], Positive]]
    triad_GBps_by_cores: list[tuple[Annotated[int, Field(gt=0)], Positive]]


def memory_bandwidth_GBps(fit: MemoryFit, cores: int) -> float:
    """Stream bandwidth of ``cores`` cores as the simulator gives a calibrated rank (costs.task_bandwidth_cap):
    the socket's bandwidth times min(cores / saturation_cores, 1), i.e. min(cores x per_core, bandwidth) with
    the knee as the YAML records it. Here beside the fit it reads, so that applying a calibration (apply.py) does
    not import the fitting (fit.py and the benchmark definitions it reads, a few tenths of a second of every
    first simulation)."""
    return fit.bandwidth_GBps * min(cores / fit.saturation_cores, 1.0)


class EmbeddingFit(StrictModel):
    """One embedding op for one index distribution: t = first-op dispatch + fixed + lookups x (row_time + walk
    miss share x walk_time + reload miss share x reload_time) + bytes / bandwidth (bytes as in
    ops.embedding_bytes), plus run_start for the first op of a run of this op."""

    op: Literal["forward", "backward", "update"]
    distribution: Literal["uniform", "zipf"]
    cores: Annotated[int, Field(gt=0)]
    bandwidth_GBps: Positive
    stream_fraction: Positive = Field(description="bandwidth / memory.bandwidth_GBps")
    row_time_ns: Annotated[float, Field(ge=0)] = Field(
        0.0, description="time per looked-up row that grows neither with its width nor with the tables (per-row kernel calls)"
    )
    walk_time_ns: Annotated[float, Field(ge=0)] = Field(
        0.0,
        description="time per lookup whose page-table walk misses L2, charged as lookups x the miss share of the "
        "op's tables (engine.costs.page_walk_miss_share); the backward never reads the table",
    )
    reload_time_ns: Annotated[float, Field(ge=0)] = Field(
        0.0,
        description="update only: time per lookup whose rows the forward and backward left in the last-level cache "
        "but the rest of the cycle pushed out, charged as lookups x the cycle's miss share (engine.costs.cache_miss_share)",
    )
    sorted_rows: bool = Field(
        False,
        description="the op visits its touched rows in ascending row order (fbgemm's fused update, after sorting "
        "its lookups by row): walk_time_ns is then per page walked and reload_time_ns per row not adjacent to the "
        "previous one (engine.costs.sorted_visits), not per lookup",
    )
    fixed_us: Annotated[float, Field(ge=0)] = Field(
        0.0,
        description="time per op that grows with neither lookups nor bytes, beyond the dispatch fit's first-op cost "
        "(the framework's bag offsets, autograd and sparse-gradient set-up, the thread pool's parallel regions)",
    )
    run_start_us: Annotated[float, Field(ge=0)] = Field(
        0.0,
        description="time the first op of a run of this op pays beyond the later ones: its code and framework "
        "state gone cold while other work ran (benchmarks.timing.POSITIONS); charged once per run (simulator Task.run_start)",
    )


class InteractionFit(StrictModel):
    """The framework's dot interaction (batched X X^T of S+1 features per sample, pair gather/scatter), one
    direction at one core count: t = dispatch(ops) + fixed + batch x sample_time + max(flops / rate, bytes /
    bandwidth), with flops and bytes as ``workloads.model`` counts them (the simulator's own formula)."""

    direction: Literal["forward", "backward"]
    cores: Annotated[int, Field(gt=0)]
    fixed_us: Annotated[float, Field(ge=0)] = Field(description="per call, beyond the ops' dispatch")
    sample_time_ns: Annotated[float, Field(ge=0)] = Field(description="per sample: one small matrix product and its pairs")
    GFLOPs: Positive = Field(description="achieved rate of the many small per-sample matrix products")
    bandwidth_GBps: Positive | None = Field(
        None,
        description="achieved rate of its bytes (stacking, the small products' operands and results, gathers, "
        "concatenation), below stream bandwidth where those tensors are small and strided; None: the memory fit's "
        "bandwidth (files from before this field)",
    )
    evicted_l2_us: Annotated[float, Field(ge=0)] | None = Field(
        None,
        description="of fixed_us (timed after the flush), what traffic beyond a core's L2 makes a call refetch and a "
        "warm call does not pay: its kernels' code and state; None: fixed_us charged in full (files from before "
        "this field)",
    )
    evicted_llc_us: Annotated[float, Field(ge=0)] | None = Field(
        None, description="of fixed_us, what only traffic beyond the last-level cache makes a call refetch (ditto)"
    )


class OptimizerFit(StrictModel):
    """A ``torch.optim`` optimizer object's software cost per step (its ``step()`` and ``zero_grad()``) at one core
    count, beyond the per-op dispatch of its updates (benchmarks/optimizer.py): t = call + tensors x per_tensor."""

    optimizer: Literal["sgd"]
    cores: Annotated[int, Field(gt=0)]
    call_us: Annotated[float, Field(ge=0)] = Field(description="per step: the object's own Python, whatever its tensors")
    per_tensor_us: Annotated[float, Field(ge=0)] = Field(
        description="per parameter tensor it steps, beyond that tensor's update op"
    )


class AutogradFit(StrictModel):
    """What autograd adds to MLP layers' (``nn.Linear`` + ``nn.ReLU``) forward and backward at one core count, beyond
    the written-out ops the GEMM and element-wise fits price (benchmarks/autograd.py): per ``backward()`` call, and
    per layer per_layer + elements x per_element, ``elements`` the layer's input and output elements
    (batch x (fan_in + fan_out))."""

    cores: Annotated[int, Field(gt=0)]
    per_call_us: Annotated[float, Field(ge=0)] = Field(
        0.0, description="per backward() call, whatever its layers (0 in calibrations of 2026-11-27 before 19:30)"
    )
    per_layer_us: Annotated[float, Field(ge=0)] = Field(description="per layer: recording its graph and running its nodes")
    per_element_ns: Annotated[float, Field(ge=0)] = Field(description="per element of the layer's input and output")


class ShardedSoftwareFit(StrictModel):
    """What a sharded multi-rank step (TorchRec's ``DistributedModelParallel``) runs on each rank's compute thread
    beyond the same work in one process: its input and output distribution modules, their awaitables and autograd
    functions, the data-parallel wrapper (benchmarks/sharded.py, compute-thread CPU time of a 2-rank step less a
    one-process step and the step's collectives alone). Per step: per_step + ids x per_id, ``ids`` the index values
    of the rank's local batch."""

    ranks: Annotated[int, Field(gt=1)] = Field(description="ranks of the measured step")
    per_step_us: Annotated[float, Field(ge=0)] = Field(description="per step, whatever the ids")
    per_id_ns: Annotated[float, Field(ge=0)] = Field(description="per index value of the rank's local batch")


class ArrivalSkewFit(StrictModel):
    """How much later than a typical rank the last of ``ranks`` rank processes of this host reaches a barrier after
    the same compute (benchmarks/skew.py): per measured stretch of compute, its length and the lateness as a
    fraction of it (the mean over barriers of the slowest rank's stretch over the ranks' mean stretch, less 1)."""

    ranks: Annotated[int, Field(ge=2)]
    threads_per_rank: Annotated[int, Field(ge=1)]
    implementation: Literal["shm", "gloo"]
    points: list[tuple[Positive, Annotated[float, Field(ge=0)]]] = Field(
        min_length=1, description="(segment_ms, excess_fraction), segments ascending"
    )


class CoreAvailabilityFit(StrictModel):
    """How much of its cores a kernel on ``cores`` threads typically gets, against the moments the kernel benchmarks
    keep (benchmarks/availability.py): the speedup of one ``kernel`` on ``cores`` threads over one thread, timed in
    pairs, as the runs' mean median and the best of their upper deciles (availability.combine_runs), and their ratio."""

    kernel: Literal["gemm", "update", "elementwise"] = Field(
        "gemm",
        description="the kernel timed: a GEMM (the GEMM tables take it), the sparse SGD update (its embedding fit) or "
        "a dense SGD update (the element-wise and optimizer tasks' stream bandwidth)",
    )
    cores: Annotated[int, Field(ge=2)]
    availability: Annotated[float, Field(gt=0, le=1)] = Field(description="median speedup / best speedup")
    speedup_median: Positive = Field(description="the pairs' median speedup (one-thread time over cores-thread time)")
    speedup_best: Positive = Field(description="the pairs' upper-decile speedup: the moments the kernel benchmarks keep")
    runs: Annotated[int, Field(ge=1)] = Field(description="runs of the benchmark averaged")

    @property
    def retained_gain(self) -> float:
        """The share of the good moments' gain from the cores beyond the first that the typical moment keeps:
        (median speedup - 1) / (best speedup - 1), within 0..1."""
        if self.speedup_best <= 1.0:
            return 1.0
        return min(1.0, max(0.0, (self.speedup_median - 1.0) / (self.speedup_best - 1.0)))


class ColdOutputFit(StrictModel):
    """What writing an op's result into memory evicted since its last use adds per byte, at one core count
    (benchmarks/outputs.py): cold minus warm time of the same op, over its output's bytes."""

    cores: Annotated[int, Field(gt=0)]
    gemm_ns_per_KiB: Annotated[float, Field(ge=0)] = Field(description="a GEMM's output (C of A @ B), ns per KiB written")
    elementwise_ns_per_KiB: Annotated[float, Field(ge=0)] = Field(
        description="an element-wise op's output (ReLU), ns per KiB written"
    )
    elementwise_cached_GBps: Annotated[float, Field(gt=0)] | None = Field(
        None,
        description="the bytes the ReLU of the cached row reads and writes per second beyond its dispatch and fork/join: "
        "an element-wise op's rate on tensors in the last-level cache (absent: calibrated before 2026-11-28, not modelled)",
    )


def _seconds_at_cores(table: Sequence[tuple[int, float]], cores: int) -> float:
    """A [[cores, microseconds], ...] table's value at the core count nearest ``cores``, in seconds; 0 when empty."""
    return nearest_cores(table, cores, of=lambda r: r[0])[1] * 1e-6 if table else 0.0


class OverheadFit(StrictModel):
    """Fixed cost of framework ops (dispatch, output allocation, thread-pool fork/join), per core count: a
    task's first op (cold private caches) and each further op of the task (warm dispatch)."""

    task_overhead_us_by_cores: CoresMicroseconds = Field(
        min_length=1, description="[[cores, microseconds], ...]: median time of a tiny op right after a cache flush"
    )
    op_overhead_us_by_cores: CoresMicroseconds = Field(
        default_factory=list,
        description="[[cores, microseconds], ...]: median time per op of the distinct tiny ops that follow it "
        "(empty: a calibration from before this split; every op then costs the first op's time)",
    )

    fork_join_us_by_cores: CoresMicroseconds = Field(
        default_factory=list,
        description="[[cores, microseconds], ...]: the thread pool's fork and join per element-wise op above "
        "parallel_grain_elements, warm (the fork benchmark's op at these cores less its 1-core time / cores); "
        "empty: not measured, or a backend whose element-wise ops never split",
    )
    parallel_grain_elements: Annotated[float, Field(gt=0)] | None = Field(
        None, description="elements above which the backend splits an element-wise op over its threads"
    )
    scalar_op_extra_us_by_cores: CoresMicroseconds = Field(
        default_factory=list,
        description="[[cores, microseconds], ...]: what a further tiny op with a Python scalar operand (x + 0.5) costs "
        "beyond a multiply of two tensors (the framework wraps the number into a tensor each call); empty: not measured",
    )
    reduce_op_extra_us_by_cores: CoresMicroseconds = Field(
        default_factory=list,
        description="[[cores, microseconds], ...]: what a further tiny reduction (x.mean()) costs beyond a multiply of "
        "two tensors; empty: not measured",
    )

    def task_overhead_s(self, cores: int) -> float:
        return _seconds_at_cores(self.task_overhead_us_by_cores, cores)

    def fork_join_s(self, cores: int) -> float:
        """Fork and join of one parallel element-wise op at ``cores`` threads (s); 0 at one core or unmeasured."""
        return _seconds_at_cores(self.fork_join_us_by_cores, cores) if cores > 1 else 0.0

    def op_overhead_s(self, cores: int) -> float:
        return _seconds_at_cores(self.op_overhead_us_by_cores or self.task_overhead_us_by_cores, cores)

    def scalar_op_extra_s(self, cores: int) -> float:
        """What an op with a Python scalar operand costs beyond a multiply at ``cores`` threads (s); 0 unmeasured."""
        return _seconds_at_cores(self.scalar_op_extra_us_by_cores, cores)

    def reduce_op_extra_s(self, cores: int) -> float:
        """What a reduction costs beyond a multiply at ``cores`` threads (s); 0 unmeasured."""
        return _seconds_at_cores(self.reduce_op_extra_us_by_cores, cores)


class CollectiveFit(StrictModel):
    """t(n) = alpha + n / beta for n message bytes per rank (allreduce: the buffer; alltoall: the send buffer)."""

    op: Literal["allreduce", "alltoall"]
    ranks: Annotated[int, Field(ge=2)]
    implementation: Literal["shm", "gloo"]
    alpha_us: Annotated[float, Field(ge=0)]
    beta_GBps: Positive = Field(description="algorithm bandwidth: message bytes per second")
    bus_bandwidth_GBps: Positive = Field(
        description="bytes each rank moves across the link per second: beta x 2(R-1)/R (allreduce) or beta x (R-1)/R (alltoall)"
    )
    min_bytes: Positive
    max_bytes: Positive


class Measurement(StrictModel):
    """One micro-benchmark: time per call over repeats after warm-up (median; best for memory streams), in the
    fastest of the plan's passes."""

    benchmark: Literal[
        "gemm",
        "linear",
        "stream",
        "embedding",
        "interaction",
        "interaction_torchrec",
        "interaction_context",
        "interaction_torchrec_context",
        "allreduce",
        "alltoall",
        "alltoall_together",
        "dispatch",
        "tbe",
        "fork",
        "gemm_columns",
        "optimizer",
        "cold_output",
        "cache_reuse",
        "sharded",
        "autograd",
        "skew",
        "availability",
        "gemm_idle",
    ]
    name: str
    cores: Annotated[int, Field(gt=0)]
    params: dict[str, float | int | str] = {}
    flops: Annotated[float, Field(ge=0)] = 0.0
    bytes: Annotated[float, Field(ge=0)] = 0.0
    time_s: Positive = Field(description="median over repeats (streams: the minimum, STREAM's best-rate convention)")
    statistic: Literal["median", "min"] = "median"
    spread_pct: Annotated[float, Field(ge=0)] = Field(0.0, description="(max - min) / median over repeats, %")
    repeats: Annotated[int, Field(gt=0)]
    passes: Annotated[int, Field(gt=0)] = Field(
        1, description="passes of the plan that measured it; time_s is the fastest pass's (streams: the median pass's)"
    )
    slowest_pass_s: Positive | None = Field(None, description="the slowest pass's time when passes > 1: how far the host moved")

    @property
    def pass_ratio(self) -> float:
        """Slowest pass over the kept one (1 for a single pass): above ~1.5 the host changed speed under this benchmark."""
        return self.slowest_pass_s / self.time_s if self.slowest_pass_s else 1.0


class FitRow(StrictModel):
    """Predicted against measured time for one micro-benchmark."""

    benchmark: str
    name: str
    measured_s: Positive
    predicted_s: Positive
    error_pct: float = Field(description="(predicted - measured) / measured, %")


class EqCheckRow(StrictModel):
    """Eq. 1 / Eq. 2 for a preset scaled to the host: bytes the real collective moved and its time against the fit."""

    # pydantic before 2.10 warns, at every import, that "model_s" is in its protected "model_" namespace
    model_config = ConfigDict(protected_namespaces=())

    workload: str
    collective: Literal["allreduce", "alltoall"]
    scale: str = Field(description="how the preset was scaled to fit the host")
    equation_bytes: Positive = Field(description="Eq. 1 (per rank) or Eq. 2 (all ranks, one direction)")
    moved_bytes: Positive = Field(description="bytes the collective was handed, counted by the implementation, same convention")
    cross_rank_bytes: Annotated[float, Field(ge=0)] = Field(
        description="bytes that must cross ranks: 2(R-1)/R of the buffer per rank for a ring allreduce, "
        "the off-rank blocks of an alltoall"
    )
    measured_s: Positive
    model_s: Positive = Field(description="fitted alpha + n / beta for the bytes per rank")
    error_pct: float


class Calibration(StrictModel):
    """A host calibration: what the simulator reads (gemm, memory, embedding, collectives) plus the evidence."""

    format_version: Literal[1] = FORMAT_VERSION
    host: HostInfo
    gemm: GemmFit
    memory: MemoryFit
    embedding: list[EmbeddingFit] = Field(min_length=1)
    collectives: list[CollectiveFit] = Field(min_length=1)
    overhead: OverheadFit | None = None
    interaction: list[InteractionFit] = Field(
        default_factory=list, description="empty: a calibration from before the interaction benchmark"
    )
    tbe: list[EmbeddingFit] = Field(
        default_factory=list,
        description="fbgemm's CPU table-batched embedding (TorchRec's fused kernel), per table: op forward, and op update "
        "for its backward with SGD fused in (benchmarks/tbe.py); empty without fbgemm-gpu-cpu",
    )
    interaction_torchrec: list[InteractionFit] = Field(
        default_factory=list,
        description="TorchRec's InteractionArch with autograd's backward (benchmarks/interaction.py), for an "
        "implementation whose interaction_kernel is torchrec; empty without TorchRec",
    )
    optimizer: list[OptimizerFit] = Field(
        default_factory=list,
        description="torch.optim's step and zero_grad (benchmarks/optimizer.py), for an implementation that steps its "
        "parameters with an optimizer object (ImplementationProfile.optimizer_object); empty: not measured (NumPy, "
        "older files)",
    )
    cold_output: list[ColdOutputFit] = Field(
        default_factory=list,
        description="writing a result into memory evicted since its last use (benchmarks/outputs.py), per core "
        "count; empty: not measured (older files), not charged",
    )
    collectives_at_once: float | None = Field(
        None,
        description="how many collectives a rank's process group progresses at once on this host: two alltoalls "
        "in series over the same two posted together (benchmarks/collectives.py); the calibrated shm backend runs "
        "round(this) at a time (calibration.apply.calibrated_backend_overrides); null: not measured",
    )
    autograd: list[AutogradFit] = Field(
        default_factory=list,
        description="autograd's cost per MLP layer beyond the written-out ops (benchmarks/autograd.py), for an "
        "implementation whose MLPs autograd differentiates (ImplementationProfile.dense_autograd); empty: not measured "
        "(NumPy, older files), not charged",
    )
    sharded_software: ShardedSoftwareFit | None = Field(
        None,
        description="TorchRec's sharded-module software per multi-rank step on each rank's compute thread "
        "(benchmarks/sharded.py), for an implementation whose sharded_software is set; null: not measured "
        "(no torchrec, older files), not charged",
    )
    arrival_skew: ArrivalSkewFit | None = Field(
        None,
        description="the last rank's lateness at a barrier after equal compute, by stretch length (benchmarks/skew.py); "
        "the simulator delays each collective of ranks on this host by it (ComputeSpec.arrival_excess); null: not "
        "measured (one rank, older files), not charged",
    )
    core_availability: list[CoreAvailabilityFit] = Field(
        default_factory=list,
        description="the typical share of its cores a multi-threaded kernel gets, per kernel and core count "
        "(benchmarks/availability.py); the GEMM tables and the sparse update's fit at more than one busy core take "
        "it (calibration.apply); empty: not measured (older files, one core), not applied",
    )
    measurements: list[Measurement] = []
    fit_quality: list[FitRow] = []
    eq_check: list[EqCheckRow] = []

    def collective(self, op: str) -> CollectiveFit:
        for c in self.collectives:
            if c.op == op:
                return c
        raise KeyError(op)

    def embedding_fit(self, op: str, distribution: str = "uniform", cores: int | None = None) -> EmbeddingFit:
        """The embedding fit of ``op`` at the core count nearest ``cores`` (None: the most cores measured)."""
        return select_embedding_fit(self.embedding, op, distribution, cores)

    def cold_output_fit(self, cores: int) -> ColdOutputFit | None:
        """The cold-output fit at the core count nearest ``cores``; None when not measured."""
        return nearest_cores(self.cold_output, cores) if self.cold_output else None

    def availability_fit(self, cores: int, kernel: str = "gemm") -> CoreAvailabilityFit | None:
        """The ``kernel``'s core-availability fit at the count nearest ``cores``; None on one core or where not
        measured."""
        fits = [f for f in self.core_availability if f.kernel == kernel]
        if cores <= 1 or not fits:
            return None
        return nearest_cores(fits, cores)

    def availability(self, cores: int, kernel: str = "gemm") -> float:
        """The core availability of ``cores`` busy cores for ``kernel``: 1 on one core or where not measured."""
        fit = self.availability_fit(cores, kernel)
        return 1.0 if fit is None else fit.availability

    def optimizer_fit(self, cores: int) -> OptimizerFit | None:
        """The optimizer fit at the core count nearest ``cores`` (None: not measured)."""
        return nearest_cores(self.optimizer, cores) if self.optimizer else None

    def autograd_fit(self, cores: int) -> AutogradFit | None:
        """The autograd fit at the core count nearest ``cores`` (None: not measured)."""
        return nearest_cores(self.autograd, cores) if self.autograd else None

    def interaction_fit(self, direction: str, cores: int, kernel: str = "framework") -> InteractionFit | None:
        """The interaction fit of ``direction`` at the core count nearest ``cores`` (None: not measured), of
        TorchRec's kernel for ``kernel`` "torchrec" where the calibration measured it, else of the framework's."""
        if kernel == "torchrec" and self.interaction_torchrec:
            return select_interaction_fit(self.interaction_torchrec, direction, cores)
        return select_interaction_fit(self.interaction, direction, cores)


def select_embedding_fit(fits: Sequence[EmbeddingFit], op: str, distribution: str, cores: int | None) -> EmbeddingFit:
    """The fit of ``op`` for ``distribution`` at the core count nearest ``cores`` (None: the most cores);
    KeyError when that op and distribution were not measured."""
    rows = [e for e in fits if e.op == op and e.distribution == distribution]
    if not rows:
        raise KeyError((op, distribution))
    return max(rows, key=lambda e: e.cores) if cores is None else nearest_cores(rows, cores)


def select_interaction_fit(fits: Sequence[InteractionFit], direction: str, cores: int) -> InteractionFit | None:
    """The fit of ``direction`` at the core count nearest ``cores``; None when that direction was not measured."""
    rows = [f for f in fits if f.direction == direction]
    return nearest_cores(rows, cores) if rows else None


def load_calibration(path: str | Path, warn_other_host: bool = True) -> Calibration:
    """Read and validate a calibration YAML; one-line DlrmsimError on a bad file, a warning if from another host
    (unless ``warn_other_host`` is off: kept evidence of other hosts, predicted again on purpose)."""
    path = Path(path)
    cal = validate(Calibration, read_yaml(path), path)
    if warn_other_host:
        warn_if_other_host(cal.host, source=str(path))
    return cal


def save_calibration(cal: Calibration, path: str | Path) -> None:
    """Write a calibration YAML (atomic rename, so a crash never leaves half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = (
        "# dlrmsim host calibration (dlrmsim calibrate). Units are in field names: GBps = 1e9 B/s, us, s, GFLOPs.\n"
        "# gemm.tables: achieved fp32 = peak_GFLOPs(cores) x efficiency(flops); memory: bw(c) = min(c x per_core, bandwidth);\n"
        "# collectives: t(n) = alpha + n / beta per collective for n bytes per rank.\n"
    )
    data = cal.model_dump(mode="json")
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(header + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120))
    tmp.replace(path)
