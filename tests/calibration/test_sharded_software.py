"""TorchRec's sharded-module software per multi-rank step (benchmarks/sharded.py -> fit.fit_sharded_software -> the
"sharded" task of an implementation whose sharded_software is set)."""

from __future__ import annotations

import pytest

from dlrmsim.calibration.fit import FittedModel, fit_sharded_software, predict_s
from dlrmsim.calibration.schema import Calibration, Measurement, ShardedSoftwareFit
from dlrmsim.calibration.validate import load_cases, predict
from dlrmsim.training.simulate import TrainingConfig, load_inputs, load_training_topology
from dlrmsim.training.taskgraph import Task, build_iteration
from tests.calibration.conftest import SpecsByImplementation

FIT = ShardedSoftwareFit(ranks=2, per_step_us=2500.0, per_id_ns=4.0)


def _rows(per_step_us: float, per_id_ns: float) -> list[Measurement]:
    return [
        Measurement(
            benchmark="sharded",
            name=f"sharded software ids{ids}",
            cores=1,
            params={"ranks": 2, "ids": ids},
            time_s=per_step_us * 1e-6 + ids * per_id_ns * 1e-9,
            repeats=7,
        )
        for ids in (128, 32768)
    ]


def test_fit_recovers_the_per_step_and_per_id_costs() -> None:
    # Because rows built as per_step + ids x per_id are what the fit's two terms describe, it must give them back,
    # and the fitted model must predict each row; a run without torchrec has no rows and no fit.
    fit = fit_sharded_software(_rows(2500.0, 4.0))
    assert fit is not None and fit.ranks == 2
    assert fit.per_step_us == pytest.approx(2500.0, rel=1e-4) and fit.per_id_ns == pytest.approx(4.0, rel=1e-3)
    model = FittedModel(gemm=None, memory=None, sharded_software=fit)  # type: ignore[arg-type]
    for m in _rows(2500.0, 4.0):
        assert predict_s(m, model) == pytest.approx(m.time_s, rel=1e-6)
    # A size whose software came out lower than a fixed cost allows cannot make the per-id cost negative.
    flat = fit_sharded_software(_rows(2500.0, 0.0)[:1] + _rows(2000.0, 0.0)[1:])
    assert flat is not None and flat.per_id_ns == 0.0
    assert fit_sharded_software([]) is None


def _sharded_tasks(implementation: str, case_name: str) -> list[list[Task]]:
    case = next(c for c in load_cases() if c.name == case_name)
    cfg = TrainingConfig(
        topology="host", ranks=case.ranks, threads_per_rank=1, workload="small", backend="shm", implementation=implementation
    )  # one thread a rank: the case's ranks on any machine (the task graph does not depend on the cores)
    inputs = load_inputs(cfg, workload=case.workload, topology=load_training_topology(cfg))
    graph = build_iteration(inputs.workload, inputs.placement, inputs.settings)
    return [[s for s in prog if isinstance(s, Task) and s.kind == "sharded"] for prog in graph.programs]


def test_each_rank_of_a_sharded_step_runs_the_software_once_over_its_local_ids() -> None:
    # Because DMP splits each rank's local batch of ids by destination every step: the ranks-2 case (global batch
    # 1024, 4 tables, 16 lookups) gives each of its 2 ranks one task over 512 x 4 x 16 ids. One process has no
    # sharded modules to run, and the project runner none at all.
    per_rank = _sharded_tasks("torchrec-fused", "ranks-2")
    assert [len(t) for t in per_rank] == [1, 1]
    assert per_rank[0][0].rows == 512 * 4 * 16 and per_rank[0][0].flops == 0 and per_rank[0][0].ops == 0
    assert _sharded_tasks("torchrec-fused", "base") == [[]]
    assert _sharded_tasks("project-runner", "ranks-2") == [[], []]


def test_apply_charges_the_fit_only_to_an_implementation_with_sharded_software(
    quick_cal: Calibration, torchrec_and_runner_specs: SpecsByImplementation
) -> None:
    # Because only TorchRec's profile runs sharded modules: its calibrated spec pays the fit per step on the kind and
    # per id on its rows; the project runner's spec gets neither.
    torchrec, runner = torchrec_and_runner_specs(quick_cal.model_copy(update={"sharded_software": FIT}), 2)
    assert torchrec.fixed_time_s_by_kind["sharded"] == pytest.approx(2500e-6)
    assert torchrec.row_time_s_by_kind["sharded"] == pytest.approx(4e-9)
    assert "sharded" not in runner.fixed_time_s_by_kind and "sharded" not in runner.row_time_s_by_kind


def test_a_blocking_two_rank_step_is_longer_by_exactly_the_software(quick_cal: Calibration) -> None:
    # Because both ranks run the same software before the input distribution, which waits on every rank, and the
    # task moves no bytes: everything after it starts that much later on both ranks, so the step grows by
    # per_step + ids x per_id, with 512 x 4 x 16 ids a rank in the ranks-2 case.
    # No arrival skew: it would make the software's stretch before the exchange end later by a share of its length.
    case = next(c for c in load_cases() if c.name == "ranks-2")
    cal = quick_cal.model_copy(update={"arrival_skew": None})
    without, _ = predict(case, cal.model_copy(update={"sharded_software": None}), "torchrec-fused")
    with_fit, phases = predict(case, cal.model_copy(update={"sharded_software": FIT}), "torchrec-fused")
    expected = 2500e-6 + 512 * 4 * 16 * 4e-9
    assert with_fit - without == pytest.approx(expected, rel=1e-6)
    assert phases["sharded_software"] == pytest.approx(expected, rel=1e-6)


def test_a_benchmark_that_cannot_start_costs_the_fit_not_the_calibration(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Because the benchmark belongs to an optional extra: when its two ranks fail to start, the calibration goes on
    # without the fit (no rows, so fit_sharded_software gives None) and says why in one warning line.
    from dlrmsim.calibration.benchmarks import sharded
    from dlrmsim.calibration.benchmarks.timing import QUICK_POLICY
    from dlrmsim.errors import DlrmsimError

    def fail(*_args: object) -> None:
        raise DlrmsimError("TorchRec sharded-software benchmark failed: gloo could not bind")

    monkeypatch.setattr(sharded, "run_dmp_ranks", fail)
    assert sharded.sharded_software_task(QUICK_POLICY).run() == []
    err = capsys.readouterr().err
    assert "warning:" in err and "gloo could not bind" in err and "no sharded-software fit" in err


@pytest.mark.slow
def test_the_benchmark_measures_both_sizes_in_two_ranks() -> None:
    """Two spawned processes importing torch and torchrec (about 10 s on 2 cores, hence slow)."""
    pytest.importorskip("torchrec", reason="TorchRec not installed (make torchrec)")
    from dlrmsim.calibration.benchmarks.sharded import CONFIGS, sharded_software_task
    from dlrmsim.calibration.benchmarks.timing import TimingPolicy

    rows = sharded_software_task(TimingPolicy(warmup=1, repeats=3, min_sample_s=0.01)).run()
    # because each size reports its three parts, each a positive CPU time a step, and the software is the step's
    # excess over the other two (floored just above zero)
    assert [int(m.params["batch"]) for m in rows] == [b for b, _ in CONFIGS]
    for m in rows:
        parts = [float(m.params[k]) for k in ("step_cpu_s", "local_cpu_s", "exchanges_cpu_s")]
        assert min(parts) > 0
        # the process's CPU holds its compute thread's, round by round, so its median cannot be below it
        assert float(m.params["step_process_cpu_s"]) >= parts[0]
        assert m.time_s == pytest.approx(max(parts[0] - parts[1] - parts[2], 1e-7))
    assert fit_sharded_software(rows) is not None
