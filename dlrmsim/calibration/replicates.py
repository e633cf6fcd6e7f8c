"""Cases of one validation run that are the same configuration: the floor the host's noise puts under its errors.

Two cases of the validation file can name one configuration on a given host. On 2 cores, ``ranks-2`` (threads: the
cores per rank, so 1) and ``ranks-2-threads-1`` are the same two one-thread processes. One run measures them minutes
apart, round-robin with the other cases: they are replicates, and whatever separates their measurements is the host's,
not the model's.

That difference bounds what any model can score on the run. A prediction ``p`` of measurements ``a <= b`` is within
``e`` of both only if ``e >= (b - a) / (a + b)``, with equality at ``p = 2ab / (a + b)``. So no prediction, however
good, gets the run's largest |error| below that: the run's *replicate floor*. Pooled over kept runs
(``dlrmsim evidence``), the floors say how often the host alone makes a run miss a goal on its maximum.

They also say what a run of many cases can score at best. If each kept measurement is the true step time times
``exp(e)``, with ``e`` drawn independently per case, the log-ratio of two replicates is ``e1 - e2``: the replicate pairs
sample that difference, and ``(e1 - e2) / sqrt(2)`` has the spread of one case's ``e``. A perfect model's errors in one
run are then ``exp(e) - 1`` for each of its cases: :func:`perfect_model` draws such runs from the kept pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from dlrmsim.calibration.validate import ValidationReport, base_case_name, load_cases


@dataclass(frozen=True)
class Measured:
    """One case of a run as a replicate check needs it: the configuration it ran and its measured step (s)."""

    case: str  # as the run names it (``base`` or ``base@t8``)
    ranks: int
    threads: int  # per rank, as run (a case's null resolved to the host's cores / ranks)
    batch: int  # global
    measured_s: float
    placement: str = ""  # the sharding the implementation chose itself (TorchRec's plan), "" for the default


@dataclass(frozen=True)
class Replicate:
    """Cases of one run that ran one configuration, and their measured steps (s), in the run's order."""

    cases: tuple[str, ...]
    measured_s: tuple[float, ...]

    @property
    def floor(self) -> float:
        """(slowest - fastest) / (slowest + fastest): the smallest largest |error| any prediction can have on
        these measurements together."""
        lo, hi = min(self.measured_s), max(self.measured_s)
        return (hi - lo) / (hi + lo)


@cache
def _workloads() -> dict[str, dict[str, Any]]:
    """Each validation case's workload by name (the cases file in this checkout), as its fields less its name (each
    case's workload carries the case's name, which changes nothing it runs)."""
    return {c.name: c.workload.model_dump(exclude={"name"}) for c in load_cases()}


def replicates(cases: Sequence[Measured]) -> list[Replicate]:
    """Groups of two or more of ``cases`` (one run's) with the same ranks, threads, global batch, sharding and
    workload, in the run's order. A case not in this checkout's cases file is left out: its workload is unknown."""
    workloads = _workloads()
    groups: list[tuple[tuple[int, int, int, str], dict[str, Any], list[Measured]]] = []
    for m in cases:
        workload = workloads.get(base_case_name(m.case))
        if workload is None:
            continue
        key = (m.ranks, m.threads, m.batch, m.placement)
        for k, w, members in groups:
            if k == key and w == workload:
                members.append(m)
                break
        else:
            groups.append((key, workload, [m]))
    return [
        Replicate(tuple(m.case for m in members), tuple(m.measured_s for m in members))
        for _, _, members in groups
        if len(members) > 1
    ]


def run_floor(cases: Sequence[Measured]) -> float | None:
    """The largest :attr:`Replicate.floor` of one run's ``cases``; None where no two of them are one configuration."""
    floors = [r.floor for r in replicates(cases)]
    return max(floors) if floors else None


def of_report(report: ValidationReport) -> list[Replicate]:
    """:func:`replicates` of one validation report's cases."""
    return replicates([Measured(c.name, c.ranks, c.threads, c.batch, c.measured_s, c.placement) for c in report.cases])


def describe(r: Replicate) -> str:
    """One line for a run's report: which cases ran one configuration, their measurements and the floor."""
    measured = " and ".join(f"{1e3 * t:.2f}" for t in r.measured_s)
    return (
        f"{' and '.join(r.cases)} are one configuration on this host: measured {measured} ms, so no prediction is "
        f"within {100 * r.floor:.1f}% of both (the host's floor under this run's max |error|)"
    )


@dataclass(frozen=True)
class PerfectModel:
    """What a model with no error of its own scores on runs of ``cases`` cases, its errors drawn from the host's
    replicate pairs (:func:`perfect_model`): the median over drawn runs of their median and largest |error|, and the
    share of runs meeting both goals."""

    cases: int
    median_abs: float
    max_abs: float
    meets_goal: float  # share of drawn runs, 0..1


def perfect_model(floors: Sequence[float], cases: int, goal_median: float, goal_max: float, runs: int = 20000) -> PerfectModel:
    """Runs of ``cases`` cases scored by a model with no error: each case's error ``exp(s * |d| / sqrt(2)) - 1``,
    ``d`` the log-ratio of a replicate pair drawn from ``floors`` (:attr:`Replicate.floor`, so ``|d| = log((1 + f) /
    (1 - f))``), ``s`` a random sign. Seeded, so the same floors give the same figures."""
    f = np.asarray(floors, dtype=float)
    spread = np.log((1 + f) / (1 - f)) / np.sqrt(2)
    rng = np.random.default_rng(0)
    e = np.abs(np.expm1(rng.choice(spread, size=(runs, cases)) * rng.choice((-1.0, 1.0), size=(runs, cases))))
    med, worst = np.median(e, axis=1), e.max(axis=1)
    return PerfectModel(
        cases, float(np.median(med)), float(np.median(worst)), float(np.mean((med <= goal_median) & (worst <= goal_max)))
    )
