"""One self-contained HTML page of a sweep: scaling curves, time breakdowns, communication, topology, raw numbers.

plotly.js is embedded once in the page's head, so it opens with no network access. Times are plotted in
milliseconds per training iteration; the data stay in seconds.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from dlrmsim.studies.derive import config_columns, config_keys, derive_scaling

MS = 1e3  # seconds -> milliseconds for display
COMPONENTS: tuple[tuple[str, str, str], ...] = (
    ("compute_s", "compute", "#4C78A8"),
    ("exposed_allreduce_s", "exposed allreduce", "#F58518"),
    ("exposed_alltoall_s", "exposed alltoall", "#E45756"),
    ("prepost_s", "pre/post-processing", "#72B7B2"),
    ("other_s", "idle (waiting for slower ranks)", "#BAB0AC"),
)
COMM_COLUMNS: tuple[tuple[str, str], ...] = (
    ("exposed_allreduce_s", "exposed allreduce"),
    ("exposed_alltoall_s", "exposed alltoall"),
    ("allreduce_s", "allreduce (total)"),
    ("alltoall_s", "alltoall (total)"),
)
MAX_BREAKDOWN_FIGURES = 12
PLOT_CONFIG = {"displaylogo": False, "responsive": True}


# --- labels ---------------------------------------------------------------------------------------------------


def _short(value: Any) -> str:
    text = str(value)
    if text.endswith((".yaml", ".yml")) and "/" in text:
        return Path(text).stem
    return text


def _varying(df: pd.DataFrame, columns: Sequence[str]) -> list[str]:
    return [c for c in columns if c in df and df[c].map(str).nunique() > 1]


def _label(row: pd.Series, columns: Sequence[str]) -> str:
    if not columns:
        return "all points"
    return ", ".join(f"{c}={_short(row[c])}" for c in columns)


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    if "status" in df:
        df = df[df["status"].eq("ok")]
    if "iteration_s" in df:
        df = df[pd.to_numeric(df["iteration_s"], errors="coerce").gt(0)]
    return df


def _configs(df: pd.DataFrame, exclude: Sequence[str] = ()) -> list[tuple[str, pd.DataFrame]]:
    """(label, rows sorted by ranks) per configuration, labelled by the parameters that vary across the sweep."""
    cols = [c for c in config_columns(df) if c not in exclude]
    varying = _varying(df, cols)
    keys = config_keys(df, cols)
    groups = []
    for _, idx in keys.groupby(keys, sort=False).groups.items():
        part = df.loc[idx].sort_values("ranks")
        groups.append((_label(part.iloc[0], varying), part))
    return groups


def _rank_axis(df: pd.DataFrame) -> dict[str, Any]:
    ranks = sorted({int(r) for r in df["ranks"].dropna()})
    return {"title": {"text": "ranks (processes, one per socket or card)"}, "type": "log", "tickvals": ranks, "ticktext": [str(r) for r in ranks]}


def _layout(fig: go.Figure, title: str, yaxis: str, **kwargs: Any) -> go.Figure:
    fig.update_layout(
        title={"text": title},
        yaxis={"title": {"text": yaxis}},
        legend={"title": {"text": "configuration"}},
        template="plotly_white",
        margin={"t": 70},
        hovermode="closest",
        **kwargs,
    )
    return fig


# --- figures --------------------------------------------------------------------------------------------------


def speedup_figure(df: pd.DataFrame) -> go.Figure | None:
    """Speedup against ranks per configuration, with the ideal (linear) line per baseline rank count."""
    ok = _ok(df)
    if ok.empty or "speedup" not in ok or ok["speedup"].isna().all():
        return None
    fig = go.Figure()
    for base in sorted({int(b) for b in ok["ranks_base"].dropna()}):
        xs = sorted({int(r) for r in ok["ranks"].dropna() if r >= base})
        fig.add_trace(
            go.Scatter(
                x=xs, y=[x / base for x in xs], mode="lines", name=f"ideal (from {base} ranks)",
                line={"dash": "dash", "color": "gray"},
                hovertemplate=f"ideal from {base} ranks<br>ranks %{{x}}<br>speedup %{{y:.2f}}x<extra></extra>",
            )
        )  # fmt: skip
    for label, part in _configs(ok):
        fig.add_trace(
            go.Scatter(
                x=part["ranks"].astype(int), y=part["speedup"], mode="lines+markers", name=label,
                customdata=list(zip(part["iteration_s"] * MS, part["efficiency"] * 100, strict=True)),
                hovertemplate=(
                    f"{html.escape(label)}<br>ranks %{{x}}<br>speedup %{{y:.2f}}x<br>"
                    "iteration %{customdata[0]:.3f} ms<br>efficiency %{customdata[1]:.1f} %<extra></extra>"
                ),
            )
        )  # fmt: skip
    return _layout(fig, "Speedup against ranks (strong: t_base / t; weak: throughput ratio)",
                   "speedup (x, relative to the smallest rank count)", xaxis=_rank_axis(ok))  # fmt: skip


def efficiency_figure(df: pd.DataFrame) -> go.Figure | None:
    """Parallel efficiency (%) against ranks per configuration, with the ideal 100 % line."""
    ok = _ok(df)
    if ok.empty or "efficiency" not in ok or ok["efficiency"].isna().all():
        return None
    xs = sorted({int(r) for r in ok["ranks"].dropna()})
    fig = go.Figure(
        go.Scatter(x=xs, y=[100.0] * len(xs), mode="lines", name="ideal", line={"dash": "dash", "color": "gray"},
                   hovertemplate="ideal<br>ranks %{x}<br>efficiency %{y:.0f} %<extra></extra>")  # fmt: skip
    )
    for label, part in _configs(ok):
        fig.add_trace(
            go.Scatter(
                x=part["ranks"].astype(int), y=part["efficiency"] * 100, mode="lines+markers", name=label,
                customdata=list(zip(part["iteration_s"] * MS, part["speedup"], strict=True)),
                hovertemplate=(
                    f"{html.escape(label)}<br>ranks %{{x}}<br>efficiency %{{y:.1f}} %<br>"
                    "speedup %{customdata[1]:.2f}x<br>iteration %{customdata[0]:.3f} ms<extra></extra>"
                ),
            )
        )  # fmt: skip
    return _layout(fig, "Parallel efficiency against ranks (speedup / rank ratio)", "efficiency (%)",
                   xaxis=_rank_axis(ok), yaxis_rangemode="tozero")  # fmt: skip


def _mode(blocking: Any) -> str:
    if isinstance(blocking, bool):
        return "blocking" if blocking else "overlapping"
    return {"true": "blocking", "false": "overlapping"}.get(str(blocking).lower(), str(blocking))


def breakdown_figures(df: pd.DataFrame, limit: int = MAX_BREAKDOWN_FIGURES) -> list[go.Figure]:
    """Stacked bars of compute / exposed allreduce / exposed alltoall / pre-post (/ idle) (ms) per rank count.

    One figure per configuration (apart from ranks and blocking); blocking and overlapping stand side by side.
    """
    ok = _ok(df)
    present = [c for c in COMPONENTS if c[0] in ok]
    if ok.empty or not present:
        return []
    figs = []
    for label, part in _configs(ok, exclude=("blocking",))[:limit]:
        modes = part["blocking"].map(_mode) if "blocking" in part else pd.Series("", index=part.index)
        part = part.assign(_mode=modes).sort_values(["ranks", "_mode"])
        x = [[f"{int(r)} ranks" for r in part["ranks"]], list(part["_mode"])]
        fig = go.Figure()
        explained = pd.Series(0.0, index=part.index)
        for col, name, color in present:
            y = pd.to_numeric(part[col], errors="coerce").fillna(0.0) * MS
            explained += y
            fig.add_trace(_bar(x, y, name, color, part))
        other = (pd.to_numeric(part["iteration_s"], errors="coerce") * MS - explained).clip(lower=0.0)
        if (other > 1e-3 * part["iteration_s"] * MS).any():
            fig.add_trace(_bar(x, other, "other (not in the breakdown)", "#9D755D", part))
        figs.append(_layout(fig, f"Iteration time breakdown: {label}", "time per iteration (ms)", barmode="stack",
                            xaxis={"title": {"text": "ranks / communication mode"}}))  # fmt: skip
    return figs


def _bar(x: list[list[str]], y: pd.Series, name: str, color: str, part: pd.DataFrame) -> go.Bar:
    total = pd.to_numeric(part["iteration_s"], errors="coerce") * MS
    return go.Bar(
        x=x, y=y, name=name, marker_color=color,
        customdata=list(zip(part["ranks"].astype(int), part["_mode"], total, strict=True)),
        hovertemplate=(
            f"{name}: %{{y:.3f}} ms<br>%{{customdata[0]}} ranks, %{{customdata[1]}}<br>"
            "iteration %{customdata[2]:.3f} ms<extra></extra>"
        ),
    )  # fmt: skip


def communication_figure(df: pd.DataFrame) -> go.Figure | None:
    """Grouped bars of the communication times (ms per iteration) per configuration and rank count."""
    ok = _ok(df)
    present = [(c, n) for c, n in COMM_COLUMNS if c in ok and ok[c].notna().any()]
    if ok.empty or not present:
        return None
    configs = _configs(ok)
    fig = go.Figure()
    for col, name in present:
        xs: list[list[str]] = [[], []]
        ys, custom = [], []
        for i, (label, part) in enumerate(configs):
            for _, row in part.iterrows():
                xs[0].append(f"config {i + 1}" if len(configs) > 1 else "")
                xs[1].append(f"{int(row['ranks'])} ranks")
                ys.append(float(row[col]) * MS if pd.notna(row[col]) else math.nan)
                custom.append([label, int(row["ranks"])])
        fig.add_trace(
            go.Bar(x=xs if len(configs) > 1 else xs[1], y=ys, name=name, customdata=custom,
                   hovertemplate=f"{name}: %{{y:.3f}} ms<br>%{{customdata[1]}} ranks<br>%{{customdata[0]}}<extra></extra>")
        )  # fmt: skip
    fig = _layout(fig, "Communication per iteration", "time per iteration (ms)", barmode="group",
                  xaxis={"title": {"text": "configuration / ranks" if len(configs) > 1 else "ranks"}})  # fmt: skip
    # The key of "config N" labels; build_report lists it under the chart (too long for an axis).
    fig.update_layout(meta={"configs": [label for label, _ in configs]} if len(configs) > 1 else None)
    if len(configs) == 1:
        fig.update_layout(title={"text": f"Communication per iteration: {configs[0][0]}"})
    return fig


def scaling_figures(df: pd.DataFrame) -> list[go.Figure]:
    """Every data figure of a sweep or scaling run: speedup, efficiency, time breakdowns, communication."""
    if "speedup" not in df and "iteration_s" in df:
        df = derive_scaling(df)
    figs: list[go.Figure | None] = [speedup_figure(df), efficiency_figure(df), *breakdown_figures(df), communication_figure(df)]
    return [f for f in figs if f is not None]


def topology_figures(df: pd.DataFrame) -> tuple[list[go.Figure], list[str]]:
    """Drawings of the sweep's topologies via ``dlrmsim.topologies.figure``, and notes for those it could not draw."""
    names = list(dict.fromkeys(str(t) for t in df.get("topology", pd.Series(dtype=str)).dropna()))
    try:
        from dlrmsim import topologies
    except ImportError:
        return [], ["topology drawing unavailable: dlrmsim.topologies is not installed"]
    loader = getattr(topologies, "load_topology", None)
    draw = getattr(topologies, "figure", None)
    if loader is None or draw is None:
        return [], ["topology drawing unavailable: this dlrmsim has no topology loader or drawing yet"]
    figs, notes = [], []
    for name in names:
        try:
            fig = draw(loader(name))
        except Exception as exc:  # noqa: BLE001 - a drawing is a nicety; the report still gets written
            notes.append(f"topology '{_short(name)}' not drawn: {type(exc).__name__}: {exc}")
            continue
        if not fig.layout.title.text:
            fig.update_layout(title={"text": f"Topology: {_short(name)}"})
        figs.append(fig)
    return figs, notes


# --- the page -------------------------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
.figure { margin: 1em 0 2em 0; min-height: 450px; }
.note { color: #666; font-size: 0.9em; }
table.raw { border-collapse: collapse; font-size: 0.8em; }
table.raw th, table.raw td { border: 1px solid #ddd; padding: 2px 6px; text-align: right; white-space: nowrap; }
table.raw th { background: #f4f4f4; position: sticky; top: 0; }
.tablewrap { overflow: auto; max-height: 600px; }
"""


def _table(df: pd.DataFrame) -> str:
    shown = df.drop(columns=[c for c in df.columns if c.startswith("_")])
    return shown.to_html(index=False, classes="raw", border=0, na_rep="", float_format=lambda v: f"{v:.6g}", escape=True)


def build_report(
    df: pd.DataFrame,
    out: Path,
    topology_figures: list[go.Figure] | None = None,
    title: str = "dlrmsim sweep report",
    notes: Sequence[str] = (),
) -> Path:
    """Write one self-contained HTML page (plotly.js embedded, no network needed) and return its path.

    Sections: speedup and efficiency curves with the ideal line, stacked time breakdowns (blocking beside
    overlapping), communication bars, topology drawings (``topology_figures``), and a table of every row.
    """
    from plotly.offline import get_plotlyjs

    if "speedup" not in df and "iteration_s" in df and "ranks" in df:
        df = derive_scaling(df)
    sections: list[tuple[str, list[go.Figure]]] = [
        ("Scaling", [f for f in (speedup_figure(df), efficiency_figure(df)) if f is not None]),
        ("Where the time goes", breakdown_figures(df)),
        ("Communication", [f for f in (communication_figure(df),) if f is not None]),
        ("Topology", list(topology_figures or [])),
    ]
    notes = list(notes)
    n_groups = len(_configs(_ok(df), exclude=("blocking",))) if "ranks" in df and not _ok(df).empty else 0
    if n_groups > MAX_BREAKDOWN_FIGURES:
        notes.append(f"time breakdowns shown for the first {MAX_BREAKDOWN_FIGURES} of {n_groups} configurations; all numbers are in the table")
    body: list[str] = []
    count = 0
    for heading, figs in sections:
        if not figs:
            continue
        body.append(f"<h2>{html.escape(heading)}</h2>")
        for fig in figs:
            div = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"figure-{count}", config=PLOT_CONFIG)
            body.append(f'<div class="figure" data-figure="{count}">{div}</div>')
            meta = fig.layout.meta
            if isinstance(meta, dict) and meta.get("configs"):
                items = "".join(f"<li>{html.escape(str(c))}</li>" for c in meta["configs"])
                body.append(f'<ol class="note">{items}</ol>')
            count += 1
    total = len(df)
    ok = int(df["status"].eq("ok").sum()) if "status" in df else total
    summary = f"{total} points, {ok} ok, {total - ok} failed."
    failed_html = ""
    if "status" in df and total - ok:
        failed = df[~df["status"].eq("ok")]
        items = "".join(f"<li><code>{html.escape(str(r.get('point_id', '')))}</code>: {html.escape(str(r.get('error', '')))}</li>"
                        for _, r in failed.head(50).iterrows())  # fmt: skip
        failed_html = f"<h2>Failed points</h2><ul>{items}</ul>"
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="dlrmsim-figures" content="{count}">
<title>{html.escape(title)}</title>
<style>{_CSS}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head>
<body>
<h1>{html.escape(title)}</h1>
<p>{html.escape(summary)} Times are per training iteration; speedup and efficiency are relative to the smallest rank
count of each configuration. Written {stamp}.</p>
{"".join(f'<p class="note">{html.escape(n)}</p>' for n in notes)}
{"".join(body)}
{failed_html}
<h2>Raw numbers</h2>
<p class="note">Seconds, bytes and other SI units as in the column names.</p>
<div class="tablewrap">{_table(df)}</div>
</body>
</html>
"""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out
