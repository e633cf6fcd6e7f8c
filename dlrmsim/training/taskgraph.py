"""One training iteration as per-rank programs: the ordered compute tasks, collective posts and waits.

This module is pure: from a workload, a placement and the iteration settings it builds what every rank
does and in which order, with flops and bytes from the workload model. The SimPy side
(``training.py``) walks these programs; nothing here knows about time.

Program order on a rank follows the hybrid-parallel DLRM schedule: embedding lookups first, the forward
alltoall posted at once and overlapped only with the bottom MLP; the top MLP's backward posts weight
gradient buckets for allreduce as soon as each bucket's layers are done, so the allreduce overlaps the rest
of backward; the backward alltoall overlaps the bottom MLP's backward; the embedding backward and update
wait for it; the dense optimizer waits for every allreduce.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

import numpy as np

from dlrmsim.engine.costs import RowVisit
from dlrmsim.training.implementations import InputDist
from dlrmsim.training.optimizers import OptimizerSpec, load_optimizer
from dlrmsim.workloads import model
from dlrmsim.workloads.model import Layer, Pass
from dlrmsim.workloads.placement import Placement, Shard
from dlrmsim.workloads.schema import Workload

CommVariant = Literal["alltoall", "fused-scatter", "scatter-list"]
UpdateStrategy = Literal["atomic", "rtm", "race_free"]


@dataclass(frozen=True)
class UpdateCosts:
    """Processor parameters of the sparse embedding update, from the topology YAML (seconds).

    ``conflict_s`` is the time one conflicting update of a cache line costs when two cores write the same
    embedding row (a cache-line transfer between cores for atomics, an abort and retry for RTM).
    """

    atomic_conflict_s: float
    rtm_conflict_s: float
    cache_line_bytes: int = 64
    core_bandwidth_Bps: float = float("inf")  # what one core streams from memory (socket bandwidth / saturation cores)


@dataclass(frozen=True)
class IterationSettings:
    """What shapes the task graph: scaling, communication variant, blocking, buckets, update and optimizer."""

    global_batch: int
    comm: CommVariant = "alltoall"
    blocking: bool = False
    bucket_bytes: float = 25e6
    update_strategy: UpdateStrategy = "race_free"
    fuse_backward_update: bool = False
    input_dist: InputDist | None = None  # the implementation sends the local batch's indices to the owners
    # The implementation's sharded modules run their own software on the compute thread each multi-rank step
    # (ImplementationProfile.sharded_software): one task of kind "sharded" whose rows are the local batch's ids.
    sharded_software: bool = False
    # Autograd differentiates the MLPs (ImplementationProfile.dense_autograd): one task of kind "autograd_call" where
    # backward starts, and one of kind "autograd" per layer's backward, whose rows are its input and output elements.
    dense_autograd: bool = False
    dense_first: bool = False  # bottom MLP before the lookups, its backward after the embeddings' (RankProgram.build)
    # The step writes its loss out in element-wise ops (ImplementationProfile.loss "written_out", the project runner):
    # the loss task counts its scalar-operand ops and its mean (activation_task); "module": one loss module's call,
    # a task of its own each way (loss_task)
    written_out_loss: bool = True
    # Which parameters a torch.optim object steps (ImplementationProfile.optimizer_object): the optimizer task's
    # rows are those tensors, each paying ComputeSpec.row_time_s_by_kind["optimizer"]
    optimizer_object: str = "none"
    # Follow each GEMM and activation input's traffic since its last touch, and each GEMM's and interaction's since
    # its kernels last ran (operand_traffic): only where the ranks' specs charge for them (a calibrated host:
    # costs.tracks_operand_traffic), as it costs build time on every rank's program.
    track_operands: bool = False
    optimizer: OptimizerSpec = field(default_factory=lambda: load_optimizer("sgd"))
    threads: int = 1  # compute threads per rank, for the race-free update's load balance
    # Task kinds the implementation runs on fewer threads than the rank's cores (implementations.ImplementationProfile):
    # (kind, threads) pairs; the rank runs such a task on that many cores.
    op_threads: tuple[tuple[str, int], ...] = ()
    update_costs: UpdateCosts = field(default_factory=lambda: UpdateCosts(0.0, 0.0))
    # Pre/post-processing passes per collective: copies into and out of flat buffers, gradient averaging.
    allreduce_prepost_passes: float = 3.0
    alltoall_prepost_passes: float = 2.0


@dataclass(frozen=True)
class Task:
    """A unit of work on one rank's compute stream (flops in op, bytes of memory traffic)."""

    name: str
    kind: str  # gemm | elementwise | embedding | embedding_bwd | interaction | interaction_bwd | update | optimizer | copy |
    # sharded | autograd | autograd_call (implementations.TASK_KINDS)
    flops: float
    bytes: float
    category: str = "compute"  # compute | prepost
    serial_s: float = 0.0  # time that does not parallelise over cores (contended cache-line transfers)
    ops: float = 1.0  # framework operations (kernel launches) the task stands for; each pays ComputeSpec.task_overhead_s
    # Of those ops, how many take a Python scalar operand and how many reduce: each pays ComputeSpec.scalar_op_extra_s
    # or reduce_op_extra_s beyond the dispatch (costs.op_class_extra_s)
    scalar_ops: float = 0.0
    reduce_ops: float = 0.0
    rows: float = 0.0  # items the task walks one by one (embedding rows looked up or updated, samples of the
    # interaction's batched small matrices); each pays ComputeSpec.row_time_s_by_kind[kind]
    tables_bytes: float = 0.0  # embedding tables on the rank whose page tables a lookup walks (costs.fixed_time_s)
    reuse_bytes: float = 0.0  # bytes through the rank's cache between a table's forward and its update (ditto)
    run_start: bool = False  # the first of a run of same-kind tasks on its rank: pays ComputeSpec.run_start_s_by_kind
    visit: RowVisit | None = None  # an update's distinct rows, its table's rows and a row's bytes (costs.sorted_visits)
    # Elements of each of its element-wise framework ops whose thread-pool fork no calibration benchmark times
    # (activations, the dense optimizer); an op above the grain pays ComputeSpec.fork_join_s (costs.fork_join_time_s).
    op_elements: tuple[float, ...] = ()
    # A GEMM's inputs: (bytes, traffic through the rank's caches since the input was last touched in bytes) each,
    # and the traffic since the rank's previous GEMM, which last warmed the kernel's code and packing buffers
    # (operand_traffic); their evicted shares cost ComputeSpec.gemm_evicted_* (costs.evicted_operand_time_s). An
    # interaction task's kernel_traffic is that since the rank's previous interaction (costs.evicted_fixed_time_s).
    # An activation's inputs the same way: what of them is still cached streams at ComputeSpec.elementwise_cache_Bps
    # (costs.elementwise_cached_split).
    operands: tuple[tuple[float, float], ...] = ()
    kernel_traffic: float = math.inf
    columns: int = 0  # a GEMM's output columns, n of C[m, n] (costs.vector_block_efficiency); 0 = not a GEMM
    out_bytes: float = 0.0  # the new tensor the task returns (an MLP layer's GEMM and activation; costs.cold_output_time_s)


@dataclass(frozen=True)
class Collective:
    """A collective call every participating rank posts: alltoall(v), allreduce, scatter, reduce-scatter, allgather.

    ``nbytes`` follows the engine's convention for ``op``; ``matrix`` (bytes, src x dst) is set for
    alltoallv and scatter variants. ``category`` is what the breakdown charges its waits to.
    """

    cid: str
    op: str
    category: str  # alltoall | allreduce
    nbytes: float = 0.0
    matrix: np.ndarray | None = field(default=None, compare=False)
    root: int | None = None


@dataclass(frozen=True)
class Post:
    collective: str


@dataclass(frozen=True)
class Wait:
    collective: str


Step = Task | Post | Wait


@dataclass
class IterationGraph:
    """Per-rank programs plus the collectives they post, in posting order."""

    programs: list[list[Step]]
    collectives: dict[str, Collective]

    def tasks(self, rank: int) -> list[Task]:
        return [s for s in self.programs[rank] if isinstance(s, Task)]


def local_batches(global_batch: int, ranks: int) -> list[int]:
    """Samples per rank: the global batch split as evenly as integers allow."""
    base, extra = divmod(global_batch, ranks)
    return [base + (1 if r < extra else 0) for r in range(ranks)]


# --- cost formulas of single tasks -------------------------------------------------------------------------


@dataclass(frozen=True)
class Touches:
    """The named tensors a task reads as inputs (name, bytes) and the ones it writes or otherwise touches."""

    reads: tuple[tuple[str, float], ...] = ()
    writes: tuple[str, ...] = ()


# The pseudo-tensor every GEMM touches: the kernel's code and packing buffers, warm after the rank's last GEMM.
GEMM_KERNEL = "gemm-kernel"
# The dot interaction's kernels (stack, batched products, pair gather and scatter), touched by both its directions.
INTERACTION_KERNEL = "interaction-kernel"
INTERACTION_TASK_KINDS = ("interaction", "interaction_bwd")


@dataclass(frozen=True)
class GemmReuse:
    """What a GEMM finds in the caches: (bytes, traffic since last touched) of each input, and the traffic since
    the rank's previous GEMM (bytes)."""

    operands: tuple[tuple[float, float], ...]
    kernel_traffic: float


def operand_traffic(program: list[Step], touches: dict[int, Touches]) -> dict[int, GemmReuse]:
    """Per GEMM step of ``program`` (keyed by its index) with ``touches``: (bytes, traffic since last touched) of
    each tensor it reads, the traffic being the bytes of the rank's tasks strictly between the last task that
    touched the tensor and this one, and the same for the kernel's state, which every GEMM touches. The program
    repeats every iteration, so a tensor last touched late in the previous iteration (the weights, by the
    optimizer) counts the traffic from there to the program's end plus that from its start. Like
    bytes_since_lookups, each task's traffic counts once, an upper bound on the distinct bytes. Each interaction
    step gets the traffic since the previous one (its kernels' state) and no operands; each activation step its
    inputs' (bytes, traffic) and no kernel traffic."""
    kernels = {"gemm": GEMM_KERNEL, **dict.fromkeys(INTERACTION_TASK_KINDS, INTERACTION_KERNEL)}

    def kernel_of(i: int) -> str | None:
        step = program[i]
        return kernels.get(step.kind) if isinstance(step, Task) else None

    touches = {i: Touches(t.reads, (*t.writes, k)) if (k := kernel_of(i)) else t for i, t in touches.items()}
    sizes = [s.bytes if isinstance(s, Task) else 0.0 for s in program]
    after = list(itertools.accumulate(sizes))
    total = after[-1] if after else 0.0
    before = [a - b for a, b in zip(after, sizes, strict=True)]
    last: dict[str, float] = {}
    for i, t in sorted(touches.items()):
        for name in (*(n for n, _ in t.reads), *t.writes):
            last[name] = after[i] - total  # where the previous iteration left it
    out: dict[int, GemmReuse] = {}

    def inputs(i: int, t: Touches) -> tuple[tuple[float, float], ...]:
        """Each input's (bytes, traffic since it was last touched; inf if never) at step ``i``."""
        return tuple((b, before[i] - last[n] if n in last else math.inf) for n, b in t.reads)

    for i, t in sorted(touches.items()):
        step = program[i]
        if isinstance(step, Task) and step.kind == "gemm" and t.reads:
            out[i] = GemmReuse(inputs(i, t), before[i] - last[GEMM_KERNEL])
        elif isinstance(step, Task) and step.kind in INTERACTION_TASK_KINDS:
            out[i] = GemmReuse((), before[i] - last[INTERACTION_KERNEL])
        elif isinstance(step, Task) and step.kind == "elementwise" and t.reads:
            # an activation's inputs (costs.elementwise_cached_split); no kernel state of its own
            out[i] = GemmReuse(inputs(i, t), math.inf)
        for name in (*(n for n, _ in t.reads), *t.writes):
            last[name] = after[i]
    return out


def layer_touches(layer: Layer, batch: int, which: Pass | Literal["act_fwd", "act_bwd"], element_bytes: float) -> Touches:
    """The tensors one pass of ``layer`` reads and writes: its input activation ``a:<previous>`` (``a:input``
    for the bottom MLP's first layer, ``a:interaction`` for the top's), weights ``w:<layer>``, output ``a:<layer>``,
    output gradient ``g:<layer>``, input gradient ``g:<previous>`` and weight gradient ``dw:<layer>``."""
    eb = element_bytes
    prev = layer_input(layer)
    x, g = batch * layer.fan_in * eb, batch * layer.fan_out * eb
    weights = layer.fan_in * layer.fan_out * eb
    if which == "act_fwd":  # reads the GEMM's result (in place of it, as the model names it)
        return Touches(((f"a:{layer.name}", g),), (f"a:{layer.name}",))
    if which == "act_bwd":  # the output gradient, masked by the saved output
        return Touches(((f"g:{layer.name}", g), (f"a:{layer.name}", g)), (f"g:{layer.name}", f"a:{layer.name}"))
    if which is Pass.FORWARD:
        return Touches(((f"a:{prev}", x), (f"w:{layer.name}", weights)), (f"a:{layer.name}",))
    if which is Pass.BACKWARD_WEIGHTS:
        return Touches(((f"g:{layer.name}", g), (f"a:{prev}", x)), (f"dw:{layer.name}",))
    return Touches(((f"g:{layer.name}", g), (f"w:{layer.name}", weights)), (f"g:{prev}",))


def layer_input(layer: Layer) -> str:
    """The name of what feeds ``layer``: the previous layer of its MLP, the dense input or the interaction."""
    if layer.index > 0:
        return f"{'bot' if layer.part == 'bottom' else 'top'}{layer.index - 1}"
    return "input" if layer.part == "bottom" else "interaction"


def bottom_output(w: Workload) -> str:
    """The name of what the interaction reads from the dense side: the bottom MLP's last layer, or the input."""
    layers = model.bottom_layers(w)
    return layers[-1].name if layers else "input"


def gemm_task(w: Workload, layer: Layer, batch: int, which: Pass) -> Task | None:
    flops = model.layer_flops(layer, batch, which)
    if flops == 0:
        return None
    g = model.layer_gemm(layer, batch, which)
    # Framework ops: one GEMM call; the weight gradient also reduces the bias gradient (dz.sum(0)), a reduction.
    weights = which is Pass.BACKWARD_WEIGHTS
    ops = 2.0 if weights else 1.0
    out = g.m * g.n * w.element_bytes
    return Task(
        f"{layer.name}.{which.value}",
        "gemm",
        flops,
        g.bytes_moved(w.element_bytes),
        ops=ops,
        reduce_ops=1.0 if weights else 0.0,
        columns=g.n,
        out_bytes=out,
    )


# The binary cross-entropy loss beyond the final activation's one op, counted from dlrm_runner: 11 element-wise ops
# forward (add, log, mul, rsub, rsub, add, log, mul, add, neg, mean) and 1 backward (the sigmoid's and the loss's
# gradients are (p - y) / n, 2 ops with the activation's). Written out, it is part of the last activation's task;
# a loss module's call is a task of its own (loss_task).
LOSS_OPS_FORWARD, LOSS_OPS_BACKWARD = 11.0, 1.0


def _elementwise_pass(
    name: str, w: Workload, batch: int, width: int, backward: bool, ops: float, scalar_ops: float = 0.0, reduce_ops: float = 0.0
) -> Task:
    """``ops`` unfused element-wise ops over a (batch, width) tensor, forward or backward (bandwidth-bound)."""
    elements = float(batch * width)
    return Task(
        f"{name}.{'bwd' if backward else 'fwd'}",
        "elementwise",
        elements,
        model.activation_bytes(batch, width, w.element_bytes, backward),
        ops=ops,
        scalar_ops=scalar_ops,
        reduce_ops=reduce_ops,
        op_elements=(elements,) * int(ops),
        out_bytes=elements * w.element_bytes,
    )


def activation_task(w: Workload, layer: Layer, batch: int, backward: bool = False, written_out_loss: bool = True) -> Task:
    """ReLU (or the final sigmoid) after a layer's GEMM, or its gradient in backward: bandwidth-bound."""
    # One framework op (relu / threshold_backward), except after the network's last layer when the step writes its
    # loss out (``written_out_loss``): the sigmoid and the loss's ops on a batch-long vector (LOSS_OPS_*), of which 4
    # forward add a Python float (p + eps, 1 - p, + eps, 1 - y) and the mean reduces, and backward divides by the batch
    # size. A loss module's call (TorchRec's, the reference DLRM's) is a task of its own (:func:`loss_task`): the layer
    # keeps its one op, as the implementations' phase tables book the loss outside the top MLP.
    last = layer.part == "top" and layer.index == len(w.top_mlp) - 1 and written_out_loss
    ops = 1.0 + ((LOSS_OPS_BACKWARD if backward else LOSS_OPS_FORWARD) if last else 0.0)
    scalar_ops, reduce_ops = ((1.0, 0.0) if backward else (4.0, 1.0)) if last else (0.0, 0.0)
    return _elementwise_pass(f"{layer.name}.act", w, batch, layer.fan_out, backward, ops, scalar_ops, reduce_ops)


def loss_task(w: Workload, batch: int, backward: bool = False) -> Task:
    """A loss module's call on the network's output (TorchRec's ``BCEWithLogitsLoss``, the reference DLRM's loss), for an
    implementation that does not write its loss out: the ops the written-out loss adds to the last activation
    (LOSS_OPS_*), without their scalar-operand and reduction classes (a module's ops are not re-measured), and a pass
    over the batch-long output of its own (the written-out loss's ops share the activation's). Named outside the top
    MLP, as those implementations' phase tables book the loss (with autograd's start) under ``other``."""
    ops = LOSS_OPS_BACKWARD if backward else LOSS_OPS_FORWARD
    return _elementwise_pass("loss", w, batch, model.top_layers(w)[-1].fan_out, backward, ops)


def embedding_forward_task(w: Workload, name: str, batch: int, columns: int, lookup_fraction: float = 1.0) -> Task:
    """Pooled lookups of one table (or slice): P rows summed per sample; ``lookup_fraction`` for row shards."""
    lookups = batch * w.lookups_per_sample * lookup_fraction
    read_eb = w.element_bytes if w.table_precision is None else w.table_element_bytes
    nbytes = lookups * (columns * read_eb + w.index_bytes) + batch * columns * w.element_bytes
    return Task(name, "embedding", flops=lookups * columns, bytes=nbytes, rows=lookups)


def embedding_backward_update_tasks(
    w: Workload, name: str, rows: int, batch: int, columns: int, s: IterationSettings, lookup_fraction: float = 1.0
) -> list[Task]:
    """Embedding backward (expand the pooled gradient into one row per lookup) and the sparse SGD update.

    The update touches each distinct row once (read and write the fp32 row) and adds every lookup's
    gradient row into it. Contention depends on the strategy:
    - atomic / rtm: duplicate lookups of a row from different cores conflict; each conflict moves
      the row's cache lines between cores. Conflicts on one row serialise, so the hottest row's
      duplicates form a serial chain (``serial_s``) that extra cores cannot shorten.
    - race_free: every thread scans all indices (they fit in cache) and updates only its own row range;
      no conflicts, but the thread owning the hottest row must read all of that row's gradient rows on
      its own, at one core's bandwidth (load imbalance, ``serial_s``).
    Fusing backward and update skips writing and re-reading the expanded gradient rows.
    """
    lookups = batch * w.lookups_per_sample * lookup_fraction
    grad_row_bytes = columns * 4.0
    pooled_grad_bytes = batch * columns * w.element_bytes
    expand_bytes = lookups * grad_row_bytes  # write one gradient row per lookup
    unique = _expected_unique_rows(rows, lookups, w.index_distribution)
    row_bytes = columns * w.table_element_bytes
    update_bytes = unique * 2 * row_bytes + lookups * (w.index_bytes)
    tasks: list[Task] = []
    if s.fuse_backward_update:
        update_bytes += pooled_grad_bytes
    else:
        tasks.append(Task(f"{name}.bwd", "embedding_bwd", flops=0.0, bytes=pooled_grad_bytes + expand_bytes, rows=lookups))
        update_bytes += expand_bytes  # read the gradient rows back
    flops = lookups * columns * 2  # scale and add per gradient element
    serial_s = 0.0
    if s.update_strategy in ("atomic", "rtm"):
        per_conflict = s.update_costs.atomic_conflict_s if s.update_strategy == "atomic" else s.update_costs.rtm_conflict_s
        lines = max(1.0, np.ceil(grad_row_bytes / s.update_costs.cache_line_bytes))
        hottest = _hottest_row_share(rows, w.index_distribution) * lookups
        # Only duplicates on different cores conflict; one thread's repeated updates stay in its cache.
        cross_core = 1.0 - 1.0 / max(1, s.threads)
        serial_s = max(0.0, hottest - 1.0) * lines * per_conflict * cross_core
    elif s.threads > 1:
        hottest = _hottest_row_share(rows, w.index_distribution) * lookups
        serial_s = hottest * grad_row_bytes / s.update_costs.core_bandwidth_Bps
    visit = RowVisit(unique_rows=unique, table_rows=float(rows), row_bytes=row_bytes)
    tasks.append(Task(f"{name}.update", "update", flops=flops, bytes=update_bytes, serial_s=serial_s, rows=lookups, visit=visit))
    return tasks


def _expected_unique_rows(rows: int, draws: float, dist: object) -> float:
    """:func:`model.expected_unique_rows`, memoized: every rank and rank count asks for the same tables."""
    try:
        return _unique_rows_cached(rows, draws, dist)
    except TypeError:  # an unhashable distribution
        return model.expected_unique_rows(rows, draws, dist)  # type: ignore[arg-type]


def _hottest_row_share(rows: int, dist: object) -> float:
    """:func:`model.hottest_row_share`, memoized."""
    try:
        return _hottest_cached(rows, dist)
    except TypeError:
        return model.hottest_row_share(rows, dist)  # type: ignore[arg-type]


@lru_cache(maxsize=4096)
def _unique_rows_cached(rows: int, draws: float, dist: object) -> float:
    return model.expected_unique_rows(rows, draws, dist)  # type: ignore[arg-type]


@lru_cache(maxsize=4096)
def _hottest_cached(rows: int, dist: object) -> float:
    return model.hottest_row_share(rows, dist)  # type: ignore[arg-type]


def copy_task(name: str, nbytes: float, passes: float) -> Task | None:
    """Pre/post-processing: ``passes`` read+write sweeps over ``nbytes`` (flat-buffer copies, averaging)."""
    if nbytes <= 0 or passes <= 0:
        return None
    return Task(name, "copy", flops=0.0, bytes=2.0 * nbytes * passes, category="prepost")


# --- the iteration --------------------------------------------------------------------------------------


# add_layer's (task, touches) per (layer, local batch, pass), shared by the ranks of one build_iteration
LayerSteps = dict[tuple[Layer, int, str], tuple[Task | None, Touches]]


def build_iteration(w: Workload, placement: Placement, s: IterationSettings) -> IterationGraph:
    """Per-rank programs for one training iteration of ``w`` on ``placement.ranks`` ranks."""
    p = placement.ranks
    n_global = s.global_batch
    batches = local_batches(n_global, p)
    eb = w.element_bytes
    collectives: dict[str, Collective] = {}
    programs: list[list[Step]] = [[] for _ in range(p)]
    row_wise = placement.spec.strategy == "row_wise"

    # Forward exchange: who sends what to whom.
    fwd_ids: list[str] = []
    if p > 1 and placement.sharded_tables:
        if row_wise:
            # Each rank holds a row slice of every table: partial sums for all samples, reduce-scattered.
            nbytes = len(placement.sharded_tables) * n_global * w.embedding_dim * eb
            collectives["a2a_fwd"] = Collective("a2a_fwd", "reduce_scatter", "alltoall", nbytes=nbytes)
            collectives["a2a_bwd"] = Collective("a2a_bwd", "allgather", "alltoall", nbytes=nbytes)
            fwd_ids = ["a2a_fwd"]
        else:
            fwd_ids = _exchange_collectives(w, placement, batches, s, collectives)

    bwd_ids = [c.replace("fwd", "bwd") for c in fwd_ids] if not row_wise else (["a2a_bwd"] if fwd_ids else [])
    for cid in fwd_ids:
        if not row_wise:
            fwd = collectives[cid]
            assert fwd.matrix is not None
            collectives[cid.replace("fwd", "bwd")] = Collective(
                cid.replace("fwd", "bwd"), fwd.op, "alltoall", matrix=fwd.matrix.T.copy(), root=None
            )

    # The v1 loader sends every table's indices of the local samples to the table's owners.
    if p > 1 and w.loader is not None and w.loader.kind == "v1" and placement.sharded_tables:
        collectives[LOADER_EXCHANGE] = Collective(
            LOADER_EXCHANGE, "alltoallv", "alltoall", matrix=loader_index_matrix(w, placement, batches)
        )

    # The implementation's input distribution: sizes first, then lengths and values to the owners.
    if p > 1 and s.input_dist is not None and placement.sharded_tables:
        collectives.update(input_dist_collectives(w, placement, batches, s.input_dist, row_wise))

    # Allreduce buckets: gradients become ready in backward order (last top layer first).
    buckets = _buckets(w, placement, s)
    for i, (_, nbytes) in enumerate(buckets):
        collectives[f"allreduce{i}"] = Collective(f"allreduce{i}", "allreduce", "allreduce", nbytes=nbytes)

    # Ranks with the same local batch run the same MLP passes: each (layer, batch, pass) is built once and shared
    # (tasks are immutable), which at 64 ranks was most of the programs' construction time.
    layer_steps: LayerSteps = {}
    for r in range(p):
        programs[r] = RankProgram(w, placement, s, r, batches, (fwd_ids, bwd_ids), buckets, collectives, layer_steps).build()
    return IterationGraph(programs=programs, collectives=collectives)


LOADER_EXCHANGE = "loader_a2a"
INPUT_SPLITS, INPUT_LENGTHS, INPUT_VALUES = "input_a2a.splits", "input_a2a.lengths", "input_a2a.values"


def input_dist_collectives(
    w: Workload, placement: Placement, batches: list[int], dist: InputDist, row_wise: bool
) -> dict[str, Collective]:
    """The three alltoalls of an implementation's input distribution (implementations.InputDist), as byte
    matrices (src x dst): the sizes of what each destination will receive (per table shard it owns), the
    lengths of rank src's local samples in those shards' tables, and their index values (a row shard gets its
    share of a table's lookups, a column shard all of them)."""
    local = np.array(batches, dtype=float)
    matrices = {
        INPUT_SPLITS: _to_shard_owners(placement, lambda sh: dist.split_bytes_per_table),
        INPUT_LENGTHS: _to_shard_owners(placement, lambda sh: local * dist.length_bytes),
        INPUT_VALUES: _to_shard_owners(
            placement, lambda sh: local * w.lookups_per_sample * lookup_fraction(w, sh, row_wise) * w.index_bytes
        ),
    }
    return {cid: Collective(cid, "alltoallv", "alltoall", matrix=m) for cid, m in matrices.items()}


def loader_index_matrix(w: Workload, placement: Placement, batches: list[int]) -> np.ndarray:
    """Bytes (src x dst) of the v1 loader's index exchange: rank src's local samples' indices of every table
    shard on dst (row-wise shards each need all of a table's indices; replicated tables stay local)."""
    assert w.loader is not None
    per_shard = w.lookups_per_sample * w.loader.value_bytes
    send = np.array(batches, dtype=float)
    return _to_shard_owners(placement, lambda sh: send * per_shard)


def _to_shard_owners(placement: Placement, send: Callable[[Shard], np.ndarray | float]) -> np.ndarray:
    """Bytes (src x dst) when every rank sends ``send(shard)`` bytes (one value, or one per source rank) to the
    owner of each table shard, and nothing to itself."""
    p = placement.ranks
    m = np.zeros((p, p))
    for sh in placement.shards:
        m[:, sh.rank] += send(sh)
    np.fill_diagonal(m, 0.0)
    return m


def loader_task(w: Workload, local_batch: int, global_batch: int) -> Task | None:
    """Reading this iteration's samples: ``passes`` read+write sweeps over what the rank's loader reads."""
    nbytes = model.loader_read_bytes(w, local_batch, global_batch)
    if nbytes <= 0 or w.loader is None or w.loader.passes <= 0:
        return None
    return Task("loader.read", "copy", flops=0.0, bytes=2.0 * nbytes * w.loader.passes)


def _exchange_collectives(
    w: Workload, placement: Placement, batches: list[int], s: IterationSettings, collectives: dict[str, Collective]
) -> list[str]:
    """Forward embedding exchange as alltoall, one fused scatter per rank, or one scatter per table."""
    p = placement.ranks
    eb = w.element_bytes
    send = np.array(batches, dtype=float) * eb  # bytes per column for each destination

    def matrix_for(shards: list[Shard]) -> np.ndarray:
        m = np.zeros((p, p))
        for sh in shards:
            m[sh.rank] += sh.columns * send
        np.fill_diagonal(m, 0.0)
        return m

    if s.comm == "alltoall":
        collectives["a2a_fwd"] = Collective("a2a_fwd", "alltoallv", "alltoall", matrix=matrix_for(list(placement.shards)))
        return ["a2a_fwd"]
    ids: list[str] = []
    if s.comm == "fused-scatter":
        for r in range(p):
            shards = placement.shards_on(r)
            if shards:
                cid = f"scatter_fwd.r{r}"
                collectives[cid] = Collective(cid, "scatter", "alltoall", matrix=matrix_for(shards), root=r)
                ids.append(cid)
        return ids
    for sh in placement.shards:  # scatter-list: one call per table shard
        cid = f"scatter_fwd.t{sh.table}.c{sh.col_offset}"
        collectives[cid] = Collective(cid, "scatter", "alltoall", matrix=matrix_for([sh]), root=sh.rank)
        ids.append(cid)
    return ids


def _buckets(w: Workload, placement: Placement, s: IterationSettings) -> list[tuple[list[str], float]]:
    """Gradient buckets in the order backward produces them: (layer names, bytes).

    Replicated (data-parallel) embedding tables join the last bucket: their gradients are ready only
    after the embedding backward.
    """
    if placement.ranks == 1:
        return []
    eb = w.element_bytes
    order = list(reversed(model.top_layers(w))) + list(reversed(model.bottom_layers(w)))
    out: list[tuple[list[str], float]] = []
    names: list[str] = []
    size = 0.0
    for layer in order:
        names.append(layer.name)
        size += layer.params * eb
        if size >= s.bucket_bytes:
            out.append((names, size))
            names, size = [], 0.0
    replicated = sum(w.table_rows[t] * w.embedding_dim * eb for t in placement.replicated_tables)
    if replicated:
        names.append("replicated_tables")
        size += replicated
    if names:
        out.append((names, size))
    return out


class RankProgram:
    """Builds one rank's program for one iteration, phase by phase (the hybrid-parallel schedule in the
    module docstring). ``build`` runs the phases in order; each phase method appends its steps."""

    def __init__(
        self,
        w: Workload,
        placement: Placement,
        s: IterationSettings,
        rank: int,
        batches: list[int],
        exchange: tuple[list[str], list[str]],
        buckets: list[tuple[list[str], float]],
        collectives: dict[str, Collective],
        layer_steps: LayerSteps,
    ) -> None:
        self.w = w
        self.placement = placement
        self.s = s
        self.r = rank
        self.n = batches[rank]
        self.fwd_ids, self.bwd_ids = exchange
        self.buckets = buckets
        self.collectives = collectives
        self.row_wise = placement.spec.strategy == "row_wise"
        self.shards = placement.shards_on(rank)
        self.last_in_bucket = {names[-1]: i for i, (names, _) in enumerate(buckets)}
        self.prog: list[Step] = []
        self.touches: dict[int, Touches] = {}  # by index in prog
        self.layer_steps = layer_steps  # add_layer's, shared by a build's ranks

    def build(self) -> list[Step]:
        """The rank's steps, phases 0-7, with table-walk sizes and run starts marked. With ``dense_first`` (an
        implementation profile's: PyTorch's DLRM, TorchRec and the project runner call the bottom MLP first and
        leave the backward's order to autograd) the bottom MLP runs before the lookups and its backward after the
        embedding backward; the exchanges are waited for where their results are first needed."""
        self.load_data()
        if self.s.dense_first:
            self.bottom_layers_forward()
            self.embedding_lookups()
            self.wait_forward_exchange()
            self.interaction_and_top_forward()
            self.top_backward()
            self.post_backward_exchange()
            self.wait_backward_exchange()
            self.embedding_backward_and_update(before_update=self.bottom_layers_backward)
        else:
            self.embedding_lookups()
            self.bottom_forward()
            self.interaction_and_top_forward()
            self.top_backward()
            self.bottom_backward()
            self.embedding_backward_and_update()
        self.dense_optimizer()
        return self.finish()

    # --- helpers ---
    def add(self, task: Task | None, touches: Touches | None = None) -> None:
        if task is not None:
            if touches is not None:
                self.touches[len(self.prog)] = touches
            self.prog.append(task)

    def add_layer(self, layer: Layer, which: Pass | Literal["act_fwd", "act_bwd"]) -> None:
        """One pass of an MLP layer (its GEMM, or its activation forward or backward), with the tensors it touches."""
        w, n = self.w, self.n
        key = (layer, n, which)  # Pass is a StrEnum: "fwd" and Pass.FORWARD are one key
        got = self.layer_steps.get(key)
        if got is None:
            if which == "act_fwd" or which == "act_bwd":
                task: Task | None = activation_task(w, layer, n, which == "act_bwd", self.s.written_out_loss)
            else:
                task = gemm_task(w, layer, n, which)
            got = self.layer_steps[key] = (task, layer_touches(layer, n, which, w.element_bytes))
        self.add(*got)

    def post(self, cid: str) -> None:
        self.prog.append(Post(cid))
        if self.s.blocking:
            self.prog.append(Wait(cid))

    def wait(self, cid: str) -> None:
        if not self.s.blocking:
            self.prog.append(Wait(cid))

    def exchange_prepost(self, ids: list[str], stage: str) -> None:
        sent = sum(_bytes_touching(self.collectives[c], self.r) for c in ids)
        self.add(copy_task(f"{stage}.prepost", sent, self.s.alltoall_prepost_passes / 2))

    def backward(self, layer: Layer) -> None:
        """One MLP layer's backward; posts its gradient bucket when the layer is the bucket's last."""
        s = self.s
        self.add_layer(layer, "act_bwd")
        self.add_layer(layer, Pass.BACKWARD_WEIGHTS)
        self.add_layer(layer, Pass.BACKWARD_DATA)
        if s.dense_autograd:
            # The graph autograd recorded for the layer in forward and the engine's run of its nodes, charged with its
            # backward (its phase's hooks see both): per layer and per element of its input and output.
            self.add(
                Task(f"{layer.name}.autograd", "autograd", 0.0, 0.0, ops=0.0, rows=float(self.n * (layer.fan_in + layer.fan_out)))
            )
        if layer.name in self.last_in_bucket:
            i = self.last_in_bucket[layer.name]
            self.add(copy_task(f"allreduce{i}.pre", self.buckets[i][1], s.allreduce_prepost_passes / 3))
            self.post(f"allreduce{i}")

    # --- phases ---
    def load_data(self) -> None:
        """0. The data loader reads this iteration's samples (the whole global minibatch with the reference
        loader, the local batch with v1, which then sends the tables' indices to their owners and waits: the
        lookups need them); then the implementation's own input distribution, if it has one."""
        self.add(loader_task(self.w, self.n, self.s.global_batch), Touches(writes=("a:input",)))
        if LOADER_EXCHANGE in self.collectives:
            self.post(LOADER_EXCHANGE)
            self.wait(LOADER_EXCHANGE)
        if INPUT_SPLITS in self.collectives and self.s.sharded_software:
            # Splitting and permuting the local batch's ids by destination, and the rest of the sharded modules'
            # per-step software (output distribution, awaitables, DDP), charged here as one task: a blocking
            # step pays it in sequence wherever it falls.
            w = self.w
            ids = self.n * w.num_tables * w.lookups_per_sample
            self.add(Task("sharded.software", "sharded", 0.0, 0.0, ops=0.0, rows=float(ids)))
        if INPUT_SPLITS in self.collectives:
            # The receivers size their buffers from the first exchange; the implementation then posts the
            # lengths and the values together (asynchronous calls, even in blocking mode) and waits for both.
            self.post(INPUT_SPLITS)
            self.wait(INPUT_SPLITS)
            self.prog += [Post(INPUT_LENGTHS), Post(INPUT_VALUES), Wait(INPUT_LENGTHS), Wait(INPUT_VALUES)]

    def embedding_lookups(self) -> None:
        """1. Embedding lookups: own shards over the global batch (row shards see 1/p of the lookups),
        replicated tables over the local batch; then the forward exchange is posted."""
        w, s, r = self.w, self.s, self.r
        n_global = s.global_batch
        scatter_list = s.comm == "scatter-list" and not self.row_wise and self.placement.ranks > 1
        if scatter_list:
            # ScatterList: every rank walks the tables in the same order and calls each table's scatter (the
            # owner as root, the others to receive); the owner computes that table's lookups just before, so
            # each scatter can start while later tables are still being looked up.
            for sh in sorted(self.placement.shards, key=lambda x: (x.table, x.col_offset)):
                cid = f"scatter_fwd.t{sh.table}.c{sh.col_offset}"
                if sh.rank == r:
                    self.add(embedding_forward_task(w, f"emb{sh.table}.c{sh.col_offset}.fwd", n_global, sh.columns))
                self.exchange_prepost([cid], cid)
                self.post(cid)
        else:
            for sh in self.shards:
                self.add(
                    embedding_forward_task(
                        w, f"emb{sh.table}.c{sh.col_offset}.fwd", n_global, sh.columns, lookup_fraction(w, sh, self.row_wise)
                    )
                )
        for t in self.placement.replicated_tables:
            self.add(embedding_forward_task(w, f"emb{t}.replica.fwd", self.n, w.embedding_dim))
        if not scatter_list:
            if self.fwd_ids:
                self.exchange_prepost(self.fwd_ids, "a2a_fwd")
            for cid in self.fwd_ids:
                self.post(cid)

    def bottom_forward(self) -> None:
        """2. Bottom MLP forward overlaps the forward exchange."""
        self.bottom_layers_forward()
        self.wait_forward_exchange()

    def bottom_layers_forward(self) -> None:
        for layer in model.bottom_layers(self.w):
            self.add_layer(layer, Pass.FORWARD)
            self.add_layer(layer, "act_fwd")

    def wait_forward_exchange(self) -> None:
        for cid in self.fwd_ids:
            self.wait(cid)

    def interaction_and_top_forward(self) -> None:
        """3. Interaction and top MLP. The interaction walks n small per-sample matrices (``rows``: a
        calibration fits a per-sample time)."""
        w, n = self.w, self.n
        self.add(
            Task(
                "interaction.fwd",
                "interaction",
                model.interaction_flops(w, n),
                model.interaction_bytes(w, n),
                ops=model.interaction_ops(w),
                rows=float(n),
            ),
            Touches(writes=(f"a:{bottom_output(w)}", "a:interaction")),
        )
        for layer in model.top_layers(w):
            self.add_layer(layer, Pass.FORWARD)
            self.add_layer(layer, "act_fwd")
        if not self.s.written_out_loss:
            self.add(loss_task(w, n))

    def top_backward(self) -> None:
        """4. Top MLP backward, posting each bucket when its last layer's weight gradient is done; then the
        interaction's backward."""
        w, n = self.w, self.n
        if self.s.dense_autograd:
            # The step's one backward() call: the engine's start, before the top MLP's first node (the phase table
            # books it under other, with the loss's backward).
            self.add(Task("autograd.start", "autograd_call", 0.0, 0.0, ops=0.0))
        if not self.s.written_out_loss:
            self.add(loss_task(w, n, backward=True))  # the loss's node runs first
        for layer in reversed(model.top_layers(w)):
            self.backward(layer)
        self.add(
            Task(
                "interaction.bwd",
                "interaction_bwd",
                model.interaction_flops(w, n, backward=True),
                2 * model.interaction_bytes(w, n),
                ops=model.interaction_ops(w, backward=True),
                rows=float(n),
            ),
            Touches(writes=("g:interaction", f"g:{bottom_output(w)}")),
        )

    def bottom_backward(self) -> None:
        """5. The backward exchange goes out now and overlaps the bottom MLP backward."""
        self.post_backward_exchange()
        self.bottom_layers_backward()
        self.wait_backward_exchange()

    def post_backward_exchange(self) -> None:
        if self.bwd_ids:
            self.exchange_prepost(self.bwd_ids, "a2a_bwd")
        for cid in self.bwd_ids:
            self.post(cid)

    def bottom_layers_backward(self) -> None:
        for layer in reversed(model.bottom_layers(self.w)):
            self.backward(layer)

    def wait_backward_exchange(self) -> None:
        for cid in self.bwd_ids:
            self.wait(cid)

    def embedding_backward_and_update(self, before_update: Callable[[], None] | None = None) -> None:
        """6. Embedding backward and sparse update once the gradients have arrived: autograd runs every
        table's backward before the optimizer updates any (PyTorch's DLRM and the calibration's runner alike).
        ``before_update``: what runs between the backward (a fused backward's update included) and the separate
        update tasks (the dense-first order's bottom MLP backward)."""
        w, s, n = self.w, self.s, self.n
        sparse = [
            task
            for sh in self.shards
            for task in embedding_backward_update_tasks(
                w,
                f"emb{sh.table}.c{sh.col_offset}",
                sh.rows,
                s.global_batch,
                sh.columns,
                s,
                lookup_fraction(w, sh, self.row_wise),
            )
        ]
        for task in sparse:
            if task.kind != "update":
                self.add(task)
        for t in self.placement.replicated_tables:
            self.add(
                Task(
                    f"emb{t}.replica.bwd",
                    "embedding_bwd",
                    0.0,
                    n * w.lookups_per_sample * w.embedding_dim * 4.0 + n * w.embedding_dim * w.element_bytes,
                )
            )
        updates = [task for task in sparse if task.kind == "update"]
        # A fused update runs inside the backward, so before whatever follows the backward; a separate one after it.
        inside, after = (updates, []) if self.s.fuse_backward_update else ([], updates)
        for task in inside:
            self.add(task)
        if before_update is not None:
            before_update()
        for task in after:
            self.add(task)
        pending = [
            i for i, (names, _) in enumerate(self.buckets) if "replicated_tables" in names and names[-1] == "replicated_tables"
        ]
        for i in pending:
            self.add(copy_task(f"allreduce{i}.pre", self.buckets[i][1], s.allreduce_prepost_passes / 3))
            self.post(f"allreduce{i}")

    def dense_optimizer(self) -> None:
        """7. Dense optimizer after every allreduce (post-processing: averaging and copy back)."""
        w, s = self.w, self.s
        for i, (_, nbytes) in enumerate(self.buckets):
            self.wait(f"allreduce{i}")
            self.add(copy_task(f"allreduce{i}.post", nbytes, s.allreduce_prepost_passes * 2 / 3))
        dense_params = self.placement.dense_params(w)
        # Each layer's weight and bias, and each replicated table: the optimizer's ops run once per tensor.
        sizes = [float(n) for layer in model.mlp_layers(w) for n in (layer.fan_in * layer.fan_out, layer.fan_out)]
        sizes += [float(w.table_rows[t] * w.embedding_dim) for t in self.placement.replicated_tables]
        per_tensor = s.optimizer.ops_per_tensor
        # An optimizer object walks every tensor it holds in Python: the dense ones, and with "all" the rank's
        # table shards too (their sparse updates are tasks of their own; their walk is paid here).
        walked = {"none": 0, "dense": len(sizes), "all": len(sizes) + len(self.shards)}[s.optimizer_object]
        self.add(
            Task(
                "optimizer",
                "optimizer",
                flops=2.0 * dense_params,
                bytes=s.optimizer.bytes_per_param * dense_params,
                ops=per_tensor * len(sizes),
                rows=float(walked),
                op_elements=tuple(n for n in sizes for _ in range(int(per_tensor))),
            ),
            Touches(writes=tuple(f"{t}:{layer.name}" for layer in model.mlp_layers(w) for t in ("w", "dw"))),
        )

    def finish(self) -> list[Step]:
        """Lookups and updates read the tables at random: their page walks compete with every table on the
        rank. An update re-reads what its table's forward and backward touched, after every other table's did
        and after the dense work the rank ran since its lookups (:func:`bytes_since_lookups`). A GEMM carries, for
        each of its inputs, the traffic since a task last touched it (:func:`operand_traffic`)."""
        w = self.w
        held = self.placement.table_bytes_on(w, self.r)
        lookups = self.s.global_batch * w.lookups_per_sample
        tables = sum(
            update_reuse_bytes(w, sh.rows, lookups * lookup_fraction(w, sh, self.row_wise), sh.columns) for sh in self.shards
        )
        between = bytes_since_lookups(self.prog)
        operands = operand_traffic(self.prog, self.touches) if self.s.track_operands else {}
        return mark_run_starts(
            [
                _evolve(t, tables_bytes=held, reuse_bytes=tables + between[i] if t.kind == "update" else 0.0)
                if isinstance(t, Task) and t.kind in TABLE_WALK_KINDS
                else _evolve(t, operands=operands[i].operands, kernel_traffic=operands[i].kernel_traffic)
                if i in operands
                else t
                for i, t in enumerate(self.prog)
            ]
        )


# Kinds whose bytes the update's working set already counts (update_reuse_bytes: the rows the lookups read and
# the gradient rows the backward wrote) or that are the updates themselves.
_TABLE_WORK_KINDS = ("embedding", "embedding_bwd", "update")


def bytes_since_lookups(program: list[Step]) -> list[float]:
    """Per step of a rank's ``program``: the bytes its other tasks (MLPs, interaction, copies) moved since the
    rank's last embedding lookup before it (0 before any lookup).

    Between a table's forward and its update the dense forward and backward stream their activations, weights
    and gradients through the same last-level cache, pushing out rows the update re-reads: the LRU distance of
    those rows is the table working set plus these bytes. Counting each task's traffic once is an upper bound
    on the distinct bytes (a tensor read twice counts twice); the cache_miss_share it feeds saturates anyway.
    """
    out: list[float] = []
    acc = 0.0
    seen_lookup = False
    for step in program:
        if isinstance(step, Task):
            if step.kind == "embedding":
                acc, seen_lookup = 0.0, True
            elif seen_lookup and step.kind not in _TABLE_WORK_KINDS:
                acc += step.bytes
        out.append(acc)
    return out


def _evolve(task: Task, **changes: object) -> Task:
    """``dataclasses.replace(task, **changes)`` for a Task, which has no ``__post_init__``: a copy with the fields
    set, without replace's field-by-field re-construction (a 1024-rank program builds some 50,000 of them)."""
    out = object.__new__(Task)
    fields = out.__dict__  # a frozen dataclass's own fields, on a fresh instance (copy.copy costs ten times more)
    fields.update(task.__dict__)
    fields.update(changes)
    return out


def mark_run_starts(program: list[Step]) -> list[Step]:
    """``program`` with ``run_start`` set on every task whose kind differs from the rank's previous task's
    (the first task too: the previous iteration ended with other work). Posts and waits do not break a run."""
    out: list[Step] = []
    previous: str | None = None
    for step in program:
        if isinstance(step, Task):
            if step.kind != previous:
                step = _evolve(step, run_start=True)
            previous = step.kind
        out.append(step)
    return out


TABLE_WALK_KINDS = ("embedding", "update")  # task kinds that read rows of the tables (the backward does not)


def lookup_fraction(w: Workload, shard: Shard, row_wise: bool) -> float:
    """Share of a table's lookups that land on ``shard``: its share of the rows when tables are split by rows."""
    return shard.rows / w.table_rows[shard.table] if row_wise else 1.0


def update_reuse_bytes(w: Workload, rows: int, lookups: float, columns: int) -> float:
    """Bytes of one table (slice) that its sparse update touches again after the forward and backward
    touched them (bytes): every distinct row the forward read and every gradient row the backward wrote."""
    return _expected_unique_rows(rows, lookups, w.index_distribution) * columns * w.table_element_bytes + lookups * columns * 4.0


def _bytes_touching(c: Collective, rank: int) -> float:
    """Bytes a rank packs or unpacks for an exchange: what it sends plus what it receives."""
    if c.matrix is None:
        return c.nbytes
    return float(c.matrix[rank].sum() + c.matrix[:, rank].sum())
