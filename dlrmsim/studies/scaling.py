"""Strong- and weak-scaling studies: one training simulation per rank count, speedup against a baseline.

The baseline is the fewest ranks whose sockets hold the workload (with the memory-aware rank-to-socket mapping,
1 rank wherever one socket of the topology is big enough), or a rank count the user sets. Every row says which
sockets its ranks ran on; the baseline and why it was chosen travel with the table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dlrmsim.errors import DlrmsimError
from dlrmsim.output import print_table
from dlrmsim.topologies.mapping import capacities, format_sockets
from dlrmsim.training.optimizers import load_optimizer
from dlrmsim.training.simulate import Inputs, TrainingConfig, TrainingResult, load_inputs, load_training_topology, run_iteration
from dlrmsim.workloads import load_workload
from dlrmsim.workloads.placement import fewest_ranks


@dataclass(frozen=True)
class Baseline:
    """The rank count speedups are measured against, and why (shown in tables and reports)."""

    ranks: int
    reason: str


def baseline_ranks(cfg: TrainingConfig) -> int:
    """The fewest ranks whose sockets (memory-aware mapping, or ``cfg.rank_sockets``) hold the workload."""
    w = load_workload(cfg.workload, cfg.workload_overrides or None)
    topo = load_training_topology(cfg)
    state = load_optimizer(cfg.optimizer).state_bytes_per_param
    fewest = fewest_ranks(w, cfg.placement, capacities(topo), state, cfg.rank_sockets)
    if fewest is None:
        raise DlrmsimError(
            f"no rank count of this placement holds the workload in the memory of {topo.name}",
            source=cfg.workload,
            field="tables",
            fix="use column_wise placement or a topology with more memory per rank",
        )
    return fewest


def choose_baseline(cfg: TrainingConfig, user_ranks: int | None = None) -> Baseline:
    """``user_ranks`` when set, else the fewest ranks that fit (``baseline_ranks``)."""
    if user_ranks is not None:
        if user_ranks < 1:
            raise DlrmsimError(
                f"--baseline-ranks {user_ranks} is not a rank count", field="--baseline-ranks", fix="give a positive number"
            )
        return Baseline(user_ranks, "user-set")
    fewest = baseline_ranks(cfg)
    why = "1 rank: one socket holds the workload" if fewest == 1 else f"fewest ranks whose sockets hold the workload ({fewest})"
    return Baseline(fewest, why)


def scaling_frame(rows: pd.DataFrame, base: Baseline, time_column: str = "iteration_s") -> pd.DataFrame:
    """``rows`` (one per rank count, with ``scaling``) plus ``ranks_base``, ``baseline``, ``speedup``, ``efficiency``.

    Strong scaling: speedup = t_base / t. Weak scaling compares throughput: speedup = (ranks / ranks_base) x
    t_base / t. Efficiency = speedup / (ranks / ranks_base).
    """
    out = rows.copy()
    t_base = float(out.loc[out["ranks"] == base.ranks, time_column].iloc[0])
    ratio = out["ranks"].astype(float) / base.ranks
    speedup = t_base / out[time_column]
    weak = out["scaling"].astype(str).eq("weak")
    out["ranks_base"] = base.ranks
    out["baseline"] = base.reason
    out["speedup"] = speedup.where(~weak, ratio * speedup)
    out["efficiency"] = out["speedup"] / ratio
    return out


def check_counts(base: TrainingConfig, counts: Sequence[int], baseline: Baseline, fewest: int | None) -> None:
    """Every count at or above the fewest that fit (a one-line error naming the smallest valid count)."""
    if fewest is None:
        return
    for r in sorted(set(counts) | {baseline.ranks}):
        if r < fewest:
            what = "--baseline-ranks" if r == baseline.ranks and r not in counts else "ranks"
            raise DlrmsimError(
                f"{r} ranks cannot hold the workload in memory",
                source=base.workload,
                field=what,
                fix=f"the smallest valid count is {fewest}",
            )


def scaling_study(
    base: TrainingConfig,
    ranks: Sequence[int],
    on_point: Callable[[TrainingResult], None] | None = None,
    baseline: int | None = None,
    keep_baseline: bool = False,
) -> pd.DataFrame:
    """Simulate ``base`` at each rank count; rows have ranks, sockets, iteration_s, speedup, efficiency, the breakdown.

    The baseline (``baseline`` ranks, or the fewest that fit) is simulated too; its row is kept when requested or
    ``keep_baseline``. Every rank count is checked before any simulation runs, so a bad list fails at once.
    """
    chosen = choose_baseline(base, baseline)
    fewest = chosen.ranks if baseline is None else baseline_ranks(base)
    counts = sorted(set(ranks) | {chosen.ranks})
    check_counts(base, ranks, chosen, fewest)
    inputs: dict[int, Inputs] = {r: load_inputs(base.model_copy(update={"ranks": r})) for r in counts}  # validates every count
    rows = []
    for r in counts:
        cfg = base.model_copy(update={"ranks": r})
        res = run_iteration(inputs[r], cfg, record_flows=False)
        if on_point:
            on_point(res)
        mapping = inputs[r].mapping
        sockets = format_sockets(mapping.sockets) if mapping else ""
        rows.append(
            {
                "ranks": r,
                "scaling": base.scaling,
                "in_request": r in ranks,
                "sockets": sockets,
                "mapping": mapping.reason if mapping else "",
                **res.to_row(),
            }
        )
    df = scaling_frame(pd.DataFrame(rows), chosen)
    keep = df["in_request"] | (keep_baseline & df["ranks"].eq(chosen.ranks))
    return df[keep].drop(columns=["in_request"]).reset_index(drop=True)


def baseline_note(df: pd.DataFrame) -> str:
    """One sentence: the baseline rank count, why, and its sockets when shown."""
    if df.empty:
        return ""
    first = df.iloc[0]
    base = int(first["ranks_base"])
    at = df[df["ranks"] == base]
    where = ""
    if not at.empty and at["sockets"].iloc[0]:
        where = f" on socket{'s' if base > 1 else ''} {at['sockets'].iloc[0]}"
    return f"Speedup and efficiency are against {base} rank{'s' if base > 1 else ''}{where}: {first['baseline']}."


def print_scaling_table(df: Any, title: str) -> None:
    """One row per rank count: sockets, iteration time, speedup, efficiency and the breakdown (ms); the baseline marked."""
    rows = [
        (
            f"{int(r.ranks)}{' (baseline)' if int(r.ranks) == int(r.ranks_base) else ''}",
            r.sockets,
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
    print_table(
        f"{title}\n{baseline_note(df)}",
        [
            "ranks",
            "sockets",
            "iter ms",
            "speedup",
            "efficiency",
            "compute ms",
            "exp. allreduce ms",
            "exp. alltoall ms",
            "pre/post ms",
        ],
        rows,
    )
