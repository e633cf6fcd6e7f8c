"""The max-QPS search answers a rate the system sustains: a longer run at the answer keeps p99 within budget and
completes what arrives; the search says how it decided and warns when it stopped at the capacity bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dlrmsim.serving.simulate import ServeOptions, find_max_qps, simulate_serving, sustained
from dlrmsim.topologies import load_topology
from tests.conftest import assert_one_line_error
from tests.serving.test_serving import SLED, _mm1

BUDGET_MS = 20.0


def test_answer_is_sustained_by_a_five_times_longer_run() -> None:
    # M/M/1, mu = 1000/s: the p99 limit is lambda = 1000 - ln(100)/0.02 = 770/s. The search uses 2 s runs over 3 seeds;
    # the answer must then hold in a 10 s run with a seed the search never used.
    w = _mm1(1.0)
    found = find_max_qps(
        lambda: load_topology(SLED),
        w,
        ServeOptions(qps=1, duration_s=2, warmup_s=0.25, seed=0, nodes=1),
        budget_ms=BUDGET_MS,
        rel_tol=0.05,
        seeds=3,
    )
    assert 0 < found.qps <= 770, found.per_seed
    assert len(found.per_seed) == 3 and found.qps == min(lo for _, lo, _ in found.per_seed)
    assert found.ci_qps[0] <= found.qps <= found.ci_qps[1]
    long = simulate_serving(load_topology(SLED), w, ServeOptions(qps=found.qps, duration_s=10, warmup_s=0.5, seed=99, nodes=1))
    # Because "sustainable" means the queue does not grow: p99 within budget and achieved = offered within 1 %
    # (offered = the arrivals this run drew; their count differs from qps x window by Poisson noise alone).
    assert long.p99_ms <= BUDGET_MS, long.p99_ms
    assert long.achieved_qps == pytest.approx(long.arrived_qps, rel=0.01)
    assert long.arrived_qps == pytest.approx(found.qps, rel=3 / (found.qps * 9.5) ** 0.5)  # within 3 sigma of Poisson


def test_overload_is_not_sustained_even_when_short_runs_keep_p99_low() -> None:
    # lambda = 1100/s on mu = 1000/s: the queue grows ~100 requests/s, but a 0.5 s run keeps p99 near 50 ms: with a
    # 1 s budget only the completed/arrived criterion can refuse it.
    res = simulate_serving(load_topology(SLED), _mm1(1.0), ServeOptions(qps=1100, duration_s=3, warmup_s=0.5, seed=2, nodes=1))
    assert res.p99_ms < 1000
    assert res.throughput_ratio < 0.97
    assert sustained(res, 1000.0, 0.01).startswith("achieved")
    light = simulate_serving(load_topology(SLED), _mm1(1.0), ServeOptions(qps=300, duration_s=3, warmup_s=0.5, seed=2, nodes=1))
    assert sustained(light, 1000.0, 0.01) == ""


def test_cli_reports_criteria_ci_and_warns_at_the_capacity_bound(cli, tmp_path: Path) -> None:
    # A 10 us exponential service on one node sustains any rate up to the memory-bandwidth bound (~4,100 QPS for
    # the preset's lookups): the search stops at the bound, so it must say so.
    path = tmp_path / "fast.yaml"
    path.write_text(yaml.safe_dump(_mm1(0.01).model_dump(mode="json", exclude_unset=False)))
    res = cli(
        "serve",
        "--nodes",
        "1",
        "-w",
        str(path),
        "--find-max-qps",
        "--latency-budget-ms",
        "20",
        "--duration",
        "0.5",
        "--warmup",
        "0.1",
        "--seeds",
        "2",
        "--json",
    )
    assert res.code == 0, res.err
    js = json.loads(res.out)
    assert js["max_qps"] == pytest.approx(js["capacity_bound_qps"])
    assert "warning: stopped at the memory-bandwidth capacity bound" in res.err
    assert "completed >= 99% of arrivals" in js["criteria"] and "2 seeds" in js["criteria"]
    assert [s["seed"] for s in js["seeds"]] == [0, 1] and len(js["ci95_qps"]) == 2
    assert all(p["ok"] == (p["reason"] == "") for p in js["probes"])


def test_bad_search_options(cli) -> None:
    assert_one_line_error(cli("serve", "--find-max-qps", "--seeds", "0"), "--seeds")
    assert_one_line_error(cli("serve", "--find-max-qps", "--throughput-tolerance", "1.5"), "--throughput-tolerance")
    assert_one_line_error(cli("serve", "--find-max-qps", "--latency-budget-ms", "-1"), "--latency-budget-ms")


def test_qps_beyond_what_one_run_can_hold_is_refused_up_front(cli) -> None:
    # Because 1e12 QPS x 2 s would allocate terabytes of arrival times, it is refused before any work.
    assert_one_line_error(cli("serve", "--qps", "1e12"), "--qps", "2e+12 requests", "lower --qps or --duration")
    assert_one_line_error(cli("serve", "--qps", "100", "--duration", "1e9"), "--qps")


@pytest.mark.slow
def test_preset_answer_is_sustained_by_a_five_times_longer_run(cli) -> None:
    # The case: recsys-inference on one sled, 100 ms budget. 1 s probes (3 seeds), then a 5 s run at the answer.
    res = cli("serve", "-t", SLED, "-w", "recsys-inference", "--find-max-qps", "--latency-budget-ms", "100", "--json")
    assert res.code == 0, res.err
    qps = json.loads(res.out)["max_qps"]
    assert qps > 0
    long = cli("serve", "-t", SLED, "-w", "recsys-inference", "--qps", str(qps), "--duration", "5", "--seed", "7", "--json")
    js = json.loads(long.out)
    assert js["p99_ms"] <= 100
    assert js["qps"] == pytest.approx(js["arrived_qps"], rel=0.01)
