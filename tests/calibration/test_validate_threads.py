"""`dlrmsim validate --threads` sweeps each case over thread counts; `--repredict` predicts kept evidence again."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlrmsim.calibration import validate as v
from dlrmsim.calibration.benchmarks.plan import build_plan
from dlrmsim.calibration.benchmarks.timing import core_counts
from dlrmsim.calibration.ops import get_ops
from dlrmsim.calibration.schema import load_calibration
from dlrmsim.calibration.targets.reference import find_script
from dlrmsim.errors import DlrmsimError
from dlrmsim.workloads.placement import Placement, PlacementSpec, place

EMR16 = Path(__file__).resolve().parents[2] / "validation" / "results" / "20261126-emr16"


def test_a_thread_sweep_is_one_case_per_count_named_after_it() -> None:
    cases = v.load_cases(only=["base", "ranks-2"], threads=[1, 2, 8])
    # because a swept case keeps everything but its threads, and its name says which count it ran at
    assert [c.name for c in cases] == ["base@t1", "base@t2", "base@t8", "ranks-2@t1", "ranks-2@t2", "ranks-2@t8"]
    assert [c.threads for c in cases] == [1, 2, 8] * 2 and {c.ranks for c in cases[3:]} == {2}
    assert cases[0].workload == cases[2].workload and cases[0].batch == v.load_cases(only=["base"])[0].batch


def test_a_count_the_host_cannot_run_is_refused_before_anything_runs() -> None:
    cases = v.load_cases(only=["ranks-2"], threads=[4])
    # because 2 ranks x 4 threads oversubscribe a 4-core host: the OS would time-share cores the model gives each thread
    with pytest.raises(DlrmsimError) as e:
        v.check_fits_host(cases, cores=4)
    assert e.value.field == "--threads" and "need 8 cores" in str(e.value) and "up to 2" in e.value.fix
    v.check_fits_host(cases, cores=8)  # 8 cores hold it


def test_the_default_cases_leave_out_what_a_small_host_cannot_run(capsys: pytest.CaptureFixture[str]) -> None:
    two = v.cases_for_host(cores=2)
    # because every default case fits two cores, a two-core host runs them all, as before
    assert [c.name for c in two] == [c.name for c in v.load_cases(cores=2)] and {c.ranks for c in two} == {1, 2}
    one = v.cases_for_host(cores=1)
    # because two ranks cannot run on one core, the default set runs its one-rank cases there and says what it left
    assert one and all(c.ranks * c.threads == 1 for c in one)
    left = [c.name for c in two if c.name not in {o.name for o in one}]
    assert left and all(c.ranks * c.threads > 1 for c in two if c.name in left)
    said = " ".join(capsys.readouterr().err.split())
    assert "left out on this 1-core host" in said and all(name in said for name in left)


def test_a_case_named_for_a_host_too_small_for_its_ranks_is_refused_without_a_count_to_use() -> None:
    # because the user asked for it by name, it is refused, not left out; and no thread count fits 2 ranks on 1 core,
    # so the fix does not offer one ("use counts up to 0")
    with pytest.raises(DlrmsimError) as e:
        v.cases_for_host(only=["ranks-2"], cores=1)
    assert e.value.field == "--case" and "need 2 cores" in str(e.value) and "up to" not in e.value.fix


@pytest.mark.parametrize("text", ["1,x", "0,2", ","])
def test_thread_counts_that_are_not_positive_integers_are_one_line(text: str) -> None:
    with pytest.raises(DlrmsimError) as e:
        v.parse_thread_counts(text)
    assert e.value.field == "--threads"


def test_thread_counts_are_sorted_and_unique() -> None:
    assert v.parse_thread_counts("8,1,2,8") == [1, 2, 8] and v.parse_thread_counts(None) is None


def test_the_cli_refuses_an_oversubscribed_sweep_in_one_line(cli) -> None:  # noqa: ANN001
    r = cli("validate", "--case", "base", "--threads", "1,100000")
    # because no host here has 100000 cores; the check runs before the calibration is even read
    assert r.code == 2 and r.err.count("\n") == 1 and "--threads" in r.err and "Traceback" not in r.err


def test_embedding_and_interaction_are_measured_at_every_core_count_of_the_gemms() -> None:
    plan = build_plan(get_ops("numpy"), quick=True, cores=16, implementation="ccl")
    counts: dict[str, set[int]] = {}
    for t in plan:
        if t.stage.startswith(("embedding bags", "dot interaction")):
            counts.setdefault(t.stage.split(" (")[0], set()).add(int(t.id.split()[-1].removeprefix("c")))
    # because the simulator takes the nearest measured count: with only 1 and 16 measured, 2-8 threads used the 1-core fit
    every = {1, 2, 3, 4, 8, 16}
    assert counts == {"embedding bags": every, "dot interaction": every, "dot interaction context": every}
    assert set(core_counts(16)) == {1, 2, 3, 4, 8, 16}


def test_calibrate_cores_measures_the_chosen_counts_and_all_cores_only() -> None:
    def counts(only: list[int] | None) -> set[int]:
        plan = build_plan(get_ops("numpy"), quick=True, cores=16, implementation="ccl", only_cores=only)
        return {int(t.id.split()[-1].removeprefix("c")) for t in plan if t.first_pass and t.stage.startswith("embedding bags")}

    # because a lease's run measures fewer counts, and the "all cores" rows (preset layers, collectives) need 16 always
    assert counts([1, 8]) == {1, 8, 16} and counts(None) == {1, 2, 3, 4, 8, 16}
    with pytest.raises(DlrmsimError) as e:
        counts([1, 32])
    assert e.value.field == "--cores" and "1-16" in str(e.value)


def test_the_cli_refuses_calibrate_cores_the_host_lacks_before_measuring(cli, tmp_path: Path) -> None:  # noqa: ANN001
    out = tmp_path / "c.yaml"
    r = cli("calibrate", "--quick", "--backend", "numpy", "--cores", "1,100000", "--out", str(out))
    # because no host here has 100000 cores; nothing is measured or written
    assert r.code == 2 and r.err.count("\n") == 1 and "--cores" in r.err and not list(tmp_path.iterdir())


def test_a_relative_reference_checkout_resolves_to_an_absolute_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "dlrm").mkdir()
    (tmp_path / "dlrm" / "dlrm_s_pytorch.py").write_text("")
    monkeypatch.chdir(tmp_path)
    # because the script runs from inside its checkout: a relative path would then point below the checkout again
    script = find_script(Path("dlrm"))
    assert script.is_absolute() and script == tmp_path / "dlrm" / "dlrm_s_pytorch.py"


def _kept_csv(tmp_path: Path, cal: Path, rows: list[tuple[str, int, int, float]], target: str = "numpy") -> Path:
    """A results CSV as `dlrmsim validate` keeps it: (case, ranks, threads, measured seconds) per row."""
    report = v.ValidationReport(
        [
            v.CaseResult.of(
                v.ValidationCase(name, v.load_cases(only=[name.partition("@t")[0]])[0].workload, 1024, ranks, threads),
                t,
                1.0,  # a prediction the re-prediction must replace
                measured_rounds_s=[t, 1.1 * t],
            )
            for name, ranks, threads, t in rows
        ],
        str(cal),
        target,
    )
    return v.write_results_csv(report, tmp_path)


def test_repredict_keeps_the_measurements_and_predicts_each_row_at_its_own_threads(quick_cal_path: Path, tmp_path: Path) -> None:
    if load_calibration(quick_cal_path).host.cores < 2:
        pytest.skip("a one-core host's calibration measured one thread count, so it predicts every count alike")
    kept = _kept_csv(tmp_path, quick_cal_path, [("base@t1", 1, 1, 0.010), ("base@t8", 1, 8, 0.004), ("ranks-2", 2, 3, 0.009)])
    report = v.repredict(kept, quick_cal_path)
    by = {c.name: c for c in report.cases}
    # because a re-prediction runs nothing: the measured medians and samples are the CSV's
    assert [c.measured_s for c in report.cases] == [0.010, 0.004, 0.009] and by["base@t8"].measured_rounds_s == [0.004, 0.0044]
    # because each row is predicted at the ranks and threads it ran with, not this host's cores (a 16-core host's
    # evidence is re-predicted on a 2-core laptop)
    assert (by["base@t8"].threads, by["ranks-2"].threads, by["ranks-2"].ranks) == (8, 3, 2)
    assert by["base@t8"].predicted_s != by["base@t1"].predicted_s
    # ... and the prediction is the simulator's, the same one a validation makes
    case = v.ValidationCase("base@t8", v.load_cases(only=["base"])[0].workload, 1024, 1, 8)
    assert by["base@t8"].predicted_s == v.predict(case, load_calibration(quick_cal_path), "project-runner")[0]


def test_repredict_from_the_cli_prints_json_and_writes_nothing(quick_cal_path: Path, tmp_path: Path) -> None:
    from dlrmsim.cli import app

    kept = _kept_csv(tmp_path, quick_cal_path, [("base", 1, 2, 0.010)])
    before = sorted(tmp_path.iterdir())
    res = CliRunner().invoke(app, ["validate", "-c", str(quick_cal_path), "--repredict", str(kept), "--json"])
    assert res.exit_code == 0, res.output
    (case,) = json.loads(res.stdout)["cases"]
    assert case["measured_s"] == 0.010 and case["threads"] == 2 and case["predicted_s"] != 1.0
    assert sorted(tmp_path.iterdir()) == before  # no new evidence file: nothing was measured


def test_repredict_refuses_a_file_that_is_not_kept_evidence(quick_cal_path: Path, tmp_path: Path, cli) -> None:  # noqa: ANN001
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    r = cli("validate", "-c", str(quick_cal_path), "--repredict", str(bad))
    assert r.code == 2 and "not a validation results CSV" in r.err and "Traceback" not in r.err


def test_the_16_core_evidence_is_kept_with_its_calibration() -> None:
    # because the 16-core host is lent only now and then: its measurements and calibration stay in the repository,
    # so a model change can be checked against them on any machine with --repredict
    rows = list(csv.DictReader((EMR16 / "20261126T020054-A-project-threads.csv").open()))
    assert {int(r["threads"]) for r in rows} == {1, 2, 4, 8, 16} and {r["cores"] for r in rows} == {"16"}
    assert (EMR16 / "calibration-A.yaml").is_file() and (EMR16 / "calibration-AB-every-count.yaml").is_file()


def test_the_evidence_keeps_each_cases_phases_and_repredict_reads_them_back(quick_cal_path: Path, tmp_path: Path) -> None:
    case = v.ValidationCase("base", v.load_cases(only=["base"])[0].workload, 1024, 1, 2)
    measured = {"embedding_update": 0.004, "top_mlp_fwd": 0.0005}
    report = v.ValidationReport(
        [v.CaseResult.of(case, 0.01, 0.009, measured_phases_s=measured, predicted_phases_s={"top_mlp_fwd": 0.0004})],
        str(quick_cal_path),
        "numpy",
    )
    kept = v.write_results_csv(report, tmp_path)
    row = next(csv.DictReader(kept.open()))
    assert row["measured_phases_s"] == "embedding_update=0.004;top_mlp_fwd=0.0005"
    # because a re-prediction compares phase by phase too: the measured phases come back as they were kept
    (again,) = v.repredict(kept, quick_cal_path).cases
    assert again.measured_phases_s == measured and again.predicted_phases_s
    assert v.parse_phases_cell(None) == {} and v.parse_phases_cell("") == {}  # files from before the column


def test_a_swept_report_plots_one_measured_and_one_predicted_line_per_case(tmp_path: Path) -> None:
    from dlrmsim.calibration.plot import figure, thread_series, write_html

    w = v.load_cases(only=["base"])[0].workload
    cases = [
        v.CaseResult.of(v.ValidationCase(f"{name}@t{t}", w, 1024, 1, t), 0.01 / t**0.5, 0.01 / t)
        for name in ("base", "wide-mlp")
        for t in (4, 1, 2)
    ]
    report = v.ValidationReport(
        [*cases, v.CaseResult.of(v.ValidationCase("ranks-2", w, 1024, 2, 1), 0.01, 0.01)], "c.yaml", "torch"
    )
    series = thread_series(report)
    # because only a case run at several thread counts has a curve, in thread order
    assert list(series) == ["base", "wide-mlp"] and [c.threads for c in series["base"]] == [1, 2, 4]
    fig = figure(report, "t")
    assert [tr.name for tr in fig.data] == ["base measured", "base predicted", "wide-mlp measured", "wide-mlp predicted"]
    assert list(fig.data[1].y) == pytest.approx([10.0, 5.0, 2.5])  # ms, predicted 0.01 s / threads
    page = write_html(report, tmp_path / "sub" / "p.html", "t")
    assert page.is_file() and "plotly" in page.read_text()[:5000].lower()
    # a report without a sweep: measured and predicted bars per case
    flat = figure(v.ValidationReport(cases[:1], "c.yaml", "torch"), "t")
    assert [tr.type for tr in flat.data] == ["bar", "bar"]


def test_torchrec_predictions_from_a_calibration_without_tbe_fits_say_so(capsys) -> None:  # noqa: ANN001
    no_tbe = load_calibration(EMR16 / "calibration-A.yaml")  # measured where fbgemm was not installed
    assert no_tbe.tbe == []
    # because TorchRec's fused embedding is fbgemm's TBE kernel: without its fits the prediction stands on the
    # EmbeddingBag fits, and the user must hear it; the project's runner uses EmbeddingBag, so nothing to say
    assert v.warn_if_uncalibrated_kernel(no_tbe, "cal.yaml", "torchrec")
    assert "no fbgemm TBE measurements" in capsys.readouterr().err
    assert not v.warn_if_uncalibrated_kernel(no_tbe, "cal.yaml", "project")
    with_tbe = no_tbe.model_copy(update={"tbe": no_tbe.embedding[:1]})
    assert not v.warn_if_uncalibrated_kernel(with_tbe, "cal.yaml", "torchrec")


def _torchrec_two_rank_csv(tmp_path: Path, cal: Path, placement: Placement | None) -> Path:
    """A kept TorchRec results CSV with the ranks-2 case, its plan kept as validate keeps it (or not, as older files)."""
    case = v.load_cases(only=["ranks-2"])[0]
    result = v.CaseResult.of(case, 0.02, 1.0, measured_rounds_s=[0.02], target="torchrec", placement=v.placement_cell(placement))
    return v.write_results_csv(v.ValidationReport([result], str(cal), "torchrec"), tmp_path)


def test_a_kept_torchrec_plan_is_predicted_again_as_it_ran(quick_cal_path: Path, tmp_path: Path) -> None:
    case = v.load_cases(only=["ranks-2"])[0]
    # A plan TorchRec could choose and dlrmsim's default would not: row-wise, each table split over both ranks.
    plan = place(case.workload, PlacementSpec(strategy="row_wise"), 2)
    # because the CSV keeps the plan as one cell that reads back to the very same placement
    assert v.parse_placement_cell(v.placement_cell(plan)) == plan and v.placement_cell(None) == ""
    (again,) = v.repredict(_torchrec_two_rank_csv(tmp_path, quick_cal_path, plan), quick_cal_path).cases
    # because the re-prediction simulates the sharding that was measured, not dlrmsim's table-wise default
    cal = load_calibration(quick_cal_path)
    assert again.predicted_s == v.predict(case, cal, "torchrec-fused", plan)[0]
    assert again.predicted_s != v.predict(case, cal, "torchrec-fused")[0]
    assert v.parse_placement_cell(again.placement) == plan


def test_a_torchrec_two_rank_row_without_its_plan_is_refused(quick_cal_path: Path, tmp_path: Path, cli) -> None:  # noqa: ANN001
    # because guessing the plan would predict a sharding nobody measured: an older file's row is refused in one line
    kept = _torchrec_two_rank_csv(tmp_path, quick_cal_path, None)
    r = cli("validate", "-c", str(quick_cal_path), "--repredict", str(kept))
    assert r.code == 2 and "which the CSV does not keep" in r.err and "Traceback" not in r.err


def test_validate_names_the_cases_that_ran_one_configuration(quick_cal_path: Path, tmp_path: Path, cli) -> None:  # noqa: ANN001
    # because on a 2-core host ranks-2 and ranks-2-threads-1 are both two one-thread ranks: 9 and 11 ms measured are
    # 2 / 20 = 10 % from their balance point whatever the model predicts
    kept = _kept_csv(
        tmp_path, quick_cal_path, [("base", 1, 2, 0.010), ("ranks-2", 2, 1, 0.009), ("ranks-2-threads-1", 2, 1, 0.011)]
    )
    res = cli("validate", "-c", str(quick_cal_path), "--repredict", str(kept))
    assert res.code == 0, res.err
    assert "ranks-2 and ranks-2-threads-1 are one configuration on this host" in res.out and "within 10.0% of both" in res.out
    doc = json.loads(cli("validate", "-c", str(quick_cal_path), "--repredict", str(kept), "--json").out)
    assert doc["replicates"] == [
        {"cases": ["ranks-2", "ranks-2-threads-1"], "measured_s": [0.009, 0.011], "floor": pytest.approx(0.1)}
    ]
