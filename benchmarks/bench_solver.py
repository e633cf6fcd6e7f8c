"""How much of a simulation is the max-min solve itself, and how many instants need one?

Issue 26 asks for a 64-rank Large iteration in 0.5 s. This benchmark measures the floor an exact fluid engine has
under that goal, apart from SimPy and Python overheads:

1. It simulates one training iteration on the step-by-step path (``run_ahead=False``: every solve goes through
   ``FluidScheduler._solve`` in Python, where it can be observed) and records the simulated time of every solve:
   how many there are, how many distinct instants they fall on, and how far apart those are.
2. It keeps every ``--every``-th rate problem as the scheduler hands it to the solver (entries, capacities,
   effective caps, shares) with the rates the scheduler got, and checks that solving it again gives the same rates
   bit for bit (so the kept problems are the real ones).
3. It times ``maxmin.maxmin_rates`` on the kept problems in a compiled loop, each problem ``--repeat`` times in a
   row (its arrays hot in cache, as they are in the engine, which solves the same tables at every instant), and
   reports the best of five passes in microseconds per solve.

``solves x us per solve`` (the solves of the product's own path, the compiled run-ahead kernel, which it also runs
and times once) is then the time the solves alone need at this size: a lower bound for any engine that solves every
instant exactly, whatever it does around the solves.

    .venv/bin/python -m benchmarks.bench_solver [--topology clx-64s-opa] [--workload large] [--ranks 64]
        [--scaling weak] [--every 40] [--repeat 10] [--out JSON]

The problems are timed with numba, so the first pass compiles the timing loop (a few seconds, not counted).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit
from numba.typed import List

from dlrmsim.engine import fluid, maxmin
from dlrmsim.engine.simulation import RUN_TOTALS
from dlrmsim.training.simulate import TrainingConfig, load_inputs, run_iteration


@dataclass
class Problem:
    """One rate problem as ``fluid._solve_rates`` hands it to the solver (weighted form), and the rates it got."""

    n: int
    e_act: np.ndarray
    e_res: np.ndarray
    e_w: np.ndarray
    caps: np.ndarray  # effective caps divided by shares (the filled variable is rate / share)
    share: np.ndarray
    rates: np.ndarray  # B/s or core units per s, as the scheduler wrote them


def observe(
    cfg: TrainingConfig, every: int, on_solve: Callable[[fluid.FluidScheduler], None] | None = None
) -> tuple[list[float], list[Problem], np.ndarray]:
    """Run ``cfg`` on the step-by-step path; return every solve's simulated time (s), every ``every``-th problem,
    and the resources' capacities. ``on_solve`` sees the scheduler's tables before each observed solve."""
    times: list[float] = []
    kept: list[Problem] = []
    original = fluid.FluidScheduler._solve
    res_cap: list[np.ndarray] = []

    def solve(self: fluid.FluidScheduler) -> None:
        n, m = self._n, self._m
        observed = bool(n) and not self._held
        if observed:
            times.append(self.env.now)
            if on_solve is not None:
                on_solve(self)
        keep = observed and len(times) % every == 0
        if keep:
            caps = fluid._effective_caps(self._F, self._I, n, self.n_ranks)
            share = self._F[fluid._SHARE, :n].copy()
            args = (n, self._E[0, :m].copy(), self._E[1, :m].copy(), self._EW[:m].copy(), caps / share, share)
        original(self)
        if keep:
            kept.append(Problem(*args, rates=self._F[fluid._RATE, :n].copy()))
            res_cap[:] = [self.res_cap]

    fluid.FluidScheduler._solve = solve  # type: ignore[method-assign]
    try:
        run_iteration(load_inputs(cfg), cfg, record_flows=False, run_ahead=False)
    finally:
        fluid.FluidScheduler._solve = original  # type: ignore[method-assign]
    return times, kept, res_cap[0] if res_cap else np.zeros(0)


def check(problems: list[Problem], res_cap: np.ndarray) -> int:
    """How many kept problems solve again to other rates than the scheduler's (0 unless the capture is wrong)."""
    bad = 0
    for p in problems:
        x = maxmin.maxmin_rates(p.n, p.e_act, p.e_res, p.e_w, res_cap, p.caps, p.share)
        bad += not np.array_equal(x * p.share, p.rates)
    return bad


@njit(cache=False)
def _solve_all(n, e_act, e_res, e_w, res_cap, caps, share, repeat):  # type: ignore[no-untyped-def]
    s = 0.0
    for i in range(len(n)):
        for _ in range(repeat):
            s += maxmin.maxmin_rates(n[i], e_act[i], e_res[i], e_w[i], res_cap, caps[i], share[i])[0]
    return s


def time_solves(problems: list[Problem], res_cap: np.ndarray, repeat: int, passes: int = 5) -> float:
    """Best over ``passes`` of the mean time per solve (s), each problem solved ``repeat`` times in a row."""
    cols = [List(getattr(p, f) for p in problems) for f in ("n", "e_act", "e_res", "e_w", "caps", "share")]
    n, e_act, e_res, e_w, caps, share = cols
    _solve_all(n, e_act, e_res, e_w, res_cap, caps, share, 1)  # compile
    best = np.inf
    for _ in range(passes):
        t = time.perf_counter()
        _solve_all(n, e_act, e_res, e_w, res_cap, caps, share, repeat)
        best = min(best, (time.perf_counter() - t) / (repeat * len(problems)))
    return best


def product_solves(cfg: TrainingConfig) -> tuple[int, float]:
    """The solves of the product's own path (the compiled run-ahead kernel), and its CPU time (s). It may solve less
    often than the step-by-step path, which skips a collective's exactly repeated cycles where it can."""
    inputs = load_inputs(cfg)
    run_iteration(inputs, cfg, record_flows=False)  # load the kernels
    before = RUN_TOTALS.get("solves", 0)
    t = time.process_time()
    run_iteration(inputs, cfg, record_flows=False)
    return RUN_TOTALS.get("solves", 0) - before, time.process_time() - t


def summary(cfg: TrainingConfig, every: int, repeat: int) -> dict[str, Any]:
    solves, product_cpu_s = product_solves(cfg)
    t0 = time.perf_counter()
    times, problems, res_cap = observe(cfg, every)
    observed_s = time.perf_counter() - t0
    t = np.asarray(times)
    distinct = np.unique(t)
    gaps = np.diff(distinct)
    fits = sum(bool(maxmin.caps_fit(p.e_act, p.e_res, p.e_w, res_cap, p.caps, p.share)) for p in problems)
    per_solve = time_solves(problems, res_cap, repeat)
    return {
        "config": cfg.model_dump(mode="json", include={"topology", "workload", "ranks", "scaling"}),
        "solves": solves,
        "product_cpu_s": product_cpu_s,
        "step_by_step_solves": len(times),
        "distinct_instants": int(distinct.size),
        "instant_gap_s": {q: float(np.quantile(gaps, float(q))) for q in ("0.1", "0.5", "0.9")} if gaps.size else {},
        "simulated_s": float(t.max()) if t.size else 0.0,
        "kept_problems": len(problems),
        "kept_rates_differ": check(problems, res_cap),
        "mean_activities": float(np.mean([p.n for p in problems])) if problems else 0.0,
        "mean_entries": float(np.mean([p.e_act.size for p in problems])) if problems else 0.0,
        "caps_fit_share": fits / len(problems) if problems else 0.0,
        "us_per_solve": per_solve * 1e6,
        "solves_alone_s": per_solve * solves,
        "step_by_step_wall_s": observed_s,
    }


def run_arguments(description: str) -> argparse.ArgumentParser:
    """A parser with the run's options (the exact 64-rank Large weak run by default), shared with solve_locality."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--topology", default="clx-64s-opa")
    ap.add_argument("--workload", default="large")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--scaling", default="weak")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = run_arguments(__doc__.split("\n\n")[0])
    ap.add_argument("--every", type=int, default=40, help="keep every N-th rate problem for timing")
    ap.add_argument("--repeat", type=int, default=10, help="solves of each kept problem in a row")
    ap.add_argument("--out", type=Path, help="write the JSON here as well")
    a = ap.parse_args(argv)
    cfg = TrainingConfig(topology=a.topology, workload=a.workload, ranks=a.ranks, scaling=a.scaling)
    out = summary(cfg, a.every, a.repeat)
    text = json.dumps(out, indent=1)
    print(text)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    return 0 if out["kept_rates_differ"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
