"""`dlrmsim validate`: cases load, every case is simulated, rounds keep the fastest run, the JSON has its keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlrmsim.calibration import drift
from dlrmsim.calibration import validate as v
from dlrmsim.calibration.drift import DriftSample
from dlrmsim.calibration.schema import Calibration, Measurement

ROUND_TIMES = [0.030, 0.010, 0.020]  # what the fake runner measures in rounds 1, 2, 3


@pytest.fixture
def fake_runner(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def measure(case: v.ValidationCase, backend: str, iterations: int, warmup: int) -> tuple[float, dict[str, float]]:
        t = ROUND_TIMES[sum(1 for c in calls if c == case.name)]
        calls.append(case.name)
        return t, {"embedding_update": t / 2}

    monkeypatch.setattr(v, "measure", measure)
    # The fake runs use no cores: the cases are a two-core host's, whatever this machine has.
    monkeypatch.setattr(v, "usable_cores", lambda: 2)
    # The host drift probe (tested on its own below): the first round finds the host 1.5x slower.
    probes: list[int] = []

    def measure_drift(cal: object, kernels: object, counts: object = (), tbe: bool = False) -> list[DriftSample]:
        probes.append(1)
        return [DriftSample("gemm 512x512x512 c2", 1e-3, 1.5e-3 if len(probes) == 1 else 1e-3)]

    monkeypatch.setattr(drift, "measure_drift", measure_drift)
    return calls


def test_cases_file_varies_what_the_issue_asks() -> None:
    cases = v.load_cases(cores=2)  # as on a two-core host (a case without a count of its own takes all the cores)
    assert len(cases) >= 8
    assert {c.ranks for c in cases} == {1, 2} and len({c.threads for c in cases}) >= 2
    assert len({c.batch for c in cases}) >= 2 and len({c.workload.embedding_dim for c in cases}) >= 2
    assert len({c.workload.lookups_per_sample for c in cases}) >= 2 and len({c.workload.table_rows[0] for c in cases}) >= 2


def test_rounds_are_round_robin_and_keep_the_fastest(quick_cal_path: Path, fake_runner: list[str]) -> None:
    report = v.run_validation(quick_cal_path, backend="numpy", only=["base", "ranks-2"], rounds=3, progress=False)
    # a slow spell spreads over cases instead of hitting one; the last round starts at the second case (2 x 2 // 3)
    assert fake_runner == ["base", "ranks-2", "base", "ranks-2", "ranks-2", "base"]
    for c in report.cases:
        assert c.measured_s == min(ROUND_TIMES) and c.measured_rounds_s == ROUND_TIMES
        # the fastest run is round 2's, so the drift beside it is the probe's just before round 2, not round 1's 1.5
        assert c.kept_round == 1 and c.drift_ratio == pytest.approx(1.0)
        assert c.spread == pytest.approx(2.0)
        assert c.predicted_s > 0 and c.error == pytest.approx((c.predicted_s - c.measured_s) / c.measured_s)
        assert c.measured_phases_s == {"embedding_update": min(ROUND_TIMES) / 2}
        # The simulated phases add up to no more than the simulated iteration (blocking schedule, one rank).
        assert 0 < sum(c.predicted_phases_s.values()) <= c.predicted_s * 1.001 or c.ranks > 1
    # the probe ran before each round, and its ratios are now / calibrated
    assert [[d.ratio for d in r] for r in report.drift_rounds] == [[pytest.approx(1.5)], [1.0], [1.0]]
    assert report.median_abs_error == pytest.approx(
        sorted(abs(c.error) for c in report.cases)[0] / 2 + sorted(abs(c.error) for c in report.cases)[1] / 2
    )


def test_validate_json_has_the_issue_keys(quick_cal_path: Path, fake_runner: list[str]) -> None:
    from dlrmsim.cli import app

    res = CliRunner().invoke(
        app, ["validate", "--no-results", "-c", str(quick_cal_path), "--case", "base", "--rounds", "2", "--json"]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert set(data) >= {"cases", "median_abs_error", "max_abs_error"}
    (case,) = data["cases"]
    assert set(case) >= {"name", "measured_s", "predicted_s", "error"} and case["measured_rounds_s"] == ROUND_TIMES[:2]
    assert case["kept_round"] == 1 and case["drift_ratio"] == pytest.approx(1.0)
    assert [r[0]["ratio"] for r in data["host_drift"]] == [pytest.approx(1.5), 1.0]
    # because the kept round (the second) ran after a probe at 1.0, and over both rounds the gemm probe's median
    # is (1.5 + 1.0) / 2
    assert case["drift_by_kind"] == {"gemm": pytest.approx(1.0)}
    assert data["host_drift_by_kind"] == {"gemm": pytest.approx(1.25)}


def test_validate_warns_when_the_host_drifted(quick_cal_path: Path, fake_runner: list[str]) -> None:
    from dlrmsim.cli import app

    res = CliRunner().invoke(app, ["validate", "--no-results", "-c", str(quick_cal_path), "--case", "base", "--rounds", "2"])
    assert res.exit_code == 0, res.output
    assert "Host drift" in res.output and "1.5" in res.output
    assert "host drifted since calibration" in res.output
    assert "by probe family (median over rounds): gemm 1.25x" in res.output


def test_drift_by_kind_is_the_median_ratio_of_each_probe_family() -> None:
    samples = [
        DriftSample("gemm 512x512x512 c16", 1.0, 1.6),
        DriftSample("embedding update r1 c1", 1.0, 1.1),
        DriftSample("embedding update r1 c16", 1.0, 1.5),
        DriftSample("embedding forward r1 c16", 2.0, 2.0),
    ]
    # because what moved matters more than the worst single probe: the GEMMs ran 1.6x slower, the embedding probes
    # 1.0-1.5x (median 1.1), in the probe's order
    assert drift.by_kind(samples) == {"gemm": pytest.approx(1.6), "embedding": pytest.approx(1.1)}
    assert list(drift.by_kind(samples)) == ["gemm", "embedding"] and drift.by_kind([]) == {}


def test_kept_evidence_keeps_the_drift_by_family(quick_cal_path: Path, fake_runner: list[str], tmp_path: Path) -> None:
    report = v.run_validation(quick_cal_path, backend="numpy", only=["base"], rounds=2, progress=False)
    path = v.write_results_csv(report, tmp_path)
    # because --repredict reads the CSV back: the drift beside each kept case must survive the round trip
    (case,) = v.repredict(path, quick_cal_path).cases
    assert case.drift_by_kind == {"gemm": pytest.approx(1.0)} == report.cases[0].drift_by_kind


def test_drift_probe_reruns_the_calibrations_own_benchmarks(quick_cal: Calibration) -> None:
    """The probe rebuilds a GEMM, the triad, an embedding configuration, the op dispatch and a thread-pool fork from
    the calibration's rows and measures them again under the same names; a sample's ratio is now / calibrated."""
    from dlrmsim.calibration.ops import get_ops

    samples = drift.measure_drift(quick_cal, get_ops(quick_cal.host.backend))
    calibrated = {m.name: m.time_s for m in quick_cal.measurements}
    kinds = {s.name.split()[0] for s in samples}
    assert kinds == {"gemm", "stream", "embedding", "dispatch", "fork"}, kinds
    assert any(s.name.startswith("embedding update") for s in samples)
    for s in samples:
        assert s.calibrated_s == calibrated[s.name] and s.now_s > 0
        assert s.ratio == pytest.approx(s.now_s / s.calibrated_s)
    assert drift.worst([DriftSample("a", 1.0, 1.2), DriftSample("b", 1.0, 0.5)]).name == "b"  # type: ignore[union-attr]
    assert drift.worst([]) is None


def test_the_probe_also_runs_at_the_thread_counts_a_validation_runs(quick_cal: Calibration) -> None:
    from dlrmsim.calibration.ops import get_ops

    ops = get_ops(quick_cal.host.backend)
    cores = quick_cal.host.cores

    def counts_of(tasks: list, family: str) -> set[int]:  # type: ignore[type-arg]
        return {int(t.id.rsplit(" c", 1)[1]) for t in tasks if t.id.startswith(family)}

    default = drift.probe_tasks(quick_cal, ops)
    swept = drift.probe_tasks(quick_cal, ops, [1, 64])
    # because a probe only at all cores says nothing of a 1-thread case's host; a count the calibration never
    # measured (64) has no calibrated time to compare with, so it is not run
    assert counts_of(default, "gemm") == {cores} and counts_of(swept, "gemm") == {1, cores}
    assert counts_of(swept, "embedding") == counts_of(default, "embedding") == {1, cores}
    assert drift.without_cores("embedding update r262144 d32 c16") == "embedding update r262144 d32"


def test_torchrec_validations_probe_fbgemms_tbe_at_its_smallest_calibrated_configuration(
    quick_cal: Calibration, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dlrmsim.calibration.benchmarks.tbe import TbeConfig, TbeTiming, tbe_measurements
    from dlrmsim.calibration.ops import get_ops

    def rows(r: int, pooling: int, between: int = 0) -> list[Measurement]:
        cfg = TbeConfig(r, 32, pooling, 1024, 4, "uniform", between)
        return tbe_measurements(TbeTiming(cfg, 1, 1e-4, 4e-4, 1.0, 1.0, 7), 1000, (1.0, 1.0))

    cal = quick_cal.model_copy(
        update={"measurements": [*quick_cal.measurements, *rows(2**21, 4), *rows(2**18, 16), *rows(2**18, 4, 1 << 25)]}
    )
    monkeypatch.setattr(drift, "tbe_available", lambda: True)
    ops = get_ops(quick_cal.host.backend)
    # because TorchRec's step runs fbgemm's TBE, not the EmbeddingBag the other probes time: its drift is its own;
    # the smallest configuration (fewest rows, then lookups) without a sweep between forward and backward, one thread
    tasks = drift.probe_tasks(cal, ops, tbe=True)
    assert [t.id for t in tasks if t.id.startswith("tbe")] == ["tbe r262144 d32 p16 uniform b1024 t4 c1"]
    assert not any(t.id.startswith("tbe") for t in drift.probe_tasks(cal, ops))
    monkeypatch.setattr(drift, "tbe_available", lambda: False)
    assert drift.tbe_probe(cal) is None  # where fbgemm is not installed, nothing to run


def test_the_tbe_probe_times_what_the_calibration_timed(quick_cal: Calibration, monkeypatch: pytest.MonkeyPatch) -> None:
    from dlrmsim.calibration.benchmarks.tbe import TbeConfig, TbeTiming, tbe_measurements

    cfg = TbeConfig(2**18, 32, 16, 1024, 4, "uniform", 0, "sparse_arch")
    rows = tbe_measurements(TbeTiming(cfg, 1, 1e-4, 4e-4, 1.0, 1.0, 7), 1000, (1.0, 1.0))
    cal = quick_cal.model_copy(update={"measurements": [*quick_cal.measurements, *rows]})
    monkeypatch.setattr(drift, "tbe_available", lambda: True)
    # because a calibration that timed TorchRec's sparse arch must be probed on the same module, or the drift ratio
    # would compare the kernel alone with the kernel plus TorchRec's glue (0.35-2 ms a call on the VM)
    monkeypatch.setattr(drift, "calibrated_module", lambda: "sparse_arch")
    probe = drift.tbe_probe(cal)
    assert probe is not None and probe.id == "tbe r262144 d32 p16 uniform b1024 t4 sparse_arch c1"
    # and where torchrec is missing now, the kernel alone is what can still run
    monkeypatch.setattr(drift, "calibrated_module", lambda: "tbe")
    probe = drift.tbe_probe(cal)
    assert probe is not None and probe.id == "tbe r262144 d32 p16 uniform b1024 t4 c1"


def test_an_unknown_case_is_one_line_listing_the_cases(cli, tmp_path: Path) -> None:  # noqa: ANN001
    from tests.conftest import assert_one_line_error

    # because the name is checked before the calibration is read, even a missing calibration file gives this error
    result = cli("validate", "-c", str(tmp_path / "missing.yaml"), "--case", "nosuchcase")
    assert_one_line_error(result, "--case", "unknown validation case 'nosuchcase'", "base", "ranks-2-wide", "--list-cases")
    # a near miss names the nearest case first
    assert_one_line_error(cli("validate", "--case", "ranks2"), "did you mean 'ranks-2'?")


def test_list_cases_prints_every_case_name(cli) -> None:  # noqa: ANN001
    # because the names come from validation_cases.yaml, the listing is that file's names in order (no calibration needed)
    result = cli("validate", "--list-cases")
    assert result.code == 0, result.err
    assert result.out.split() == v.case_names()
    assert json.loads(cli("validate", "--list-cases", "--json").out) == {"cases": v.case_names()}


def test_validate_without_a_calibration_is_one_line(cli) -> None:  # noqa: ANN001
    from tests.conftest import assert_one_line_error

    assert_one_line_error(cli("validate", "--case", "base"), "--calibration", "dlrmsim calibrate")


def test_a_group_that_runs_one_collective_at_a_time_serialises_torchrecs_input_distribution(quick_cal: Calibration) -> None:
    from dlrmsim.calibration.apply import calibrated_backend_overrides
    from dlrmsim.calibration.validate import load_cases, simulate_case

    assert calibrated_backend_overrides(quick_cal.model_copy(update={"collectives_at_once": 1.1}), "shm") == {
        "progress_engines": 1
    }
    assert calibrated_backend_overrides(quick_cal.model_copy(update={"collectives_at_once": 1.9}), "shm") == {
        "progress_engines": 2
    }
    assert calibrated_backend_overrides(quick_cal.model_copy(update={"collectives_at_once": 1.1}), "ccl") == {}
    case = load_cases(only=["ranks-2"])[0]
    free = quick_cal.model_copy(update={"collectives_at_once": None})
    serial = quick_cal.model_copy(update={"collectives_at_once": 1.0})
    t_free = simulate_case(case, free, "torchrec-fused").iteration_s
    t_serial = simulate_case(case, serial, "torchrec-fused").iteration_s
    alpha = quick_cal.collective("alltoall").alpha_us * 1e-6
    # because TorchRec posts the KeyedJaggedTensor's lengths and values together, a group that runs one
    # collective at a time pays the second one's fixed cost after the first: about one alltoall's alpha more
    assert t_serial - t_free == pytest.approx(alpha, rel=0.5), (t_serial, t_free, alpha)
    # and the project runner, which waits on each collective before posting the next, does not change
    assert simulate_case(case, serial).iteration_s == simulate_case(case, free).iteration_s
