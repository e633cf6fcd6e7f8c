"""What TorchRec's training step runs outside its DLRM's four parts, and which the simulator does not charge.

``dlrmsim validate --against torchrec --phases`` books under ``other`` what falls outside the bottom MLP, the sparse
arch, the interaction and the top MLP and outside the optimizer step: ``opt.zero_grad``, ``DLRM.forward``'s own code
between its parts, the loss module's forward, and the loss's backward with autograd's start up to the top MLP's first
node. Of these the simulator's task graph has the loss, as its own tasks (taskgraph.loss_task, booked under ``other``
too since 2026-11-28; before, as part of the top MLP's last activation), and autograd's start. This times each piece of a
validation case's real step (hooks on the parts, as ``targets.torchrec.measure_phases`` places them), medians over
the steps, in ms.

    .venv/bin/python -m benchmarks.bench_torchrec_other [--cases batch-256,base,batch-4096] [--steps 80]
        [--out validation/results]

Needs torch and torchrec.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.evidence import write_evidence
from dlrmsim.allocator import steady_allocator
from dlrmsim.calibration.targets.torchrec import ARCH_PHASES, build_model, fresh_batch_count, make_batches
from dlrmsim.calibration.validate import ValidationCase, load_cases


def other_pieces(case: ValidationCase, steps: int) -> dict[str, float]:
    """Median seconds per step of each piece of ``case``'s TorchRec step outside its four parts and its optimizer."""
    import torch

    from dlrmsim.calibration.ops.torch_ops import torch_threads

    model, opt = build_model(case.workload, "fused", 0)
    batches = make_batches(case.workload, case.batch, fresh_batch_count(case.workload, case.batch), 0)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    clock = time.perf_counter
    inside = {"parts": 0.0}
    marks: dict[str, float] = {}
    for name in ARCH_PHASES:
        part = getattr(model, name)

        def before(*_: Any, name: str = name) -> None:
            marks[name] = clock()

        def after(*_: Any, name: str = name) -> None:
            inside["parts"] += clock() - marks[name]

        part.register_forward_pre_hook(before)
        part.register_forward_hook(after)

    def top_mlp_starts(*_: Any) -> None:  # returns None: a value would replace the gradients
        marks.setdefault("top_bwd", clock())

    model.over_arch.register_full_backward_pre_hook(top_mlp_starts)
    rows: list[dict[str, float]] = []
    warmup = 10
    with torch_threads(case.threads, grad=True):
        for i in range(warmup + steps):
            dense, kjt, labels = batches[i % len(batches)]
            marks.clear()
            inside["parts"] = 0.0
            t0 = clock()
            opt.zero_grad(set_to_none=True)
            t1 = clock()
            logits = model(dense_features=dense, sparse_features=kjt)
            t2 = clock()
            loss = loss_fn(logits, labels)
            t3 = clock()
            loss.backward()
            opt.step()
            if i >= warmup:
                rows.append(
                    {
                        "zero_grad": t1 - t0,
                        "forward_outside_parts": (t2 - t1) - inside["parts"],
                        "loss_forward": t3 - t2,
                        "loss_backward_and_autograd_start": marks["top_bwd"] - t3,
                    }
                )
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="batch-256,base,batch-4096")
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--out", type=Path, default=None, help="write the result as evidence JSON into this folder")
    args = ap.parse_args(argv)
    steady_allocator()  # as the validation's processes have it
    result: dict[str, dict[str, float]] = {}
    for case in load_cases(only=args.cases.split(",")):
        pieces = other_pieces(case, args.steps)
        result[case.name] = {k: round(v * 1e3, 4) for k, v in pieces.items()}
        total = sum(pieces.values()) * 1e3
        print(f"{case.name:12s} " + "  ".join(f"{k} {v:.3f}" for k, v in result[case.name].items()) + f"  sum {total:.3f} ms")
    if args.out:
        write_evidence(args.out, "torchrec-other", {"steps": args.steps, "ms": result})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
