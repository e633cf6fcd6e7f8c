"""Fixtures for the sweep tests: a toy topology YAML and spec files.

The sweeps here run the cheap evaluators of ``tests.studies.sweep_evaluators`` against a toy topology YAML that
the real topology loader accepts (two sockets joined by one link named ``net``), so its overrides are checked
as a user's would be.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

EVALUATORS = "tests.studies.sweep_evaluators"
# Toy numbers (no machine's): the sweep tests never simulate it, the cheap evaluators only read the overrides.
TOY_TOPOLOGY = {
    "name": "toy",
    "description": "two toy sockets joined by one link (sweep tests)",
    "compute": {
        "toy-cpu": {
            "kind": "socket",
            "model": "toy",
            "cores": 28,
            "base_avx_clock_GHz": 2.0,
            "turbo_avx_clock_GHz": 2.0,
            "flops_per_cycle_per_core": {"fp32": 32},
            "memory": {"bandwidth_GBps": 100.0, "capacity_GB": 96, "numa_nodes": 1},
            "gemm_efficiency": [{"flops": 1.0e6, "efficiency": 0.5}],
        },
    },
    "links": {"net": {"kind": "upi", "bandwidth_GBps": 10.0, "latency_us": 1.0, "overhead_us": 1.0, "one_sided": True}},
    "fabric": {
        "generator": "explicit",
        "nodes": [{"name": "s0", "kind": "socket", "compute": "toy-cpu"}, {"name": "s1", "kind": "socket", "compute": "toy-cpu"}],
        "edges": [{"u": "s0", "v": "s1", "link": "net"}],
    },
}


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
