"""Interrupted calibrations resume from the partial-results cache; CLI errors are one line."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from dlrmsim.calibration import backends
from dlrmsim.calibration.benchmarks.plan import (
    SPREAD_STAGES,
    UNSTABLE_PASS_RATIO,
    build_plan,
    combine_passes,
    measured_again,
    unstable_benchmarks,
)
from dlrmsim.calibration.benchmarks.timing import BenchTask
from dlrmsim.calibration.calibrate import PartialCache, check_first_pass, not_taken, partial_path, run_plan
from dlrmsim.calibration.dlrm_runner import run_dlrm_iteration
from dlrmsim.calibration.ops import get_ops
from dlrmsim.calibration.schema import Measurement
from dlrmsim.calibration.validate import load_cases
from dlrmsim.errors import DlrmsimError


def _row(name: str) -> Measurement:
    return Measurement(benchmark="stream", name=name, cores=1, bytes=1e6, time_s=1e-4, repeats=3, params={"kind": "copy"})


def test_resume_reuses_finished_tasks_and_reruns_the_rest(tmp_path: Path) -> None:
    path = partial_path(tmp_path / "host.yaml")
    assert path.name == "host.yaml.partial.jsonl"
    calls: list[str] = []

    def task(name: str, fail: bool = False) -> BenchTask:
        def run() -> list[Measurement]:
            calls.append(name)
            if fail:
                raise KeyboardInterrupt  # the user pressed ^C in the middle of this benchmark
            return [_row(name)]

        return BenchTask("memory streams", name, run)

    with pytest.raises(KeyboardInterrupt):
        run_plan([task("a"), task("b"), task("c", fail=True)], PartialCache(path, "key1"), progress=False)
    assert calls == ["a", "b", "c"]
    with path.open("a") as fh:
        fh.write('{"key": "key1", "task": "c", "measu')  # a line cut by the interruption is ignored
    calls.clear()
    rows = run_plan([task("a"), task("b"), task("c")], PartialCache(path, "key1"), progress=False)
    assert calls == ["c"] and [r.name for r in rows] == ["a", "b", "c"]
    # Another host (or backend, or mode) never reuses them.
    calls.clear()
    run_plan([task("a")], PartialCache(path, "other-host"), progress=False)
    assert calls == ["a"]


def test_calibrate_bad_backend_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from dlrmsim.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--quick", "--backend", "numpyy"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown backend 'numpyy'" in err and "did you mean 'numpy'" in err


def test_torch_backend_without_torch_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # because the one torch check lives in ops.backends, a missing torch is one error for benchmarks and runner alike
    monkeypatch.setattr(backends, "torch_available", lambda: False)
    with pytest.raises(DlrmsimError, match="needs PyTorch"):
        get_ops("torch")
    with pytest.raises(DlrmsimError, match="needs PyTorch"):
        run_dlrm_iteration(load_cases()[0].workload, batch=64, backend="torch")


def test_calibrate_command_is_registered() -> None:
    from typer.testing import CliRunner

    from dlrmsim.cli import app

    result = CliRunner().invoke(app, ["calibrate", "--help"])
    assert result.exit_code == 0
    assert "--quick" in result.output and "--backend" in result.output


def test_combine_passes_keeps_the_fastest_pass_and_the_streams_median_one() -> None:
    def m(name: str, t: float, bench: str = "gemm") -> Measurement:
        return Measurement(benchmark=bench, name=name, cores=1, time_s=t, repeats=3)

    out = combine_passes([m("a", 2.0), m("b", 1.0), m("a", 1.5), m("b", 3.0), m("a", 1.8), m("c", 4.0)])
    assert [(x.name, x.time_s, x.passes, x.slowest_pass_s) for x in out] == [
        ("a", 1.5, 3, 2.0),
        ("b", 1.0, 2, 3.0),
        ("c", 4.0, 1, None),
    ]
    assert [x.pass_ratio for x in out] == pytest.approx([2.0 / 1.5, 3.0, 1.0])
    # a stream keeps its median sample: one pass in a rare fast state (4.0 -> 2.6 ms) does not set the
    # bandwidth; an even count keeps the lower middle (faster) one
    streams = combine_passes(
        [m("s", t, "stream") for t in (4.0, 4.1, 2.6, 3.9, 4.3)] + [m("e", t, "stream") for t in (4.0, 2.6, 3.9, 4.3)]
    )
    assert [(x.time_s, x.passes, x.slowest_pass_s) for x in streams] == [(4.0, 5, 4.3), (3.9, 4, 4.3)]


def test_the_arrival_skews_runs_are_averaged() -> None:
    # because the skew estimates an expectation over the host's states (one rank slower than the other by an amount
    # that changes from run to run), its runs are combined by their mean: of the slowest rank's segment and of the
    # ranks' mean segment alike, so the fitted fraction is mean(last) / mean(typical) - 1
    runs = [(10.5e-3, 10.0e-3), (10.1e-3, 10.0e-3), (11.4e-3, 10.2e-3), (10.2e-3, 9.8e-3)]
    rows = [
        Measurement(benchmark="skew", name="s", cores=2, time_s=last, params={"ranks": 2, "segment_s": typ}, repeats=80)
        for last, typ in runs
    ]
    (out,) = combine_passes(rows)
    assert out.time_s == pytest.approx(sum(r[0] for r in runs) / 4)
    assert out.params["segment_s"] == pytest.approx(sum(r[1] for r in runs) / 4)
    assert out.params["ranks"] == 2 and out.passes == 4 and out.slowest_pass_s == 11.4e-3
    assert out.spread_pct == pytest.approx((11.4 - 10.1) / 10.35 * 100)


def test_benchmarks_whose_passes_disagree_are_reported_worst_first() -> None:
    def m(name: str, fast: float, slow: float | None) -> Measurement:
        return Measurement(benchmark="gemm", name=name, cores=1, time_s=fast, slowest_pass_s=slow, passes=2, repeats=3)

    steady, edge, bad, worse = (
        m("steady", 1.0, 1.1),
        m("edge", 1.0, UNSTABLE_PASS_RATIO),
        m("bad", 1.0, 1.6),
        m("worse", 1.0, 3.0),
    )
    assert unstable_benchmarks([steady, bad, m("single", 1.0, None), edge, worse]) == [worse, bad]


def test_plan_repeats_single_process_kernels_in_later_passes_only() -> None:

    k = get_ops("numpy")
    one = build_plan(k, quick=True, cores=2, implementation="gloo", passes=1)
    two = build_plan(k, quick=True, cores=2, implementation="gloo", passes=2)
    again = [t for t in one if t.repeat]
    assert {t.stage for t in again} == {
        "gemm size sweep",
        "gemm preset MLP shapes",
        "gemm narrow layers",
        "gemm in training-step order",
        "gemm with evicted operands",
        "gemm output columns",
        "memory streams",
        "op dispatch",
        "thread-pool fork",
        "cold outputs",
        "embedding bags",
        "dot interaction",
        "dot interaction context",
        "arrival skew",
        "core availability",
    }
    streams = [t for t in again if t.stage in SPREAD_STAGES]
    # because a slow state of the host can outlast both passes, the square GEMMs and preset layers (every layer's
    # compute rate) are sampled across the run beside the streams and the skew; the other GEMM stages are not
    spread = {"gemm size sweep", "gemm preset MLP shapes", "memory streams", "arrival skew", "core availability"}
    assert {t.stage for t in streams} == spread
    assert len(streams) == len([t for t in one if t.stage in SPREAD_STAGES])
    assert len([t for t in streams if t.stage == "arrival skew"]) == 1
    assert len(two) == len(one) + len(again) + 3 * len(streams)
    # the spread stages open the run, and run again right after the first pass (its last tasks are the
    # collectives) and at the very end: five samples spread over the run
    ids = [t.id for t in two]
    assert ids[: len(streams)] == [f"{t.id} start" for t in streams]
    assert ids[len(streams) : len(streams) + len(one)] == [t.id for t in one]
    rest = ids[len(streams) + len(one) :]
    assert rest[: len(streams)] == [f"{t.id} after collectives" for t in streams]
    # the second pass comes after all of the first (spread in time), backwards (a spell over neighbouring
    # benchmarks meets others), with ids the partial cache tells apart
    assert rest[len(streams) : len(streams) + len(again)] == [f"{t.id} pass 2" for t in reversed(again)]
    assert rest[len(streams) + len(again) :] == [f"{t.id} last pass" for t in streams]
    assert len(set(ids)) == len(two)
    tiny = build_plan(k, quick=True, cores=2, implementation="gloo", tiny=True, passes=2)
    assert not any("pass 2" in t.id for t in tiny)


def test_fit_summary_counts_the_runs_the_host_moved_under() -> None:
    from dlrmsim.calibration.compare import ErrorSummary, error_summary
    from dlrmsim.calibration.schema import FitRow

    runs = [("gemm", 10.0, 1.0), ("gemm", -30.0, 2.0), ("gemm", 20.0, 1.2), ("stream", 5.0, 1.6)]
    rows = [
        FitRow(benchmark=b, name=f"{b} {err}", measured_s=1.0, predicted_s=1.0 + err / 100, error_pct=err) for b, err, _ in runs
    ]
    measured = [
        Measurement(benchmark=b, name=f"{b} {err}", cores=1, time_s=1.0, slowest_pass_s=ratio, passes=2, repeats=3)  # type: ignore[arg-type]
        for b, err, ratio in runs
    ]
    out = error_summary(rows, measured)
    assert out == {"gemm": ErrorSummary(3, 20.0, 30.0, 1), "stream": ErrorSummary(1, 5.0, 5.0, 1)}


def _plan_with_second_pass() -> list[BenchTask]:
    first = [BenchTask("memory streams", name, lambda name=name: [_row(name)], repeat=True) for name in ("a", "b")]
    return first + measured_again(list(reversed(first)), "pass 2")


def test_finish_fits_what_an_interrupted_run_kept_in_plan_order(tmp_path: Path) -> None:
    # because a cut-off run (a lease's end) has every benchmark's first pass, --finish fits those and the second
    # passes it did take, and counts the measurements it lacks so the warning can say how many
    tasks = _plan_with_second_pass()
    cache = PartialCache(partial_path(tmp_path / "host.yaml"), "key")
    for t in (tasks[2], tasks[0], tasks[1]):  # "b pass 2" was the last task run before the cut
        cache.add(t, t.run())
    check_first_pass(tasks, cache)
    rows, lacking = run_plan(tasks, cache, progress=False, later_passes_until=-math.inf), not_taken(tasks, cache)
    assert [r.name for r in rows] == ["a", "b", "b"] and lacking == 1  # "a pass 2" never ran
    assert [(m.name, m.passes) for m in combine_passes(rows)] == [("a", 1), ("b", 2)]


def test_finish_refuses_a_run_whose_first_pass_is_incomplete(tmp_path: Path) -> None:
    # because a benchmark measured in no pass leaves its fit without points, the error names the fix: resume
    tasks = _plan_with_second_pass()
    cache = PartialCache(partial_path(tmp_path / "host.yaml"), "key")
    cache.add(tasks[0], tasks[0].run())
    with pytest.raises(DlrmsimError, match=r"1 of the first pass are missing \(first: b\).*without --finish"):
        check_first_pass(tasks, cache)


def test_calibrate_finish_without_partial_results_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dlrmsim.cli import main

    out = tmp_path / "cal.yaml"
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--quick", "--backend", "numpy", "--out", str(out), "--finish", "--no-progress"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "cal.yaml.partial.jsonl: --finish: no finished benchmarks to fit" in err and "Traceback" not in err
    assert not out.exists()
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--refit", str(out), "--finish"])
    assert exc.value.code == 2 and "--refit measures nothing, so --finish does not apply" in capsys.readouterr().err


def test_run_calibration_finish_fits_the_kept_rows_without_measuring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # because --finish must measure nothing, every task here fails if run; the fit sees the kept rows with their
    # passes combined, the warning counts the measurement not taken, and the partial file goes once the YAML is out
    from dlrmsim.calibration import calibrate

    def never() -> list[Measurement]:
        raise AssertionError("--finish ran a benchmark")

    first = [BenchTask("memory streams", name, never, repeat=True) for name in ("a", "b")]
    tasks = first + measured_again(list(reversed(first)), "pass 2")
    monkeypatch.setattr(calibrate, "build_plan", lambda *a, **k: tasks)
    seen: dict[str, object] = {}
    monkeypatch.setattr(calibrate, "fit_calibration", lambda host, rows: seen.setdefault("rows", rows))
    monkeypatch.setattr(calibrate, "save_calibration", lambda cal, out: seen.setdefault("out", out))
    out = tmp_path / "cal.yaml"
    host = calibrate.detect_host("numpy", True, get_ops("numpy").versions(), date="", probe=False)
    monkeypatch.setattr(calibrate, "detect_host", lambda *a, **k: host)
    cache = PartialCache(partial_path(out), f"{calibrate.host_key(host)} flush {get_ops('numpy').flush_bytes()}")
    for t, rows in ((tasks[0], [_row("a")]), (tasks[1], [_row("b")]), (tasks[2], [_row("b")])):
        cache.add(t, rows)
    calibrate.run_calibration(quick=True, backend="numpy", out=out, progress=False, finish=True)
    assert [(m.name, m.passes) for m in seen["rows"]] == [("a", 1), ("b", 2)]  # type: ignore[attr-defined]
    assert seen["out"] == out and not partial_path(out).exists()
    assert "1 of 4 planned measurements (later passes) were not taken (--finish)" in capsys.readouterr().err


def test_past_the_time_limit_later_passes_are_skipped_and_the_first_pass_still_runs(tmp_path: Path) -> None:
    # because every fit needs each benchmark once but a second pass only filters slow spells, a run past its time
    # limit skips the second pass's measurements still to take, keeps those it has, and never skips a first one
    calls: list[str] = []

    def task(name: str) -> BenchTask:
        def run() -> list[Measurement]:
            calls.append(name)
            return [_row(name.split()[0])]

        return BenchTask("memory streams", name, run, repeat=True)

    first = [task("a"), task("b")]
    tasks = first + measured_again(list(reversed(first)), "pass 2")
    cache = PartialCache(partial_path(tmp_path / "host.yaml"), "key")
    cache.add(tasks[2], [_row("b")])  # "b pass 2", from an earlier, interrupted run
    rows = run_plan(tasks, cache, progress=False, later_passes_until=time.monotonic() - 1.0)
    assert calls == ["a", "b"] and [r.name for r in rows] == ["a", "b", "b"]
    calls.clear()
    run_plan(tasks, PartialCache(partial_path(tmp_path / "other.yaml"), "key"), progress=False, later_passes_until=None)
    assert len(calls) == 4  # no limit: every pass runs
