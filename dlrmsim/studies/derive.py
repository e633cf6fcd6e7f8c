"""Speedup and efficiency per configuration: one pure function shared by the sweep loader and ``dlrmsim scaling``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from dlrmsim.studies.spec import OVERRIDE_PREFIXES, POINT_FIELDS


def config_columns(df: pd.DataFrame) -> list[str]:
    """The columns that identify a configuration: every swept parameter except ``ranks``."""
    return [c for c in df.columns if c != "ranks" and (c in POINT_FIELDS or c.startswith(OVERRIDE_PREFIXES))]


def config_keys(df: pd.DataFrame, columns: Sequence[str]) -> pd.Series:
    """One text key per row for ``columns`` (NaN and None compare equal, lists and floats alike)."""
    if not columns:
        return pd.Series("", index=df.index, dtype=object)
    return df[list(columns)].map(str).agg("\x1f".join, axis=1)


def derive_scaling(
    df: pd.DataFrame, time_column: str = "iteration_s", group_columns: Sequence[str] | None = None
) -> pd.DataFrame:
    """A copy of ``df`` with ``ranks_base``, ``speedup`` and ``efficiency`` columns.

    Per configuration (``group_columns``, default every swept parameter but ``ranks``) the baseline is the smallest
    rank count with a successful time. Strong scaling: speedup = t_base / t. Weak scaling (``scaling == "weak"``)
    compares throughput: speedup = (ranks / ranks_base) * t_base / t. Efficiency = speedup / (ranks / ranks_base).
    Rows without a usable time (failed points, ``status != "ok"``) get NaN.
    """
    out = df.copy()
    cols = list(group_columns) if group_columns is not None else config_columns(df)
    t = pd.to_numeric(out[time_column], errors="coerce") if time_column in out else pd.Series(np.nan, index=out.index)
    usable = t.gt(0) & np.isfinite(t)
    if "status" in out:
        usable &= out["status"].eq("ok")
    ranks = pd.to_numeric(out["ranks"], errors="coerce").astype(float)
    keys = config_keys(out, cols)
    base_ranks = pd.Series(np.nan, index=out.index)
    base_time = pd.Series(np.nan, index=out.index)
    for _, idx in keys[usable].groupby(keys[usable]).groups.items():
        r = ranks.loc[idx]
        smallest = r.min()
        at_base = idx[r.eq(smallest).to_numpy()]
        members = keys.index[keys.eq(keys.loc[idx[0]])]
        base_ranks.loc[members] = smallest
        base_time.loc[members] = t.loc[at_base].mean()
    ratio = ranks / base_ranks
    speedup = base_time / t
    if "scaling" in out:
        weak = out["scaling"].astype(str).eq("weak")
        speedup = speedup.where(~weak, ratio * base_time / t)
    speedup = speedup.where(usable)
    out["ranks_base"] = base_ranks.where(usable)
    out["speedup"] = speedup
    out["efficiency"] = speedup / ratio
    return out
