"""DLRM workloads: YAML presets, their validated schema, model math (flops, bytes, Eq. 1/Eq. 2) and placements."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlrmsim import config
from dlrmsim.workloads.schema import Workload

PRESET_DIR = Path(__file__).resolve().parent / "presets"


def load_workload(name_or_path: str | Path, overrides: dict[str, Any] | None = None) -> Workload:
    """Load a built-in preset by name or a user's workload YAML by path."""
    return config.load(name_or_path, Workload, PRESET_DIR, "workload", overrides)


def workload_names() -> list[str]:
    return config.preset_names(PRESET_DIR)


__all__ = ["PRESET_DIR", "Workload", "load_workload", "workload_names"]
