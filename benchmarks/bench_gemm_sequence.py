"""What does a GEMM pay for following other ops instead of itself, and does it grow with the GEMM?

Each GEMM of an MLP's forward and backward (the DLRM runner's ops: ``dlrm_runner.mlp_forward`` / ``mlp_backward``)
is timed in three contexts, interleaved round by round so that a slow spell of the host lands on all three:
- ``step``: the cycle right after a cache flush (the calibration's step-order rows: eviction and sequence);
- ``cycle``: the same cycle without the flush (only the other ops in between: the sequence alone);
- ``loop``: the GEMM called back to back with itself (the calibration's warm loop).
``cycle - loop`` is the sequence cost the calibration's ``sequence_l2_factor`` prices; ``step - cycle`` the
eviction. One JSON line per GEMM and thread count: medians (s) and the GEMM's compulsory bytes.

The MLPs are the validation's (bottom [64, 256, 32], top [42, 256, 64, 1]) at batch 256 and 1024, and the
calibration's smallest cycle (128-512-32 at batch 512):

    .venv/bin/python -m benchmarks.bench_gemm_sequence --threads 1,2 > rows.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.bench_gemm_idle import timed
from dlrmsim.calibration.benchmarks.gemm import time_mlp_cycle
from dlrmsim.calibration.benchmarks.timing import TimingPolicy
from dlrmsim.calibration.dlrm_runner import mlp_backward, mlp_forward, new_mlp
from dlrmsim.calibration.ops import Ops, get_ops
from dlrmsim.workloads.model import Layer, Pass, layer_gemm

CYCLES: tuple[tuple[int, tuple[int, ...]], ...] = (
    (256, (64, 256, 32)),
    (256, (42, 256, 64, 1)),
    (1024, (64, 256, 32)),
    (1024, (42, 256, 64, 1)),
    (512, (128, 512, 32)),
)


def loop_times(ops: Ops, batch: int, widths: tuple[int, ...], calls: int) -> dict[tuple[str, int], float]:
    """Median time (s) of each GEMM of the cycle called back to back with itself ``calls`` times."""
    rng = np.random.default_rng(0)
    layers = new_mlp(ops, widths, rng)
    x = ops.tensor(rng.standard_normal((batch, widths[0])).astype(np.float32))
    dz = ops.tensor(np.full((batch, widths[-1]), 1e-3, dtype=np.float32))
    grabbed: dict[tuple[str, int], Callable[[], Any]] = {}

    def grab(which: str, layer: int, call: Callable[[], Any]) -> Any:
        grabbed[(which, layer)] = call
        return call()

    _, acts = mlp_forward(ops, layers, x, sigmoid_last=False, gemm=grab)
    mlp_backward(ops, layers, acts, dz, need_dx=True, gemm=grab)
    out = {}
    for key, call in grabbed.items():
        for _ in range(3):
            call()
        out[key] = statistics.median(timed(call, None, calls))
    return out


def measure(ops: Ops, threads: int, rounds: int, repeats: int) -> list[dict[str, object]]:
    """One row per GEMM of every cycle at ``threads``: each context's median over ``rounds`` interleaved rounds."""
    policy = TimingPolicy(warmup=2, repeats=repeats, min_sample_s=0.0)
    got: dict[tuple[int, tuple[int, ...], str, int], dict[str, list[float]]] = {}
    with ops.threads(threads):
        for _ in range(rounds):
            for batch, widths in CYCLES:
                step = time_mlp_cycle(ops, batch, widths, policy, ops.flush)
                cycle = time_mlp_cycle(ops, batch, widths, policy, lambda: None)
                loop = loop_times(ops, batch, widths, repeats)
                for key in step:
                    per = got.setdefault((batch, widths, *key), {"step": [], "cycle": [], "loop": []})
                    per["step"].append(statistics.median(step[key]))
                    per["cycle"].append(statistics.median(cycle[key]))
                    per["loop"].append(loop[key])
    rows = []
    for (batch, widths, which, i), per in got.items():
        gemm = layer_gemm(Layer("measured", widths[i], widths[i + 1], "top", 0), batch, Pass(which))
        med = {k: statistics.median(v) for k, v in per.items()}
        rows.append(
            {
                "threads": threads,
                "batch": batch,
                "mlp": "-".join(map(str, widths)),
                "layer": i,
                "pass": which,
                "bytes": gemm.bytes_moved(4.0),
                **{f"{k}_s": v for k, v in med.items()},
                "sequence_s": med["cycle"] - med["loop"],
                "eviction_s": med["step"] - med["cycle"],
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the three contexts")
    ap.add_argument("--repeats", type=int, default=9, help="cycles (or calls) per context and round")
    ap.add_argument("--backend", default="torch")
    args = ap.parse_args()
    ops = get_ops(args.backend)
    for threads in (int(t) for t in args.threads.split(",")):
        for r in measure(ops, threads, args.rounds, args.repeats):
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
