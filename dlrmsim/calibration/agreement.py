"""How far two calibrations of one host agree: per fitted parameter, and per prediction they lead to.

A calibration is repeatable when a second run, back to back on the same quiet host, fits the same parameters and,
more to the point, predicts the same iteration times. This module lines two calibrations up parameter by parameter
(every number the fits produced, keyed by what it describes: ``embedding.backward/uniform/c2.row_time_ns``) and
predicts the validation cases (:mod:`dlrmsim.calibration.validate`) under each. A difference is symmetric and
relative, ``|a - b| / max(|a|, |b|)``, so a parameter that is zero in one run and tiny in the other counts as
different, not as an infinite ratio.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dlrmsim.calibration.schema import Calibration
from dlrmsim.calibration.validate import TARGET_IMPLEMENTATIONS, ValidationCase, predict

# Fields that say which fit a list entry is (not fitted values themselves).
IDENTITY_FIELDS = ("op", "distribution", "direction", "ranks", "implementation", "cores")
# Fitted parts of a calibration; host facts, raw measurements and the fit's own error tables are not parameters.
FITTED_PARTS = ("gemm", "memory", "embedding", "collectives", "overhead", "interaction")


def relative_difference(a: float, b: float) -> float:
    """``|a - b| / max(|a|, |b|)`` (0 when both are 0): symmetric, and at most 1 for values of one sign."""
    top = max(abs(a), abs(b))
    return 0.0 if top == 0 else abs(a - b) / top


@dataclass(frozen=True)
class Compared:
    """One quantity in both calibrations."""

    name: str
    a: float
    b: float

    @property
    def difference(self) -> float:
        return relative_difference(self.a, self.b)


@dataclass(frozen=True)
class Agreement:
    """Every fitted parameter and every case's predicted iteration time (s) in two calibrations."""

    parameters: tuple[Compared, ...]
    predictions: tuple[Compared, ...]
    only_in_one: tuple[str, ...]  # parameters one calibration has and the other lacks

    @staticmethod
    def _summary(rows: Sequence[Compared]) -> tuple[float, float]:
        diffs = [r.difference for r in rows]
        return (statistics.median(diffs), max(diffs)) if diffs else (0.0, 0.0)

    @property
    def parameter_median_max(self) -> tuple[float, float]:
        """Median and largest relative difference over the fitted parameters."""
        return self._summary(self.parameters)

    @property
    def prediction_median_max(self) -> tuple[float, float]:
        """Median and largest relative difference over the predictions."""
        return self._summary(self.predictions)

    def worst_parameters(self, n: int = 5) -> list[Compared]:
        return sorted(self.parameters, key=lambda r: -r.difference)[:n]


def fitted_parameters(cal: Calibration) -> dict[str, float]:
    """Every number the fits produced, by a name that says what it describes."""
    out: dict[str, float] = {}
    for part in FITTED_PARTS:
        value = getattr(cal, part)
        if value is not None:
            _flatten(part, value.model_dump() if hasattr(value, "model_dump") else [v.model_dump() for v in value], out)
    if cal.arrival_skew is not None:
        # Each run times its own stretch lengths (the GEMM count that lasts about 2, 10 or 40 ms on that run's
        # host), so the points are named by their place among the lengths, not by a length the other run lacks.
        pts = cal.arrival_skew.points
        for i, (_ms, fraction) in enumerate(pts):
            out[f"arrival_skew.excess[{i + 1} of {len(pts)}]"] = float(fraction)
    for fit in cal.core_availability:  # a state of the host as much as a fit: two runs may well differ here
        kernel = "" if fit.kernel == "gemm" else f"{fit.kernel}."
        out[f"core_availability.{kernel}c{fit.cores}"] = fit.availability
    return out


def _flatten(prefix: str, value: Any, out: dict[str, float]) -> None:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int | float):
        out[prefix] = float(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            if k not in IDENTITY_FIELDS:
                _flatten(f"{prefix}.{k}", v, out)
    elif isinstance(value, list | tuple):
        if value and all(isinstance(v, list | tuple) and len(v) == 2 for v in value):
            for x, y in value:  # (abscissa, value) points, e.g. (flops, efficiency) or (cores, overhead)
                _flatten(f"{prefix}@{x:g}", y, out)
            return
        for i, v in enumerate(value):
            ident = "/".join(str(v[f]) for f in IDENTITY_FIELDS if isinstance(v, dict) and f in v)
            _flatten(f"{prefix}.{ident or i}", v, out)


def compare(a: Calibration, b: Calibration, cases: Iterable[ValidationCase]) -> Agreement:
    """Line up ``a`` and ``b``: their fitted parameters, and each case's simulated iteration under each."""
    pa, pb = fitted_parameters(a), fitted_parameters(b)
    params = tuple(Compared(k, pa[k], pb[k]) for k in pa if k in pb)
    only = tuple(sorted(set(pa) ^ set(pb)))
    runner = TARGET_IMPLEMENTATIONS["project"]
    preds = tuple(Compared(c.name, predict(c, a, runner)[0], predict(c, b, runner)[0]) for c in cases)
    return Agreement(params, preds, only)
