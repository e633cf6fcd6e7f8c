"""Fit quality: predicted against measured for every micro-benchmark, and the Eq. 1 / Eq. 2 check's rows
(the benchmark itself is :mod:`dlrmsim.calibration.benchmarks.eq_check`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dlrmsim.calibration.benchmarks.plan import unstable_benchmarks
from dlrmsim.calibration.fit import FittedModel, predict_collective_s, predict_s
from dlrmsim.calibration.schema import (
    CollectiveFit,
    EqCheckRow,
    FitRow,
    Measurement,
)


def fit_quality(measurements: Sequence[Measurement], model: FittedModel) -> list[FitRow]:
    rows = []
    for m in measurements:
        if m.name.startswith("eq "):
            continue
        pred = predict_s(m, model)
        if pred is None or pred <= 0:
            continue
        rows.append(
            FitRow(
                benchmark=m.benchmark,
                name=m.name,
                measured_s=float(f"{m.time_s:.6g}"),
                predicted_s=float(f"{pred:.6g}"),
                error_pct=round(100.0 * (pred - m.time_s) / m.time_s, 2),
            )
        )
    return rows


def eq_check(measurements: Sequence[Measurement], collectives: Sequence[CollectiveFit]) -> list[EqCheckRow]:
    fits = {c.op: c for c in collectives}
    rows = []
    for m in measurements:
        if not m.name.startswith("eq ") or m.benchmark not in fits:
            continue
        model = predict_collective_s(fits[m.benchmark], m.bytes)
        rows.append(
            EqCheckRow(
                workload=str(m.params["workload"]),
                collective=m.benchmark,
                scale=str(m.params["scale"]),  # type: ignore[arg-type]
                equation_bytes=float(m.params["equation_bytes"]),
                moved_bytes=float(m.params["moved_bytes"]),
                cross_rank_bytes=float(m.params["cross_rank_bytes"]),
                measured_s=float(f"{m.time_s:.6g}"),
                model_s=float(f"{model:.6g}"),
                error_pct=round(100.0 * (model - m.time_s) / m.time_s, 2),
            )
        )
    return rows


@dataclass(frozen=True)
class ErrorSummary:
    """Fit quality of one benchmark kind: how many runs, their median and maximum |error| (%), and how many
    of them the host moved under (passes more than benchmarks.plan.UNSTABLE_PASS_RATIO apart)."""

    runs: int
    median_abs_pct: float
    max_abs_pct: float
    host_moved: int


def error_summary(rows: Sequence[FitRow], measurements: Sequence[Measurement]) -> dict[str, ErrorSummary]:
    """Per benchmark kind, the :class:`ErrorSummary` of its fit-quality rows (``measurements``: the
    calibration's, whose passes say which rows the host moved under)."""
    moved = {m.name for m in unstable_benchmarks(measurements)}
    out: dict[str, ErrorSummary] = {}
    for bench in sorted({r.benchmark for r in rows}):
        mine = [r for r in rows if r.benchmark == bench]
        errs = [abs(r.error_pct) for r in mine]
        out[bench] = ErrorSummary(len(errs), float(np.median(errs)), float(max(errs)), sum(r.name in moved for r in mine))
    return out
