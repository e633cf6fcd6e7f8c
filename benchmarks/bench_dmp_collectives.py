"""DMP's collectives alone: the gloo calls a 2-rank TorchRec DMP step of the ranks-2 validation case makes, in its
order and with compute between them, but none of DMP's own software; time spent in them per step.

Per step, as ``DistributedModelParallel`` issues them for 4 tables sharded table-wise over 2 ranks (batch 512 a
rank, 16 ids a sample, E=32; sizes from calibration.benchmarks.sharded.exchange_bytes): the input distribution's
split-size exchange, then its lengths and values exchanges (posted together, then both awaited, as KJTAllToAll
does; ``--pattern sync`` calls them one after the other instead), the pooled embeddings' forward exchange, the
gradients' backward exchange, and DDP's allreduce of the dense gradients, posted before the last 1 ms of backward
compute and awaited after it. GEMM work fills the gaps (1-2 ms, as the step computes between its collectives). If
these cost about what the calibrated gloo collectives predict, the rest of a measured DMP step's communication time
is DMP's software and the waits it causes, not gloo. Needs torch.

    .venv/bin/python -m benchmarks.bench_dmp_collectives [--rounds 3] [--steps 50] [--out validation/results]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.evidence import in_processes, write_evidence
from dlrmsim.calibration.benchmarks.sharded import RANKS, exchange_bytes, fp32_elements
from dlrmsim.calibration.validate import load_cases

PATTERNS = ("dmp", "sync")
CASE = "ranks-2"


def _rank(queue: Any, rank: int, port: int, pattern: str, steps: int, sizes: list[tuple[str, int]]) -> None:
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=RANKS)
    a = torch.full((128, 128), 0.5)
    t0 = time.perf_counter()
    for _ in range(200):
        a @ a
    per_ms = max(1, round(1e-3 / ((time.perf_counter() - t0) / 200)))

    def compute(ms: int) -> None:
        for _ in range(ms * per_ms):
            a @ a

    # The bytes matter, not the element types: every buffer is fp32 of the exchange's size.
    splits, lengths, values, pooled, pooled_grad, dense = (torch.zeros(fp32_elements(n)) for _, n in sizes)
    per_step = []

    def exchange(src: torch.Tensor) -> None:
        dist.all_to_all_single(torch.empty_like(src), src)

    for step in range(steps + 5):
        dist.barrier()
        compute(1)
        t = time.perf_counter()
        exchange(splits)
        if pattern == "dmp":
            h1 = dist.all_to_all_single(torch.empty_like(lengths), lengths, async_op=True)
            h2 = dist.all_to_all_single(torch.empty_like(values), values, async_op=True)
            h1.wait()
            h2.wait()
        else:
            exchange(lengths)
            exchange(values)
        spent = time.perf_counter() - t
        compute(2)
        t = time.perf_counter()
        exchange(pooled)
        spent += time.perf_counter() - t
        compute(2)
        t = time.perf_counter()
        exchange(pooled_grad)
        spent += time.perf_counter() - t
        if pattern == "dmp":
            handle = dist.all_reduce(dense, async_op=True)
            compute(1)
            t = time.perf_counter()
            handle.wait()
        else:
            compute(1)
            t = time.perf_counter()
            dist.all_reduce(dense)
        spent += time.perf_counter() - t
        if step >= 5:
            per_step.append(spent)
    queue.put(statistics.median(per_step) if rank == 0 else None)
    dist.destroy_process_group()


def run(pattern: str, steps: int) -> float:
    """Median seconds a step spends in the collectives (rank 0), for the ranks-2 case's exchanges."""
    case = load_cases(only=[CASE])[0]
    sizes = exchange_bytes(case.workload, case.batch)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    got = in_processes(_rank, [(r, port, pattern, steps, sizes) for r in range(RANKS)])
    return float(next(v for v in got if v is not None))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--pattern", choices=PATTERNS, nargs="*", default=list(PATTERNS))
    ap.add_argument("--out", type=Path, default=Path("validation/results"))
    args = ap.parse_args()
    rounds: dict[str, list[float]] = {p: [] for p in args.pattern}
    for r in range(args.rounds):
        for p in args.pattern:
            rounds[p].append(run(p, args.steps))
        print(f"round {r + 1}: " + ", ".join(f"{p} {v[-1] * 1e3:.2f} ms" for p, v in rounds.items()), flush=True)
    write_evidence(
        args.out,
        "dmp-collectives",
        {"case": CASE, "collective_ms_per_step": {p: [round(x * 1e3, 3) for x in v] for p, v in rounds.items()}},
    )


if __name__ == "__main__":
    main()
