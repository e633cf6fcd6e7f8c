"""Would an incremental max-min solver pay off? How much of each solve a change of the running set reaches.

Issue 26 lists "solve max-min incrementally, only in the component of links that a change touches" among the ways
to make the engine's cost grow with distinct events. Max-min fair rates split over the connected components of the
activity-resource graph (an activity joins the resources it draws on): a component that no started or finished
activity touches keeps its rates. So an incremental solver re-solves only the touched components, and the share of
entries in them bounds what it saves on the solves (it saves nothing else: the rest of an instant, draining and
finding what finished, still visits every activity unless that is made lazy too).

This runs one training iteration on the step-by-step path (``run_ahead=False``, the same instants and solves as the
product's compiled path; every solve is observed through :func:`benchmarks.bench_solver.observe`) and, at each
solve, labels the components (union-find over the entries), then counts the entries and activities in the components
that hold an activity started since the previous solve or a resource of one that finished since.

    .venv/bin/python -m benchmarks.solve_locality [--topology clx-64s-opa] [--workload large] [--ranks 64]
        [--scaling weak] [--config JSON] [--out JSON]

Measured on the 2-vCPU AMD VM (2026-11-29, ``validation/results/20261129T033*-vm-solve-locality-*.json``): 64-rank
Large weak, 84,144 solves: the touched components held 75 % of the entries summed over the solves (median 66 % a
solve); strong, 98,629 solves: 99.5 % (one component, all 1,832 entries, at the median solve); MLPerf column-wise
(``--config '{"sockets": N, "placement": {"strategy": "column_wise", "replicate_below_rows": 2048}}'``) at 256 ranks
59 % (median 20 %), at 1024 ranks 77 % (median 40 %). Alltoall flows cross the fabric's spine links and copy traffic
joins the memory domains that compute tasks use, so most changes reach most of the problem.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

from benchmarks.bench_solver import observe, run_arguments
from dlrmsim.engine import fluid
from dlrmsim.training.simulate import TrainingConfig


@njit(cache=True)
def component_labels(e_act: np.ndarray, e_res: np.ndarray, n_act: int, n_res: int) -> np.ndarray:
    """Connected-component label of each activity (0..n_act-1) and resource (n_act + r) of the bipartite graph whose
    edges are the entries (activity ``e_act[i]`` draws on resource ``e_res[i]``): a representative node id."""
    parent = np.arange(n_act + n_res)
    for i in range(e_act.shape[0]):
        a = e_act[i]
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        b = n_act + e_res[i]
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        if a != b:
            parent[a] = b
    for x in range(n_act + n_res):
        root = x
        while parent[root] != root:
            root = parent[root]
        parent[x] = root
    return parent


class Locality:
    """Per observed solve: (activities, entries, entries and activities in the components a change touched). An
    activity is known across solves by (owner, tag, issue time): its row in the tables moves as others leave."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int, int]] = []
        self._prev: dict[tuple[int, int, float], list[int]] | None = None

    def __call__(self, sched: fluid.FluidScheduler) -> None:
        n, m = sched._n, sched._m
        ea, er = sched._E[0, :m], sched._E[1, :m]
        lab = component_labels(ea, er, n, sched.res_cap.shape[0])
        keys = list(
            zip(
                sched._I[fluid._OWNER, :n].tolist(),
                sched._I[fluid._TAG, :n].tolist(),
                sched._F[fluid._ISSUE, :n].tolist(),
                strict=True,
            )
        )
        res_of: dict[tuple[int, int, float], list[int]] = {k: [] for k in keys}
        for a, r in zip(ea.tolist(), er.tolist(), strict=True):
            res_of[keys[a]].append(r)
        prev, self._prev = self._prev, res_of
        if prev is None:
            return
        touched = {int(lab[i]) for i, k in enumerate(keys) if k not in prev}
        touched |= {int(lab[n + r]) for k, rs in prev.items() if k not in res_of for r in rs}
        in_touched = np.isin(lab, np.fromiter(touched, dtype=np.int64, count=len(touched)))
        self.rows.append((n, m, int(in_touched[ea].sum()), int(in_touched[:n].sum())))

    def summary(self) -> dict[str, Any]:
        a = np.array(self.rows, dtype=float).reshape(-1, 4)
        n, m, ent, act = a.T
        share = ent / np.maximum(m, 1)
        return {
            "solves_compared": len(self.rows),
            "median_activities": float(np.median(n)) if len(n) else 0.0,
            "median_entries": float(np.median(m)) if len(m) else 0.0,
            "touched_entries_share": float(ent.sum() / m.sum()) if m.sum() else 0.0,
            "touched_activities_share": float(act.sum() / n.sum()) if n.sum() else 0.0,
            "touched_entries_share_percentiles": {
                f"p{q}": float(np.percentile(share, q)) if len(share) else 0.0 for q in (10, 25, 50, 75, 90)
            },
        }


def main(argv: list[str] | None = None) -> int:
    ap = run_arguments(__doc__.split("\n\n")[0])
    ap.add_argument(
        "--config",
        type=json.loads,
        default={},
        help='more TrainingConfig fields as JSON, e.g. \'{"sockets": 256, "placement": {"strategy": "column_wise"}}\'',
    )
    ap.add_argument("--out", type=Path, help="write the JSON here as well")
    args = ap.parse_args(argv)
    fields = {"topology": args.topology, "workload": args.workload, "ranks": args.ranks, "scaling": args.scaling}
    cfg = TrainingConfig(**fields, **args.config)
    seen = Locality()
    t = time.perf_counter()
    times, _, _ = observe(cfg, every=sys.maxsize, on_solve=seen)
    out = {
        "config": cfg.model_dump(include={"topology", "workload", "ranks", "scaling", *args.config}),
        "step_by_step_solves": len(times),
        **seen.summary(),
        "wall_s": time.perf_counter() - t,
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
