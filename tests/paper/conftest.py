"""Shared helpers of the paper-behaviour tests: one cached simulation per configuration."""

from __future__ import annotations

from functools import lru_cache

from dlrmsim.training.simulate import TrainingConfig, TrainingResult, simulate_training


@lru_cache(maxsize=256)
def _simulate(items: tuple[tuple[str, object], ...]) -> TrainingResult:
    return simulate_training(TrainingConfig(**dict(items)))


def sim(**kw: object) -> TrainingResult:
    """The simulated iteration of ``TrainingConfig(**kw)``, computed once per configuration in a test session."""
    return _simulate(tuple(sorted(kw.items())))
