"""Two calibrations of one host side by side: fitted parameters and the predictions they lead to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlrmsim.calibration.agreement import compare, fitted_parameters, relative_difference
from dlrmsim.calibration.schema import Calibration, save_calibration
from dlrmsim.calibration.validate import load_cases


def test_relative_difference_is_symmetric_and_bounded() -> None:
    # because |a - b| / max(|a|, |b|) treats the two runs alike and a zero against a value as a full difference
    assert relative_difference(1.0, 1.1) == relative_difference(1.1, 1.0) == pytest.approx(0.1 / 1.1)
    assert relative_difference(0.0, 5.0) == 1.0
    assert relative_difference(0.0, 0.0) == 0.0


def test_a_calibration_agrees_with_itself(quick_cal: Calibration) -> None:
    ag = compare(quick_cal, quick_cal, load_cases(only=["base", "ranks-2"]))
    # because every parameter and every prediction is the same number twice
    assert ag.parameter_median_max == (0.0, 0.0) and ag.prediction_median_max == (0.0, 0.0)
    assert len(ag.parameters) > 20 and not ag.only_in_one


def test_faster_collectives_show_in_their_parameters_and_in_two_rank_predictions(quick_cal: Calibration) -> None:
    faster = quick_cal.model_copy(
        update={
            "collectives": [
                c.model_copy(update={"beta_GBps": c.beta_GBps * 4, "bus_bandwidth_GBps": c.bus_bandwidth_GBps * 4})
                for c in quick_cal.collectives
            ]
        }
    )
    ag = compare(quick_cal, faster, load_cases(only=["ranks-2"]))
    changed = [r for r in ag.parameters if r.difference > 0]
    # because only the collectives' bandwidths changed, each by 1 - 1/4
    assert changed and all(r.name.startswith("collectives.") and r.name.endswith("_GBps") for r in changed)
    assert all(r.difference == pytest.approx(0.75) for r in changed)
    # and a two-rank iteration, which exchanges activations and gradients, is predicted faster
    assert ag.predictions[0].b < ag.predictions[0].a
    # because list entries are named by what they describe, not by position
    assert any(k.startswith("embedding.forward/uniform/") for k in fitted_parameters(quick_cal))


def test_agreement_cli_json(cli, quick_cal: Calibration, tmp_path: Path) -> None:  # noqa: ANN001
    a = tmp_path / "a.yaml"
    save_calibration(quick_cal, a)
    res = cli("agreement", str(a), str(a), "--case", "base", "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    # because a file compared with itself agrees exactly
    assert doc["predictions"]["max"] == 0.0 and doc["parameters"]["max"] == 0.0
