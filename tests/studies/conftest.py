"""Fixtures for the sweep tests: a toy topology YAML, spec files, and the topology loader switched off.

The sweeps here run the cheap evaluators of ``tests.studies.sweep_evaluators`` against a toy topology YAML, so
their topology overrides are checked by YAML path (as when ``dlrmsim.topologies.load_topology`` is absent),
whatever topology schema the real loader enforces.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import dlrmsim.studies.spec as spec_module

EVALUATORS = "tests.studies.sweep_evaluators"
REAL_TOPOLOGY_LOADER = spec_module.topology_loader
TOY_TOPOLOGY = {"name": "toy", "links": {"net": {"bandwidth_GBps": 10.0, "latency_us": 1.0}}, "processor": {"cores": 28}}


@pytest.fixture(autouse=True)
def _no_topology_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spec_module, "topology_loader", lambda: None)


@pytest.fixture
def toy_topology(tmp_path: Path) -> Path:
    path = tmp_path / "toy_topology.yaml"
    path.write_text(yaml.safe_dump(TOY_TOPOLOGY))
    return path


@pytest.fixture
def write_spec(tmp_path: Path, toy_topology: Path) -> Callable[..., Path]:
    """Write a sweep spec: ``grid`` entries override a 1 x 1 x [1, 2, 4, 8] grid on the toy topology."""

    def write(evaluator: str = "cheap", name: str = "spec.yaml", **grid: Any) -> Path:
        full: dict[str, Any] = {"topology": toy_topology.name, "workload": "small", "ranks": [1, 2, 4, 8]}
        full.update(grid)
        path = tmp_path / name
        path.write_text(yaml.safe_dump({"name": "test", "evaluator": f"{EVALUATORS}:{evaluator}", "grid": full}, sort_keys=False))
        return path

    return write
