"""The demo runs end to end on a reduced grid (its tables need the scaling columns: sockets and baseline)."""

from __future__ import annotations

from pathlib import Path

from dlrmsim.studies.demo import run_demo


def test_demo_on_one_topology_and_workload_writes_its_report(tmp_path: Path) -> None:
    df = run_demo(tmp_path, topologies=("skx-8s-upi",), workloads=("small",))
    # because the printed tables show each row's sockets and say what the speedups are against
    assert {"sockets", "baseline", "speedup"} <= set(df.columns)
    assert df.loc[df.ranks == 1, "speedup"].eq(1.0).all(), "because one rank is the baseline of small on skx-8s-upi"
    assert (tmp_path / "report.html").stat().st_size > 0, "because the demo writes its report"
