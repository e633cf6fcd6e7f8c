"""Cases of one run that ran one configuration (replicates.py): which pair, the floor their measurements put under a
run's max |error|, and what a model with no error of its own would score on runs that noisy."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dlrmsim.calibration.evidence import pool, read_rows
from dlrmsim.calibration.replicates import Measured, Replicate, perfect_model, replicates, run_floor
from tests.calibration.test_evidence import _run


def _two_rank(threads_a: int, threads_b: int, a: float = 0.020, b: float = 0.025, plan_b: str = "") -> list[Measured]:
    return [
        Measured("base", 1, 2, 1024, 0.015),
        Measured("ranks-2", 2, threads_a, 1024, a),
        Measured("ranks-2-threads-1", 2, threads_b, 1024, b, plan_b),
        Measured("ranks-2-wide", 2, threads_a, 2048, 0.15),
    ]


def test_the_floor_is_the_best_any_prediction_does_on_both() -> None:
    r = Replicate(("x", "y"), (0.020, 0.025))
    # because (25 - 20) / (25 + 20) = 1/9, reached at p = 2ab / (a + b), and any other p is further from one of them
    assert r.floor == pytest.approx(1 / 9)
    best = 2 * 0.020 * 0.025 / 0.045
    assert abs(best / 0.020 - 1) == pytest.approx(r.floor) and abs(best / 0.025 - 1) == pytest.approx(r.floor)
    for p in (0.9 * best, 1.1 * best, 0.020, 0.025):
        assert max(abs(p / 0.020 - 1), abs(p / 0.025 - 1)) > r.floor


def test_two_ranks_of_one_thread_are_one_configuration_only_where_the_cores_make_them_so() -> None:
    # because on 2 cores ranks-2 runs 1 thread a rank, as ranks-2-threads-1 does; on 16 cores it runs 8
    (pair,) = replicates(_two_rank(1, 1))
    assert pair.cases == ("ranks-2", "ranks-2-threads-1") and pair.measured_s == (0.020, 0.025)
    assert replicates(_two_rank(8, 1)) == [] and run_floor(_two_rank(8, 1)) is None
    # because the same workload on another sharding plan is another configuration
    assert replicates(_two_rank(1, 1, plan_b='{"strategy":"row_wise"}')) == []
    # because a case this checkout does not define has no known workload to compare
    assert replicates([Measured("gone", 2, 1, 1024, 0.02), Measured("gone-too", 2, 1, 1024, 0.03)]) == []


def test_evidence_keeps_each_runs_floor(tmp_path: Path) -> None:
    rows = [
        {"case": "base", "error": 0.05},
        {"case": "ranks-2", "ranks": 2, "threads": 1, "error": -0.1, "measured": 0.020},
        {"case": "ranks-2-threads-1", "ranks": 2, "threads": 1, "error": 0.1, "measured": 0.030},
    ]
    _run(tmp_path, "a.csv", "2026-11-26T08:00:00", rows)
    _run(tmp_path, "b.csv", "2026-11-26T09:00:00", rows[:2])
    runs = {r.run: r for r in pool(read_rows([tmp_path])).runs}
    # because 20 and 30 ms are 10 / 50 = 20 % from their balance point; b.csv measured the configuration once
    assert runs["a.csv"].floor == pytest.approx(0.2) and runs["b.csv"].floor is None


def test_evidence_cli_reports_the_floor_and_a_perfect_models_odds(cli, tmp_path: Path) -> None:  # noqa: ANN001
    rows = [
        {"case": "base", "error": 0.05},
        {"case": "ranks-2", "ranks": 2, "threads": 1, "error": -0.1, "measured": 0.020},
        {"case": "ranks-2-threads-1", "ranks": 2, "threads": 1, "error": 0.1, "measured": 0.030},
    ]
    _run(tmp_path, "a.csv", "2026-11-26T08:00:00", rows)
    res = cli("evidence", str(tmp_path))
    assert res.code == 0, res.err
    assert "1 runs measured one configuration twice" in res.out and "median 20.0 %" in res.out
    doc = json.loads(cli("evidence", str(tmp_path), "--json").out)
    group = doc["groups"][0]
    assert group["runs"][0]["floor"] == pytest.approx(0.2)
    # because one run's floor is the whole pool: its median and largest, above 10 % once, and the perfect model's
    # figures come from that one pair (runs of 3 cases, as this run had)
    rep = group["replicates"]
    assert (rep["runs"], rep["above_half_goal"]) == (1, 1) and rep["floor_median"] == rep["floor_max"] == pytest.approx(0.2)
    assert rep["perfect"]["cases"] == 3 and 0 < rep["perfect"]["max_abs"] < 1


def test_a_perfect_model_scores_what_the_replicates_spread_allows() -> None:
    # because with no spread between replicates a model with no error has no error
    none = perfect_model([0.0] * 5, 15, 0.08, 0.20)
    assert (none.median_abs, none.max_abs, none.meets_goal) == (0.0, 0.0, 1.0)
    # because one floor f gives every case an error of exp(d) - 1 or 1 - exp(-d), d = log((1 + f) / (1 - f)) / sqrt(2),
    # and the larger, exp(d) - 1, is in all but 2^-15 of 15-case runs
    f = 0.1
    d = math.log((1 + f) / (1 - f)) / math.sqrt(2)
    one = perfect_model([f], 15, 0.08, 0.20)
    assert one.max_abs == pytest.approx(math.expm1(d)) and one.median_abs in (
        pytest.approx(math.expm1(d)),
        pytest.approx(-math.expm1(-d)),
    )
    # because a wider spread can only make runs miss more often, and a run of more cases has a larger maximum
    narrow, wide = perfect_model([0.02, 0.05, 0.08], 15, 0.08, 0.20), perfect_model([0.05, 0.10, 0.20], 15, 0.08, 0.20)
    assert wide.meets_goal < narrow.meets_goal and wide.max_abs > narrow.max_abs
    assert perfect_model([0.02, 0.05, 0.08], 60, 0.08, 0.20).max_abs >= narrow.max_abs
    # because the draws are seeded: the same floors give the same figures
    assert perfect_model([0.05, 0.10, 0.20], 15, 0.08, 0.20) == wide
