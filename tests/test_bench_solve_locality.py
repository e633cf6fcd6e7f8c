"""benchmarks/solve_locality.py: components labelled as the graph says, every step-by-step solve compared."""

from __future__ import annotations

import json

import numpy as np

from benchmarks import solve_locality
from dlrmsim.engine.simulation import RUN_TOTALS
from dlrmsim.training.simulate import TrainingConfig, load_inputs, run_iteration


def test_components_join_activities_through_the_resources_they_share() -> None:
    # activities 0 and 1 draw on resource 0, activity 2 on resource 1; resource 2 is unused
    lab = solve_locality.component_labels(np.array([0, 1, 2]), np.array([0, 0, 1]), 3, 3)
    # because a shared resource joins its activities, 0 and 1 (and resource 0) are one component, 2 another
    assert lab[0] == lab[1] == lab[3] and lab[2] == lab[4] and lab[0] != lab[2]
    # and an unused resource is a component of its own
    assert len({int(x) for x in lab}) == 3


def test_every_step_by_step_solve_is_compared_with_the_one_before(tmp_path) -> None:
    cfg = TrainingConfig(topology="clx-64s-opa", workload="small", ranks=8, scaling="weak")
    before = RUN_TOTALS.get("solves", 0)
    run_iteration(load_inputs(cfg), cfg, record_flows=False, run_ahead=False)
    solves = RUN_TOTALS["solves"] - before
    out = tmp_path / "locality.json"
    assert solve_locality.main(["--workload", "small", "--ranks", "8", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    # because the hook sees every solve of the step-by-step path, and each after the first is compared with its
    # predecessor
    assert res["step_by_step_solves"] == solves > 1 and res["solves_compared"] == solves - 1
    # because the touched components are part of the problem: a share of it, and something starts or ends between
    # two solves, so over the run some entries are touched
    assert 0 < res["touched_entries_share"] <= 1 and 0 < res["touched_activities_share"] <= 1
    p = res["touched_entries_share_percentiles"]
    assert 0 <= p["p10"] <= p["p50"] <= p["p90"] <= 1
