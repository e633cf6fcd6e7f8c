"""The built-in CPU-cluster paper study (issue 24) and the scaling commands it needs (issues 24, 28)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from dlrmsim.studies.paper import busy_time, load_study, plan, run_study, simulate_point
from dlrmsim.studies.paper_report import build_study_report
from dlrmsim.studies.pool import WorkerPool
from tests.conftest import assert_one_line_error

# One experiment per figure kind, at the smallest rank counts, so the whole study runs in about a second.
REDUCED = {
    "name": "reduced",
    "title": "reduced paper grid",
    "experiments": [
        {
            "name": "single",
            "title": "single socket",
            "figure": "single_socket",
            "topology": "skx-8s-upi",
            "workloads": {"small": [1], "large": [1]},
            "fixed": {"scaling": "single"},
            "vary": {
                "update_strategy": ["race_free", "atomic"],
                "workload.index_distribution": [{"kind": "uniform"}, {"kind": "zipf", "exponent": 1.05}],
            },
        },
        {
            "name": "strong",
            "title": "strong",
            "figure": "scaling",
            "topology": "clx-64s-opa",
            "workloads": {"small": [2, 4], "mlperf": [2]},
            "fixed": {"scaling": "strong"},
            "baseline_ranks": {"small": 2},
        },
        {
            "name": "blocking",
            "title": "blocking",
            "figure": "breakdown",
            "topology": "skx-8s-upi",
            "workloads": {"small": [2]},
            "vary": {"backend": ["ccl", "mpi"], "blocking": [True, False]},
        },
        {
            "name": "comm",
            "title": "comm",
            "figure": "communication",
            "topology": "skx-8s-upi",
            "workloads": {"small": [2]},
            "vary": {"comm": ["alltoall", "scatter-list"]},
        },
    ],
}


@pytest.fixture(scope="module")
def reduced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("study") / "reduced.yaml"
    path.write_text(yaml.safe_dump(REDUCED))
    return path


def test_builtin_study_covers_the_paper_grid() -> None:
    # Because the issue asks for single socket, strong and weak scaling on clx-64s-opa (ccl and mpi, alltoall and
    # scatter, blocking and overlapping) and strong scaling on skx-8s-upi: every axis must appear in the plan.
    study, source = load_study("cpu-cluster-paper")
    exps, points, baselines = plan(study, source)
    cfgs = [p.config for p in points]
    assert {c.scaling for c in cfgs if c.topology == "clx-64s-opa"} == {"strong", "weak"}
    assert {c.backend for c in cfgs} >= {"ccl", "mpi"} and {c.comm for c in cfgs} >= {"alltoall", "scatter-list", "fused-scatter"}
    assert {c.blocking for c in cfgs} == {True, False} and {c.update_strategy for c in cfgs} == {"race_free", "atomic", "rtm"}
    assert any(c.topology == "skx-8s-upi" and c.ranks == 8 for c in cfgs)
    assert {e.figure for e in exps} == {"single_socket", "scaling", "breakdown", "communication"}
    # The paper's baselines: MLPerf's single socket (a 192 GB one), Large at 4 ranks.
    assert baselines[("strong-clx", "mlperf")].ranks == 1 and baselines[("strong-clx", "large")].ranks == 4


def test_a_study_on_worker_processes_gives_the_same_rows(reduced: Path) -> None:
    serial = run_study(reduced, workers=1).rows
    with WorkerPool(simulate_point, 2) as pool:
        parallel = run_study(reduced, workers=pool).rows
    # because each point is an independent, deterministic simulation: the pool `dlrmsim study` makes before its
    # progress bar changes no number and keeps the rows' order
    pd.testing.assert_frame_equal(serial, parallel)


def test_reduced_study_has_one_figure_per_experiment(reduced: Path, tmp_path: Path) -> None:
    result = run_study(reduced, workers=1)
    page = build_study_report(result, tmp_path / "paper.html").read_text()
    # Because each experiment is one figure: the page declares and holds exactly as many as there are experiments.
    n = len(REDUCED["experiments"])
    assert f'<meta name="dlrmsim-figures" content="{n}">' in page
    assert re.findall(r'data-experiment="([^"]+)"', page) == [e["name"] for e in REDUCED["experiments"]]
    # Because the report must render offline: plotly.js is inline, nothing is loaded from a CDN.
    assert not re.search(r"<script[^>]*\bsrc=", page) and "Plotly.newPlot" in page and len(page) > 3_000_000
    rows = result.rows
    # Because Large needs about 400 GB, its single-socket points are reported as refused with the reason, not dropped.
    large = rows[(rows["experiment"] == "single") & (rows["workload"] == "large")]
    assert len(large) == 4 and large["status"].eq("refused").all() and large["error"].str.contains("no socket").all()
    # Because the user-set baseline is 2 ranks, speedup there is exactly 1 and the reason says who chose it.
    small = rows[(rows["experiment"] == "strong") & (rows["workload"] == "small")].set_index("ranks")
    assert small.loc[2, "speedup"] == pytest.approx(1.0) and "paper" in small.loc[2, "baseline"]
    assert small.loc[4, "speedup"] > 1.0
    # Because the mpi/ccl x blocking/overlapping grid is 4 distinct configurations of one rank count.
    assert len(rows[rows["experiment"] == "blocking"]) == 4


def test_command_line_baseline_overrides_the_study(reduced: Path) -> None:
    # Because --baseline-ranks small=4 makes 4 ranks the reference: speedup 1 there, below 1 at 2 ranks.
    rows = run_study(reduced, workers=1, only=["strong"], baseline_ranks={"small": 4}).rows
    small = rows[rows["workload"] == "small"].set_index("ranks")
    assert small.loc[4, "speedup"] == pytest.approx(1.0) and small.loc[2, "speedup"] < 1.0
    assert small.loc[4, "baseline"].startswith("user-set")


def test_identical_points_are_simulated_once(reduced: Path) -> None:
    # Because experiments share configurations, each distinct one runs once: 8 single-socket + 4 strong (MLPerf's
    # 1-rank baseline added) + 4 blocking + 2 comm rows, where comm's alltoall point is blocking's ccl/overlapping one.
    result = run_study(reduced, workers=1)
    assert len(result.rows) == 18 and result.simulations == 17


def test_busy_time_is_the_union_of_intervals() -> None:
    # Because overlapping collectives must not be counted twice: [0,2) u [1,3) u [5,6) lasts 4 s.
    assert busy_time([(1.0, 3.0), (0.0, 2.0), (5.0, 6.0)]) == pytest.approx(4.0)


def test_study_cli_json_csv_and_errors(cli, reduced: Path, tmp_path: Path) -> None:
    res = cli("study", str(reduced), "--experiments", "comm", "--workers", "1", "--json", "--csv", str(tmp_path / "rows.csv"))
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert {r["comm"] for r in doc["rows"]} == {"alltoall", "scatter-list"}
    assert (tmp_path / "rows.csv").read_text().count("\n") == 3  # header + 2 rows
    # Because --json must pipe into strict parsers (jq): refused points carry null, never NaN.
    single = cli("study", str(reduced), "--experiments", "single", "--workers", "1", "--json")
    assert single.code == 0, single.err
    strict = json.loads(single.out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert any(r["status"] == "refused" and r["iteration_s"] is None for r in strict["rows"])
    assert_one_line_error(cli("study", "no-such-study"), "no study 'no-such-study'")
    assert_one_line_error(cli("study", str(reduced), "--baseline-ranks", "large"), "WORKLOAD=RANKS")
    assert_one_line_error(cli("study", str(reduced), "--experiments", "nope"), "no experiment 'nope'")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**REDUCED, "experiments": [{**REDUCED["experiments"][1], "fixed": {"sclaing": "weak"}}]}))
    assert_one_line_error(cli("study", str(bad)), "sclaing")


def test_scaling_mlperf_from_one_rank_runs_strong_and_weak(cli) -> None:
    # Because MLPerf's single-socket baseline ran on a 192 GB socket: 1 rank must run, on socket 56.
    for mode in ("strong", "weak"):
        res = cli("scaling", "-t", "clx-64s-opa", "-w", "mlperf", "-r", "1,2,4,8,16,26", "--scaling", mode, "--json")
        assert res.code == 0, res.err
        rows = json.loads(res.out)
        assert [r["ranks"] for r in rows] == [1, 2, 4, 8, 16, 26]
        assert rows[0]["sockets"] == "56" and rows[0]["speedup"] == pytest.approx(1.0) and rows[0]["ranks_base"] == 1


def test_scaling_large_from_four_ranks_shows_its_baseline(cli) -> None:
    # Because 4 Large ranks fit only the 192 GB sockets (nodes 28-29) and the baseline must be shown and settable.
    res = cli("scaling", "-t", "clx-64s-opa", "-w", "large", "-r", "4,8", "--baseline-ranks", "4", "--json")
    assert res.code == 0, res.err
    rows = json.loads(res.out)
    assert rows[0]["sockets"] == "56-59" and rows[0]["speedup"] == pytest.approx(1.0) and rows[0]["baseline"] == "user-set"
    table = cli("scaling", "-t", "clx-64s-opa", "-w", "large", "-r", "4,8")
    assert table.code == 0, table.err
    assert "3 (baseline)" in table.out and "fewest ranks whose sockets hold the workload" in table.out
    assert_one_line_error(
        cli("scaling", "-t", "clx-64s-opa", "-w", "large", "-r", "4,8", "--baseline-ranks", "2"), "smallest valid count is 3"
    )


def test_scaling_html_report_states_the_baseline(cli, tmp_path: Path) -> None:
    # Because issue 28: a speedup against an unshown baseline misleads; the report says which and why.
    out = tmp_path / "s.html"
    res = cli("scaling", "-t", "skx-8s-upi", "-w", "small", "-r", "2,4", "--baseline-ranks", "2", "--html", str(out))
    assert res.code == 0, res.err
    assert "Speedup and efficiency are against 2 ranks on sockets 0-1: user-set." in out.read_text()


@pytest.mark.slow
def test_scaling_large_to_64_ranks_runs_strong_and_weak(cli) -> None:
    for mode in ("strong", "weak"):
        res = cli("scaling", "-t", "clx-64s-opa", "-w", "large", "-r", "4,8,16,32,64", "--scaling", mode, "--json")
        assert res.code == 0, res.err
        assert [r["ranks"] for r in json.loads(res.out)] == [4, 8, 16, 32, 64]
