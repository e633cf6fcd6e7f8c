"""A validation case's MLP GEMMs hot, warm and cold: each GEMM in step order, timed after repeats of itself (hot, as
a warm-loop benchmark times it), once back to back with the others (warm), and once right after a cache flush of
its own (cold), beside what the calibrated simulator charges each one.

First seen on 2026-11-25: inside a TorchRec step at one thread the base case's 14 GEMMs took about 4.1 ms
(torch.profiler), in a warm cycle 3.4 ms. The model column is what the calibrated simulator charges each GEMM in
the case's step: its warm roofline, its dispatch and, with a calibration that timed GEMMs after a flush of their
own, the eviction cost at the shares the task graph gives it there (costs.evicted_operand_time_s). The in-sequence
("warm") mode gives every GEMM its own operands, so it is not a step: there a forward reads the activation its
predecessor just wrote. Outputs are preallocated (``out=``), so that
neither mode pays the allocator's fresh pages. Modes alternate within each round; the case sets batch, widths and
threads (``threads-1`` for one thread).

    .venv/bin/python -m benchmarks.bench_gemm_cold [--case base] [--rounds 40]
        [--calibration CAL.yaml] [--out validation/results]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.evidence import write_evidence
from dlrmsim.calibration.validate import load_cases
from dlrmsim.workloads import model

FLUSH_BYTES = 64 << 20  # twice a 32 MiB last-level cache, as Ops.flush on this project's host
# hot: each GEMM timed after 4 untimed calls of itself (a warm loop, as the calibration's GEMM benchmarks time);
# warm: in step order, each once, back to back with the others; cold: the same, after a flush before each.
MODES = ("hot", "warm", "cold")
HOT_REPEATS = 4


def gemm_calls(torch: Any, widths_by_part: dict[str, list[int]], batch: int) -> list[tuple[str, Callable[[], Any]]]:
    """(simulator task name, call) for each GEMM of the MLPs in the DLRM runner's step order: each part's forward,
    then each part's backward from its last layer (weight gradient, then input gradient; none into the bottom MLP's
    input), top before bottom in backward as in a step."""
    gen = torch.Generator().manual_seed(0)
    layers: dict[str, list[dict[str, Any]]] = {}
    for part, widths in widths_by_part.items():
        layers[part] = []
        for fi, fo in zip(widths, widths[1:], strict=False):
            x = torch.randn(batch, fi, generator=gen)
            dz = torch.randn(batch, fo, generator=gen)
            w = torch.randn(fo, fi, generator=gen) * 0.1
            b = torch.zeros(fo)
            outs = {"fwd": torch.empty(batch, fo), "bwd_weights": torch.empty(fo, fi), "bwd_data": torch.empty(batch, fi)}
            layers[part].append({"x": x, "dz": dz, "w": w, "b": b, **{f"o_{k}": v for k, v in outs.items()}})
    calls: list[tuple[str, Callable[[], Any]]] = []
    prefix = {"bottom": "bot", "top": "top"}
    for part in ("bottom", "top"):
        for i, L in enumerate(layers[part]):
            calls.append((f"{prefix[part]}{i}.fwd", lambda L=L: torch.addmm(L["b"], L["x"], L["w"].t(), out=L["o_fwd"])))
    for part in ("top", "bottom"):
        for i in range(len(layers[part]) - 1, -1, -1):
            L = layers[part][i]
            calls.append((f"{prefix[part]}{i}.bwd_weights", lambda L=L: torch.mm(L["dz"].t(), L["x"], out=L["o_bwd_weights"])))
            if i > 0 or part == "top":
                calls.append((f"{prefix[part]}{i}.bwd_data", lambda L=L: torch.mm(L["dz"], L["w"], out=L["o_bwd_data"])))
    return calls


def predicted_gemms(calibration: Path, case_name: str) -> dict[str, float]:
    """Seconds the calibrated simulator charges each GEMM task of the case's rank 0 (the project runner's step)."""
    from dlrmsim.calibration.schema import load_calibration
    from dlrmsim.calibration.validate import TARGET_IMPLEMENTATIONS, simulate_case

    case = {c.name: c for c in load_cases()}[case_name]
    res = simulate_case(case, load_calibration(calibration), TARGET_IMPLEMENTATIONS["project"])
    return {r.name: r.end - r.start for r in res.records if r.rank == 0 and r.kind == "gemm"}


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="base")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--calibration", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=Path("validation/results"))
    args = ap.parse_args()
    case = {c.name: c for c in load_cases()}[args.case]
    w = case.workload
    torch.set_num_threads(case.threads)
    calls = gemm_calls(torch, {"bottom": list(w.bottom_mlp), "top": [model.interaction_width(w), *w.top_mlp]}, case.batch)
    flush = torch.ones(FLUSH_BYTES // 4)
    times: dict[str, dict[str, list[float]]] = {name: {m: [] for m in MODES} for name, _ in calls}
    for r in range(args.rounds + 3):  # the first 3 rounds warm the code and the allocator up, untimed
        for mode in MODES[r % len(MODES) :] + MODES[: r % len(MODES)]:
            for name, call in calls:
                if mode == "cold":
                    flush.add_(1.0)
                for _ in range(HOT_REPEATS if mode == "hot" else 0):
                    call()
                t0 = time.perf_counter()
                call()
                dt = time.perf_counter() - t0
                if r >= 3:
                    times[name][mode].append(dt)
    pred = predicted_gemms(args.calibration, args.case) if args.calibration else {}
    rows = []
    for name, _ in calls:
        row: dict[str, Any] = {"gemm": name, **{f"{m}_us": 1e6 * float(np.median(times[name][m])) for m in MODES}}
        row["predicted_us"] = 1e6 * pred[name] if name in pred else None
        rows.append(row)
        extra = f"  model {row['predicted_us']:7.1f}" if name in pred else ""
        print(f"{name:18s} " + "  ".join(f"{m} {row[f'{m}_us']:7.1f}" for m in MODES) + f" us{extra}")
    total = {k: sum(r[f"{k}_us"] or 0.0 for r in rows) / 1e3 for k in (*MODES, "predicted")}
    print("total ms: " + "  ".join(f"{k} {v:.3f}" for k, v in total.items() if k != "predicted" or pred))
    doc = {"case": args.case, "threads": case.threads, "batch": case.batch, "rounds": args.rounds, "torch": torch.__version__}
    doc["calibration"] = str(args.calibration) if pred else None
    write_evidence(args.out, "gemm-cold", {**doc, "gemms": rows, "total_ms": total})


if __name__ == "__main__":
    main()
