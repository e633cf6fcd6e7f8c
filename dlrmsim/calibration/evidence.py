"""Kept validations pooled: is a case's error the model's or the host's?

One validation run is one draw. On a host whose speed moves between a calibration and the run after it (this
project's 2-vCPU VM ran the same micro-benchmark 1.5-2x apart minutes apart), one run's errors mix the model's bias
with how fast the host ran that hour. The runs ``dlrmsim validate`` keeps under ``validation/results/``
(:func:`dlrmsim.calibration.validate.write_results_csv`), each after its own calibration, are repeated draws of the
same comparison. Pooled, an error that comes back run after run with one sign is the model's; one that moves by
more than its size between runs is the host's.

This module reads those CSVs and summarises, per host and target:
- each case over the runs: the median error and its range;
- each run: its median and largest error, whether it meets the validation goal, and the floor the host put under
  its largest error where two of its cases ran one configuration (:mod:`dlrmsim.calibration.replicates`);
- each phase of the single-process cases: the median of measured minus predicted;
- the goal checked on the per-case medians.

Each CSV keeps the predictions of the model that ran it, and the model changes between runs. :func:`repredicted`
predicts every kept run again with the current model and the calibration the run names (measurements as kept), so
the pooled figures are one model's.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dlrmsim.calibration.calibrate import refitted
from dlrmsim.calibration.replicates import Measured, PerfectModel, perfect_model, run_floor
from dlrmsim.calibration.schema import Calibration, load_calibration
from dlrmsim.calibration.validate import kept_target, parse_phases_cell, read_results_rows, repredict
from dlrmsim.errors import DlrmsimError

# The validation goal of a run (issue "Host fidelity against DLRM implementations nobody here wrote"): median
# |error| over its cases at most 8 %, the largest at most 20 %.
GOAL_MEDIAN = 0.08
GOAL_MAX = 0.20
# Columns a validation results CSV has had since errors were kept (older and other benchmarks' CSVs lack some).
REQUIRED = ("date", "host", "target", "case", "ranks", "threads", "batch", "measured_median_s", "predicted_s", "error")
# Phases a one-rank run reports but does not time as work: the waits on collectives it never makes.
UNTIMED_PHASES = frozenset({"arrival_wait", "allreduce", "alltoall"})


@dataclass(frozen=True)
class Row:
    """One case of one kept run. ``error`` is (predicted - measured) / measured."""

    run: str  # the CSV's file name
    date: str  # ISO time of the run
    host: str  # the machine, as :func:`machine_label` names it: runs on different machines never pool
    target: str  # project, torchrec or reference
    case: str
    ranks: int
    threads: int
    batch: int
    measured_s: float
    predicted_s: float
    error: float
    host_drift: float | None
    measured_phases_s: dict[str, float]
    predicted_phases_s: dict[str, float]
    source: str = ""  # the CSV's path as read
    calibration: str = ""  # the calibration the run was predicted with, as its CSV names it
    placement: str = ""  # the sharding the implementation chose itself (TorchRec's plan), as the CSV keeps it

    @property
    def group(self) -> tuple[str, str]:
        return (self.host, self.target)


@dataclass(frozen=True)
class CaseSummary:
    """One case's errors over the runs that measured it (fractions, in run order)."""

    host: str
    target: str
    case: str
    errors: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.errors)

    @property
    def same_sign(self) -> bool:
        """Every run erred the same way (a bias the host's noise does not explain away)."""
        return all(e > 0 for e in self.errors) or all(e < 0 for e in self.errors)


@dataclass(frozen=True)
class RunSummary:
    """One kept run: its cases' median and largest |error| (fractions) and the worst host-drift ratio it saw."""

    run: str
    host: str
    target: str
    cases: int
    median_abs: float
    max_abs: float
    host_drift: float | None
    # The largest replicate floor of the run (replicates.py): where two of its cases ran one configuration, the
    # largest |error| no prediction can go below on them; None where none did.
    floor: float | None = None

    @property
    def meets_goal(self) -> bool:
        return self.median_abs <= GOAL_MEDIAN and self.max_abs <= GOAL_MAX


@dataclass(frozen=True)
class PhaseSummary:
    """One phase over the single-process rows that timed it: the median of measured minus predicted (s) and of
    the phase's error (predicted - measured) / measured."""

    host: str
    target: str
    phase: str
    rows: int
    median_diff_s: float
    median_error: float


@dataclass(frozen=True)
class ReplicateSummary:
    """The replicate floors of a group's runs (replicates.py): how many runs had one, their median and largest, how
    many exceeded half the goal's maximum, and a model with no error scored on runs drawn from them."""

    runs: int
    floor_median: float
    floor_max: float
    above_half_goal: int
    perfect: PerfectModel


@dataclass(frozen=True)
class Pooled:
    """Everything :func:`pool` found, for one or more (host, target) groups."""

    cases: list[CaseSummary]
    runs: list[RunSummary]
    phases: list[PhaseSummary]

    def groups(self) -> list[tuple[str, str]]:
        return sorted({(c.host, c.target) for c in self.cases})

    def of(self, host: str, target: str) -> Pooled:
        """The part of one (host, target) group."""

        def mine(xs: list) -> list:  # cases, runs and phases all carry host and target
            return [x for x in xs if (x.host, x.target) == (host, target)]

        return Pooled(mine(self.cases), mine(self.runs), mine(self.phases))

    def replicates(self) -> ReplicateSummary | None:
        """The runs' replicate floors pooled (of one group), and what a model with no error would score on runs
        that noisy; None where no run measured one configuration twice."""
        floors = sorted(r.floor for r in self.runs if r.floor is not None)
        if not floors:
            return None
        cases = round(statistics.median(r.cases for r in self.runs))
        return ReplicateSummary(
            len(floors),
            statistics.median(floors),
            floors[-1],
            sum(f > GOAL_MAX / 2 for f in floors),
            perfect_model(floors, cases, GOAL_MEDIAN, GOAL_MAX),
        )

    def verdict(self) -> tuple[float, float]:
        """(median, largest) |per-case median error|: the goal's statistics on the pooled runs (of one group)."""
        meds = [abs(c.median) for c in self.cases]
        return statistics.median(meds), max(meds)


def machine_label(row: dict[str, str]) -> str:
    """The machine a kept row ran on: its host name, with its CPU model and core count where the CSV records them.

    A host name alone does not name a machine: this project's "vm" has been a 2-vCPU AMD EPYC, a 2-vCPU Intel Xeon
    and a 16-core Intel Xeon, and pooling their runs would mix three hosts' errors into one."""
    cpu, cores = row.get("cpu_model") or "", row.get("cores") or ""
    details = ", ".join(x for x in (cpu, f"{cores} cores" if cores else "") if x)
    return f"{row['host']} ({details})" if details else row["host"]


def read_csv(path: Path, strict: bool = True) -> list[Row]:
    """The rows of one kept validation CSV. ``strict``: a file that is not one is an error (a file named on the
    command line); otherwise it yields no rows (a folder holds other benchmarks' CSVs too)."""
    raw = read_results_rows(path, REQUIRED, "files", strict)
    rows = []
    for i, r in enumerate(raw, start=2):
        try:
            rows.append(
                Row(
                    run=path.name,
                    date=r["date"],
                    host=machine_label(r),
                    target=kept_target(r["target"]),
                    case=r["case"],
                    ranks=int(r["ranks"]),
                    threads=int(r["threads"]),
                    batch=int(r["batch"]),
                    measured_s=float(r["measured_median_s"]),
                    predicted_s=float(r["predicted_s"]),
                    error=float(r["error"]),
                    host_drift=float(r["host_drift"]) if r.get("host_drift") else None,
                    measured_phases_s=parse_phases_cell(r.get("measured_phases_s")),
                    predicted_phases_s=parse_phases_cell(r.get("predicted_phases_s")),
                    source=str(path),
                    calibration=r.get("calibration") or "",
                    placement=r.get("placement") or "",
                )
            )
        except ValueError as e:
            raise DlrmsimError(f"{path}: line {i}: {e}", field="files", fix="restore the file from version control") from None
    return rows


def read_rows(paths: Sequence[Path]) -> list[Row]:
    """Rows of every validation CSV among ``paths``: files, and folders (their ``*.csv``, others' CSVs skipped)."""
    rows: list[Row] = []
    for p in paths:
        if p.is_dir():
            for f in sorted(p.glob("*.csv")):
                rows += read_csv(f, strict=False)
        else:
            rows += read_csv(p)
    return rows


def select(rows: Iterable[Row], target: str | None = None, host: str | None = None, since: str | None = None,
           cases: Sequence[str] = ()) -> list[Row]:  # fmt: skip
    """The rows of one target and host (a machine label, or a host name: every machine of that name), from runs
    dated ``since`` (an ISO date or time prefix) on, of ``cases`` (all when empty)."""
    return [
        r
        for r in rows
        if (target is None or r.target == target)
        and (host is None or r.host == host or r.host.startswith(f"{host} ("))
        and (since is None or r.date >= since)
        and (not cases or r.case in cases)
    ]


def kept_calibration(csv_path: Path, named: str) -> Path | None:
    """The calibration a kept run names: the path as written (relative to where validate ran, usually the
    checkout), else a file of that name beside the CSV; None when neither exists."""
    if not named:
        return None
    for candidate in (Path(named), csv_path.parent / Path(named).name):
        if candidate.is_file():
            return candidate
    return None


def repredicted(
    rows: Sequence[Row], advance: Callable[[str], None] | None = None, refit: bool = False
) -> tuple[list[Row], list[str]]:
    """``rows`` with each run's predictions made again by the current model, against the calibration its CSV names
    (:func:`dlrmsim.calibration.validate.repredict`; the measurements stay as kept), and one line per run left out
    (its calibration is not there, or its rows cannot be predicted again, e.g. a multi-rank TorchRec run from before
    the CSVs kept TorchRec's plan). ``refit``: fit each calibration's kept measurements again with the current fit
    first (a calibration file holds the fit of the code that wrote it, which a later fit may extend; once per
    file). ``advance`` is called with each CSV's name as it is done (progress)."""
    refits: dict[Path, Calibration] = {}
    by_source: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_source[r.source].append(r)
    out: list[Row] = []
    left_out: list[str] = []
    for source, mine in by_source.items():
        csv_path = Path(source)
        cal = kept_calibration(csv_path, mine[0].calibration)
        if cal is None:
            left_out.append(f"{source}: its calibration '{mine[0].calibration}' is not here (nor beside the CSV)")
        else:
            try:
                if refit and cal not in refits:
                    kept = load_calibration(cal, warn_other_host=False)
                    try:
                        refits[cal] = refitted(kept)
                    except ValueError as e:  # a fit the kept measurements cannot make (an older plan's rows)
                        raise DlrmsimError(f"{cal} cannot be refitted: {e}") from None
                report = repredict(csv_path, cal, warn_other_host=False, calibration=refits.get(cal))
            except DlrmsimError as e:
                left_out.append(e.message if e.message.startswith(source) else f"{source}: {e.message}")
            else:
                new = {c.name: c for c in report.cases}
                for r in mine:
                    c = new[r.case]
                    out.append(
                        dataclasses.replace(r, predicted_s=c.predicted_s, error=c.error, predicted_phases_s=c.predicted_phases_s)
                    )
        if advance is not None:
            advance(csv_path.name)
    return out, left_out


def pool(rows: Sequence[Row]) -> Pooled:
    """Per case, per run and per phase summaries of ``rows`` (see the module docstring)."""
    by_case: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    by_run: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    diffs: dict[tuple[str, str, str], list[tuple[float, float]]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r.date, r.run)):
        by_case[(r.host, r.target, r.case)].append(r)
        by_run[(r.run, r.host, r.target)].append(r)
        if r.ranks == 1:
            for ph in r.measured_phases_s.keys() & r.predicted_phases_s.keys() - UNTIMED_PHASES:
                m, p = r.measured_phases_s[ph], r.predicted_phases_s[ph]
                if m > 0:
                    diffs[(r.host, r.target, ph)].append((m - p, (p - m) / m))
    cases = [CaseSummary(h, t, c, tuple(r.error for r in rs)) for (h, t, c), rs in sorted(by_case.items())]
    runs = []
    for (run, h, t), rs in sorted(by_run.items(), key=lambda kv: (kv[1][0].date, kv[0])):
        errs = [abs(r.error) for r in rs]
        drifts = [r.host_drift for r in rs if r.host_drift is not None]
        worst = max(drifts, key=lambda d: abs(d - 1.0)) if drifts else None
        floor = run_floor([Measured(r.case, r.ranks, r.threads, r.batch, r.measured_s, r.placement) for r in rs])
        runs.append(RunSummary(run, h, t, len(rs), statistics.median(errs), max(errs), worst, floor))
    phases = [
        PhaseSummary(h, t, ph, len(v), statistics.median(d for d, _ in v), statistics.median(e for _, e in v))
        for (h, t, ph), v in sorted(diffs.items())
    ]
    return Pooled(cases, runs, phases)
