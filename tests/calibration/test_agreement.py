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


def test_slower_gemms_show_in_their_parameters_and_in_mlp_bound_predictions(quick_cal: Calibration) -> None:
    slower = quick_cal.model_copy(
        update={
            "gemm": quick_cal.gemm.model_copy(
                update={
                    "tables": [t.model_copy(update={"points": [(f, e / 2) for f, e in t.points]}) for t in quick_cal.gemm.tables]
                }
            )
        }
    )
    ag = compare(quick_cal, slower, load_cases(only=["wide-mlp"]))
    changed = [r for r in ag.parameters if r.difference > 0]
    # because only the GEMM efficiency points changed, each by half
    assert changed and all(r.name.startswith("gemm.tables.") and "points@" in r.name for r in changed)
    assert all(r.difference == pytest.approx(0.5) for r in changed)
    # and the MLP-heavy case's GEMMs take longer at half the efficiency
    assert ag.predictions[0].b > ag.predictions[0].a
    # because list entries are named by what they describe, not by position
    assert any(k.startswith("embedding.forward/uniform/") for k in fitted_parameters(quick_cal))


def test_the_arrival_skew_is_compared_by_the_place_of_its_lengths(quick_cal: Calibration) -> None:
    from dlrmsim.calibration.schema import ArrivalSkewFit

    def skew(points: list[tuple[float, float]]) -> Calibration:
        fit = ArrivalSkewFit(ranks=2, threads_per_rank=1, implementation="gloo", points=points)
        return quick_cal.model_copy(update={"arrival_skew": fit})

    ag = compare(skew([(1.78, 0.08), (10.2, 0.07)]), skew([(1.26, 0.06), (10.1, 0.07)]), [])
    got = {r.name: r.difference for r in ag.parameters if r.name.startswith("arrival_skew")}
    # because each run measures its own stretch lengths, the shortest is compared with the shortest (8 % against
    # 6 % late: a quarter apart) and the 10-ms one with the 10-ms one (equal), not left unmatched
    assert got == pytest.approx({"arrival_skew.excess[1 of 2]": 0.25, "arrival_skew.excess[2 of 2]": 0.0})
    assert not ag.only_in_one


def test_agreement_cli_json(cli, quick_cal: Calibration, tmp_path: Path) -> None:  # noqa: ANN001
    a = tmp_path / "a.yaml"
    save_calibration(quick_cal, a)
    res = cli("agreement", str(a), str(a), "--case", "base", "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    # because a file compared with itself agrees exactly
    assert doc["predictions"]["max"] == 0.0 and doc["parameters"]["max"] == 0.0


def test_refit_reproduces_the_fits_of_unchanged_measurements(cli, quick_cal_path: Path, tmp_path: Path) -> None:  # noqa: ANN001
    out = tmp_path / "refit.yaml"
    res = cli("calibrate", "--refit", str(quick_cal_path), "--out", str(out))
    assert res.code == 0, res.err
    res = cli("agreement", str(quick_cal_path), str(out), "--case", "base", "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    # because the same measurements through the same fits give the same parameters and predictions
    assert doc["parameters"]["max"] == 0.0 and doc["predictions"]["max"] == 0.0


def test_refit_refuses_measuring_options(cli, quick_cal_path: Path, tmp_path: Path) -> None:  # noqa: ANN001
    res = cli("calibrate", "--refit", str(quick_cal_path), "--quick", "--out", str(tmp_path / "x.yaml"))
    # because a refit measures nothing: --quick would be silently ignored
    assert res.code == 2 and "--refit" in res.err and not (tmp_path / "x.yaml").exists()
