"""TorchRec as a validation target: a DLRM training step built with TorchRec's own modules, and its planner's estimate.

What users of TorchRec write for a CPU DLRM (torchrec.models.dlrm.DLRM over an embedding-bag collection) is
what this module times, so ``dlrmsim validate --against torchrec`` measures dlrmsim against an implementation
this project did not write. Two embedding paths exist, and they do different work per step:

- ``fused``: ``FusedEmbeddingBagCollection``, fbgemm's table-batched embedding with the SGD update fused into
  backward (no table gradient is materialised; touched rows are updated in place);
- ``ebc``: a plain ``EmbeddingBagCollection`` whose table weights get dense, full-size gradients and are
  stepped by ``torch.optim.SGD`` with the MLPs (what a newcomer writes first; its cost grows with table size).

The planner estimate is TorchRec's own ``EmbeddingPerfEstimator`` (inside ``EmbeddingShardingPlanner``): its
per-shard ``Perf`` of forward/backward compute and communication, in milliseconds, summed over tables.

Timing follows the repeatable-measurement rule of calibration: each sample loops whole steps for at least
``min_sample_s`` (tens of milliseconds, so scheduler ticks average out), samples repeat, and the result keeps the
median with its spread. torch, fbgemm-gpu-cpu and torchrec are optional (``make torchrec`` installs the matched set).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from dlrmsim.calibration.ops import make_indices
from dlrmsim.calibration.ops.base import FLUSH_LLC_MULTIPLE
from dlrmsim.calibration.targets.measurement import StepMeasurement, time_samples
from dlrmsim.errors import DlrmsimError
from dlrmsim.host import last_level_cache_bytes
from dlrmsim.workloads.schema import Workload

EmbeddingPath = Literal["fused", "ebc"]
LEARNING_RATE = 0.01  # any positive rate costs the same; SGD as in the DLRM reference training
# At most this many pre-built batches (fresh_batch_count): enough for the validation's smallest batches on a cache of
# some hundreds of MiB, a few hundred MB of ids at most.
MAX_FRESH_BATCHES = 256


def quiet_torchrec() -> None:
    """Keep TorchRec's advice about how we call it off the user's terminal: its planner logs two warnings a plan
    (the Topology built directly, and dense sizes estimated in a dry run, neither of which touches the
    per-table estimate we report), torchrec's import makes torch.fx log a deprecation, and the sharded path warns
    about its own internals. A validation run printed some 200 such lines around its table. Errors still show."""
    logging.getLogger("torchrec").setLevel(logging.ERROR)
    logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"torchrec(\.|$)")
    warnings.filterwarnings("ignore", module=r"fbgemm_gpu(\.|$)")


def require_torchrec() -> tuple[Any, Any]:
    """Import torch and torchrec, or raise a one-line error that says how to install them."""
    quiet_torchrec()
    try:
        import torch
        import torchrec
    except ImportError as exc:  # optional extra: a one-line hint instead of a traceback
        raise DlrmsimError(
            f"the TorchRec validation target needs torch, fbgemm-gpu-cpu and torchrec ({exc.name} is missing): "
            "run make torchrec, or pip install torch==2.13.0 fbgemm-gpu-cpu==1.8.0 and then torchrec==1.8.0 --no-deps"
        ) from None
    return torch, torchrec


def check_workload(w: Workload) -> None:
    """Refuse, in one line, a workload TorchRec's DLRM cannot build (the single-rank and the DMP target share it)."""
    if w.interaction != "dot":
        raise DlrmsimError(f"workload {w.name}: interaction: {w.interaction} has no TorchRec DLRM; use interaction: dot")
    if w.bottom_mlp[-1] != w.embedding_dim:
        raise DlrmsimError(f"workload {w.name}: TorchRec's DLRM needs bottom_mlp[-1] == embedding_dim ({w.embedding_dim})")
    if w.precision != "fp32":
        raise DlrmsimError(f"workload {w.name}: precision {w.precision}: the TorchRec target runs fp32 only")


def embedding_bag_configs(table_rows: Sequence[int], dim: int) -> list[Any]:
    """One ``EmbeddingBagConfig`` per table of ``table_rows`` rows of ``dim``; feature ``f{i}`` looks up table
    ``t{i}`` (the target's model and the calibration's sparse-arch benchmark, benchmarks/tbe.py, alike)."""
    _, torchrec = require_torchrec()
    return [
        torchrec.EmbeddingBagConfig(name=f"t{i}", embedding_dim=dim, num_embeddings=rows, feature_names=[f"f{i}"])
        for i, rows in enumerate(table_rows)
    ]


def table_configs(w: Workload) -> list[Any]:
    """One ``EmbeddingBagConfig`` per table of ``w`` (:func:`embedding_bag_configs`)."""
    return embedding_bag_configs(w.table_rows, w.embedding_dim)


def fused_collection(tables: list[Any]) -> Any:
    """The ``FusedEmbeddingBagCollection`` of ``tables`` with fbgemm's SGD fused into its backward."""
    torch, _ = require_torchrec()
    from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection

    return FusedEmbeddingBagCollection(tables=tables, optimizer_type=torch.optim.SGD, optimizer_kwargs={"lr": LEARNING_RATE})


def ids_kjt(values: Any, tables: int, batch: int, lookups: int) -> Any:
    """The ``KeyedJaggedTensor`` of ``values`` (int64, table after table): ``lookups`` ids per sample of ``batch``
    samples for each of features ``f0`` .. ``f{tables-1}``."""
    torch, torchrec = require_torchrec()
    return torchrec.KeyedJaggedTensor.from_lengths_sync(
        keys=[f"f{i}" for i in range(tables)],
        values=values,
        lengths=torch.full((tables * batch,), lookups, dtype=torch.int32),
    )


def dlrm_over(w: Workload, ebc: Any) -> Any:
    """TorchRec's ``DLRM`` with ``w``'s bottom and top MLPs over the embedding-bag collection ``ebc`` (the one-process
    target's and the DMP target's model alike)."""
    require_torchrec()
    from torchrec.models.dlrm import DLRM

    return DLRM(
        embedding_bag_collection=ebc,
        dense_in_features=w.bottom_mlp[0],
        dense_arch_layer_sizes=list(w.bottom_mlp[1:]),
        over_arch_layer_sizes=list(w.top_mlp),
    )


def build_model(w: Workload, path: EmbeddingPath, seed: int = 0) -> tuple[Any, Any]:
    """TorchRec DLRM of workload ``w`` and the optimizer that steps what backward does not update.

    Returns (model, optimizer). With ``fused`` the optimizer holds only the dense (MLP) parameters: the tables
    are updated inside backward by fbgemm. With ``ebc`` it holds every parameter, tables included.
    """
    torch, _ = require_torchrec()
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    check_workload(w)
    torch.manual_seed(seed)
    tables = table_configs(w)
    model = dlrm_over(w, fused_collection(tables) if path == "fused" else EmbeddingBagCollection(tables=tables))
    params = [p for n, p in model.named_parameters() if path == "ebc" or not n.startswith("sparse_arch.")]
    return model, torch.optim.SGD(params, lr=LEARNING_RATE)


def fresh_batch_count(w: Workload, batch: int, cache_bytes: int | None = None) -> int:
    """How many distinct batches a timed loop cycles so that each step meets its rows as a fresh minibatch does:
    between two visits of a batch the others read at least twice the last-level cache (``cache_bytes``; this host's
    when None) of other rows, or every table's rows where the tables are smaller (they stay cached in training too).
    At least 4, at most MAX_FRESH_BATCHES.

    Training draws a new minibatch each step (the project runner draws one per step too, the reference DLRM one per
    iteration); a loop over a few batches revisits their rows every few steps, and where the cache holds them they
    are still there. A cycle of 4 at the validation's batch 1024 reads 32 MiB of rows: within the 300 MiB last-level
    cache the 16-core machines report. On a 2-vCPU AMD EPYC VM (32 MiB, 2026-11-27), blocks of steps over 4 batches
    and over this count alternating in one process took the same time: batch-256 7.74 / 7.60 and 7.96 / 7.82 ms,
    lookups-4 13.6 / 13.7 and 13.8 / 13.5 ms (a first try against 300 batches, 6.46 / 7.07 ms, did not repeat)."""
    cache = last_level_cache_bytes() if cache_bytes is None else cache_bytes
    row_bytes = w.embedding_dim * w.table_element_bytes
    per_batch = w.num_tables * batch * w.lookups_per_sample * row_bytes
    tables = sum(w.table_rows) * row_bytes
    need = min(FLUSH_LLC_MULTIPLE * cache, tables)
    return int(min(MAX_FRESH_BATCHES, max(4, np.ceil(need / max(per_batch, 1.0)) + 1)))


def make_batches(w: Workload, batch: int, count: int, seed: int = 0) -> list[tuple[Any, Any, Any]]:
    """``count`` (dense, sparse KeyedJaggedTensor, labels) batches with ``w``'s lookups and index distribution."""
    torch, _ = require_torchrec()
    rng = np.random.default_rng(seed)
    dist = w.index_distribution
    exponent = getattr(dist, "exponent", 0.0)
    lookups = w.lookups_per_sample
    out = []
    for _ in range(count):
        values = np.concatenate([make_indices(rows, batch * lookups, dist.kind, exponent, rng) for rows in w.table_rows])
        kjt = ids_kjt(torch.from_numpy(values.astype(np.int64)), w.num_tables, batch, lookups)
        dense = torch.from_numpy(rng.standard_normal((batch, w.bottom_mlp[0])).astype(np.float32))
        labels = torch.from_numpy((rng.random((batch, 1)) < 0.5).astype(np.float32))
        out.append((dense, kjt, labels))
    return out


def training_step(model: Any, opt: Any, batches: list[tuple[Any, Any, Any]]) -> Callable[[int], None]:
    """Step ``i`` of training ``model`` (a DLRM, or DistributedModelParallel around one) on ``batches[i % len]``:
    zero the optimizer's gradients, forward, BCE loss, backward (with any update fused into it), optimizer step."""
    torch, _ = require_torchrec()
    loss_fn = torch.nn.BCEWithLogitsLoss()

    def step(i: int) -> None:
        dense, kjt, labels = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss_fn(model(dense, kjt), labels).backward()
        opt.step()

    return step


def measure_step(
    w: Workload,
    batch: int,
    threads: int,
    path: EmbeddingPath = "fused",
    samples: int = 7,
    min_sample_s: float = 0.05,
    warmup_steps: int = 3,
    seed: int = 0,
) -> StepMeasurement:
    """Time TorchRec training steps (forward, BCE loss, backward, optimizer step) on ``threads`` threads.

    Samples as :func:`~dlrmsim.calibration.targets.measurement.time_samples` takes them, cycling over pre-built
    batches (so input generation is not timed), enough of them that no step finds its rows still cached from an
    earlier visit (:func:`fresh_batch_count`).
    """
    require_torchrec()
    from dlrmsim.calibration.ops.torch_ops import torch_threads

    model, opt = build_model(w, path, seed)
    step = training_step(model, opt, make_batches(w, batch, fresh_batch_count(w, batch), seed))
    # Autograd on, whatever the process set before (the calibration's torch ops turn it off).
    with torch_threads(threads, grad=True):
        samples_s, k = time_samples(step, samples, min_sample_s, warmup_steps)
    return StepMeasurement(f"torchrec/{path}", threads, batch, tuple(samples_s), k)


# dlrmsim's phase names (validate.sim_phase) of the DLRM's four parts, forward and backward
ARCH_PHASES = {
    "dense_arch": ("bottom_mlp_fwd", "bottom_mlp_bwd"),
    "sparse_arch": ("embedding_fwd", "embedding_update"),
    "inter_arch": ("interaction_fwd", "interaction_bwd"),
    "over_arch": ("top_mlp_fwd", "top_mlp_bwd"),
}


def measure_phases(
    w: Workload, batch: int, threads: int, path: EmbeddingPath = "fused", min_s: float = 0.3, warmup_steps: int = 3, seed: int = 0
) -> dict[str, float]:
    """Mean seconds per step of each phase of TorchRec's training step, by dlrmsim's phase names, from hooks on the
    DLRM's parts over steps lasting ``min_s`` in all. A pass of its own, apart from the timed samples: the hooks
    cost nothing measurable at one thread, but about 13 % of a wide MLP's step at two threads (2-vCPU VM).

    Forward: each part's forward hooks. Backward runs on the calling thread, one autograd node after another:
    the top MLP's full backward hooks bracket its backward; the bottom MLP's runs from its output's autograd node
    to its last parameter gradient; the interaction's from the end of the top MLP's to the first of the two
    parts' backward; ``embedding_update`` is the rest of backward after the loss's own part: fbgemm's fused
    backward and SGD update of the tables. ``mlp_update`` is the optimizer step of the MLPs; ``other`` the rest:
    zeroing the gradients, the loss forward and backward, and autograd's start."""
    torch, _ = require_torchrec()
    from dlrmsim.calibration.ops.torch_ops import torch_threads

    model, opt = build_model(w, path, seed)
    batches = make_batches(w, batch, fresh_batch_count(w, batch), seed)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    clock = time.perf_counter
    marks: dict[str, float] = {}
    totals: dict[str, float] = {}

    def add(phase: str, seconds: float) -> None:
        totals[phase] = totals.get(phase, 0.0) + seconds

    def first(key: str) -> Callable[..., None]:
        def hook(*_: Any) -> None:  # returns None: a hook's return value would replace the gradients
            marks.setdefault(key, clock())

        return hook

    for name, (fwd, _bwd) in ARCH_PHASES.items():
        part = getattr(model, name)

        def before(_m: Any, _a: Any, name: str = name) -> None:
            marks[f"{name}.fwd"] = clock()

        def after(_m: Any, _a: Any, out: Any, fwd: str = fwd, name: str = name) -> None:
            add(fwd, clock() - marks[f"{name}.fwd"])
            if name in ("dense_arch", "sparse_arch"):
                # the moment autograd starts this part's backward: just before its output's node runs
                out.grad_fn.register_prehook(first(f"{name}.bwd"))

        part.register_forward_pre_hook(before)
        part.register_forward_hook(after)
    # The bottom MLP's backward ends with the last of its parameters' gradients (its input needs none).
    for param in model.dense_arch.parameters():
        param.register_post_accumulate_grad_hook(lambda _p: marks.__setitem__("dense_arch.bwd_end", clock()))
    # The top MLP's input needs a gradient, so its full backward hooks bracket its backward.
    model.over_arch.register_full_backward_pre_hook(first("over_arch.bwd"))
    model.over_arch.register_full_backward_hook(lambda *_: marks.__setitem__("over_arch.bwd_end", clock()))

    def step(i: int, timed: bool) -> None:
        dense, kjt, labels = batches[i % len(batches)]
        marks.clear()
        t0 = clock()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(dense_features=dense, sparse_features=kjt), labels)
        t1 = clock()
        loss.backward()
        t2 = clock()
        opt.step()
        t3 = clock()
        if not timed:
            return
        top = marks["over_arch.bwd_end"] - marks["over_arch.bwd"]
        bottom = marks["dense_arch.bwd_end"] - marks["dense_arch.bwd"]
        inter = min(marks["dense_arch.bwd"], marks["sparse_arch.bwd"]) - marks["over_arch.bwd_end"]
        loss_bwd = marks["over_arch.bwd"] - t1
        add("top_mlp_bwd", top)
        add("bottom_mlp_bwd", bottom)
        add("interaction_bwd", inter)
        add("embedding_update", (t2 - t1) - loss_bwd - top - inter - bottom)
        add("mlp_update", t3 - t2)
        add("other", (t1 - t0) + loss_bwd)

    with torch_threads(threads, grad=True):
        for i in range(warmup_steps):
            step(i, timed=False)
        totals.clear()  # the warm-up's forward hooks added theirs
        steps, t_start = 0, clock()
        while steps < 3 or clock() - t_start < min_s:
            step(warmup_steps + steps, timed=True)
            steps += 1
    fwd_parts = sum(totals.get(f, 0.0) for f, _ in ARCH_PHASES.values())
    totals["other"] = totals.get("other", 0.0) - fwd_parts  # the loss forward: the step's forward less its parts'
    return {k: v / steps for k, v in totals.items()}


@dataclass(frozen=True)
class PlannerEstimate:
    """TorchRec planner's per-step estimate for the tables of a workload (seconds), and the sharding it chose."""

    step_s: float
    compute_s: float
    comms_s: float
    sharding: dict[str, str]


def planner_estimate(w: Workload, batch: int, world_size: int = 1) -> PlannerEstimate:
    """What ``EmbeddingShardingPlanner`` with ``EmbeddingPerfEstimator`` predicts per step for ``w``'s tables.

    ``batch`` is the per-rank batch, as TorchRec's planner takes it; pooling factors come from the workload's
    lookups per sample. The planner reports milliseconds; the estimate is the slowest rank's sum of its shards.
    """
    torch, torchrec = require_torchrec()
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.planner.types import ParameterConstraints

    check_workload(w)
    topo = Topology(world_size=world_size, compute_device="cpu", local_world_size=world_size)
    constraints = {f"t{i}": ParameterConstraints(pooling_factors=[float(w.lookups_per_sample)]) for i in range(w.num_tables)}
    planner = EmbeddingShardingPlanner(topology=topo, batch_size=batch, constraints=constraints)
    ebc = torchrec.EmbeddingBagCollection(tables=table_configs(w), device=torch.device("meta"))
    planner.plan(ebc, [EmbeddingBagCollectionSharder()])
    per_rank_compute = [0.0] * world_size
    per_rank_comms = [0.0] * world_size
    sharding = {}
    for option in planner._best_plan:  # the chosen ShardingOptions; TorchRec exposes no public accessor
        sharding[option.name] = str(option.sharding_type)
        for shard in option.shards:
            p = shard.perf
            rank = shard.rank or 0
            per_rank_compute[rank] += (p.fwd_compute + p.bwd_compute + p.prefetch_compute) / 1e3
            per_rank_comms[rank] += (p.fwd_comms + p.bwd_comms + p.input_dist_comms) / 1e3
    totals = [c + m for c, m in zip(per_rank_compute, per_rank_comms, strict=True)]
    worst = int(np.argmax(totals))
    return PlannerEstimate(totals[worst], per_rank_compute[worst], per_rank_comms[worst], sharding)
