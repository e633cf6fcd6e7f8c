"""End-to-end validation: real DLRM iterations on this host against the calibrated simulator's prediction.

The simulator sees only the micro-benchmark calibration; the DLRM runs it is compared with are never
fitted to. Each case also gets a per-phase comparison, so a miss points at the part of the model that is
wrong (GEMMs, embedding ops, collectives, optimizer) rather than at a number to nudge.
"""

from __future__ import annotations

import csv
import datetime
import importlib.metadata
import json
import os
import platform
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, PositiveInt
from rich.progress import Progress

from dlrmsim import __version__, config
from dlrmsim.calibration import drift
from dlrmsim.calibration.apply import SHM_BACKEND, apply_calibration, calibrated_backend_overrides
from dlrmsim.calibration.dlrm_runner import run_dlrm_iteration
from dlrmsim.calibration.drift import DriftSample
from dlrmsim.calibration.ops import Ops, get_ops
from dlrmsim.calibration.schema import Calibration, load_calibration
from dlrmsim.calibration.targets.reference import measure_reference
from dlrmsim.calibration.targets.torchrec import measure_phases, measure_step, planner_estimate
from dlrmsim.calibration.targets.torchrec_dmp import measure_dmp_step
from dlrmsim.config import StrictModel
from dlrmsim.engine.frames import records_frame
from dlrmsim.errors import DlrmsimError, closest, parse_counts
from dlrmsim.host import read_host, usable_cores
from dlrmsim.output import err_console
from dlrmsim.topologies import load_topology
from dlrmsim.training.implementations import TASK_KINDS, load_implementation
from dlrmsim.training.simulate import TrainingConfig, TrainingResult, load_inputs, run_iteration
from dlrmsim.workloads.placement import Placement, PlacementSpec, Shard
from dlrmsim.workloads.schema import Workload

CASES_FILE = Path(__file__).resolve().parent / "validation_cases.yaml"


class CaseSpec(StrictModel):
    name: str
    batch: PositiveInt
    ranks: PositiveInt = 1
    threads: PositiveInt | None = None
    workload: dict[str, Any] = Field(default_factory=dict)


class CasesFile(StrictModel):
    base: dict[str, Any]
    cases: list[CaseSpec] = Field(min_length=1)


@dataclass(frozen=True)
class ValidationCase:
    """One configuration to run for real and to predict."""

    name: str
    workload: Workload
    batch: int
    ranks: int
    threads: int


@dataclass
class CaseResult:
    name: str
    measured_s: float
    predicted_s: float
    error: float  # (predicted - measured) / measured
    ranks: int
    threads: int
    batch: int
    measured_phases_s: dict[str, float] = field(default_factory=dict)
    predicted_phases_s: dict[str, float] = field(default_factory=dict)
    measured_rounds_s: list[float] = field(default_factory=list)  # each round's median iteration time
    kept_round: int = 0  # the round whose run is kept (the fastest), 0-based
    # The drift probe's worst ratio (drift.worst) just before the kept round; None without a probe. Far from 1,
    # the case ran on a host other than the calibrated one, and that much of its error is not the model's.
    drift_ratio: float | None = None
    # The same round's median ratio per probe family (drift.by_kind): which of the host's rates moved
    drift_by_kind: dict[str, float] = field(default_factory=dict)
    target: str = "project"  # the implementation measured: project runner, torchrec/fused, reference
    # TorchRec's own planner estimate of the same step (EmbeddingPerfEstimator; tables only) and its error
    planner_s: float | None = None
    # The sharding the implementation ran where it chose its own (TorchRec's plan), as placement_cell writes it;
    # "" where the prediction used dlrmsim's default placement
    placement: str = ""

    @classmethod
    def of(cls, case: ValidationCase, measured_s: float, predicted_s: float, **rest: Any) -> CaseResult:
        """The result of ``case``: its error is (predicted - measured) / measured."""
        error = (predicted_s - measured_s) / measured_s
        return cls(case.name, measured_s, predicted_s, error, case.ranks, case.threads, case.batch, **rest)

    @property
    def planner_error(self) -> float | None:
        return None if self.planner_s is None else (self.planner_s - self.measured_s) / self.measured_s

    @property
    def spread(self) -> float:
        """(slowest - fastest) / fastest round: how much the host's own noise moved this measurement."""
        r = self.measured_rounds_s
        return (max(r) - min(r)) / min(r) if len(r) > 1 else 0.0


@dataclass
class ValidationReport:
    cases: list[CaseResult]
    calibration: str
    backend: str
    # Per round, the calibration's probe benchmarks measured again just before it (drift.py); empty when the
    # validation runs another backend than the calibration measured.
    drift_rounds: list[list[DriftSample]] = field(default_factory=list)
    # The calibration's library versions (numpy, torch, BLAS), for the evidence file beside this run's own.
    libraries: dict[str, str] = field(default_factory=dict)

    @property
    def median_abs_error(self) -> float:
        return statistics.median(abs(c.error) for c in self.cases)

    @property
    def max_abs_error(self) -> float:
        return max(abs(c.error) for c in self.cases)

    def to_json(self) -> dict[str, Any]:
        return {
            "calibration": self.calibration,
            "backend": self.backend,
            "cases": [asdict(c) for c in self.cases],
            "median_abs_error": self.median_abs_error,
            "max_abs_error": self.max_abs_error,
            "host_drift": [[{**asdict(d), "ratio": d.ratio} for d in r] for r in self.drift_rounds],
            "host_drift_by_kind": drift.by_kind([d for r in self.drift_rounds for d in r]),
        }


def _cases_file(path: Path) -> CasesFile:
    return config.validate(CasesFile, config.read_yaml(path), path.name)


def case_names(path: Path = CASES_FILE) -> list[str]:
    """Names of the validation cases, in file order."""
    return [c.name for c in _cases_file(path).cases]


def check_case_names(only: list[str] | None, path: Path = CASES_FILE) -> None:
    """One-line error naming every case for the first name in ``only`` that is not a case."""
    names = case_names(path)
    for name in only or []:
        if name not in names:
            guess = closest(name, names)
            hint = f"did you mean '{guess}'? " if guess else ""
            raise DlrmsimError(
                f"unknown validation case '{name}'",
                field="--case",
                fix=f"{hint}cases: {', '.join(names)} (dlrmsim validate --list-cases)",
            )


def load_cases(
    path: Path = CASES_FILE, only: list[str] | None = None, threads: list[int] | None = None, cores: int | None = None
) -> list[ValidationCase]:
    """Validation cases from YAML: ``base`` workload fields, each case's overrides on top; an unknown name in
    ``only`` is a one-line error listing the cases.

    ``threads`` sweeps the thread count: each case runs once per count (named ``<case>@t<n>``), in place of its
    own count. A case without a count of its own splits ``cores`` (default: this host's usable cores) over its
    ranks. Cases are built whatever this host's cores (a kept result from a larger host can be predicted
    again here); :func:`cases_for_host` leaves out or refuses one that would oversubscribe it."""
    check_case_names(only, path)
    spec = _cases_file(path)
    cores = cores or usable_cores()
    out = []
    for i, c in enumerate(spec.cases):
        if only and c.name not in only:
            continue
        data = {**spec.base, **c.workload, "name": c.name}
        w = config.validate(Workload, data, f"{path.name}: cases.{i}")
        if not threads:
            out.append(ValidationCase(c.name, w, c.batch, c.ranks, c.threads or max(1, cores // c.ranks)))
            continue
        out += [ValidationCase(f"{c.name}@t{n}", w, c.batch, c.ranks, n) for n in threads]
    return out


def check_fits_host(cases: list[ValidationCase], cores: int | None = None) -> None:
    """A one-line error for the first case whose ranks x threads exceed this host's usable cores: oversubscribed
    threads time the OS scheduler's sharing of cores, which the model does not describe."""
    cores = cores or usable_cores()
    for c in cases:
        if c.ranks * c.threads > cores:
            fix = f"use counts up to {cores // c.ranks} for this case, or " if cores >= c.ranks else ""
            raise DlrmsimError(
                f"case {c.name}: {c.ranks} rank(s) x {c.threads} threads need {c.ranks * c.threads} cores, this host has {cores}",
                field="--case" if not fix else "--threads",
                fix=f"{fix}leave it out with --case",
            )


def cases_for_host(
    only: list[str] | None = None, threads: list[int] | None = None, cores: int | None = None
) -> list[ValidationCase]:
    """The cases to run on this host (``cores``: its usable cores by default). Cases named with ``only`` and thread
    counts given with ``threads`` must all fit (:func:`check_fits_host`): the user asked for exactly those. Of the
    default set, a case needing more cores than the host has (two ranks on a one-core machine) is left out with a
    warning naming it, so that ``dlrmsim validate`` runs what fits anywhere; nothing left is a one-line error."""
    cores = cores or usable_cores()
    cases = load_cases(only=only, threads=threads, cores=cores)
    if only or threads:
        check_fits_host(cases, cores)
        return cases
    fits = [c for c in cases if c.ranks * c.threads <= cores]
    left = [c.name for c in cases if c.ranks * c.threads > cores]
    if not fits:
        check_fits_host(cases, cores)  # raises for the first
    if left:
        err_console.print(
            f"[bold yellow]warning:[/] left out on this {cores}-core host (each needs more cores): {', '.join(left)}",
            highlight=False,
        )
    return fits


def base_case_name(name: str) -> str:
    """A swept case's name without its thread count (``base@t8`` -> ``base``); other names as they are."""
    return name.partition("@t")[0]


def parse_thread_counts(text: str | None) -> list[int] | None:
    """``--threads``: a comma-separated list of positive thread counts (``1,2,4``); None when not given."""
    return parse_counts(text, "--threads")


# Simulator task names -> the runner's phase names (see dlrm_runner.PHASES).
def sim_phase(name: str, category: str) -> str:
    if category in ("allreduce", "alltoall") or name.startswith(("allreduce", "a2a", "scatter")):
        return "allreduce" if "allreduce" in name or category == "allreduce" else "alltoall"
    if name.startswith("bot"):
        return "bottom_mlp_fwd" if name.endswith(".fwd") else "bottom_mlp_bwd"
    if name.startswith("top"):
        return "top_mlp_fwd" if name.endswith(".fwd") else "top_mlp_bwd"
    if name.startswith("interaction"):
        return "interaction_fwd" if name.endswith(".fwd") else "interaction_bwd"
    if name.startswith("emb"):
        if name.endswith(".fwd"):
            return "embedding_fwd"
        return "embedding_update" if ".update" in name else "embedding_bwd"
    if name == "optimizer":
        return "mlp_update"
    if name.startswith("sharded"):
        return "sharded_software"
    return "other"


def simulate_case(
    case: ValidationCase, cal: Calibration, implementation: str | None = None, placement: Placement | None = None
) -> TrainingResult:
    """One iteration of ``case`` simulated on the host model calibrated by ``cal``, with every task's record.

    ``implementation``: the profile (training.implementations) of the implementation the case is compared with,
    e.g. torchrec-fused: fbgemm's table-batched embedding applies the sparse update inside its backward, and its
    forward and backward run on one thread; None is the project's runner (every op on all the rank's threads).
    ``placement``: the sharding the implementation ran (TorchRec's plan), instead of dlrmsim's table-wise default.
    """
    impl = load_implementation(implementation) if implementation else None
    topo = load_topology("host", {"compute.host-cpu.cores": case.ranks * case.threads}, ranks=case.ranks)
    topo = apply_calibration(topo, cal, case.workload.index_distribution.kind, impl)
    cfg = TrainingConfig(
        topology="host",
        workload=case.workload.name,
        ranks=case.ranks,
        scaling="strong",
        backend=SHM_BACKEND,
        blocking=True,  # the runner waits on every collective from its compute thread
        implementation=implementation,
        workload_overrides={"minibatch.strong_global": case.batch},
        backend_overrides=calibrated_backend_overrides(cal, SHM_BACKEND),
    )
    w = case.workload.model_copy(update={"minibatch": case.workload.minibatch.model_copy(update={"strong_global": case.batch})})
    return run_iteration(load_inputs(cfg, workload=w, topology=topo, placement=placement), cfg)


def predict(
    case: ValidationCase, cal: Calibration, implementation: str | None = None, placement: Placement | None = None
) -> tuple[float, dict[str, float]]:
    """Simulated iteration time (s) and per-phase times of ``case`` on the host model calibrated by ``cal``
    (:func:`simulate_case`)."""
    res = simulate_case(case, cal, implementation, placement)
    df = records_frame(res.records)
    phases: dict[str, float] = {}
    if not df.empty:
        # Every task kind a rank's program has (implementations.TASK_KINDS), and the contended updates' serial part,
        # which the engine records as a kind of its own.
        kinds = TASK_KINDS | {"conflicts"}
        tasks = df[df["kind"].isin(kinds) & df["rank"].eq(0)]
        for (name, cat), part in tasks.groupby(["name", "category"]):
            ph = sim_phase(str(name), str(cat))
            phases[ph] = phases.get(ph, 0.0) + float((part["end"] - part["start"]).sum())
    # As the runner reports a step (dlrm_runner.iteration_phases): the wait for the last rank to arrive is its own
    # phase, taken out of the collective's. The runner's phase is the first rank's wait for the last (per
    # collective, the latest arrival less the earliest); the simulator's delay is the last rank's lateness behind a
    # typical one. The ranks' deviations being symmetric about their mean, the first arrives as early as the last
    # arrives late: the phase is twice the collectives' delays. (The iteration's end meets the runner's barrier
    # before the next step, not a collective: in the iteration, not in this phase.)
    late = res.arrival_wait_s
    for cid, t in res.wait_per_collective_s.items():
        ph = "allreduce" if cid.startswith("allreduce") else "alltoall"
        phases[ph] = phases.get(ph, 0.0) + t - min(late.get(cid, 0.0), t)
    if late:
        phases["arrival_wait"] = 2.0 * sum(t for cid, t in late.items() if cid in res.wait_per_collective_s)
    return res.iteration_s, phases


def measure(case: ValidationCase, backend: str, iterations: int, warmup: int) -> tuple[float, dict[str, float]]:
    m = run_dlrm_iteration(
        case.workload, case.batch, ranks=case.ranks, threads=case.threads, backend=backend, iterations=iterations, warmup=warmup
    )
    phases = dict(m.phases_s)
    merged = {"alltoall": phases.pop("alltoall_fwd", 0.0) + phases.pop("alltoall_bwd", 0.0)}
    merged.update(phases)
    return m.iteration_s, merged


TARGETS = ("project", "torchrec", "reference")
# The implementation profile (training/presets/implementations) each target's step is predicted with; absent: none.
TARGET_IMPLEMENTATIONS = {"project": "project-runner", "torchrec": "torchrec-fused", "reference": "reference-dlrm"}


@dataclass(frozen=True)
class TargetRun:
    """One case run by an implementation this project did not write."""

    samples_s: list[float]  # per-step seconds, one per sample
    planner_s: float | None = None  # TorchRec's planner estimate of the same step
    placement: Placement | None = None  # the sharding it ran (TorchRec's plan), simulated as is


def measure_target(case: ValidationCase, against: str, reference: Path | None, samples: int) -> TargetRun:
    """``case`` run by TorchRec (one process, or DistributedModelParallel over ``case.ranks`` processes with the
    plan TorchRec's planner made) or by the reference DLRM."""
    if against == "torchrec":
        if case.ranks > 1:
            dmp = measure_dmp_step(case.workload, case.batch, case.ranks, case.threads, samples=samples)
            planner = planner_estimate(case.workload, case.batch // case.ranks, world_size=case.ranks)
            return TargetRun(list(dmp.step.samples_s), planner.step_s, dmp.placement)
        m = measure_step(case.workload, case.batch, case.threads, "fused", samples=samples)
        return TargetRun(list(m.samples_s), planner_estimate(case.workload, case.batch).step_s)
    if reference is None:
        raise DlrmsimError(
            "--against reference needs --reference PATH",
            field="--reference",
            fix="clone https://github.com/facebookresearch/dlrm into a temporary directory and pass its path",
        )
    m = measure_reference(reference, case.workload, case.batch, ranks=case.ranks, threads=case.threads, iterations=10 * samples)
    return TargetRun(list(m.samples_s))


def measure_target_phases(case: ValidationCase, against: str) -> dict[str, float]:
    """Seconds per step of each of dlrmsim's phases in another implementation's step: TorchRec's, single-process
    (hooks on its DLRM's parts, targets.torchrec.measure_phases); {} where none is measured
    (DistributedModelParallel's ranks run in processes of their own, the reference DLRM prints step times only)."""
    if against == "torchrec" and case.ranks == 1:
        return measure_phases(case.workload, case.batch, case.threads)
    return {}


def run_validation(
    calibration_path: Path,
    backend: str | None = None,
    only: list[str] | None = None,
    iterations: int = 5,
    warmup: int = 2,
    progress: bool = True,
    rounds: int = 3,
    against: str = "project",
    reference: Path | None = None,
    threads: list[int] | None = None,
) -> ValidationReport:
    """Run every case for real and in the simulator; the report holds both and the relative errors.

    Each case is measured in ``rounds`` rounds, round-robin over the cases (each round starting further down the
    list), and the fastest round's median
    is kept (with its phases): other jobs on a shared host only ever slow a run down, and a slow spell lasting
    seconds would otherwise land whole on one case. Every round's median stays in the report. Before each
    round a few of the calibration's benchmarks run again (drift.py), so the report says whether the host
    was still the calibrated one. :func:`run_validations` measures several targets in turn.
    """
    (report,) = run_validations(
        calibration_path, [against], backend, only, iterations, warmup, progress, rounds, reference, threads
    )
    return report


@dataclass
class _TargetPlan:
    """One target's part of a validation: its cases, one round of one case, and its report from the rounds."""

    target: str
    cases: list[ValidationCase]
    run: Callable[[ValidationCase], Any]
    report: Callable[[dict[str, list[Any]], list[list[DriftSample]]], ValidationReport]
    probe_ok: bool = True  # False: the runs use other kernels than the calibration's, so no drift probe


def run_validations(
    calibration_path: Path,
    targets: Sequence[str],
    backend: str | None = None,
    only: list[str] | None = None,
    iterations: int = 5,
    warmup: int = 2,
    progress: bool = True,
    rounds: int = 3,
    reference: Path | None = None,
    threads: list[int] | None = None,
) -> list[ValidationReport]:
    """:func:`run_validation` for each of ``targets``, measured in turn: in every round each case runs under every
    target one after the other (in reverse order every other round), so that a state of the host lasting minutes
    lands on all of them. Measured one run apart, TorchRec's wide-mlp step on the 2-vCPU Intel VM came out 20-30 %
    slower than the runner's; in turn, in one process, the two took the same time (bench_targets_interleaved).
    One report per target, in the order given."""
    cal = load_calibration(calibration_path)  # validate (and warn about another host) before any run
    for against in targets:
        if against not in TARGETS:
            raise DlrmsimError(
                f"unknown validation target '{against}'", field="--against", fix=f"use one of: {', '.join(TARGETS)}"
            )
    if len(set(targets)) != len(targets):
        raise DlrmsimError("a validation target is named twice", field="--against", fix="name each target once")
    cases = cases_for_host(only, threads)
    plans = [
        _project_plan(cal, calibration_path, backend, cases, iterations, warmup, progress)
        if against == "project"
        else _target_plan(cal, calibration_path, against, reference, cases)
        for against in targets
    ]
    # The probe re-runs the calibration's own kernels, so only when every target's runs are the calibration's kind.
    probe = _probe_ops(cal.host.backend) if all(p.probe_ok for p in plans) else None
    counts = sorted({c.threads for p in plans for c in p.cases})  # the probe also runs at the cases' counts
    tbe = any(p.target == "torchrec" for p in plans)
    by_name = [{c.name: c for c in p.cases} for p in plans]
    names = list(dict.fromkeys(name for cases in by_name for name in cases))
    runs: list[dict[str, list[Any]]] = [{name: [] for name in cases} for cases in by_name]
    drift_rounds: list[list[DriftSample]] = []
    with Progress(console=err_console, transient=True, disable=not progress) as bar:
        task = bar.add_task("validating", total=sum(len(p.cases) for p in plans) * rounds)
        for r in range(rounds):
            if probe is not None:
                bar.update(task, description=f"host drift probe (round {r + 1}/{rounds})")
                drift_rounds.append(drift.measure_drift(cal, probe, counts, tbe=tbe))
            order = list(range(len(plans))) if r % 2 == 0 else list(range(len(plans)))[::-1]
            # Each round starts at another case (a share of the list further on), so no case always runs first,
            # right after the probe: whatever a place in the order costs then lands on one round of a case, as a
            # slow spell does, and the fastest round escapes it. (The base case, first in every round, was both
            # targets' worst case at 01:59 on 2026-11-27, 1.5-1.9x slow in all three rounds; a check in one process
            # found 6-17 % for running right after the probe.)
            start = r * len(names) // rounds
            for name in names[start:] + names[:start]:
                for i in order:
                    case = by_name[i].get(name)
                    if case is None:  # a case this target does not run (TorchRec's needs bottom MLP width = dim)
                        continue
                    bar.update(task, description=f"{name}: {plans[i].target} (round {r + 1}/{rounds})")
                    runs[i][name].append(plans[i].run(case))
                    bar.advance(task)
    return [p.report(run, drift_rounds) for p, run in zip(plans, runs, strict=True)]


def _project_plan(
    cal: Calibration, path: Path, backend: str | None, cases: list[ValidationCase], iterations: int, warmup: int, progress: bool
) -> _TargetPlan:
    """The project's runner on ``cases``: each round a median of ``iterations`` steps; the fastest round kept with
    its phases."""
    # The fitted rates describe the calibration's kernels; compare against runs of the same kernels.
    backend = backend or cal.host.backend
    with Progress(console=err_console, transient=True, disable=not progress) as bar:
        task = bar.add_task("simulating", total=len(cases))
        predictions = {}
        for case in cases:
            bar.update(task, description=f"{case.name}: simulating")
            predictions[case.name] = predict(case, cal, TARGET_IMPLEMENTATIONS["project"])
            bar.advance(task)

    def report(runs: dict[str, list[tuple[float, dict[str, float]]]], drift_rounds: list[list[DriftSample]]) -> ValidationReport:
        results = []
        for case in cases:
            kept = min(range(len(runs[case.name])), key=lambda r: runs[case.name][r][0])
            measured, mphases = runs[case.name][kept]
            predicted, pphases = predictions[case.name]
            results.append(
                CaseResult.of(
                    case,
                    measured,
                    predicted,
                    measured_phases_s=mphases,
                    predicted_phases_s=pphases,
                    measured_rounds_s=[t for t, _ in runs[case.name]],
                    kept_round=kept,
                    **_kept_drift(drift_rounds, kept),
                )
            )
        return ValidationReport(results, str(path), backend, drift_rounds, cal.host.libraries)

    return _TargetPlan(
        "project", cases, lambda case: measure(case, backend, iterations, warmup), report, backend == cal.host.backend
    )


def warn_if_uncalibrated_kernel(cal: Calibration, source: str, against: str) -> bool:
    """Warn on stderr when ``against``'s implementation runs fbgemm's table-batched embedding and the calibration
    measured none (fbgemm was not installed when it ran): its embedding tasks then take the framework's
    EmbeddingBag fits, a different kernel, so the predictions stand on a substitute. True when it warned."""
    implementation = load_implementation(TARGET_IMPLEMENTATIONS.get(against, TARGET_IMPLEMENTATIONS["project"]))
    if implementation.embedding_kernel != "tbe" or cal.tbe:
        return False
    err_console.print(
        f"[bold yellow]warning:[/] {source}: calibration has no fbgemm TBE measurements (tbe: []), so {against}'s fused "
        "embedding is predicted from the EmbeddingBag fits (fix: install the torchrec extra, then run dlrmsim calibrate)",
        highlight=False,
        soft_wrap=True,
    )
    return True


SAMPLES_PER_ROUND = 5  # samples of whole steps per case and round, each of at least 50 ms (targets/measurement.py)


def _target_plan(
    cal: Calibration,
    path: Path,
    against: str,
    reference: Path | None,
    cases: list[ValidationCase],
) -> _TargetPlan:
    """Each case run by another implementation against the prediction: each round a median of samples of whole
    steps; the fastest round is kept, as for the project's runner (other jobs on a shared host only slow a run
    down, and a slow spell then lands on one round of every case instead of on every round of one case)."""
    warn_if_uncalibrated_kernel(cal, str(path), against)
    if against == "torchrec":
        # TorchRec's DLRM feeds the bottom MLP's output into the dot interaction with the embeddings
        cases = [c for c in cases if c.workload.bottom_mlp[-1] == c.workload.embedding_dim]

    def run(case: ValidationCase) -> tuple[TargetRun, dict[str, float]]:
        # Where the step time goes, by dlrmsim's phases: a pass of its own right after the timed samples (its hooks
        # stay out of the step times), so the kept round's phases share its host's state.
        return measure_target(case, against, reference, SAMPLES_PER_ROUND), measure_target_phases(case, against)

    def report(
        runs: dict[str, list[tuple[TargetRun, dict[str, float]]]], drift_rounds: list[list[DriftSample]]
    ) -> ValidationReport:
        results = []
        for case in cases:
            medians = [statistics.median(r.samples_s) for r, _ in runs[case.name]]
            kept = min(range(len(medians)), key=lambda i: medians[i])
            kept_run, kept_phases = runs[case.name][kept]
            # The implementation's profile: TorchRec's fused embedding updates rows inside backward (no gradient
            # rows written and read back), and fbgemm's CPU kernels run on one thread
            # (presets/implementations/torchrec-fused.yaml).
            predicted, pphases = predict(
                case, cal, implementation=TARGET_IMPLEMENTATIONS.get(against), placement=kept_run.placement
            )
            results.append(
                CaseResult.of(
                    case,
                    medians[kept],
                    predicted,
                    predicted_phases_s=pphases,
                    measured_phases_s=kept_phases,
                    measured_rounds_s=kept_run.samples_s,
                    kept_round=kept,
                    target=against,
                    planner_s=kept_run.planner_s,
                    placement=placement_cell(kept_run.placement),
                    **_kept_drift(drift_rounds, kept),
                )
            )
        return ValidationReport(results, str(path), against, drift_rounds, cal.host.libraries)

    return _TargetPlan(against, cases, run, report)


def _kept_drift(drift_rounds: list[list[DriftSample]], kept: int) -> dict[str, Any]:
    """The drift fields of a CaseResult for the round a case kept: the worst probe ratio (drift.worst) and the
    median ratio per probe family (drift.by_kind); None and {} without a probe."""
    if not drift_rounds:
        return {"drift_ratio": None, "drift_by_kind": {}}
    worst = drift.worst(drift_rounds[kept])
    return {"drift_ratio": worst.ratio if worst is not None else None, "drift_by_kind": drift.by_kind(drift_rounds[kept])}


def _probe_ops(backend: str) -> Ops | None:
    """The calibration backend's ops for the drift probe, or None where that backend is not installed here."""
    try:
        return get_ops(backend)
    except DlrmsimError:
        return None


RESULT_COLUMNS = (
    "date",
    "host",
    "cpu_model",
    "cores",
    "load_average",
    "versions",
    "calibration",
    "target",
    "case",
    "ranks",
    "threads",
    "batch",
    "measured_median_s",
    "measured_spread",
    "measured_samples_s",
    "predicted_s",
    "error",
    "planner_s",
    "planner_error",
    "host_drift",
    "measured_phases_s",
    "predicted_phases_s",
    "host_drift_by_kind",
    "placement",
)


def placement_cell(p: Placement | None) -> str:
    """The sharding a case ran (TorchRec's plan) as one CSV cell, compact JSON: the strategy, the replication
    threshold, the ranks, each shard as [table, rank, rows, columns, row offset, column offset], the replicated and
    the sharded tables; empty when there is none. :func:`parse_placement_cell` reads it back."""
    if p is None:
        return ""
    doc = {
        "strategy": p.spec.strategy,
        "replicate_below_rows": p.spec.replicate_below_rows,
        "ranks": p.ranks,
        "shards": [[s.table, s.rank, s.rows, s.columns, s.row_offset, s.col_offset] for s in p.shards],
        "replicated": list(p.replicated_tables),
        "sharded": list(p.sharded_tables),
    }
    return json.dumps(doc, separators=(",", ":"))


def parse_placement_cell(text: str | None, source: str = "placement") -> Placement | None:
    """The placement of a :func:`placement_cell`; None for an empty cell (or a file from before the column)."""
    if not text:
        return None
    try:
        d = json.loads(text)
        spec = PlacementSpec(strategy=d["strategy"], replicate_below_rows=d["replicate_below_rows"])
        shards = tuple(Shard(*(int(x) for x in s)) for s in d["shards"])
        return Placement(spec, int(d["ranks"]), shards, tuple(d["replicated"]), tuple(d["sharded"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise DlrmsimError(
            f"{source}: the placement cell is not one validate wrote ({exc})", field="placement", fix="keep the file as written"
        ) from None


def phases_cell(phases: dict[str, float]) -> str:
    """A phase dict (or any name -> number dict, such as the drift per probe family) as one CSV cell,
    ``name=value;...`` in name order (empty when there is none)."""
    return ";".join(f"{k}={v:.6g}" for k, v in sorted(phases.items()))


def parse_phases_cell(cell: str | None) -> dict[str, float]:
    """The inverse of :func:`phases_cell`; an absent column (older files) or an empty cell is no phases."""
    out = {}
    for item in (cell or "").split(";"):
        name, _, value = item.partition("=")
        if name and value:
            out[name] = float(value)
    return out


def kept_target(column: str) -> str:
    """The validation target a results CSV's ``target`` column names: the project runner's rows name their
    backend (torch, numpy) instead."""
    return column if column in TARGETS else "project"


def read_results_rows(path: Path, required: Sequence[str], field: str, strict: bool = True) -> list[dict[str, str]]:
    """The rows of a kept results CSV (:func:`write_results_csv`) that has every ``required`` column. A file that
    cannot be read is a one-line error naming ``field``; so is one that is not such a CSV when ``strict``
    (otherwise no rows: a results folder keeps other benchmarks' CSVs too)."""
    try:
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as e:
        raise DlrmsimError(f"{path}: cannot read file ({e.strerror})", field=field, fix="check the path") from None
    missing = [c for c in required if rows and c not in rows[0]]
    if rows and not missing:
        return rows
    if not strict:
        return []
    raise DlrmsimError(
        f"{path}: not a validation results CSV" + (f" (no column {missing[0]})" if missing else " (no rows)"),
        field=field,
        fix="pass a file that `dlrmsim validate` wrote under validation/results/",
    )


def repredict(
    results_csv: Path, calibration_path: Path, warn_other_host: bool = True, calibration: Calibration | None = None
) -> ValidationReport:
    """The cases of a kept results CSV (:func:`write_results_csv`) predicted again with ``calibration_path``, their
    measured medians and samples as kept: a model or fit change is checked against evidence from any host (a
    16-core one's, here on a laptop) without running anything. Each row's case is rebuilt from its name (``base``
    or ``base@t8``) with the row's ranks, threads and batch; the implementation is the row's target, the placement
    the row's (TorchRec's own plan, kept since 2026-11-26). A multi-rank TorchRec row of an older file, which does
    not keep its plan, is refused, not guessed. ``warn_other_host``: warn when the calibration is another host's
    (off where kept runs of several hosts are predicted again on purpose, dlrmsim evidence --repredict).
    ``calibration``: the calibration to predict with, already loaded (a refit of the file's measurements), in place
    of the file's."""
    cal = calibration if calibration is not None else load_calibration(calibration_path, warn_other_host)
    rows = read_results_rows(results_csv, ("case", "ranks", "threads", "batch", "target", "measured_median_s"), "--repredict")
    results = []
    target = rows[0]["target"]
    warn_if_uncalibrated_kernel(cal, str(calibration_path), kept_target(target))
    # every base case the rows name, read from the cases file once (an unknown one is a one-line error)
    bases = {c.name: c for c in load_cases(only=sorted({base_case_name(row["case"]) for row in rows}))}
    for row in rows:
        name, ranks, threads = row["case"], int(row["ranks"]), int(row["threads"])
        against = kept_target(row["target"])
        placement = parse_placement_cell(row.get("placement"), f"{results_csv}: case {name}")
        if against == "torchrec" and ranks > 1 and placement is None:
            raise DlrmsimError(
                f"{results_csv}: case {name} ran TorchRec's sharding plan on {ranks} ranks, which the CSV does not keep",
                field="--repredict",
                fix="validate it again with --against torchrec",
            )
        case = ValidationCase(name, bases[base_case_name(name)].workload, int(row["batch"]), ranks, threads)
        predicted, pphases = predict(case, cal, TARGET_IMPLEMENTATIONS[against], placement)
        samples = [float(x) for x in row.get("measured_samples_s", "").split(";") if x]
        results.append(
            CaseResult.of(
                case,
                float(row["measured_median_s"]),
                predicted,
                measured_phases_s=parse_phases_cell(row.get("measured_phases_s")),
                predicted_phases_s=pphases,
                measured_rounds_s=samples,
                target=against,
                drift_ratio=float(row["host_drift"]) if row.get("host_drift") else None,
                drift_by_kind=parse_phases_cell(row.get("host_drift_by_kind")),
                placement=row.get("placement") or "",
            )
        )
    return ValidationReport(results, str(calibration_path), target, [], cal.host.libraries)


def write_results_csv(report: ValidationReport, directory: Path) -> Path:
    """Keep a validation's evidence: one CSV per run under ``directory`` (host, date, library versions, each
    case's measured samples, median and spread, the prediction and its error), so results are versioned."""
    host = read_host()
    versions = {"dlrmsim": __version__, "python": platform.python_version(), **report.libraries}
    for dist in ("torch", "torchrec", "fbgemm-gpu-cpu"):  # installed versions, read without importing the packages
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    directory.mkdir(parents=True, exist_ok=True)
    name = f"{now:%Y%m%dT%H%M%S}-{platform.node() or 'host'}-{report.backend}.csv"
    path = directory / name
    load = os.getloadavg()[0]
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(RESULT_COLUMNS)
        for c in report.cases:
            runs = c.measured_rounds_s or [c.measured_s]
            out.writerow(
                [
                    now.isoformat(),
                    platform.node(),
                    host.model,
                    host.cores,
                    f"{load:.2f}",
                    ";".join(f"{k}={v}" for k, v in sorted(versions.items())),
                    report.calibration,
                    report.backend,
                    c.name,
                    c.ranks,
                    c.threads,
                    c.batch,
                    f"{c.measured_s:.6g}",
                    f"{c.spread:.4f}",
                    ";".join(f"{t:.6g}" for t in runs),
                    f"{c.predicted_s:.6g}",
                    f"{c.error:.4f}",
                    "" if c.planner_s is None else f"{c.planner_s:.6g}",
                    "" if c.planner_error is None else f"{c.planner_error:.4f}",
                    "" if c.drift_ratio is None else f"{c.drift_ratio:.3f}",
                    phases_cell(c.measured_phases_s),
                    phases_cell(c.predicted_phases_s),
                    phases_cell(c.drift_by_kind),
                    c.placement,
                ]
            )
    return path
