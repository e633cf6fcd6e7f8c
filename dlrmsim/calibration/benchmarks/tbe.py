"""fbgemm's table-batched embedding (TBE) on CPU, timed outside any DLRM step: forward, and backward with the SGD
update fused in.

This is the kernel TorchRec's ``FusedEmbeddingBagCollection`` runs on a CPU (fbgemm_gpu's
``SplitTableBatchedEmbeddingBagsCodegen`` with ``EmbeddingLocation.HOST``, ``ComputeDevice.CPU`` and
``OptimType.EXACT_SGD``), timed as a micro-benchmark so that how its time changes with the thread count and the
shapes is a measured fact and not something read off the step we validate against.

Two subjects (``TbeConfig.module``): ``"tbe"``, the kernel alone on flat (indices, offsets); and ``"sparse_arch"``,
what TorchRec's DLRM calls around it: ``torchrec.models.dlrm.SparseArch`` over a ``FusedEmbeddingBagCollection``,
from a ``KeyedJaggedTensor`` to the (batch, tables, dim) tensor of pooled embeddings ([TorchRec-1.8]
torchrec/models/dlrm.py: the collection's ``KeyedTensor`` is split per feature with ``to_dict`` and stacked again
with ``torch.cat``; backward splits the gradient the same way). That glue is not free: on this project's 2-vCPU
VM at one thread (2026-11-26) the sparse arch's forward took 0.35-2.0 ms more than the kernel's (base case 2.23
against 1.74 ms; batch 4096 7.67 against 5.69 ms), growing with the lookups and the pooled bytes, and its backward
0-1.1 ms more. The calibration times the sparse arch when torchrec is installed, as it times TorchRec's own
``InteractionArch`` (benchmarks/interaction.py): it is what the torchrec-fused implementation runs.

Each forward is timed after the calibration's flush and rewarm (``Ops.then_rewarm``), as a step meets it: the rest
of a training step streams far more than the cache holds between two of its lookups, and leaves the framework's
shared state warm. Timed back to back (until 2026-11-27), a call whose batch of ids came round again (``tbe_inputs``
builds 8; a full calibration's 11 calls revisit three of them) could find its rows still cached from the last visit.
Both ways, alternating configuration by configuration on a 2-vCPU AMD EPYC VM (quick policy, 2026-11-27,
``benchmarks/tbe_protocol_ab.py``), the rows agreed within the host's noise (update at batch 256 1.04x in the median
over 18 configurations, at 1024 1.00x), and so did TorchRec's validation predicted with each (6.0 / 15.8 % against
6.8 / 15.8 %): the quick policy's 9 calls revisit one batch, and this host's 32 MiB cache holds little of a cycle.

Each call is timed by the wall clock and by the process's CPU time (all its threads): a kernel that runs its work
on ``n`` threads shows CPU time near ``n`` x wall time, one that runs on a single thread shows CPU time = wall time
whatever ``torch.set_num_threads`` says. (No OpenMP region runs between the timed calls, so no idle OpenMP worker
spins and inflates the CPU time.) torch and fbgemm-gpu-cpu are optional; they are imported where used.
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from dlrmsim.calibration.benchmarks.embedding import ZIPF_EXPONENT, lookup_params
from dlrmsim.calibration.benchmarks.timing import BenchTask, TimingPolicy, median_spread
from dlrmsim.calibration.ops import Op, Ops, embedding_bytes, get_ops, make_indices
from dlrmsim.calibration.schema import Measurement
from dlrmsim.calibration.targets.torchrec import embedding_bag_configs, fused_collection, ids_kjt, require_torchrec

LEARNING_RATE = 0.01  # any positive rate costs the same


@dataclass(frozen=True)
class TbeConfig:
    """Tables of ``rows`` x ``dim`` fp32, ``tables`` of them batched in one TBE, ``pooling`` lookups per sample;
    ``between_bytes`` read between each forward and its backward (0: back to back); ``module`` what is timed: the
    kernel alone ("tbe") or TorchRec's sparse arch around it ("sparse_arch", see the module docstring)."""

    rows: int
    dim: int
    pooling: int
    batch: int
    tables: int = 4
    distribution: str = "uniform"
    between_bytes: int = 0
    module: Literal["tbe", "sparse_arch"] = "tbe"


@dataclass(frozen=True)
class TbeTiming:
    """Median seconds per call of the TBE forward and of its backward (with the fused SGD update) on ``threads``
    threads, and the median ratio of process CPU time to wall time over the same calls (the threads busy)."""

    config: TbeConfig
    threads: int
    forward_s: float
    backward_s: float
    forward_busy_threads: float
    backward_busy_threads: float
    samples: int


def build_tbe(cfg: TbeConfig, seed: int = 0) -> Any:
    """The TBE module TorchRec's fused embedding-bag collection builds on a CPU for ``cfg``'s tables."""
    import torch
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        OptimType,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    torch.manual_seed(seed)
    specs = [(cfg.rows, cfg.dim, EmbeddingLocation.HOST, ComputeDevice.CPU)] * cfg.tables
    return SplitTableBatchedEmbeddingBagsCodegen(
        embedding_specs=specs, optimizer=OptimType.EXACT_SGD, learning_rate=LEARNING_RATE, device=torch.device("cpu")
    )


def build_sparse_arch(cfg: TbeConfig, seed: int = 0) -> Any:
    """TorchRec's DLRM sparse arch over a fused collection of ``cfg``'s tables: feature ``f{i}`` looks up table
    ``t{i}``, as the TorchRec validation target builds it (calibration/targets/torchrec.py)."""
    torch, _ = require_torchrec()  # quietly, as the validation target imports it
    from torchrec.models.dlrm import SparseArch

    torch.manual_seed(seed)
    return SparseArch(fused_collection(embedding_bag_configs([cfg.rows] * cfg.tables, cfg.dim)))


def tbe_inputs(cfg: TbeConfig, count: int, seed: int = 0) -> list[tuple[Any, ...]]:
    """``count`` call arguments, each every table's ``batch`` x ``pooling`` lookups: (indices, offsets) in TBE's
    flat layout, or, for the sparse arch, a ``KeyedJaggedTensor`` of the same ids."""
    import torch

    rng = np.random.default_rng(seed)
    offsets = torch.arange(0, cfg.tables * cfg.batch + 1, dtype=torch.int64) * cfg.pooling
    out: list[tuple[Any, ...]] = []
    for _ in range(count):
        idx = np.concatenate(
            [make_indices(cfg.rows, cfg.batch * cfg.pooling, cfg.distribution, ZIPF_EXPONENT, rng) for _ in range(cfg.tables)]
        )
        values = torch.from_numpy(idx.astype(np.int64))
        if cfg.module == "sparse_arch":
            out.append((ids_kjt(values, cfg.tables, cfg.batch, cfg.pooling),))
        else:
            out.append((values, offsets))
    return out


def time_tbe(
    cfg: TbeConfig, threads: int, samples: int = 15, warmup: int = 3, seed: int = 0, before: Op | None = None
) -> TbeTiming:
    """Time ``samples`` forward and backward calls of the TBE of ``cfg`` on ``threads`` threads (medians), each
    with a new batch of indices as a training step has, and each forward after ``before`` (None: right after the
    previous call's backward)."""
    return _time_tbe_samples(cfg, threads, samples, warmup, seed, before)[0]


def _time_tbe_samples(
    cfg: TbeConfig, threads: int, samples: int, warmup: int, seed: int = 0, before: Op | None = None
) -> tuple[TbeTiming, list[float], list[float]]:
    """:func:`time_tbe`, with its forward and backward samples (s)."""
    import torch

    from dlrmsim.calibration.ops.torch_ops import torch_threads

    module = build_sparse_arch(cfg, seed) if cfg.module == "sparse_arch" else build_tbe(cfg, seed)
    batches = tbe_inputs(cfg, 8, seed)
    shape = (cfg.batch, cfg.tables, cfg.dim) if cfg.module == "sparse_arch" else (cfg.batch, cfg.tables * cfg.dim)
    grad = torch.full(shape, 1e-3)
    # Read between forward and backward, as a training step's dense work streams through the cache between them.
    sweep = torch.ones(cfg.between_bytes // 4) if cfg.between_bytes else None
    fwd: list[float] = []
    bwd: list[float] = []
    fwd_busy: list[float] = []
    bwd_busy: list[float] = []
    with torch_threads(threads, grad=True):
        for i in range(warmup + samples):
            args = batches[i % len(batches)]
            if before is not None:
                before()
            w0, c0 = time.perf_counter(), time.process_time()
            out = module(*args)
            w1, c1 = time.perf_counter(), time.process_time()
            if sweep is not None:
                float(sweep.sum())
                w1b, c1b = time.perf_counter(), time.process_time()
            else:
                w1b, c1b = w1, c1
            out.backward(grad)
            w2, c2 = time.perf_counter(), time.process_time()
            if i >= warmup:
                fwd.append(w1 - w0)
                bwd.append(w2 - w1b)
                fwd_busy.append((c1 - c0) / (w1 - w0))
                bwd_busy.append((c2 - c1b) / (w2 - w1b))
    med = statistics.median
    return TbeTiming(cfg, threads, med(fwd), med(bwd), med(fwd_busy), med(bwd_busy), samples), fwd, bwd


# --- as a calibration benchmark ---------------------------------------------------------------------------------

# Table shapes, poolings and distributions the TBE fit sees: as the embedding-bag benchmark's
# (benchmarks.embedding.embedding_configs), so the same terms (fixed, per lookup, per byte) separate.
TBE_SHAPES = ((2**18, 32), (2**18, 128), (2**21, 32))
TBE_POOLINGS = (4, 16, 64)
# Three batches: the TBE's backward allocates and sorts per-call buffers of every lookup (csr2csc), and its time per
# lookup is not the same at 16k and 32k lookups a table (2.2 vs 1.1 ms a table at p16, batch 2048 vs 1024 on this
# project's 2-core host): the fit must see the sizes the validation steps run. Batch 256 too, where a call's fixed
# part (TorchRec's per-feature glue) weighs most: with only 1024 and 2048 the fit put the base case's sparse-arch
# forward at batch 256 at 0.92 ms against 0.63-0.73 ms measured in the step (2-vCPU VM, 2026-11-26). The fit's
# per-table terms do not follow 256 and 1024 together (fit rows at E=32: 256 +6 to +41 %, 1024 -12 to -19 %, against
# -7 to -17 % without 256), but end to end the validation came out better with it: TorchRec's batch-256 case went
# from +17 to +39 % to +10 %, the others moved by less than the runs' noise (docs/calibration.md).
TBE_BATCHES = (256, 1024, 2048)
TBE_TABLES = 4  # a rank of the validation cases holds 4 tables in one TBE
# Bytes read between forward and backward, in last-level caches: in a training step the dense forward and backward
# run between them and push out rows the fused update re-reads (TorchRec's step on this project's 2-core host: the
# backward took 5.1-5.3 ms against 3.2-4.7 ms back to back, and 5.6-5.8 ms after a 64 MiB read). The fit's reload
# term (fit.reload_lookups) can only be told apart when its rows see that traffic change: 0, 1 and 4 caches.
TBE_SWEEP_CACHES = (1, 4)
TBE_SWEEP_BATCH = 1024  # the validation's batch, whose rows the dense work between the passes evicts


def tbe_available() -> bool:
    """Whether fbgemm-gpu-cpu (and torch) can be imported, without importing them."""
    return importlib.util.find_spec("fbgemm_gpu") is not None and importlib.util.find_spec("torch") is not None


def calibrated_module() -> Literal["tbe", "sparse_arch"]:
    """What the calibration times: TorchRec's sparse arch where torchrec is installed (what its DLRM runs), else
    fbgemm's kernel alone."""
    return "sparse_arch" if importlib.util.find_spec("torchrec") is not None else "tbe"


def tbe_configs(cache_bytes: int, module: Literal["tbe", "sparse_arch"] = "tbe") -> list[TbeConfig]:
    """The TBE shapes of the calibration, and the first shape at pooling 16, batch 1024 again with a read of ``cache_bytes``
    (the last-level cache) times each of TBE_SWEEP_CACHES between forward and backward; each timing ``module``."""
    configs = [
        TbeConfig(rows, dim, p, batch, TBE_TABLES, dist, 0, module)
        for rows, dim in TBE_SHAPES
        for p in TBE_POOLINGS
        for batch in TBE_BATCHES
        for dist in ("uniform", "zipf")
    ]
    rows, dim = TBE_SHAPES[0]
    configs += [
        TbeConfig(rows, dim, 16, TBE_SWEEP_BATCH, TBE_TABLES, dist, k * cache_bytes, module)
        for k in TBE_SWEEP_CACHES
        for dist in ("uniform", "zipf")
    ]
    return configs


def fused_update_bytes(batch: int, pooling: int, dim: int, unique_rows: int, index_bytes: int = 8) -> float:
    """Bytes of a backward with the SGD update fused in, counted as the simulator counts its fused update task
    (taskgraph.embedding_backward_update_tasks with fuse_backward_update): the pooled gradient and the indices
    read, every touched fp32 row read and written once; no gradient row per lookup is written or read back."""
    return batch * dim * 4.0 + batch * pooling * index_bytes + 2.0 * unique_rows * dim * 4.0


def config_label(cfg: TbeConfig) -> str:
    """A TBE configuration's part of its measurement and task names (the read between passes when there is one,
    and the module when it is TorchRec's sparse arch)."""
    label = f"r{cfg.rows} d{cfg.dim} p{cfg.pooling} {cfg.distribution} b{cfg.batch} t{cfg.tables}"
    label = f"{label} s{cfg.between_bytes}" if cfg.between_bytes else label
    return f"{label} {cfg.module}" if cfg.module != "tbe" else label


def tbe_measurements(t: TbeTiming, unique_rows: int, spreads: tuple[float, float]) -> list[Measurement]:
    """Calibration rows of one timed TBE: its forward (op "forward") and its backward with the update fused in
    (op "update"), each as the time **per table** (the call's time / its tables) with one table's lookups and
    bytes (the forward's as ops.embedding_bytes, the update's as :func:`fused_update_bytes`), so the fit's terms
    are per table and per byte as the simulator's embedding tasks count them."""
    cfg = t.config
    nbytes = {
        "forward": embedding_bytes(cfg.batch, cfg.pooling, cfg.dim, unique_rows)["forward"],
        "update": fused_update_bytes(cfg.batch, cfg.pooling, cfg.dim, unique_rows),
    }
    out = []
    for op, time_s, spread in (("forward", t.forward_s, spreads[0]), ("update", t.backward_s, spreads[1])):
        out.append(
            Measurement(
                benchmark="tbe",
                name=f"tbe {op} {config_label(cfg)} c{t.threads}",
                cores=t.threads,
                params={
                    **lookup_params(cfg, op, "rest", unique_rows, cfg.tables),
                    "between_bytes": cfg.between_bytes,
                    "module": cfg.module,
                },
                bytes=nbytes[op],
                time_s=time_s / cfg.tables,
                spread_pct=spread,
                repeats=t.samples,
            )
        )
    return out


def unique_rows_of(cfg: TbeConfig) -> int:
    """Distinct rows one table's lookups of ``cfg`` touch, the mean over four draws of its distribution."""
    rng = np.random.default_rng(cfg.rows + cfg.pooling)
    draws = [make_indices(cfg.rows, cfg.batch * cfg.pooling, cfg.distribution, ZIPF_EXPONENT, rng) for _ in range(4)]
    return round(statistics.mean(np.unique(d).size for d in draws))


def tbe_rows(cfg: TbeConfig, policy: TimingPolicy, threads: int, before: Op | None) -> list[Measurement]:
    """The calibration rows of ``cfg`` timed under ``policy`` on ``threads`` threads, each forward after ``before``
    (None: right after the previous call's backward)."""
    t, spreads = _time_with_spread(cfg, threads, max(policy.repeats, 7), policy.warmup, before)
    return tbe_measurements(t, unique_rows_of(cfg), spreads)


def tbe_task(cfg: TbeConfig, policy: TimingPolicy, threads: int = 1, ops: Ops | None = None) -> BenchTask:
    """One TBE configuration timed on ``threads`` threads (1: the thread fbgemm-gpu-cpu's kernels run on, see
    training/presets/implementations/torchrec-fused.yaml), each forward after ``ops``' flush and rewarm (the torch
    ops when None): see the module docstring."""

    def run() -> list[Measurement]:
        k = ops if ops is not None else get_ops("torch")
        return tbe_rows(cfg, policy, threads, k.then_rewarm(k.flush))

    name = f"tbe {config_label(cfg)} c{threads}"
    return BenchTask("fbgemm TBE", name, run, repeat=True)


def _time_with_spread(
    cfg: TbeConfig, threads: int, samples: int, warmup: int, before: Op | None
) -> tuple[TbeTiming, tuple[float, float]]:
    """:func:`time_tbe` and the (max - min) / median spread in % of its forward and backward samples."""
    t, fwd, bwd = _time_tbe_samples(cfg, threads, samples, warmup, before=before)
    return t, (median_spread(fwd)[1], median_spread(bwd)[1])
