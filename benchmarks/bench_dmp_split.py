"""Where a 2-rank TorchRec DMP step's time goes, told apart by four runs interleaved per round.

The ranks-2 validation case (global batch 1024, 1 thread per rank, 2 tables per rank) against three runs that each
hold one suspect mechanism out:

- ``fused``: one process training the same work a DMP rank does (batch 512, all 4 tables: a table-wise rank looks
  up its 2 tables over the global batch), no communication;
- ``dmp1``: the same through ``DistributedModelParallel`` on a 1-rank gloo group: DMP's own per-step software
  (input and output distribution modules, awaitables, DDP's hooks) without a second process;
- ``pair``: two ``fused`` processes at once, independent: what two processes sharing the host's cores, caches
  and memory cost each other without communicating (the slower one is kept);
- ``dmp2``: the ranks-2 step itself.

``dmp2 - pair`` is then what communication and the ranks' waiting for each other cost; ``dmp1 - fused`` is DMP's
own overhead. Each run is a median of 50 ms samples (calibration/targets/measurement.py); the rounds interleave
the four, so a slow spell of the host lands on one round of each rather than on one run. Needs torchrec
(``make torchrec``).

    .venv/bin/python -m benchmarks.bench_dmp_split [--rounds 3] [--out validation/results]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks.evidence import in_processes, write_evidence
from dlrmsim.calibration.targets.torchrec import measure_step
from dlrmsim.calibration.targets.torchrec_dmp import measure_dmp_step
from dlrmsim.calibration.validate import load_cases
from dlrmsim.workloads.schema import Workload

CASE = "ranks-2"
RUNS = ("fused", "dmp1", "pair", "dmp2")


def _fused(queue: Any, w: Workload, batch: int, seed: int) -> None:
    import torch

    torch.set_num_threads(1)
    queue.put(statistics.median(measure_step(w, batch, 1, seed=seed).samples_s))


def _in_processes(w: Workload, batch: int, seeds: tuple[int, ...]) -> float:
    """The slowest median step (s) of ``len(seeds)`` fused processes running at once."""
    return max(in_processes(_fused, [(w, batch, s) for s in seeds]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("validation/results"))
    args = ap.parse_args()
    case = load_cases(only=[CASE])[0]
    w, batch, ranks = case.workload, case.batch, case.ranks
    local = batch // ranks
    runs: dict[str, list[float]] = {k: [] for k in RUNS}
    for r in range(args.rounds):
        runs["fused"].append(_in_processes(w, local, (0,)))
        runs["dmp1"].append(statistics.median(measure_dmp_step(w, local, 1, 1).step.samples_s))
        runs["pair"].append(_in_processes(w, local, (0, 1)))
        runs["dmp2"].append(statistics.median(measure_dmp_step(w, batch, ranks, 1).step.samples_s))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1] * 1e3:.2f} ms" for k, v in runs.items()), flush=True)
    best = {k: min(v) for k, v in runs.items()}
    doc = {
        "case": CASE,
        "step_ms_per_round": {k: [round(x * 1e3, 3) for x in v] for k, v in runs.items()},
        "fastest_ms": {k: round(v * 1e3, 3) for k, v in best.items()},
        "dmp_overhead_ms": round((best["dmp1"] - best["fused"]) * 1e3, 3),
        "co_run_ms": round((best["pair"] - best["fused"]) * 1e3, 3),
        "communication_and_waits_ms": round((best["dmp2"] - best["pair"]) * 1e3, 3),
    }
    print(json.dumps({k: doc[k] for k in ("fastest_ms", "dmp_overhead_ms", "co_run_ms", "communication_and_waits_ms")}))
    write_evidence(args.out, "dmp-split", doc)


if __name__ == "__main__":
    main()
