"""Kept validation runs pooled (`dlrmsim evidence`): per case over runs, per run against the goal, per phase."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from dlrmsim.calibration.calibrate import fit_calibration
from dlrmsim.calibration.evidence import pool, read_rows, repredicted, select
from dlrmsim.calibration.schema import load_calibration
from dlrmsim.calibration.validate import RESULT_COLUMNS, phases_cell, repredict
from dlrmsim.errors import DlrmsimError
from tests.conftest import assert_one_line_error


def _run(folder: Path, name: str, date: str, rows: list[dict[str, object]], target: str = "torchrec") -> Path:
    """A results CSV as `dlrmsim validate` writes it, with only the columns evidence reads filled in."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with path.open("w", newline="") as fh:
        out = csv.DictWriter(fh, fieldnames=RESULT_COLUMNS, restval="")
        out.writeheader()
        for r in rows:
            measured = float(r.get("measured", 0.01))
            error = float(r["error"])
            out.writerow(
                {
                    "date": date,
                    "host": r.get("host", "vm"),
                    "cpu_model": r.get("cpu", ""),
                    "cores": r.get("cores", ""),
                    "target": target,
                    "case": r["case"],
                    "ranks": r.get("ranks", 1),
                    "threads": r.get("threads", 2),
                    "batch": r.get("batch", 1024),
                    "measured_median_s": measured,
                    "predicted_s": measured * (1 + error),
                    "error": error,
                    "host_drift": r.get("drift", ""),
                    "measured_phases_s": phases_cell(r.get("mphases", {})),  # type: ignore[arg-type]
                    "predicted_phases_s": phases_cell(r.get("pphases", {})),  # type: ignore[arg-type]
                }
            )
    return path


def test_a_case_is_summarised_by_its_median_error_over_the_runs(tmp_path: Path) -> None:
    _run(tmp_path, "a.csv", "2026-11-26T08:00:00", [{"case": "base", "error": 0.10}, {"case": "wide", "error": -0.05}])
    _run(tmp_path, "b.csv", "2026-11-26T09:00:00", [{"case": "base", "error": -0.02}, {"case": "wide", "error": -0.07}])
    p = pool(read_rows([tmp_path]))
    cases = {c.case: c for c in p.cases}
    # because the median of two runs is their mean, and only wide erred the same way both times
    assert cases["base"].median == pytest.approx(0.04) and not cases["base"].same_sign
    assert cases["wide"].median == pytest.approx(-0.06) and cases["wide"].same_sign
    # because the pooled goal statistics are the median and the largest of |0.04| and |-0.06|
    assert p.of("vm", "torchrec").verdict() == pytest.approx((0.05, 0.06))


def test_each_run_is_held_to_both_parts_of_the_goal(tmp_path: Path) -> None:
    good = [{"case": c, "error": e} for c, e in (("a", 0.05), ("b", -0.07), ("c", 0.19))]
    tail = [{"case": c, "error": e} for c, e in (("a", 0.05), ("b", 0.05), ("c", -0.25))]
    _run(tmp_path, "good.csv", "2026-11-26T08:00:00", good)
    _run(tmp_path, "tail.csv", "2026-11-26T09:00:00", tail)
    runs = {r.run: r for r in pool(read_rows([tmp_path])).runs}
    # because good's median |error| is 7 % and its largest 19 %; tail's median is 5 % but its largest 25 % > 20 %
    assert runs["good.csv"].median_abs == pytest.approx(0.07) and runs["good.csv"].meets_goal
    assert runs["tail.csv"].max_abs == pytest.approx(0.25) and not runs["tail.csv"].meets_goal


def test_phases_pool_the_one_rank_rows_and_leave_out_untimed_waits(tmp_path: Path) -> None:
    one = {"mphases": {"top_mlp_bwd": 0.002, "allreduce": 1e-6}, "pphases": {"top_mlp_bwd": 0.0015, "allreduce": 0.0}}
    two = {"ranks": 2, "mphases": {"top_mlp_bwd": 0.009}, "pphases": {"top_mlp_bwd": 0.001}}
    _run(tmp_path, "a.csv", "2026-11-26T08:00:00", [{"case": "base", "error": 0.0, **one}, {"case": "r2", "error": 0.0, **two}])
    phases = {p.phase: p for p in pool(read_rows([tmp_path])).phases}
    # because the 2-rank row's phases include its waits for the other rank, and a one-rank "allreduce" is no work
    assert set(phases) == {"top_mlp_bwd"} and phases["top_mlp_bwd"].rows == 1
    assert phases["top_mlp_bwd"].median_diff_s == pytest.approx(0.0005)
    assert phases["top_mlp_bwd"].median_error == pytest.approx(-0.25)


def test_filters_keep_one_target_host_and_time(tmp_path: Path) -> None:
    _run(tmp_path, "old.csv", "2026-11-25T08:00:00", [{"case": "base", "error": 0.5}])
    two_hosts = [{"case": "base", "error": 0.1}, {"case": "base", "error": 0.2, "host": "c16"}]
    _run(tmp_path, "new.csv", "2026-11-26T08:00:00", two_hosts)
    _run(tmp_path, "runner.csv", "2026-11-26T09:00:00", [{"case": "base", "error": 0.3}], target="torch")
    rows = read_rows([tmp_path])
    # because the runner's CSVs name its backend (torch), which stands for the project target
    assert {r.target for r in rows} == {"torchrec", "project"}
    kept = select(rows, target="torchrec", host="vm", since="2026-11-26")
    assert [(r.run, r.error) for r in kept] == [("new.csv", 0.1)]


def test_machines_that_share_a_host_name_never_pool(tmp_path: Path) -> None:
    amd = [{"case": "base", "error": -0.10, "cpu": "AMD EPYC", "cores": 2}]
    intel = [{"case": "base", "error": 0.30, "cpu": "Intel(R) Xeon(R) Processor", "cores": 2}]
    _run(tmp_path, "a.csv", "2026-11-26T08:00:00", amd)
    _run(tmp_path, "b.csv", "2026-11-26T09:00:00", intel)
    rows = read_rows([tmp_path])
    p = pool(rows)
    # because both CSVs say host "vm", but a CPU model is a different machine: one pooled median of -10 % and +30 %
    # would be a third host's error that no machine made
    assert p.groups() == [("vm (AMD EPYC, 2 cores)", "torchrec"), ("vm (Intel(R) Xeon(R) Processor, 2 cores)", "torchrec")]
    assert p.of("vm (AMD EPYC, 2 cores)", "torchrec").verdict() == pytest.approx((0.10, 0.10))
    # because --host takes a host name (every machine of that name) or one machine's label
    assert len(select(rows, host="vm")) == 2
    assert [r.error for r in select(rows, host="vm (Intel(R) Xeon(R) Processor, 2 cores)")] == [0.30]


def test_a_folder_skips_other_benchmarks_csvs_but_a_named_one_is_refused(tmp_path: Path) -> None:
    _run(tmp_path, "a.csv", "2026-11-26T08:00:00", [{"case": "base", "error": 0.1}])
    other = tmp_path / "tbe-threads.csv"
    other.write_text("threads,forward_ms\n1,2.0\n")
    # because a results folder also keeps other benchmarks' CSVs, while a file named by the user must be one
    assert len(read_rows([tmp_path])) == 1
    with pytest.raises(DlrmsimError, match="no column date"):
        read_rows([other])


def test_cli_prints_the_pooled_verdict_and_json(cli, tmp_path: Path) -> None:  # noqa: ANN001
    _run(tmp_path, "a.csv", "2026-11-26T08:00:00", [{"case": "base", "error": 0.10}, {"case": "wide", "error": -0.05}])
    _run(tmp_path, "b.csv", "2026-11-26T09:00:00", [{"case": "base", "error": -0.02}, {"case": "wide", "error": -0.07}])
    res = cli("evidence", str(tmp_path))
    assert res.code == 0, res.err
    # because the per-case medians are 4 % and -6 %: median 5 %, largest 6 %, inside 8 % / 20 %
    assert "median |error| 5.0 %, max 6.0 %" in res.out and "met" in res.out
    doc = json.loads(cli("evidence", str(tmp_path), "--json").out)
    group = doc["groups"][0]
    assert (group["host"], group["target"]) == ("vm", "torchrec")
    assert group["cases"]["wide"]["errors"] == [-0.05, -0.07] and len(group["runs"]) == 2


def test_cli_errors_are_one_line(cli, tmp_path: Path) -> None:  # noqa: ANN001
    _run(tmp_path, "a.csv", "2026-11-26T08:00:00", [{"case": "base", "error": 0.1}])
    assert_one_line_error(cli("evidence", str(tmp_path), "--target", "runner"), "--target", "runner")
    assert_one_line_error(cli("evidence", str(tmp_path), "--since", "2027"), "no validation rows")
    assert_one_line_error(cli("evidence", str(tmp_path / "missing.csv")), "missing.csv", "cannot read")


# A kept run of the Intel VM, with its calibration, from before the model gave each kernel its cores' availability:
# the current model predicts its steps up to 22 % apart from what it kept.
KEPT_CSV = Path("validation/results/20261127T080011-vm-torch.csv")


def test_repredict_pools_the_current_models_predictions_against_each_runs_own_calibration(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    kept = read_rows([repo / KEPT_CSV])
    # because the CSV names its calibration as validate wrote it (relative to the checkout), and a copy of the run
    # elsewhere finds the calibration beside it
    copy = tmp_path / KEPT_CSV.name
    copy.write_text((repo / KEPT_CSV).read_text())
    (tmp_path / Path(kept[0].calibration).name).write_text((repo / kept[0].calibration).read_text())
    rows, left_out = repredicted(read_rows([copy]))
    assert not left_out and len(rows) == len(kept)
    again = {c.name: c for c in repredict(repo / KEPT_CSV, repo / kept[0].calibration).cases}
    for old, new in zip(kept, rows, strict=True):
        # because only the predictions are made again: what was measured stays as kept
        assert (new.case, new.measured_s, new.measured_phases_s) == (old.case, old.measured_s, old.measured_phases_s)
        # because each row is predicted as `validate --repredict` predicts the run with the calibration it names
        assert new.predicted_s == pytest.approx(again[new.case].predicted_s, rel=1e-12)
        assert new.error == pytest.approx((new.predicted_s - new.measured_s) / new.measured_s, rel=1e-9)
        assert new.predicted_phases_s == again[new.case].predicted_phases_s
    # because the model changed since the run, the pooled predictions are not the kept ones
    assert max(abs(new.predicted_s / old.predicted_s - 1.0) for old, new in zip(kept, rows, strict=True)) > 0.05


def test_repredict_leaves_out_a_run_whose_calibration_is_gone(cli, tmp_path: Path) -> None:  # noqa: ANN001
    _run(tmp_path, "a.csv", "2026-11-26T08:00:00", [{"case": "base", "error": 0.1}])
    rows, left_out = repredicted(read_rows([tmp_path]))
    # because the made-up run names no calibration file that exists, nothing can predict it again
    assert rows == [] and len(left_out) == 1 and "a.csv" in left_out[0]
    res = cli("evidence", str(tmp_path), "--repredict", "--no-progress")
    assert_one_line_error(res, "no kept run could be predicted again", "--repredict", "a.csv")


def test_refit_predicts_with_this_checkouts_fit_of_the_kept_measurements() -> None:
    repo = Path(__file__).resolve().parents[2]
    kept = read_rows([repo / KEPT_CSV])
    cal_path = repo / kept[0].calibration
    as_kept, _ = repredicted(kept)
    refitted, left_out = repredicted(kept, refit=True)
    assert not left_out
    cal = load_calibration(cal_path)
    again = {
        c.name: c
        for c in repredict(repo / KEPT_CSV, cal_path, calibration=fit_calibration(cal.host, list(cal.measurements))).cases
    }
    # because --refit predicts with the current fit of the calibration's own measurements, not the fit its file holds
    for r in refitted:
        assert r.predicted_s == pytest.approx(again[r.case].predicted_s, rel=1e-12)
    # because the file predates the GEMM's sequence call, which this checkout's fit adds: the predictions move
    assert all(t.sequence_call_us is None for t in cal.gemm.tables)
    assert max(abs(b.predicted_s / a.predicted_s - 1.0) for a, b in zip(as_kept, refitted, strict=True)) > 0.01


def test_refit_needs_repredict(cli, tmp_path: Path) -> None:  # noqa: ANN001
    _run(tmp_path, "a.csv", "2026-11-26T08:00:00", [{"case": "base", "error": 0.1}])
    assert_one_line_error(cli("evidence", str(tmp_path), "--refit"), "--refit", "--repredict")
