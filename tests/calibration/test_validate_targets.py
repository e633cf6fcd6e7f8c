"""`dlrmsim validate --against torchrec|reference`: another implementation's steps beside dlrmsim's prediction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlrmsim.calibration import drift, validate
from dlrmsim.calibration.drift import DriftSample
from dlrmsim.calibration.schema import load_calibration
from dlrmsim.cli import app, main
from dlrmsim.workloads.placement import Placement, PlacementSpec, Shard

SAMPLES = [0.010, 0.012, 0.011, 0.013, 0.011]
PHASES = {"embedding_fwd": 0.004, "top_mlp_bwd": 0.005}  # what TorchRec's hooks would have measured


@pytest.fixture
def fake_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace the measured implementation by fixed samples (and a fixed planner estimate): the test is about
    how validate combines them with the prediction, not about this host's speed."""

    def fake(case: validate.ValidationCase, against: str, ref: Path | None, n: int) -> validate.TargetRun:
        plan = None
        if case.ranks > 1:  # the plan TorchRec made: every table on rank 1
            rows = case.workload.table_rows
            shards = tuple(Shard(t, 1, r, case.workload.embedding_dim) for t, r in enumerate(rows))
            plan = Placement(PlacementSpec(), case.ranks, shards, (), tuple(range(len(rows))))
        return validate.TargetRun(SAMPLES, 0.002 if against == "torchrec" else None, plan)

    monkeypatch.setattr(validate, "measure_target", fake)
    monkeypatch.setattr(validate, "measure_phases", lambda w, batch, threads: dict(PHASES))  # TorchRec's phase pass
    # The fake runs use no cores: the cases are a two-core host's, whatever this machine has.
    monkeypatch.setattr(validate, "usable_cores", lambda: 2)
    _fake_drift(monkeypatch)


def _fake_drift(monkeypatch: pytest.MonkeyPatch) -> None:
    """The drift probe before each round (tested on its own in test_validate.py): the first round finds the
    host 1.5x slower than calibrated, later rounds as calibrated."""
    probes: list[int] = []

    def measure_drift(cal: object, kernels: object, counts: object = (), tbe: bool = False) -> list[DriftSample]:
        probes.append(1)
        return [DriftSample("gemm 512x512x512 c2", 1e-3, 1.5e-3 if len(probes) == 1 else 1e-3)]

    monkeypatch.setattr(drift, "measure_drift", measure_drift)


def test_torchrec_report_has_dlrmsim_and_planner_errors(quick_cal_path: Path, fake_target: None) -> None:
    res = CliRunner().invoke(
        app, ["validate", "--no-results", "-c", str(quick_cal_path), "--against", "torchrec", "--case", "base", "--json"]
    )
    assert res.exit_code == 0, res.output
    (case,) = json.loads(res.stdout)["cases"]
    # Because the kept measurement is the median of the samples, and each error is (estimate - measured) / measured.
    assert case["measured_s"] == pytest.approx(0.011) and case["measured_rounds_s"] == SAMPLES
    assert case["error"] == pytest.approx((case["predicted_s"] - 0.011) / 0.011)
    assert case["planner_error"] == pytest.approx((0.002 - 0.011) / 0.011) and case["target"] == "torchrec"


def test_phases_print_each_phase_error(quick_cal_path: Path, fake_target: None) -> None:
    res = CliRunner().invoke(
        app, ["validate", "--no-results", "-c", str(quick_cal_path), "--against", "torchrec", "--case", "base", "--phases"]
    )
    assert res.exit_code == 0, res.output
    # Because an error needs a measured time, a phase TorchRec's hooks timed shows (predicted - measured) /
    # measured, and a phase they did not time a dash.
    cal = load_calibration(quick_cal_path)
    _, predicted = validate.predict(validate.load_cases(only=["base"])[0], cal, implementation="torchrec-fused")
    want = (predicted["embedding_fwd"] - PHASES["embedding_fwd"]) / PHASES["embedding_fwd"] * 100
    line = next(ln for ln in res.output.splitlines() if "embedding_fwd" in ln)
    assert f"{want:+.1f}" in line
    assert line.rstrip(" │").endswith(f"{want:+.1f}")
    untimed = next(ln for ln in res.output.splitlines() if "interaction_fwd" in ln)
    assert untimed.rstrip(" │").endswith("-")
    # and its measured column is a dash too, not a zero that reads as a measurement
    assert [cell.strip() for cell in untimed.strip(" │").split("│")][1] == "-"


def test_a_case_whose_run_timed_no_phase_says_so(quick_cal_path: Path, fake_target: None) -> None:
    res = CliRunner().invoke(
        app, ["validate", "--no-results", "-c", str(quick_cal_path), "--against", "torchrec", "--case", "ranks-2", "--phases"]
    )
    assert res.exit_code == 0, res.output
    # Because TorchRec's two-rank DMP step runs in other processes without phase hooks, its table holds predictions
    # only, and its title says so rather than listing zeros as measured times
    assert "ranks-2: per phase (not timed: predicted only)" in res.output


def test_torchrec_phases_land_beside_the_predicted_ones(quick_cal_path: Path, fake_target: None) -> None:
    report = validate.run_validation(quick_cal_path, against="torchrec", only=["base", "ranks-2"], progress=False)
    by_name = {c.name: c for c in report.cases}
    # Because the phase pass times TorchRec's single-process step by dlrmsim's phase names, a case carries those
    # beside its predicted phases (the CSV's measured_phases_s); the 2-rank case runs in other processes: none.
    assert by_name["base"].measured_phases_s == PHASES and "embedding_fwd" in by_name["base"].predicted_phases_s
    assert by_name["ranks-2"].measured_phases_s == {}


def test_torchrec_two_rank_cases_are_predicted_with_the_plan_torchrec_ran(quick_cal_path: Path, fake_target: None) -> None:
    report = validate.run_validation(quick_cal_path, against="torchrec", only=["base", "ranks-2"], progress=False)
    # Because multi-rank TorchRec runs DistributedModelParallel, the 2-rank case is measured too
    assert [c.name for c in report.cases] == ["base", "ranks-2"]
    (two,) = [c for c in report.cases if c.name == "ranks-2"]
    # and predicted on TorchRec's plan (every table on rank 1), not on dlrmsim's balanced default: one rank does
    # all the lookups, so the step is slower than with the tables spread
    cal = load_calibration(quick_cal_path)
    case = next(c for c in validate.load_cases(only=["ranks-2"]))
    spread, _ = validate.predict(case, cal, implementation="torchrec-fused")
    assert two.predicted_s > spread


def one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1, err
    return err


def test_reference_needs_a_checkout(quick_cal_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_error(
        ["validate", "--no-results", "-c", str(quick_cal_path), "--against", "reference", "--case", "base"], capsys
    )
    # Because the reference script is never vendored, the user is told where to get it.
    assert "facebookresearch/dlrm" in err


def test_unknown_target_is_one_line(quick_cal_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_error(["validate", "--no-results", "-c", str(quick_cal_path), "--against", "tensorflow"], capsys)
    assert "project, torchrec, reference" in err


def test_results_csv_keeps_the_evidence(quick_cal_path: Path, fake_target: None, tmp_path: Path) -> None:
    import csv

    res = CliRunner().invoke(
        app,
        [
            "validate",
            "-c",
            str(quick_cal_path),
            "--against",
            "torchrec",
            "--case",
            "base",
            "--results-dir",
            str(tmp_path / "results"),
        ],
    )
    assert res.exit_code == 0, res.output
    (path,) = (tmp_path / "results").glob("*.csv")
    (row,) = list(csv.DictReader(path.open()))
    # Because a result is evidence only with its host, versions and the whole measured distribution beside it.
    assert row["target"] == "torchrec" and row["case"] == "base" and "dlrmsim=" in row["versions"]
    assert [float(x) for x in row["measured_samples_s"].split(";")] == pytest.approx(SAMPLES)
    assert float(row["error"]) == pytest.approx((float(row["predicted_s"]) - 0.011) / 0.011, abs=1e-4)
    # and with the drift probe's worst ratio before the kept round: one round by default (--rounds 3 is the
    # default, the samples are equal, so round 1 is kept), whose probe found the host 1.5x slower
    assert float(row["host_drift"]) == pytest.approx(1.5)


def test_target_rounds_go_round_robin_over_the_cases_and_keep_the_fastest(
    quick_cal_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow spell on a shared host should land on one round of every case, not on every round of one case:
    rounds go case by case in turn, and because other jobs only ever slow a run down, each case keeps its
    fastest round's median (and that round's samples as its spread)."""
    calls: list[tuple[str, int]] = []
    slow_by_round = {0: 2.0, 1: 1.0, 2: 1.5}

    def fake(case: validate.ValidationCase, against: str, ref: Path | None, n: int) -> validate.TargetRun:
        r = sum(1 for name, _ in calls if name == case.name)
        calls.append((case.name, r))
        return validate.TargetRun([t * slow_by_round[r] for t in SAMPLES], 0.002)

    monkeypatch.setattr(validate, "measure_target", fake)
    monkeypatch.setattr(validate, "measure_phases", lambda w, batch, threads: {})
    _fake_drift(monkeypatch)
    report = validate.run_validation(quick_cal_path, against="torchrec", only=["base", "zipf"], rounds=3, progress=False)
    # round r starts at case r x 2 // 3: base, base, then zipf (so neither always runs right after the probe)
    assert calls == [("base", 0), ("zipf", 0), ("base", 1), ("zipf", 1), ("zipf", 2), ("base", 2)]
    for c in report.cases:
        assert c.kept_round == 1 and c.measured_s == pytest.approx(0.011)
        assert c.measured_rounds_s == SAMPLES
        # Because the probe runs before every round, the kept round 2 carries its own probe (as calibrated), not
        # round 1's 1.5x
        assert c.drift_ratio == pytest.approx(1.0)
    assert [[d.ratio for d in r] for r in report.drift_rounds] == [[pytest.approx(1.5)], [1.0], [1.0]]


def test_several_targets_run_in_turn_case_by_case_with_one_report_each(
    quick_cal_path: Path, fake_target: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # because a state of the host lasts minutes, targets measured one run apart meet different hosts (TorchRec's
    # wide-mlp on the Intel VM); in turn, each case runs under both targets back to back in every round, the order
    # reversed every other round, and the one drift probe per round stands beside both reports; each round starts
    # at another case
    calls: list[tuple[str, str]] = []
    fake = validate.measure_target

    def target(case: validate.ValidationCase, against: str, ref: Path | None, n: int) -> validate.TargetRun:
        calls.append((against, case.name))
        return fake(case, against, ref, n)

    def runner(case: validate.ValidationCase, backend: str, iterations: int, warmup: int) -> tuple[float, dict[str, float]]:
        calls.append(("project", case.name))
        return 0.02, {}

    monkeypatch.setattr(validate, "measure_target", target)
    monkeypatch.setattr(validate, "measure", runner)
    reports = validate.run_validations(
        quick_cal_path, ["project", "torchrec"], only=["base", "ranks-2"], rounds=2, progress=False
    )
    both = [("project", "base"), ("torchrec", "base"), ("project", "ranks-2"), ("torchrec", "ranks-2")]
    # the second round starts at the second case, and runs the targets in reverse
    assert calls == both + [("torchrec", "ranks-2"), ("project", "ranks-2"), ("torchrec", "base"), ("project", "base")]
    project, torchrec = reports
    assert [c.target for c in project.cases] == ["project", "project"] and project.backend in ("numpy", "torch")
    assert [c.target for c in torchrec.cases] == ["torchrec", "torchrec"] and torchrec.backend == "torchrec"
    assert len(project.drift_rounds) == len(torchrec.drift_rounds) == 2
    assert project.drift_rounds is torchrec.drift_rounds
    assert project.cases[0].measured_s == pytest.approx(0.02) and torchrec.cases[0].measured_s == pytest.approx(0.011)


def test_several_targets_from_the_cli(quick_cal_path: Path, fake_target: None, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    monkeypatch.setattr(validate, "measure", lambda case, backend, iterations, warmup: (0.02, {}))
    args = ["validate", "--no-results", "-c", str(quick_cal_path), "--case", "base", "--rounds", "1"]
    main([*args, "--against", "project,torchrec", "--json"])
    reports = json.loads(capsys.readouterr().out)["reports"]
    # because --json prints one object, two targets make one object holding a report each, in the order named
    assert [r["cases"][0]["measured_s"] for r in reports] == pytest.approx([0.02, 0.011])
    assert "planner_error" in reports[1]["cases"][0] and "planner_error" not in reports[0]["cases"][0]
    for bad, why in (("project,project", "named twice"), ("project,torchrc", "unknown validation target 'torchrc'")):
        with pytest.raises(SystemExit) as exc:
            main([*args, "--against", bad])
        assert exc.value.code == 2 and why in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main([*args, "--against", "project,torchrec", "--html", "x.html"])
    assert exc.value.code == 2 and "--html plots one target" in capsys.readouterr().err
