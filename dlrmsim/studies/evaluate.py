"""``evaluate_point``: the one place a sweep asks the training simulator about a point.

The coupling to the simulator's API is the few lines inside ``evaluate_point``; everything else in the
studies package sees only ``SweepPoint`` in and a flat ``dict[str, float | str]`` out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from dlrmsim.studies.spec import SweepPoint
from dlrmsim.training.simulate import TrainingConfig, simulate_training

# Columns every evaluator should return (seconds per training iteration and its breakdown).
STANDARD_OUTPUTS: tuple[str, ...] = ("iteration_s", "compute_s", "exposed_allreduce_s", "exposed_alltoall_s", "prepost_s")


def evaluate_point(point: SweepPoint) -> dict[str, float | str]:
    """Simulate one training configuration; returns seconds per iteration, its breakdown and the simulator's row."""
    result = simulate_training(
        TrainingConfig(
            topology=point.topology,
            workload=point.workload,
            ranks=point.ranks,
            scaling=point.scaling,
            backend=point.backend,
            placement=point.placement_spec,
            comm=point.comm,
            precision=point.precision,  # None: the workload's own
            blocking=point.blocking,
            topology_overrides=dict(point.topology_overrides),
            workload_overrides=dict(point.workload_overrides),
            lockstep_collectives=point.lockstep_collectives,
        ),
        record_flows=False,  # a sweep keeps the breakdown, never a trace
    )
    b = result.breakdown
    row: dict[str, float | str] = {
        "iteration_s": float(result.iteration_s),
        "compute_s": float(b.compute_s),
        "exposed_allreduce_s": float(b.exposed_allreduce_s),
        "exposed_alltoall_s": float(b.exposed_alltoall_s),
        "prepost_s": float(b.prepost_s),
    }
    for key, value in result.to_row().items():
        row.setdefault(key, value)
    return flat_outputs(row)


def flat_outputs(row: Mapping[str, Any]) -> dict[str, float | str]:
    """Keep an evaluator's scalar outputs: numbers as float, everything else as text (one CSV cell each)."""
    out: dict[str, float | str] = {}
    for key, value in row.items():
        if isinstance(value, bool):
            out[str(key)] = float(value)
        elif isinstance(value, int | float):
            out[str(key)] = float(value)
        elif hasattr(value, "item") and callable(value.item):  # numpy scalars
            item = value.item()
            out[str(key)] = float(item) if isinstance(item, int | float) else str(item)
        elif value is None:
            out[str(key)] = math.nan
        else:
            out[str(key)] = str(value)
    return out
