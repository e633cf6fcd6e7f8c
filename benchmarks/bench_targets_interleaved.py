"""TorchRec's training step and the project runner's, step by step in turn in one process: is TorchRec's work
slower, or was it measured at another moment?

``dlrmsim validate`` measures one target per run, so TorchRec's cases and the runner's are minutes apart and in
different processes. On the 2-vCPU Intel VM, TorchRec's wide-mlp came out 20-30 % slower than predicted in every run
while the runner's was within noise, and both are predicted at about the same time. Here, for each case named, one
process builds both (the runner's rank as ``dlrm_runner._Rank`` builds it, TorchRec's DLRM as the validation target
builds it), then alternates one TorchRec step and one runner step, so that every spell of the host lands on both.
Both run under the steady allocator (``allocator.steady_allocator``), on the case's threads (or ``--threads``).

    .venv/bin/python -m benchmarks.bench_targets_interleaved [--cases wide-mlp base] [--steps 40] [--repeats 3]
        [--threads N] [--out validation/results]

Each row: the case, per process the median and p10 of each target's step (ms) and their ratio. Needs torch,
fbgemm-gpu-cpu and torchrec (make torchrec).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.evidence import in_processes, write_evidence

WARMUP = 5


def _pair(queue: Any, case_name: str, steps: int, threads: int | None) -> None:
    import torch

    from dlrmsim.allocator import steady_allocator
    from dlrmsim.calibration.dlrm_runner import _Rank
    from dlrmsim.calibration.ops import get_ops
    from dlrmsim.calibration.targets import torchrec as tr
    from dlrmsim.calibration.validate import load_cases

    steady_allocator()
    case = next(c for c in load_cases() if c.name == case_name)
    w, batch = case.workload, case.batch
    threads = threads or case.threads
    torch.set_num_threads(threads)
    with torch.no_grad():  # the runner computes its gradients itself, as in validation
        rank = _Rank(w, batch, get_ops("torch"), None, 0, steps + WARMUP)
    model, opt = tr.build_model(w, "fused")
    step = tr.training_step(model, opt, tr.make_batches(w, batch, 4))
    trec: list[float] = []
    runner: list[float] = []
    for i in range(steps + WARMUP):
        t0 = time.perf_counter()
        step(i)
        t1 = time.perf_counter()
        with torch.no_grad():
            _, total = rank.iteration(i)
        if i >= WARMUP:
            trec.append(t1 - t0)
            runner.append(total)
    queue.put({"torchrec_s": trec, "runner_s": runner, "threads": threads})


def _ms(xs: list[float], q: float) -> float:
    return round(sorted(xs)[int(q * (len(xs) - 1))] * 1e3, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=["wide-mlp", "base"])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per case, one after another")
    ap.add_argument("--threads", type=int, default=None, help="threads for every case (default: each case's own)")
    ap.add_argument("--out", type=Path, default=None, help="folder for the JSON evidence file")
    args = ap.parse_args()
    rows = []
    for case in args.cases:
        for r in range(args.repeats):
            (got,) = in_processes(_pair, [(case, args.steps, args.threads)])
            a, b = got["torchrec_s"], got["runner_s"]
            row = {
                "case": case,
                "process": r,
                "threads": got["threads"],
                "torchrec_ms": {"median": _ms(a, 0.5), "p10": _ms(a, 0.1)},
                "runner_ms": {"median": _ms(b, 0.5), "p10": _ms(b, 0.1)},
                "torchrec_over_runner": round(statistics.median(a) / statistics.median(b), 3),
            }
            rows.append(row)
            print(
                f"{case:10s} process {r}: torchrec {row['torchrec_ms']['median']:7.2f} ms (p10 {row['torchrec_ms']['p10']:.2f})"
                f"  runner {row['runner_ms']['median']:7.2f} ms (p10 {row['runner_ms']['p10']:.2f})"
                f"  ratio {row['torchrec_over_runner']:.3f}"
            )
    if args.out is not None:
        write_evidence(args.out, "targets-interleaved", {"steps": args.steps, "rows": rows})


if __name__ == "__main__":
    main()
