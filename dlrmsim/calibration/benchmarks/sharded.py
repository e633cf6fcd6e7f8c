"""TorchRec's sharded-module software: what ``DistributedModelParallel`` runs on each rank's compute thread in a
multi-rank step beyond what the same model's one-process step runs (fit.fit_sharded_software).

A 2-rank DMP step calls, on the compute thread, code a one-process TorchRec step never reaches: the input
distribution splits the KeyedJaggedTensor by destination and permutes it (``permute_2D_sparse_data``), the output
distribution reassembles the pooled embeddings, every exchange goes through awaitables and an autograd function
of its own, and ``DistributedDataParallel.forward`` wraps the dense arch. On the 2-vCPU VM (2026-11-26) the ranks-2
validation step's compute thread ran 11.1-12.4 ms of CPU a step against 8.5-9.1 ms for one process doing a
rank's work alone, and a model of 4 tables of 1,000 x 8 with 8-wide MLPs showed the same excess, 1.9-3.5 ms, at
128 and at 32,768 ids a rank: a per-step cost of the sharded path, not of its kernels.

The benchmark measures that excess as CPU time of the compute thread (``time.thread_time``), not wall time:
waiting for the other rank or for gloo's threads costs no CPU, so the host's noise and the ranks' skew, which
made a wall-clock difference of the same runs transfer badly (benchmarks/bench_dmp_software.py), do not enter it.
In each of 2 gloo ranks of one thread, for the small model at two sizes (:data:`CONFIGS`), rounds interleave:

- ``step``: the DMP training step, tables sharded table-wise;
- ``local``: the same model trained by a one-process ``FusedEmbeddingBagCollection`` DLRM on the rank's local
  batch (its kernels and TorchRec's one-process software, which the cost model charges op by op);
- ``exchanges``: the step's 6 collectives called alone in DMP's order and sizes (:func:`exchange_bytes`): their
  calling-thread CPU is part of the calibrated collectives' time already.

The software is ``step - local - exchanges``, the median over rounds and both ranks. The DMP step's CPU time in
all of the process's threads is kept beside it (``step_process_cpu_s``): what gloo's own threads use on top, which
competes with the ranks' compute on a host whose cores they fill and which the model does not charge yet. Needs
torchrec.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from dlrmsim.calibration.benchmarks.timing import BenchTask, TimingPolicy
from dlrmsim.calibration.schema import Measurement
from dlrmsim.calibration.targets.torchrec import build_model, make_batches, require_torchrec, training_step
from dlrmsim.calibration.targets.torchrec_dmp import build_dmp, run_dmp_ranks
from dlrmsim.errors import DlrmsimError
from dlrmsim.output import err_console
from dlrmsim.workloads import model
from dlrmsim.workloads.schema import Workload

RANKS = 2
TABLES, ROWS, DIM = 4, 1000, 8
# (global batch, ids a sample per table): the smallest step, and one with 256x as many ids to split and permute
CONFIGS = ((64, 1), (1024, 16))
INDEX_BYTES, LENGTH_BYTES = 8, 4  # KJT values int64, lengths int32
PARTS = ("step", "local", "exchanges")
# A sample's shortest CPU time: a few of the small model's 2-rank steps (4-6 ms of compute-thread CPU each on the
# 2-vCPU VM), so that one step's scheduler tick or page fault is a few % of a sample at most.
MIN_SAMPLE_S = 0.03


def tiny_workload(batch: int, lookups: int) -> Workload:
    """The DLRM the benchmark trains: TABLES tables of ROWS x DIM, ``lookups`` ids a sample, MLPs of width DIM, so
    that its kernels are a small part of its step."""
    return Workload.model_validate(
        {
            "name": "sharded-software",
            "description": "TorchRec sharded-module software benchmark",
            "tables": {"count": TABLES, "rows": ROWS},
            "embedding_dim": DIM,
            "lookups_per_sample": lookups,
            "index_distribution": {"kind": "uniform"},
            "bottom_mlp": [DIM, DIM],
            "top_mlp": [DIM, 1],
            "interaction": "dot",
            "precision": "fp32",
            "minibatch": {"strong_global": batch, "weak_local": batch // RANKS},
        }
    )


def exchange_bytes(w: Workload, batch: int) -> list[tuple[str, int]]:
    """(op, bytes a rank hands the collective) of a DMP step's exchanges, in DMP's order, for ``w``'s tables sharded
    table-wise over RANKS ranks at global batch ``batch``: the input distribution's sizes (int64 per destination
    and table), lengths (int32) and values (int64 ids), the pooled embeddings forward and backward (fp32), and the
    dense gradients' allreduce (model.allreduce_bytes)."""
    local = batch // RANKS
    own = w.num_tables // RANKS  # tables a rank owns
    return [
        ("alltoall", RANKS * w.num_tables * INDEX_BYTES),
        ("alltoall", RANKS * own * local * LENGTH_BYTES),
        ("alltoall", RANKS * own * local * w.lookups_per_sample * INDEX_BYTES),
        ("alltoall", RANKS * own * local * w.embedding_dim * 4),
        ("alltoall", RANKS * own * local * w.embedding_dim * 4),
        ("allreduce", int(model.allreduce_bytes(w))),
    ]


def fp32_elements(nbytes: int) -> int:
    """fp32 elements of a buffer of about ``nbytes`` that splits into RANKS equal blocks (at least one each)."""
    return max(RANKS, nbytes // 4 // RANKS * RANKS)


def _exchanges(w: Workload, batch: int) -> Any:
    """A step's collectives alone (torch.distributed over the default group), as a ``step(i)`` function."""
    torch, _ = require_torchrec()
    import torch.distributed as dist

    bufs = [(op, torch.zeros(fp32_elements(n)), torch.zeros(fp32_elements(n))) for op, n in exchange_bytes(w, batch)]

    def step(_i: int) -> None:
        for op, send, recv in bufs:
            if op == "allreduce":
                dist.all_reduce(send)
            else:
                dist.all_to_all_single(recv, send)

    return step


def _software_rank(rank: int, ranks: int, rounds: int, min_sample_s: float) -> list[dict[str, float]] | None:
    """One rank's part: per config, the median compute-thread CPU seconds a step of each part (both ranks'
    medians averaged); rank 0 returns them."""
    torch, _ = require_torchrec()
    import torch.distributed as dist

    out = []
    for batch, lookups in CONFIGS:
        w = tiny_workload(batch, lookups)
        local = batch // ranks
        dmp, opt, _plan = build_dmp(w, local, ranks, ["table_wise"])
        one, one_opt = build_model(w, "fused")
        parts = {
            "step": training_step(dmp, opt, make_batches(w, local, 4, rank)),
            "local": training_step(one, one_opt, make_batches(w, local, 4, rank)),
            "exchanges": _exchanges(w, batch),
        }
        with torch.enable_grad():
            for fn in parts.values():
                for i in range(3):
                    fn(i)
            t0 = time.perf_counter()
            parts["step"](0)
            per_step = torch.tensor([time.perf_counter() - t0])
            dist.all_reduce(per_step, op=dist.ReduceOp.MAX)  # every rank the same count of steps per sample
            k = max(3, round(min_sample_s / max(float(per_step), 1e-6)))
            cpu: dict[str, list[float]] = {p: [] for p in PARTS}
            process: list[float] = []  # the DMP step's CPU in all the process's threads (gloo's too), for the record
            for _ in range(rounds):
                for name, fn in parts.items():
                    dist.barrier()
                    t0, p0 = time.thread_time(), time.process_time()
                    for i in range(k):
                        fn(i)
                    cpu[name].append((time.thread_time() - t0) / k)
                    if name == "step":
                        process.append((time.process_time() - p0) / k)
        medians = torch.tensor([statistics.median(v) for v in (*cpu.values(), process)], dtype=torch.float64)
        dist.all_reduce(medians)
        row = dict(zip((*PARTS, "step_process"), (medians / ranks).tolist(), strict=True))
        out.append({"batch": batch, "lookups": lookups, "ids": local * w.num_tables * lookups, **row})
    return out if rank == 0 else None


def sharded_software_task(policy: TimingPolicy) -> BenchTask:
    """The sharded software of a 2-rank TorchRec DMP step at each of :data:`CONFIGS` (torchrec installed)."""

    def run() -> list[Measurement]:
        try:
            args = (policy.repeats, max(policy.min_sample_s, MIN_SAMPLE_S))
            rows = run_dmp_ranks(_software_rank, RANKS, 1, args, "TorchRec sharded-software benchmark")
        except DlrmsimError as exc:
            # An optional extra's benchmark: a host where two gloo ranks cannot start loses this fit (TorchRec's
            # multi-rank steps are then predicted without it), not the whole calibration.
            err_console.print(f"[bold yellow]warning:[/] {exc}; no sharded-software fit", highlight=False, soft_wrap=True)
            return []
        return [
            Measurement(
                benchmark="sharded",
                name=f"sharded software b{r['batch']} l{r['lookups']}",
                cores=1,
                params={
                    "ranks": RANKS,
                    "batch": r["batch"],
                    "lookups": r["lookups"],
                    "ids": r["ids"],
                    "step_cpu_s": r["step"],
                    "local_cpu_s": r["local"],
                    "exchanges_cpu_s": r["exchanges"],
                    "step_process_cpu_s": r["step_process"],
                },
                # What the sharded path adds; a noisy round can make it come out at or below zero, kept just above.
                time_s=max(r["step"] - r["local"] - r["exchanges"], 1e-7),
                repeats=policy.repeats,
            )
            for r in rows
        ]

    return BenchTask("TorchRec sharded software", "sharded software", run)
