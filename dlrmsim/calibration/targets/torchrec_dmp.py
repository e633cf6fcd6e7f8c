"""TorchRec across ranks: ``DistributedModelParallel`` over a gloo group of processes on this host.

What a TorchRec user launches with ``torchrun --nproc_per_node=N`` on a CPU server: one process per rank, the
tables sharded by TorchRec's own ``EmbeddingShardingPlanner`` (``collective_plan``: every rank agrees on the
plan), fbgemm's fused SGD applied to the tables inside backward (``apply_optimizer_in_backward``), the dense
MLPs stepped by ``torch.optim.SGD`` after DMP's gradient allreduce. The embedding outputs travel by DMP's
alltoall over gloo.

Timing follows :mod:`dlrmsim.calibration.targets.measurement`, with one addition that several ranks need: every
rank must run the same number of steps (each step holds collectives), so the steps per sample are fixed from the
slowest rank's warm-up (an allreduce of the per-step times) and every sample ends on a barrier. Rank 0's samples
are the measurement. The plan comes back as a dlrmsim :class:`~dlrmsim.workloads.placement.Placement`
(:func:`dlrmsim.interop.torchrec.placement_from_plan`), so the prediction simulates the very sharding measured.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlrmsim.calibration.targets.measurement import StepMeasurement
from dlrmsim.calibration.targets.torchrec import (
    LEARNING_RATE,
    check_workload,
    dlrm_over,
    fresh_batch_count,
    make_batches,
    require_torchrec,
    table_configs,
    training_step,
)
from dlrmsim.errors import DlrmsimError
from dlrmsim.interop.torchrec import placement_from_plan
from dlrmsim.workloads.placement import Placement
from dlrmsim.workloads.schema import Workload

START_TIMEOUT_S = 600.0  # spawning, importing torch and planning, per rank, before a result must arrive


@dataclass(frozen=True)
class DmpMeasurement:
    """Rank 0's per-step samples and the plan the ranks ran, as a dlrmsim placement."""

    step: StepMeasurement
    placement: Placement
    plan_text: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build_dmp(
    w: Workload, local_batch: int, ranks: int, sharding_types: list[str] | None = None, seed: int = 0
) -> tuple[Any, Any, Any]:
    """TorchRec's DLRM of ``w`` wrapped in ``DistributedModelParallel`` over the default process group (already
    initialised, ``ranks`` processes), sharded by TorchRec's planner for ``local_batch`` samples a rank
    (``sharding_types``: TorchRec's names the planner may choose from; None: any). The tables' SGD runs inside
    backward (``apply_optimizer_in_backward``); returns (model, the dense parameters' SGD, the plan)."""
    torch, _ = require_torchrec()
    import torch.distributed as dist
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.modules.embedding_modules import EmbeddingBagCollection
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    torch.manual_seed(seed)
    tables = table_configs(w)
    # the tables on the meta device: DMP materialises each rank's shards only
    model = dlrm_over(w, EmbeddingBagCollection(tables=tables, device=torch.device("meta")))
    apply_optimizer_in_backward(torch.optim.SGD, model.sparse_arch.parameters(), {"lr": LEARNING_RATE})
    constraints = {
        t.name: ParameterConstraints(pooling_factors=[float(w.lookups_per_sample)], sharding_types=sharding_types) for t in tables
    }
    planner = EmbeddingShardingPlanner(
        topology=Topology(world_size=ranks, compute_device="cpu", local_world_size=ranks),
        batch_size=local_batch,
        constraints=constraints,
    )
    plan = planner.collective_plan(model, [EmbeddingBagCollectionSharder()], dist.GroupMember.WORLD)
    dmp = DistributedModelParallel(module=model, device=torch.device("cpu"), plan=plan)
    opt = torch.optim.SGD([p for n, p in dmp.named_parameters() if "embedding_bags" not in n], lr=LEARNING_RATE)
    return dmp, opt, plan


def _timed_steps(rank: int, ranks: int, w: Workload, batch: int, params: tuple) -> tuple | None:
    """One rank's part of :func:`measure_dmp_step`: plan, wrap in DMP, time the steps; rank 0's result."""
    samples, min_sample_s, warmup_steps, seed, sharding_types = params
    torch, _ = require_torchrec()
    import torch.distributed as dist

    dmp, opt, plan = build_dmp(w, batch // ranks, ranks, sharding_types, seed)
    # as many batches as keep each step's rows fresh (fresh_batch_count: all ranks' rows share the one cache)
    step = training_step(dmp, opt, make_batches(w, batch // ranks, fresh_batch_count(w, batch), seed + rank))
    with torch.enable_grad():
        t0 = time.perf_counter()
        for i in range(warmup_steps):
            step(i)
        per_step = torch.tensor([(time.perf_counter() - t0) / max(warmup_steps, 1)])
        dist.all_reduce(per_step, op=dist.ReduceOp.MAX)  # every rank the same count of steps per sample
        k = max(1, int(np.ceil(min_sample_s / max(float(per_step), 1e-6))))
        out = []
        for s in range(samples):
            dist.barrier()
            t0 = time.perf_counter()
            for i in range(k):
                step(warmup_steps + s * k + i)
            out.append((time.perf_counter() - t0) / k)
    if rank != 0:
        return None
    placement = placement_from_plan(plan, table_configs(w), ranks, module_path=next(iter(plan.plan)))
    return tuple(out), k, placement, str(plan)


def _rank_process(body: Callable[..., Any], rank: int, ranks: int, port: int, threads: int, args: tuple, queue: Any) -> None:
    """One rank's process: join the gloo group on ``threads`` threads, run ``body(rank, ranks, *args)``; rank 0
    sends its result (or any rank its exception) to the parent."""
    torch, _ = require_torchrec()
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    try:
        got = body(rank, ranks, *args)
        if rank == 0:
            queue.put(got)
    except Exception as exc:  # noqa: BLE001 - the parent turns it into a one-line error
        queue.put(exc)
        raise
    finally:
        dist.destroy_process_group()
    # Leave without the interpreter's teardown: a thread of gloo's or TorchRec's still joinable when C++'s static
    # destructors run makes the runtime print "terminate called without an active exception" and abort (2 of 5
    # validation runs on the VM showed the line), after the result is already sent. Flush the queue, then exit.
    queue.close()
    queue.join_thread()
    os._exit(0)


def run_dmp_ranks(body: Callable[..., Any], ranks: int, threads: int, args: tuple, what: str) -> Any:
    """Rank 0's result of ``body(rank, ranks, *args)`` (a module-level function) run in ``ranks`` fresh processes
    of ``threads`` threads joined by a gloo group on this host; a failure is a one-line error naming ``what``."""
    require_torchrec()
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank_process, args=(body, r, ranks, port, threads, args, queue)) for r in range(ranks)]
    for p in procs:
        p.start()
    try:
        got = queue.get(timeout=START_TIMEOUT_S)
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    if isinstance(got, Exception):
        raise DlrmsimError(f"{what} failed: {got}", fix="run it alone to see the traceback") from None
    return got


def measure_dmp_step(
    w: Workload,
    batch: int,
    ranks: int,
    threads: int,
    samples: int = 7,
    min_sample_s: float = 0.05,
    warmup_steps: int = 3,
    seed: int = 0,
    sharding_types: list[str] | None = None,
) -> DmpMeasurement:
    """Time TorchRec DMP training steps of ``w`` with global batch ``batch`` on ``ranks`` processes of ``threads``
    threads each (forward, BCE loss, backward with the fused table update, dense SGD step). ``sharding_types``
    (TorchRec's names, e.g. ``["table_wise"]``) restricts what the planner may choose; None lets it choose (for
    small tables and large batches it replicates them: ``data_parallel``)."""
    check_workload(w)
    if batch % ranks:
        raise DlrmsimError(f"batch {batch} does not split over {ranks} ranks", field="batch", fix=f"use a multiple of {ranks}")
    params = (samples, min_sample_s, warmup_steps, seed, sharding_types)
    got = run_dmp_ranks(_timed_steps, ranks, threads, (w, batch, params), f"TorchRec DMP run of {w.name}")
    out, k, placement, plan_text = got
    step = StepMeasurement(f"torchrec/dmp{ranks}", threads, batch, out, k)
    return DmpMeasurement(step, placement, plan_text)
