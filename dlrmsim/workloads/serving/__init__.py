"""Serving workloads: YAML presets of recommendation models served request by request, and their loader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlrmsim import config
from dlrmsim.workloads.serving.schema import ServingWorkload

PRESET_DIR = Path(__file__).resolve().parent


def load_serving_workload(name_or_path: str | Path, overrides: dict[str, Any] | None = None) -> ServingWorkload:
    """Load a built-in serving preset by name (``serving_workload_names()``) or a user's YAML by path."""
    return config.load(name_or_path, ServingWorkload, PRESET_DIR, "serving workload", overrides)


def serving_workload_names() -> list[str]:
    return config.preset_names(PRESET_DIR)


__all__ = ["PRESET_DIR", "ServingWorkload", "load_serving_workload", "serving_workload_names"]
