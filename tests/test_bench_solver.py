"""benchmarks/bench_solver.py: every solve observed, the kept rate problems the real ones, the floor they give."""

from __future__ import annotations

import json

from benchmarks import bench_solver
from dlrmsim.engine.simulation import RUN_TOTALS
from dlrmsim.training.simulate import TrainingConfig, load_inputs, run_iteration


def test_the_observed_solves_are_the_engines_and_solve_again_to_the_same_rates(tmp_path) -> None:
    cfg = TrainingConfig(topology="clx-64s-opa", workload="small", ranks=8, scaling="weak")
    before = dict(RUN_TOTALS)
    run_iteration(load_inputs(cfg), cfg, record_flows=False, run_ahead=False)
    step_solves = RUN_TOTALS["solves"] - before.get("solves", 0)
    before = dict(RUN_TOTALS)
    run_iteration(load_inputs(cfg), cfg, record_flows=False)  # the product's own path (compiled run-ahead)
    engine_solves = RUN_TOTALS["solves"] - before.get("solves", 0)
    out = tmp_path / "solver.json"
    rc = bench_solver.main(["--workload", "small", "--ranks", "8", "--every", "3", "--repeat", "1", "--out", str(out)])
    res = json.loads(out.read_text())
    # because the floor is solves x time per solve, the count must be the product's own (here the run-ahead kernel
    # solves more often than the step-by-step path, which skips this small run's repeated ring cycles), and the
    # observed solves must be all of the step-by-step path's (a patched _solve that missed some would see fewer)
    assert res["solves"] == engine_solves > 0 and res["step_by_step_solves"] == step_solves > 0
    # because a solve is made only where something starts or ends, no two of them fall on one instant
    assert res["distinct_instants"] == res["step_by_step_solves"]
    # because timing problems that are not the scheduler's would time something else: each kept one, solved again,
    # gives the scheduler's rates bit for bit (the exit code says the same)
    assert res["kept_problems"] == step_solves // 3 and res["kept_rates_differ"] == 0 and rc == 0
    assert 0 < res["us_per_solve"] and abs(res["solves_alone_s"] - res["solves"] * res["us_per_solve"] * 1e-6) < 1e-12
