"""fbgemm's table-batched embedding (TBE) on CPU, timed alone: forward, and backward with the SGD update fused in.

This is the kernel TorchRec's ``FusedEmbeddingBagCollection`` runs on a CPU (fbgemm_gpu's
``SplitTableBatchedEmbeddingBagsCodegen`` with ``EmbeddingLocation.HOST``, ``ComputeDevice.CPU`` and
``OptimType.EXACT_SGD``), outside any DLRM step, so that how its time changes with the thread count is a
micro-benchmark fact and not something read off the step we validate against.

Each call is timed by the wall clock and by the process's CPU time (all its threads): a kernel that runs its work
on ``n`` threads shows CPU time near ``n`` x wall time, one that runs on a single thread shows CPU time = wall time
whatever ``torch.set_num_threads`` says. (No OpenMP region runs between the timed calls, so no idle OpenMP worker
spins and inflates the CPU time.) torch and fbgemm-gpu-cpu are optional; they are imported where used.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlrmsim.calibration.ops import make_indices

LEARNING_RATE = 0.01  # any positive rate costs the same


@dataclass(frozen=True)
class TbeConfig:
    """Tables of ``rows`` x ``dim`` fp32, ``tables`` of them batched in one TBE, ``pooling`` lookups per sample."""

    rows: int
    dim: int
    pooling: int
    batch: int
    tables: int = 4
    distribution: str = "uniform"


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


def tbe_inputs(cfg: TbeConfig, count: int, seed: int = 0) -> list[tuple[Any, Any]]:
    """``count`` (indices, offsets) batches: every table's ``batch`` x ``pooling`` lookups, TBE's flat layout."""
    import torch

    rng = np.random.default_rng(seed)
    offsets = torch.arange(0, cfg.tables * cfg.batch + 1, dtype=torch.int64) * cfg.pooling
    out = []
    for _ in range(count):
        idx = np.concatenate(
            [make_indices(cfg.rows, cfg.batch * cfg.pooling, cfg.distribution, 1.05, rng) for _ in range(cfg.tables)]
        )
        out.append((torch.from_numpy(idx.astype(np.int64)), offsets))
    return out


def time_tbe(cfg: TbeConfig, threads: int, samples: int = 15, warmup: int = 3, seed: int = 0) -> TbeTiming:
    """Time ``samples`` forward and backward calls of the TBE of ``cfg`` on ``threads`` threads (medians), each
    with a new batch of indices as a training step has."""
    import torch

    tbe = build_tbe(cfg, seed)
    batches = tbe_inputs(cfg, 8, seed)
    grad = torch.full((cfg.batch, cfg.tables * cfg.dim), 1e-3)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    fwd: list[float] = []
    bwd: list[float] = []
    fwd_busy: list[float] = []
    bwd_busy: list[float] = []
    try:
        with torch.enable_grad():
            for i in range(warmup + samples):
                indices, offsets = batches[i % len(batches)]
                w0, c0 = time.perf_counter(), time.process_time()
                out = tbe(indices, offsets)
                w1, c1 = time.perf_counter(), time.process_time()
                out.backward(grad)
                w2, c2 = time.perf_counter(), time.process_time()
                if i >= warmup:
                    fwd.append(w1 - w0)
                    bwd.append(w2 - w1)
                    fwd_busy.append((c1 - c0) / (w1 - w0))
                    bwd_busy.append((c2 - c1) / (w2 - w1))
    finally:
        torch.set_num_threads(previous)
    med = statistics.median
    return TbeTiming(cfg, threads, med(fwd), med(bwd), med(fwd_busy), med(bwd_busy), samples)
