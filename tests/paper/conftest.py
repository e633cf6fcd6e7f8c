"""Shared helpers of the paper-behaviour tests: one cached simulation per configuration."""

from __future__ import annotations

import json

from dlrmsim.training.simulate import TrainingConfig, TrainingResult, simulate_training

_CACHE: dict[str, TrainingResult] = {}


def sim(**kw: object) -> TrainingResult:
    """The simulated iteration of ``TrainingConfig(**kw)``, computed once per configuration in a test session."""
    key = json.dumps(kw, sort_keys=True)
    if key not in _CACHE:
        _CACHE[key] = simulate_training(TrainingConfig(**kw))
    return _CACHE[key]
