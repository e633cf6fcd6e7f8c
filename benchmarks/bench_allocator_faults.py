"""Page faults a TorchRec training step pays under glibc's default allocator, against the steady allocator the
calibration and the project runner use (``dlrmsim.allocator.steady_allocator``).

The calibration measures every kernel with glibc told never to hand memory back to the kernel, as a long training
process ends up; the project runner trains the same way. The TorchRec validation target runs in the ``validate``
process with glibc's defaults, as a TorchRec user's script does. There, a temporary above glibc's (moving) mmap
threshold, or one that lands at the top of a heap that free then trims, is mapped fresh and faulted page by page
every step; the model charges no such cost. This benchmark puts a number on it: for each validation case named, in
fresh processes alternating the two allocators, the median step time and minor page faults per step, plus the cost
of one fault on this host (an anonymous mapping touched once a page).

    .venv/bin/python -m benchmarks.bench_allocator_faults [--cases base wide-mlp threads-1-wide] [--rounds 3]
        [--out validation/results]

Needs torch, fbgemm-gpu-cpu and torchrec (make torchrec).
"""

from __future__ import annotations

import argparse
import datetime
import json
import mmap
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from dlrmsim.calibration.host import current_host_stub

# One child per (case, allocator, round): glibc's state is the process's allocation history, so each sample starts
# from a fresh interpreter, built the way the validation target builds the case.
_CHILD = r"""
import json, resource, statistics, sys, time
mode, case, threads, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
from dlrmsim.allocator import steady_allocator
if mode == "steady":
    steady_allocator()
from dlrmsim.calibration.ops.torch_ops import torch_threads
from dlrmsim.calibration.targets.torchrec import build_model, make_batches, training_step
from dlrmsim.calibration.validate import load_cases
c = load_cases(only=[case])[0]
model, opt = build_model(c.workload, "fused", 0)
step = training_step(model, opt, make_batches(c.workload, c.batch, 4, 0))
warmup = 8
times, faults = [], []
with torch_threads(threads or c.threads, grad=True):
    for i in range(warmup + steps):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        step(i)
        t1 = time.perf_counter()
        f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        if i >= warmup:
            times.append(t1 - t0)
            faults.append(f1 - f0)
print(json.dumps({"step_s": statistics.median(times), "faults_per_step": statistics.median(faults)}))
"""


def fault_cost_s(mib: int = 64, repeats: int = 9) -> float:
    """Median seconds per minor page fault: a fresh anonymous mapping of ``mib`` MiB, one byte written a page."""
    page = mmap.PAGESIZE
    costs = []
    for _ in range(repeats):
        m = mmap.mmap(-1, mib << 20)
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        for offset in range(0, mib << 20, page):
            m[offset] = 1
        t1 = time.perf_counter()
        f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        m.close()
        costs.append((t1 - t0) / max(f1 - f0, 1))
    return statistics.median(costs)


def run_case(case: str, mode: str, threads: int, steps: int) -> dict[str, float]:
    """One fresh process timing ``steps`` TorchRec steps of validation case ``case`` under allocator ``mode``."""
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, case, str(threads), str(steps)], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise SystemExit(f"case {case} ({mode}) failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=["base", "wide-mlp", "threads-1-wide"])
    ap.add_argument("--threads", type=int, default=0, help="threads per step (0: the case's own)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--out", type=Path, default=Path("validation/results"))
    args = ap.parse_args()
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    # The python-loop overhead of writing one byte is some 0.1 us a page, small beside a fault's microseconds.
    result: dict[str, object] = {
        "date": now.isoformat(),
        "host": platform.node() or "host",
        "cpu_model": current_host_stub().cpu_model,
        "fault_cost_us": fault_cost_s() * 1e6,
        "rows": [],
    }
    rows: list[dict[str, object]] = []
    for r in range(args.rounds):
        for case in args.cases:
            for mode in ("default", "steady"):  # interleaved, so a slow spell meets both
                d = run_case(case, mode, args.threads, args.steps)
                rows.append({"round": r, "case": case, "allocator": mode, **d})
                print(f"{case:16s} {mode:8s} round {r}: {d['step_s'] * 1e3:7.2f} ms, {d['faults_per_step']:6.0f} faults/step")
    result["rows"] = rows
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{now:%Y%m%dT%H%M%S}-{result['host']}-allocator-faults.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"fault cost {result['fault_cost_us']:.2f} us a page; wrote {path}")


if __name__ == "__main__":
    main()
