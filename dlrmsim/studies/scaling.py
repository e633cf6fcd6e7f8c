"""Strong- and weak-scaling studies: one training simulation per rank count, speedup against a baseline.

The baseline is 1 rank, or the fewest ranks whose memory holds the workload when one rank cannot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from dlrmsim.errors import DlrmsimError
from dlrmsim.output import print_table
from dlrmsim.training.optimizers import load_optimizer
from dlrmsim.training.simulate import TrainingConfig, TrainingResult, load_inputs, run_iteration
from dlrmsim.workloads.placement import min_ranks_for_capacity


def baseline_ranks(cfg: TrainingConfig) -> int:
    """1 rank, or the fewest ranks whose memory holds the workload."""
    from dlrmsim.topologies import load_topology
    from dlrmsim.workloads import load_workload

    w = load_workload(cfg.workload, cfg.workload_overrides or None)
    topo = load_topology(cfg.topology, cfg.topology_overrides or None)
    capacity = topo.compute(0).memory_capacity_B
    fewest = min_ranks_for_capacity(w, cfg.placement, capacity, load_optimizer(cfg.optimizer).state_bytes_per_param)
    if fewest is None:
        raise DlrmsimError(
            "no rank count of this placement holds the workload in memory",
            source=cfg.workload,
            field="tables",
            fix="use column_wise placement or a topology with more memory per rank",
        )
    return fewest


def scaling_study(
    base: TrainingConfig,
    ranks: Sequence[int],
    on_point: Callable[[TrainingResult], None] | None = None,
) -> pd.DataFrame:
    """Simulate ``base`` at each rank count; rows have ranks, iteration_s, speedup, efficiency and the breakdown.

    Every rank count is checked before any simulation runs, so a bad list fails at once.
    """
    from dlrmsim.studies.derive import derive_scaling

    first = baseline_ranks(base)
    counts = sorted(set(ranks))
    for r in counts:
        if r < first:
            raise DlrmsimError(
                f"{r} ranks cannot hold the workload in memory",
                source=base.workload,
                field="ranks",
                fix=f"the smallest valid count is {first}",
            )
    inputs = {r: load_inputs(base.model_copy(update={"ranks": r})) for r in counts}  # validates every count first
    if first not in counts:
        counts = [first, *counts]
        inputs[first] = load_inputs(base.model_copy(update={"ranks": first}))
    rows = []
    for r in counts:
        cfg = base.model_copy(update={"ranks": r})
        res = run_iteration(inputs[r], cfg)
        if on_point:
            on_point(res)
        rows.append({"ranks": r, "scaling": base.scaling, "in_request": r in ranks, **res.to_row()})
    df = derive_scaling(pd.DataFrame(rows), group_columns=["scaling"])
    return df[df["in_request"]].drop(columns=["in_request"]).reset_index(drop=True)


def print_scaling_table(df: Any, title: str) -> None:
    """One row per rank count: iteration time, speedup, efficiency and the breakdown (ms)."""
    rows = [
        (
            int(r.ranks),
            r.iteration_s * 1e3,
            r.speedup,
            r.efficiency,
            r.compute_s * 1e3,
            r.exposed_allreduce_s * 1e3,
            r.exposed_alltoall_s * 1e3,
            r.prepost_s * 1e3,
        )
        for r in df.itertuples()
    ]
    print_table(title, ["ranks", "iter ms", "speedup", "efficiency", "compute ms", "exp. allreduce ms", "exp. alltoall ms", "pre/post ms"], rows)
