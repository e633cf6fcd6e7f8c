"""TorchRec's sharded-module software per step: what ``DistributedModelParallel`` costs a rank beyond its kernels
and its collectives, timed on a DLRM so small that this software is most of its step.

A multi-rank DMP step runs, on each rank's compute thread, work a one-process step does not: the input
distribution splits the KeyedJaggedTensor by destination rank and permutes it, the output distribution reassembles
the pooled embeddings, and every exchange goes through awaitables and autograd functions of its own. On the 2-vCPU
VM some 4 ms of the 16.6 ms ranks-2 validation step is unexplained by kernels, co-running or gloo
(bench_dmp_split.py, bench_dmp_collectives.py); this is the benchmark a calibration would need to charge it.

The model: 4 tables of 1,000 rows, E=8, MLPs of width 8, at two sizes (CONFIGS). Three runs per round, rounds
interleaved, each part's fastest round kept:

- ``step``: a 2-rank DMP training step over gloo, one thread a rank (calibration/targets/torchrec_dmp.py);
- ``local``: the same model trained in one process (``FusedEmbeddingBagCollection``), one rank's local batch: the
  kernels and TorchRec's one-process software, which the cost model already charges op by op;
- ``exchanges``: the step's 6 collectives (the input distribution's sizes, lengths and values, the pooled
  embeddings forward and backward, the dense gradients' allreduce) back to back between 2 gloo ranks, same sizes.

The sharded software is ``step - local - exchanges``. The planner must shard table-wise here: left to choose, it
replicated the tables of the larger size (``data_parallel``: no alltoalls at all), which made that size's step the
faster one and its software negative in the first runs. Table-wise on the VM (2026-11-25,
``20261125T152940-vm-dmp-software.json``): 3.6 ms at 128 ids a rank (its step spreads 61 % between rounds) and
7.6 ms at 32,768 (3.7 %). The ranks-2 validation step, with as many ids, leaves only about 4 ms unexplained
(bench_dmp_split.py, bench_dmp_collectives.py), so the term does not transfer from this model as it stands: wall
time charges the software with the waits it causes. The calibration now times the same model's software as the
compute thread's CPU time instead (dlrmsim/calibration/benchmarks/sharded.py: 2.4-2.8 ms at both sizes), which
does transfer. Needs torchrec (make torchrec).

    .venv/bin/python -m benchmarks.bench_dmp_software [--rounds 3] [--out validation/results]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from benchmarks.evidence import write_evidence

# The benchmark's model, sizes and exchanges are the calibration's (dlrmsim/calibration/benchmarks/sharded.py),
# which times the same software as compute-thread CPU time instead of wall time.
from dlrmsim.calibration.benchmarks.sharded import CONFIGS, RANKS, exchange_bytes, fp32_elements, tiny_workload
from dlrmsim.calibration.collectives_host import run_ranks
from dlrmsim.workloads.schema import Workload


def _exchanges_rank(comm, sizes: list[tuple[str, int]], steps: int, samples: int) -> list[float]:  # noqa: ANN001
    """Rank body: per sample, the mean time of a step's exchanges called back to back."""

    bufs = [(op, np.zeros(fp32_elements(n), dtype=np.float32), np.zeros(fp32_elements(n), dtype=np.float32)) for op, n in sizes]

    def step() -> None:
        for op, send, recv in bufs:
            if op == "allreduce":
                comm.allreduce(send)
            else:
                comm.alltoall(send, recv)

    for _ in range(3):
        step()
    out = []
    for _ in range(samples):
        comm.barrier()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        out.append((time.perf_counter() - t0) / steps)
    return out


def time_exchanges(w: Workload, batch: int, samples: int, min_sample_s: float) -> float:
    """Median seconds of the step's exchanges, back to back between RANKS gloo ranks (rank 0's samples)."""
    steps = max(5, round(min_sample_s / 2e-3))  # a step's exchanges take a few ms on a loopback gloo group
    per_rank = run_ranks(_exchanges_rank, RANKS, "gloo", args=(exchange_bytes(w, batch), steps, samples), threads_per_rank=1)
    return statistics.median(per_rank[0])


def measure(batch: int, lookups: int, rounds: int, samples: int = 7) -> dict[str, float | int]:
    """Fastest-round step, local step and exchanges (s) of the benchmark model at ``batch`` x ``lookups``."""
    from dlrmsim.calibration.targets.torchrec import measure_step
    from dlrmsim.calibration.targets.torchrec_dmp import measure_dmp_step

    w = tiny_workload(batch, lookups)
    steps, locals_, exchanges = [], [], []
    for _ in range(rounds):
        steps.append(
            statistics.median(measure_dmp_step(w, batch, RANKS, 1, samples=samples, sharding_types=["table_wise"]).step.samples_s)
        )
        locals_.append(statistics.median(measure_step(w, batch // RANKS, 1, samples=samples).samples_s))
        exchanges.append(time_exchanges(w, batch, samples, 0.05))
    step_s, local_s, exch_s = min(steps), min(locals_), min(exchanges)
    return {
        "batch": batch,
        "lookups": lookups,
        "step_ms": round(step_s * 1e3, 3),
        "step_spread_pct": round((max(steps) - step_s) / step_s * 100.0, 1),
        "local_ms": round(local_s * 1e3, 3),
        "exchanges_ms": round(exch_s * 1e3, 3),
        "software_ms": round((step_s - local_s - exch_s) * 1e3, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("validation/results"))
    args = ap.parse_args()
    rows = []
    for batch, lookups in CONFIGS:
        rows.append(measure(batch, lookups, args.rounds))
        print(json.dumps(rows[-1]), flush=True)
    write_evidence(args.out, "dmp-software", {"configs": rows})


if __name__ == "__main__":
    main()
