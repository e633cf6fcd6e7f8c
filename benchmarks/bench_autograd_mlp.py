"""An MLP's backward as autograd runs it (``torch.nn.Linear`` and ``ReLU`` modules, ``loss.backward()``) against the
same layers' backward written out as the project runner writes it (``dlrm_runner.mlp_backward``: per layer the
weight-gradient GEMM, the bias sum, the input-gradient GEMM and the ReLU gradient), same shapes, same threads,
each after the calibration's cache flush, interleaved sample by sample so that a slow spell of the host lands on
both. The calibration's GEMM and element-wise benchmarks time the runner's way; TorchRec's dense arches and the
reference DLRM train through autograd. Needs torch.

    .venv/bin/python -m benchmarks.bench_autograd_mlp [--threads 1,2] [--batches 256,1024,4096] [--samples 40]
        [--out validation/results]
    .venv/bin/python -m benchmarks.bench_autograd_mlp --kernel   # one ReLU gradient inside autograd and outside

Each row: the MLP's widths, batch and threads, the median backward of each way (us), their difference, and the
minor page faults per step of each way (none expected: ``allocator.steady_allocator`` is set, as in calibration).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.evidence import write_evidence
from dlrmsim.allocator import steady_allocator
from dlrmsim.calibration.dlrm_runner import mlp_backward, mlp_forward, new_mlp
from dlrmsim.calibration.ops import get_ops
from dlrmsim.host import usable_cores

# The validation cases' MLPs (calibration/validation_cases.yaml): base bottom and top (top input: E + 4*5/2 pairs
# = 42 at E=32, 4 tables), wide-mlp's bottom.
WIDTHS = ((64, 256, 32), (42, 256, 64, 1), (256, 1024, 32))


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def compare(ops: Any, widths: tuple[int, ...], batch: int, samples: int) -> dict[str, Any]:
    """Median backward (s) of the autograd MLP and of the runner's, interleaved, each after ``ops.flush``."""
    import torch

    rng = np.random.default_rng(batch + sum(widths))
    layers: list[Any] = []
    for a, b in zip(widths[:-1], widths[1:], strict=True):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    module = torch.nn.Sequential(*layers)
    x = torch.from_numpy(rng.standard_normal((batch, widths[0]), dtype=np.float32))
    grad = torch.from_numpy(rng.standard_normal((batch, widths[-1]), dtype=np.float32))
    runner = new_mlp(ops, list(widths), rng)
    times: dict[str, list[float]] = {"autograd": [], "runner": []}
    faults = {"autograd": 0, "runner": 0}
    for i in range(samples + 3):
        with torch.enable_grad():
            y = module(x)
            ops.flush()
            f0, t0 = _faults(), time.perf_counter()
            y.backward(grad)
            t1, f1 = time.perf_counter(), _faults()
            module.zero_grad(set_to_none=True)
        # The runner's: its last ReLU's gradient is part of the step's backward too, so it is timed.
        out, acts = mlp_forward(ops, runner, x, sigmoid_last=False)
        ops.flush()
        f2, t2 = _faults(), time.perf_counter()
        dz = ops.relu_backward(grad, out)
        mlp_backward(ops, runner, acts, dz, need_dx=False)
        t3, f3 = time.perf_counter(), _faults()
        if i >= 3:  # warm-up
            times["autograd"].append(t1 - t0)
            times["runner"].append(t3 - t2)
            faults["autograd"] += f1 - f0
            faults["runner"] += f3 - f2
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "widths": list(widths),
        "batch": batch,
        "autograd_us": round(med["autograd"] * 1e6, 1),
        "runner_us": round(med["runner"] * 1e6, 1),
        "difference_us": round((med["autograd"] - med["runner"]) * 1e6, 1),
        "faults_per_step": {k: v / samples for k, v in faults.items()},
    }


def kernel_inside_and_outside(ops: Any, samples: int) -> dict[str, float]:
    """One ReLU gradient (``threshold_backward``, batch 256 x 256, the bottom MLP's first layer) timed inside
    autograd's backward (a custom ``autograd.Function`` whose backward times the call) and called directly after
    the same forward and the same later layer's gradients, each after ``ops.flush``: median us of each. On the VM
    it read 60-80 inside against 31-50 outside, the gap of the whole MLP in miniature."""
    import torch

    lin1, lin2 = torch.nn.Linear(64, 256), torch.nn.Linear(256, 32)
    x, grad = torch.randn(256, 64), torch.randn(256, 32)
    inside: list[float] = []

    class TimedRelu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, y):  # noqa: ANN001, ANN205
            r = torch.relu(y)
            ctx.save_for_backward(r)
            return r

        @staticmethod
        def backward(ctx, go):  # noqa: ANN001, ANN205
            (r,) = ctx.saved_tensors
            t0 = time.perf_counter()
            out = torch.ops.aten.threshold_backward(go, r, 0.0)
            inside.append(time.perf_counter() - t0)
            return out

    outside: list[float] = []
    for _ in range(samples + 3):
        with torch.enable_grad():  # ops.threads turns autograd off
            y = torch.relu(lin2(TimedRelu.apply(lin1(x))))
            ops.flush()
            y.backward(grad)
            lin1.zero_grad(set_to_none=True)
            lin2.zero_grad(set_to_none=True)
        with torch.no_grad():
            h = torch.relu(lin1(x))
            y = torch.relu(lin2(h))
            ops.flush()
            dz = torch.ops.aten.threshold_backward(grad, y, 0.0)
            _ = (dz.t() @ h, dz.sum(0))  # the later layer's weight and bias gradients, as autograd forms them
            dx = dz @ lin2.weight
            t0 = time.perf_counter()
            torch.ops.aten.threshold_backward(dx, h, 0.0)
            outside.append(time.perf_counter() - t0)
    return {"inside_us": statistics.median(inside[3:]) * 1e6, "outside_us": statistics.median(outside[3:]) * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default=",".join(str(c) for c in sorted({1, usable_cores()})))
    ap.add_argument("--batches", default="256,1024,4096")
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--out", type=Path, default=None, help="folder for the JSON evidence file")
    ap.add_argument("--kernel", action="store_true", help="only the one-kernel reproducer, at 1 thread")
    args = ap.parse_args()
    steady_allocator()  # as calibration and validation run
    ops = get_ops("torch")
    if args.kernel:
        with ops.threads(1):
            got = kernel_inside_and_outside(ops, args.samples)
        inside, outside = got["inside_us"], got["outside_us"]
        print(f"threshold_backward 256x256, 1 thread: inside autograd {inside:.1f} us, outside {outside:.1f} us")
        return
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        with ops.threads(threads):
            for widths in WIDTHS:
                for batch in (int(b) for b in args.batches.split(",")):
                    row = {"threads": threads, **compare(ops, widths, batch, args.samples)}
                    rows.append(row)
                    print(
                        f"threads {threads} widths {'-'.join(map(str, widths)):14s} batch {batch:5d}: autograd "
                        f"{row['autograd_us']:8.1f} us, runner {row['runner_us']:8.1f} us, "
                        f"difference {row['difference_us']:+7.1f} us"
                    )
    if args.out is not None:
        write_evidence(args.out, "autograd-mlp", {"what": "benchmarks.bench_autograd_mlp", "rows": rows})


if __name__ == "__main__":
    main()
