"""Ranks sharing a host: does one rank's compute slow down while another rank computes beside it?

The simulator's ranks on one host (``-t host -r N``) each compute at the calibrated one-process rates; only the
collectives meet. Two measurements, rounds interleaved (the order rotates each round), fresh processes each:

- ``gemm``: a single-threaded GEMM (``--rows`` x 1024 x 1024, fp32, torch) in one process alone, in two processes at
  once, and as one process with two threads doing both shares. p10 and median ms per share, per process.
- ``runner`` (``--case``): one rank's work of a 2-rank validation case run alone (the whole workload at the local
  batch, 1 thread: the same MLP, interaction and embedding rows per rank) against the 2-rank run, 1 thread a rank:
  each phase's median over iterations, per rank. Per rank, not the slower rank per iteration as
  ``dlrm_runner.iteration_phases`` reports a step: a max of two noisy samples is slower than either rank's typical
  time, which once read as compute slowed by the other rank (1.2-1.8x) where each rank's own phases were mostly
  0.85-1.15x of the same work alone (2026-11-26, Intel VM).
  A rank's collective phases include its wait for the other rank.

    .venv/bin/python -m benchmarks.bench_corun [--rounds 3] [--seconds 4] [--case ranks-2 --case ranks-2-wide]
        [--out validation/results]

Needs torch (the runner's torch backend, gloo between the ranks).
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


def _alone(queue: Any, case_name: str, iterations: int) -> None:
    from dlrmsim.allocator import steady_allocator
    from dlrmsim.calibration.dlrm_runner import _run_rank
    from dlrmsim.calibration.validate import load_cases

    steady_allocator()  # as the rank processes of a validation run set it up
    case = load_cases(only=[case_name])[0]
    queue.put(_run_rank(None, case.workload, case.batch // case.ranks, "torch", 1, iterations, 2, 0))


def _medians(rank: dict[str, Any]) -> dict[str, float]:
    """A rank's median time per phase over its iterations (ms)."""
    return {ph: statistics.median(it.get(ph, 0.0) for it in rank["phases"]) * 1e3 for ph in rank["phases"][0]}


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


def runner_rounds(case_name: str, rounds: int, iterations: int = 9) -> list[dict[str, Any]]:
    """Per round: one rank's work alone, then the 2-rank run (the order swapped every other round); each phase's
    median per rank."""
    from dlrmsim.calibration.collectives_host import implementation_for, run_ranks
    from dlrmsim.calibration.dlrm_runner import _run_rank
    from dlrmsim.calibration.validate import load_cases

    case = load_cases(only=[case_name])[0]
    out = []
    for r in range(rounds):
        got: dict[str, Any] = {}
        for mode in ("alone", "ranks") if r % 2 == 0 else ("ranks", "alone"):
            if mode == "alone":
                got["alone"] = _medians(in_processes(_alone, [(case_name, iterations)])[0])
            else:
                args = (case.workload, case.batch, "torch", 1, iterations, 2, 0)
                ranks = run_ranks(_run_rank, case.ranks, implementation_for("torch"), args=args, threads_per_rank=1)
                got["ranks"] = [_medians(x) for x in ranks]
        for ph, alone in got["alone"].items():
            each = " ".join(f"{x[ph]:8.3f}" for x in got["ranks"])
            ratios = " ".join(f"x{x[ph] / alone:.2f}" for x in got["ranks"]) if alone > 0.01 else ""
            print(f"{case_name:14s} round {r} {ph:18s} alone {alone:8.3f} ms  ranks {each} ms  {ratios}")
        out.append(got)
    return out


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
    runner = {c: runner_rounds(c, args.rounds) for c in args.case}  # per case, per round: phase medians (ms)
    write_evidence(
        args.out,
        "corun",
        {"gemm_shape": [args.rows, DIM, DIM], "gemm": gemm, "gemm_median_p10_ms": summary, "runner": runner},
    )


if __name__ == "__main__":
    main()
