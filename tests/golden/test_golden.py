"""Behaviour is pinned: every scenario of ``scenarios.py`` reproduces its recorded `simulate --json` numbers.

Because a reorganisation or a speed-up must not change what the simulator predicts, every number in each
recorded document (iteration time, breakdown, per-rank parts, waits, bytes) must come out equal to 1e-9
relative. A change that alters the model on purpose regenerates ``simulate.json`` in its own commit.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.golden.scenarios import Scenario, run, scenarios

GOLDEN = json.loads(Path(__file__).with_name("simulate.json").read_text())


def _assert_same(got: object, want: object, where: str) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), (
            where,
            sorted(set(got) ^ set(want)) if isinstance(got, dict) else got,
        )
        for k in want:
            _assert_same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(want, bool):
        assert isinstance(got, int | float) and math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-15), (where, got, want)
    else:
        assert got == want, (where, got, want)


def _params() -> list:
    return [pytest.param(s, id=s.name, marks=[pytest.mark.slow] if s.slow else []) for s in scenarios()]


@pytest.mark.parametrize("scenario", _params())
def test_scenario_reproduces_golden(scenario: Scenario) -> None:
    if scenario.name not in GOLDEN:
        pytest.skip(f"{scenario.name} not recorded yet (python -m tests.golden.record --slow)")
    _assert_same(run(scenario), GOLDEN[scenario.name], scenario.name)


def test_golden_covers_every_valid_default_scenario() -> None:
    # Because a scenario missing from the file would silently test nothing, the default set must all be there,
    # and most combinations must be valid simulations (not recorded errors).
    names = {s.name for s in scenarios() if not s.slow}
    assert names <= set(GOLDEN)
    valid = [n for n in names if "error" not in GOLDEN[n]]
    assert len(valid) >= 40, len(valid)
