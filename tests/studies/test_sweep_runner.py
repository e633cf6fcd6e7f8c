"""The sweep runner: results appended per point, resume skips finished points, failures recorded, Dask at scale."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pandas as pd
import pytest

from dlrmsim.studies.derive import derive_scaling
from dlrmsim.studies.results import ResultsStore, load_results
from dlrmsim.studies.runner import run_sweep
from dlrmsim.studies.spec import POINT_FIELDS, SweepPoint, expand, load_spec, plan_sweep
from tests.studies import sweep_evaluators as ev


def _points(write_spec, **grid) -> list[SweepPoint]:
    return list(plan_sweep(write_spec(**grid)).points)


def _raw(out: Path) -> pd.DataFrame:
    """The results file as written, one row per line, no dedupe."""
    return pd.read_csv(out / "results.csv", dtype={"point_id": str})


def test_serial_sweep_writes_one_row_per_point_with_the_contract_columns(write_spec, tmp_path: Path) -> None:
    points = _points(write_spec, blocking=[False, True], topology_overrides={"links.net.bandwidth_GBps": [12.5, 25]})
    out = tmp_path / "out"
    summary = run_sweep(points, out, ev.cheap, serial=True, progress=False)
    assert (summary.total, summary.skipped, summary.ran, summary.ok, summary.failed) == (16, 0, 16, 16, 0)
    df = load_results(out)
    assert len(df) == 16 and df["point_id"].is_unique
    for col in (
        *POINT_FIELDS,
        "topology.links.net.bandwidth_GBps",
        "point_id",
        "status",
        "error",
        "wall_s",
        "iteration_s",
        "compute_s",
        "exposed_allreduce_s",
        "exposed_alltoall_s",
        "prepost_s",
        "speedup",
        "efficiency",
    ):
        assert col in df.columns, col
    # every number is the evaluator's, read back at full precision
    by_id = {p.point_id: p for p in points}
    for _, row in df.iterrows():
        expected = ev.cheap(by_id[row["point_id"]])
        assert row["iteration_s"] == expected["iteration_s"]
        assert row["allreduce_bytes"] == expected["allreduce_bytes"] == 9996548.0  # Eq. 1, DLRM Small
        assert row["topology.links.net.bandwidth_GBps"] == by_id[row["point_id"]].topology_overrides["links.net.bandwidth_GBps"]
    assert df["ranks"].dtype == "Int64" and df["blocking"].dtype == bool


def test_rerun_skips_finished_points_and_adds_new_ones(write_spec, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_sweep(_points(write_spec, ranks=[1, 2]), out, ev.cheap, serial=True, progress=False)
    before = _raw(out)
    again = run_sweep(_points(write_spec, ranks=[1, 2]), out, ev.cheap, serial=True, progress=False)
    assert (again.skipped, again.ran) == (2, 0)
    pd.testing.assert_frame_equal(_raw(out), before)  # not recomputed: wall_s unchanged
    grown = run_sweep(_points(write_spec, ranks=[1, 2, 4]), out, ev.cheap, serial=True, progress=False)
    assert (grown.skipped, grown.ran) == (2, 1)
    assert len(_raw(out)) == 3


def test_failed_point_is_recorded_and_the_sweep_goes_on(write_spec, tmp_path: Path) -> None:
    out = tmp_path / "out"
    points = _points(write_spec)
    summary = run_sweep(points, out, ev.failing, serial=True, progress=False)
    assert (summary.ok, summary.failed) == (3, 1)
    df = load_results(out)
    bad = df[df["status"] == "error"]
    assert list(bad["ranks"]) == [4]
    assert bad["error"].iloc[0] == "ValueError: toy failure at 4 ranks"
    assert math.isnan(bad["iteration_s"].iloc[0]) and math.isnan(bad["speedup"].iloc[0])
    # kept failures are not retried; by default they are, and a success then replaces the failure
    assert run_sweep(points, out, ev.failing, serial=True, progress=False, retry_failed=False).ran == 0
    retry = run_sweep(points, out, ev.cheap, serial=True, progress=False)
    assert (retry.skipped, retry.ran, retry.ok) == (3, 1, 1)
    df = load_results(out)
    assert len(df) == 4 and set(df["status"]) == {"ok"}
    assert len(_raw(out)) == 5  # the failure stays in the file as history


def test_evaluator_returning_garbage_is_a_failed_point(write_spec, tmp_path: Path) -> None:
    summary = run_sweep(_points(write_spec, ranks=[1]), tmp_path / "out", lambda p: 3.0, serial=True, progress=False)
    assert summary.failed == 1
    assert "not a mapping" in load_results(tmp_path / "out")["error"].iloc[0]


def test_truncated_last_line_from_a_kill_is_dropped_and_cut_before_appending(write_spec, tmp_path: Path) -> None:
    out = tmp_path / "out"
    points = _points(write_spec)
    run_sweep(points[:2], out, ev.cheap, serial=True, progress=False)
    path = out / "results.csv"
    full = path.read_text()
    last = full.splitlines()[-1]
    path.write_text(full + last[: len(last) // 2])  # a third line cut short mid-write
    assert len(load_results(out)) == 2
    summary = run_sweep(points, out, ev.cheap, serial=True, progress=False)
    assert (summary.skipped, summary.ran) == (2, 2)
    raw = _raw(out)
    assert sorted(raw["point_id"]) == sorted(p.point_id for p in points)
    assert path.read_text().endswith("\n")


def test_new_output_column_widens_the_file(write_spec, tmp_path: Path) -> None:
    out = tmp_path / "out"
    points = _points(write_spec, ranks=[1, 2])
    run_sweep(points[:1], out, ev.cheap, serial=True, progress=False)
    run_sweep(points, out, lambda p: ev.cheap(p) | {"extra_s": 1.5}, serial=True, progress=False)
    df = load_results(out)
    assert df["extra_s"].isna().tolist() == [True, False]
    assert df["iteration_s"].notna().all()


def test_two_sweeps_cannot_write_one_folder(tmp_path: Path) -> None:
    from dlrmsim.errors import DlrmsimError

    with ResultsStore(tmp_path), pytest.raises(DlrmsimError, match="another sweep is writing"), ResultsStore(tmp_path):
        pass


def test_derive_scaling_closed_forms() -> None:
    df = pd.DataFrame(
        {
            "workload": ["small"] * 3 + ["small"] * 3,
            "scaling": ["strong"] * 3 + ["weak"] * 3,
            "ranks": [2, 4, 8, 2, 4, 8],
            "status": ["ok", "ok", "ok", "ok", "ok", "error"],
            "iteration_s": [8.0, 5.0, 2.5, 1.0, 1.25, float("nan")],
        }
    )
    d = derive_scaling(df)
    # strong: t_base / t; weak: (p / p_base) * t_base / t; efficiency = speedup / (p / p_base)
    assert d["speedup"].tolist()[:5] == [1.0, 1.6, 3.2, 1.0, 1.6]
    assert d["efficiency"].tolist()[:5] == [1.0, 0.8, 0.8, 1.0, 0.8]
    assert math.isnan(d["speedup"].iloc[5]) and d["ranks_base"].tolist()[:5] == [2, 2, 2, 2, 2]


def test_derive_scaling_baseline_is_the_smallest_successful_rank_count() -> None:
    df = pd.DataFrame(
        {"ranks": [1, 2, 4], "status": ["error", "ok", "ok"], "iteration_s": [None, 4.0, 3.0], "blocking": [True] * 3}
    )
    d = derive_scaling(df)
    assert d["ranks_base"].tolist()[1:] == [2, 2]
    assert d["speedup"].tolist()[1:] == [1.0, 4.0 / 3.0]
    assert d["efficiency"].tolist()[2] == pytest.approx(2.0 / 3.0)


def test_200_points_on_the_local_cluster_against_serial(write_spec, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """200 points of about 8 ms CPU each: on Dask (one worker per CPU) and serially; wall times printed."""
    spec = write_spec(
        evaluator="busy",
        ranks=[1, 2, 4, 8, 16],
        placement=["column_wise"],
        scaling=["strong", "weak"],
        blocking=[False, True],
        topology_overrides={"links.net.bandwidth_GBps": [6.25, 12.5, 25, 50, 100]},
        workload_overrides={"lookups_per_sample": [25, 50]},
    )
    points = list(plan_sweep(spec).points)
    assert len(points) == 200 == len(expand(load_spec(spec)))
    t0 = time.perf_counter()
    parallel = run_sweep(points, tmp_path / "dask", ev.busy, progress=False)
    t_parallel = time.perf_counter() - t0
    t0 = time.perf_counter()
    serial = run_sweep(points, tmp_path / "serial", ev.busy, serial=True, progress=False)
    t_serial = time.perf_counter() - t0
    assert (parallel.ok, serial.ok) == (200, 200), parallel.mode
    a, b = load_results(tmp_path / "dask"), load_results(tmp_path / "serial")
    assert a["point_id"].is_unique and set(a["point_id"]) == set(b["point_id"])
    merged = a.merge(b, on="point_id", suffixes=("_dask", "_serial"))
    assert (merged["iteration_s_dask"] == merged["iteration_s_serial"]).all()
    with capsys.disabled():
        print(
            f"\n200-point sweep, {os.cpu_count()} CPUs: {parallel.mode} {t_parallel:.2f} s (incl. cluster start/stop), "
            f"serial {t_serial:.2f} s"
        )
