"""DLRM workloads: YAML presets, their validated schema, model math (flops, bytes, Eq. 1/Eq. 2) and placements."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dlrmsim.workloads.schema import Workload

PRESET_DIR = Path(__file__).resolve().parent / "presets"


def load_workload(name_or_path: str | Path, overrides: dict[str, Any] | None = None) -> Workload:
    """Load a built-in preset by name or a user's workload YAML by path."""
    from dlrmsim import config
    from dlrmsim.workloads.schema import Workload

    return config.load(name_or_path, Workload, PRESET_DIR, "workload", overrides)


def workload_names() -> list[str]:
    from dlrmsim import config

    return config.preset_names(PRESET_DIR)


def __getattr__(name: str) -> Any:
    # Workload loads on first use (PEP 562): importing a submodule (e.g. the CLI) need not build the pydantic schema.
    if name == "Workload":
        from dlrmsim.workloads.schema import Workload

        return Workload
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["PRESET_DIR", "Workload", "load_workload", "workload_names"]
