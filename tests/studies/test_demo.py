"""The demo runs end to end on a reduced grid (its tables need the scaling columns: sockets and baseline)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dlrmsim.engine import RUN_TOTALS
from dlrmsim.studies.demo import run_demo


def test_demo_on_one_topology_and_workload_writes_its_report(tmp_path: Path) -> None:
    df = run_demo(tmp_path, topologies=("skx-8s-upi",), workloads=("small",))
    # because the printed tables show each row's sockets and say what the speedups are against
    assert {"sockets", "baseline", "speedup"} <= set(df.columns)
    assert df.loc[df.ranks == 1, "speedup"].eq(1.0).all(), "because one rank is the baseline of small on skx-8s-upi"
    assert (tmp_path / "report.html").stat().st_size > 0, "because the demo writes its report"


def test_points_simulated_in_worker_processes_give_the_same_rows_and_counters(tmp_path: Path) -> None:
    runs = []
    for workers in (1, 2):
        RUN_TOTALS.clear()
        df = run_demo(tmp_path / str(workers), topologies=("skx-8s-upi",), workloads=("small", "large"), workers=workers)
        runs.append((df, dict(RUN_TOTALS)))
    # because each point is an independent, deterministic simulation: where it ran changes no number, the rows keep
    # the points' order, and the engine's counters come back from the workers (benchmarks read them)
    pd.testing.assert_frame_equal(runs[0][0], runs[1][0])
    assert runs[0][1] == runs[1][1] and runs[0][1]["solves"] > 0
