"""The headline study `make demo` runs: strong scaling of Small, Large and MLPerf on the two CPU systems.

Every rank count from the fewest sockets that hold the workload up to the most its table-wise placement
or the topology allows, overlapping and blocking, printed as tables and written as one HTML report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from dlrmsim.host import usable_cores
from dlrmsim.output import console
from dlrmsim.studies.derive import derive_scaling
from dlrmsim.studies.pool import WorkerPool
from dlrmsim.studies.report import build_report, topology_figures
from dlrmsim.studies.scaling import baseline_ranks, choose_baseline, print_scaling_table
from dlrmsim.topologies import load_topology
from dlrmsim.topologies.mapping import format_sockets
from dlrmsim.training.simulate import TrainingConfig, load_inputs, run_iteration
from dlrmsim.workloads import load_workload
from dlrmsim.workloads.placement import max_ranks

TOPOLOGIES = ("clx-64s-opa", "skx-8s-upi")
WORKLOADS = ("small", "large", "mlperf")


@dataclass(frozen=True)
class DemoPoint:
    topology: str
    workload: str
    ranks: int
    blocking: bool

    def config(self) -> TrainingConfig:
        return TrainingConfig(topology=self.topology, workload=self.workload, ranks=self.ranks, blocking=self.blocking)


def rank_counts(base: TrainingConfig, topology_ranks: int) -> list[int]:
    """Fewest ranks that fit, then powers of two, then the placement's limit."""
    first = baseline_ranks(base)
    top = min(topology_ranks, max_ranks(load_workload(base.workload), base.placement))
    counts = {first, top}
    p = 1
    while p < top:
        if p > first:
            counts.add(p)
        p *= 2
    return sorted(c for c in counts if first <= c <= top)


def demo_points(topologies: tuple[str, ...] = TOPOLOGIES, workloads: tuple[str, ...] = WORKLOADS) -> list[DemoPoint]:
    points = []
    for topo in topologies:
        n = load_topology(topo).num_ranks
        for wl in workloads:
            for r in rank_counts(TrainingConfig(topology=topo, workload=wl, ranks=1), n):
                points.extend(DemoPoint(topo, wl, r, blocking) for blocking in (False, True))
    return points


def demo_workers() -> int:
    """Processes the demo simulates on: the cores this process may use, up to 4 (its points are independent)."""
    return min(4, usable_cores())


def _simulate(pt: DemoPoint) -> tuple[dict, str]:
    """One point's results row and its sockets (in a worker process or this one)."""
    cfg = pt.config()
    inputs = load_inputs(cfg)
    res = run_iteration(inputs, cfg, record_flows=False)
    sockets = format_sockets(inputs.mapping.sockets) if inputs.mapping else ""
    return res.to_row(), sockets


def run_demo(
    out: Path = Path("out"),
    topologies: tuple[str, ...] = TOPOLOGIES,
    workloads: tuple[str, ...] = WORKLOADS,
    workers: int | None = None,
) -> pd.DataFrame:
    """Simulate every demo point, print one table per topology and workload, and write ``out/report.html``.

    ``workers`` (default :func:`demo_workers`): processes simulating points at once (:class:`WorkerPool`; 1 runs
    them here). The most ranks go first: one point (Large on 64 ranks) is most of the demo's work. Results do not
    depend on where a point ran (the simulation is deterministic)."""
    points = demo_points(topologies, workloads)
    n_workers = demo_workers() if workers is None else workers
    order = sorted(range(len(points)), key=lambda i: -points[i].ranks)
    done: dict[int, tuple[dict, str]] = {}
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
    # the pool first: its workers are forked before the progress bar's refresh thread exists (studies.pool)
    with WorkerPool(_simulate, min(n_workers, len(points))) as pool, Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("simulating", total=len(points))
        for i, result in pool.run(points, order):
            done[i] = result
            pt = points[i]
            label = f"{pt.workload} on {pt.topology}, {pt.ranks} ranks{' blocking' if pt.blocking else ''}"
            bar.update(task, description=f"done: {label}")
            bar.advance(task)
    rows = []
    why: dict[tuple[str, str], str] = {}
    for i, pt in enumerate(points):
        row, sockets = done[i]
        cfg = pt.config()
        if (pt.topology, pt.workload) not in why:
            why[pt.topology, pt.workload] = choose_baseline(cfg).reason  # the first rank count (rank_counts)
        rows.append(
            {
                "topology": pt.topology,
                "workload": pt.workload,
                "scaling": "strong",
                "backend": cfg.backend,
                "placement": cfg.placement.strategy,
                "blocking": pt.blocking,
                "ranks": pt.ranks,
                "sockets": sockets,
                "baseline": why[pt.topology, pt.workload],
                "status": "ok",
                **row,
            }
        )
    df = derive_scaling(pd.DataFrame(rows), group_columns=["topology", "workload", "scaling", "backend", "placement", "blocking"])
    for (topo, wl), part in df[~df.blocking].groupby(["topology", "workload"], sort=False):
        print_scaling_table(part, f"{wl} strong scaling on {topo} (ccl, table-wise, overlapping)")
    out.mkdir(parents=True, exist_ok=True)
    figs, notes = topology_figures(df)
    path = build_report(
        df,
        out / "report.html",
        topology_figures=figs,
        title="dlrmsim: DLRM strong scaling on CLX-64S OPA and SKX-8S UPI",
        notes=notes,
    )
    console.print(f"report written to {path}")
    return df
