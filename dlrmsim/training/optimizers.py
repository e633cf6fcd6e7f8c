"""Dense optimizers as validated YAML presets: what one step streams, dispatches and keeps per parameter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, NonNegativeFloat, PositiveFloat

from dlrmsim import config
from dlrmsim.config import StrictModel

PRESET_DIR = Path(__file__).resolve().parent / "presets" / "optimizers"


class OptimizerSpec(StrictModel):
    """A dense optimizer (see presets/optimizers/*.yaml for where each value comes from).

    The simulator charges one step over the data-parallel parameters as a streaming task of
    ``bytes_per_param`` bytes per parameter and ``ops_per_tensor`` framework ops per parameter tensor; a rank's
    memory holds ``state_bytes_per_param`` per parameter (the weight and the optimizer's state).
    """

    name: str
    description: str = ""
    bytes_per_param: PositiveFloat = Field(description="memory traffic of one step per fp32 parameter (bytes)")
    ops_per_tensor: NonNegativeFloat = Field(description="framework ops one step runs per parameter tensor")
    state_bytes_per_param: PositiveFloat = Field(description="memory per parameter: weight and optimizer state (bytes)")


def load_optimizer(name_or_path: str | Path, overrides: dict[str, Any] | None = None) -> OptimizerSpec:
    """Load an optimizer preset (sgd, lamb) or a user's optimizer YAML."""
    return config.load(name_or_path, OptimizerSpec, PRESET_DIR, "optimizer", overrides)


def optimizer_names() -> list[str]:
    return config.preset_names(PRESET_DIR)
