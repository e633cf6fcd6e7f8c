"""Ranks sharing a host: does one rank's compute slow down while another rank computes beside it?

The simulator's ranks on one host (``-t host -r N``) each compute at the calibrated one-process rates; only the
collectives meet. Two measurements, rounds interleaved (the order rotates each round), fresh processes each:

- ``gemm``: a single-threaded GEMM (``--rows`` x 1024 x 1024, fp32, torch) in one process alone, in two processes at
  once, and as one process with two threads doing both shares. p10 and median ms per share, per process.
- ``runner`` (``--case``): one rank's work of a 2-rank validation case run alone (the whole workload at the local
  batch, 1 thread: the same MLP, interaction and embedding rows per rank) against the 2-rank run, 1 thread a rank,
  per phase. The 2-rank phases are each phase's slowest rank (``dlrm_runner.iteration_phases``), so they include
  the later-of-two-ranks effect as well as any slowdown from computing side by side.

    .venv/bin/python -m benchmarks.bench_corun [--rounds 3] [--seconds 4] [--case ranks-2 --case ranks-2-wide]
        [--out validation/results]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.evidence import in_processes, write_evidence

DIM = 1024


def _gemm(queue: Any, threads: int, rows: int, seconds: float) -> None:
    import torch

    torch.set_num_threads(threads)
    a, w = torch.randn(rows, DIM), torch.randn(DIM, DIM)
    for _ in range(5):
        a @ w
    times: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        a @ w
        times.append(time.perf_counter() - t)
    times.sort()
    queue.put({"p10_ms": times[len(times) // 10] * 1e3, "median_ms": times[len(times) // 2] * 1e3, "samples": len(times)})


def _runner(queue: Any, case_name: str, alone: bool) -> None:
    from dlrmsim.calibration.dlrm_runner import run_dlrm_iteration
    from dlrmsim.calibration.validate import load_cases

    case = load_cases(only=[case_name])[0]
    if alone:
        m = run_dlrm_iteration(case.workload, case.batch // case.ranks, ranks=1, threads=1, backend="torch", iterations=7)
    else:
        m = run_dlrm_iteration(case.workload, case.batch, ranks=case.ranks, threads=1, backend="torch", iterations=7)
    queue.put({"step_ms": m.iteration_s * 1e3, "phases_ms": {k: v * 1e3 for k, v in m.phases_s.items()}})


def gemm_rounds(rounds: int, rows: int, seconds: float) -> dict[str, list[list[dict[str, float]]]]:
    """Per mode (alone, pair, threads-2), per round, what each process measured (times per ``rows``-row share)."""
    modes = {
        "alone": [(1, rows, seconds)],
        "pair": [(1, rows, seconds)] * 2,
        "threads-2": [(2, 2 * rows, seconds)],
    }
    out: dict[str, list[list[dict[str, float]]]] = {m: [] for m in modes}
    names = list(modes)
    for r in range(rounds):
        for m in names[r % len(names) :] + names[: r % len(names)]:
            got = in_processes(_gemm, modes[m])
            if m == "threads-2":  # two shares at once: per share, as the pair's processes report it
                got = [{k: (v / 2 if k.endswith("_ms") else v) for k, v in g.items()} for g in got]
            out[m].append(got)
            print(m, [f"{g['p10_ms']:.2f}/{g['median_ms']:.2f}" for g in got], flush=True)
    return out


def runner_rounds(case: str, rounds: int) -> dict[str, Any]:
    """The case's 2-rank run and one rank's work alone, ``rounds`` times each in turn; per phase the fastest round."""
    runs: dict[str, list[dict[str, Any]]] = {"alone": [], "ranks": []}
    for r in range(rounds):
        for mode in ("alone", "ranks") if r % 2 == 0 else ("ranks", "alone"):
            runs[mode] += in_processes(_runner, [(case, mode == "alone")])
    phases = list(runs["ranks"][0]["phases_ms"])
    best = {mode: {ph: min(x["phases_ms"][ph] for x in rs) for ph in phases} for mode, rs in runs.items()}
    for ph in phases:
        a, p = best["alone"][ph], best["ranks"][ph]
        print(f"{case:14s} {ph:18s} alone {a:8.3f} ms  2 ranks {p:8.3f} ms" + (f"  x{p / a:.2f}" if a > 0 else ""))
    steps = {mode: [round(x["step_ms"], 3) for x in rs] for mode, rs in runs.items()}
    print(f"{case:14s} step ms alone {steps['alone']}  2 ranks {steps['ranks']}")
    return {"fastest_round_phases_ms": best, "steps_ms": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0, help="timing per GEMM process")
    ap.add_argument("--rows", type=int, default=512, help="GEMM rows per process (one rank's batch)")
    ap.add_argument("--case", action="append", default=[], help="2-rank validation case (repeatable)")
    ap.add_argument("--out", type=Path, default=Path("validation/results"))
    args = ap.parse_args()
    gemm = gemm_rounds(args.rounds, args.rows, args.seconds)
    summary = {m: statistics.median(g["p10_ms"] for rnd in rs for g in rnd) for m, rs in gemm.items()}
    print("median of p10 ms per share:", {m: round(v, 3) for m, v in summary.items()})
    runner = {c: runner_rounds(c, args.rounds) for c in args.case}
    write_evidence(
        args.out,
        "corun",
        {"gemm_shape": [args.rows, DIM, DIM], "gemm": gemm, "gemm_median_p10_ms": summary, "runner": runner},
    )


if __name__ == "__main__":
    main()
