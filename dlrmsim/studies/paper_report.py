"""The report of a built-in study: one figure per experiment and a table of its points, in one offline HTML page.

Figures by the experiment's ``figure`` kind: ``scaling`` (speedup and efficiency against ranks, ideal lines),
``breakdown`` (stacked compute / pre-post / exposed communication per rank count, blocking beside overlapping),
``communication`` (time with an alltoall or allreduce in flight on rank 0, per variant) and ``single_socket``
(embedding vs MLP vs other compute time per update strategy and index distribution). plotly.js is embedded in
the page, so it renders without a network.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dlrmsim.output import write_page
from dlrmsim.studies.paper import Experiment, StudyResult, experiment_table
from dlrmsim.studies.report import PLOT_CONFIG, html_page

MS = 1e3
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
BREAKDOWN = (
    ("compute_s", "compute", "#4c78a8"),
    ("prepost_s", "pre/post-processing", "#9ecae9"),
    ("exposed_allreduce_s", "exposed allreduce", "#f58518"),
    ("exposed_alltoall_s", "exposed alltoall", "#e45756"),
    ("other_s", "idle (waiting for slower ranks)", "#bab0ac"),
)
COMMUNICATION = (
    ("alltoall_time_s", "alltoall in flight", "#e45756"),
    ("allreduce_time_s", "allreduce in flight", "#f58518"),
    ("exposed_alltoall_s", "exposed alltoall", "#b22222"),
    ("exposed_allreduce_s", "exposed allreduce", "#8b4513"),
)
SINGLE = (
    ("embedding_s", "embeddings (lookup, backward, update)", "#54a24b"),
    ("mlp_s", "MLPs (GEMMs, activations)", "#4c78a8"),
    ("other_compute_s", "interaction, optimizer, other", "#bab0ac"),
)


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"].eq("ok")]


def _variant(df: pd.DataFrame) -> pd.Series:
    """The series label without the workload (the bars' inner category)."""
    return df["series"].str.split(", ", n=1).str[1].fillna("")


def scaling_figure(exp: Experiment, df: pd.DataFrame) -> go.Figure:
    """Speedup (with each workload's ideal line) and efficiency against ranks, one line per series."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Speedup", "Efficiency"), horizontal_spacing=0.1)
    ok = _ok(df).dropna(subset=["speedup"])
    for i, (series, part) in enumerate(ok.groupby("series", sort=False)):
        part = part.sort_values("ranks")
        color = COLORS[i % len(COLORS)]
        base = int(part["ranks_base"].iloc[0])
        hover = [
            f"{series}<br>{r} ranks on sockets {s}<br>baseline {base} ranks"
            for r, s in zip(part["ranks"], part["sockets"], strict=True)
        ]
        common = {
            "mode": "lines+markers",
            "line": {"color": color},
            "legendgroup": series,
            "hovertext": hover,
            "hoverinfo": "text+y",
        }
        fig.add_trace(go.Scatter(x=part["ranks"], y=part["speedup"], name=f"{series} (base {base})", **common), row=1, col=1)
        fig.add_trace(go.Scatter(x=part["ranks"], y=part["efficiency"], name=series, showlegend=False, **common), row=1, col=2)
        ideal = part["ranks"] / base
        fig.add_trace(
            go.Scatter(
                x=part["ranks"],
                y=ideal,
                mode="lines",
                line={"color": color, "dash": "dot", "width": 1},
                legendgroup=series,
                showlegend=False,
                hoverinfo="skip",
            ),
            row=1,
            col=1,
        )
    fig.add_hline(y=1.0, line={"dash": "dot", "color": "#888"}, row=1, col=2)
    fig.update_xaxes(type="log", dtick=0.30102999566, title_text="ranks (sockets)")
    fig.update_yaxes(title_text="speedup (dotted: ideal)", row=1, col=1)
    fig.update_yaxes(title_text="efficiency", rangemode="tozero", row=1, col=2)
    return _layout(fig, exp.title)


def _stacked(
    exp: Experiment, df: pd.DataFrame, parts: tuple[tuple[str, str, str], ...], ytitle: str, stack: bool = True
) -> go.Figure:
    """Bars per workload panel: x = (rank count, variant); ``parts`` stacked (or grouped) in ms."""
    ok = _ok(df).copy()
    workloads = list(dict.fromkeys(ok["workload"]))
    fig = make_subplots(rows=1, cols=max(1, len(workloads)), subplot_titles=workloads, horizontal_spacing=0.06)
    ok["_variant"] = _variant(ok)
    for c, wl in enumerate(workloads, start=1):
        part = ok[ok["workload"] == wl].sort_values(["ranks"], kind="stable")
        x = [[f"{int(r)}R" for r in part["ranks"]], list(part["_variant"])]
        for col, name, color in parts:
            if col not in part:
                continue
            fig.add_trace(
                go.Bar(
                    x=x,
                    y=pd.to_numeric(part[col], errors="coerce") * MS,
                    name=name,
                    marker_color=color,
                    legendgroup=name,
                    showlegend=c == 1,
                    hovertemplate=f"{name}: %{{y:.3f}} ms<extra>%{{x}}</extra>",
                ),
                row=1,
                col=c,
            )
        fig.update_yaxes(title_text=ytitle if c == 1 else None, row=1, col=c)
    fig.update_layout(barmode="stack" if stack else "group")
    fig.update_xaxes(tickangle=-60)
    return _layout(fig, exp.title)


def breakdown_figure(exp: Experiment, df: pd.DataFrame) -> go.Figure:
    return _stacked(exp, df, BREAKDOWN, "ms per iteration (slowest rank)")


def communication_figure(exp: Experiment, df: pd.DataFrame) -> go.Figure:
    return _stacked(exp, df, COMMUNICATION, "ms per iteration (rank 0)", stack=False)


def single_socket_figure(exp: Experiment, df: pd.DataFrame) -> go.Figure:
    return _stacked(exp, df, SINGLE, "ms per iteration (one socket)")


FIGURES = {
    "scaling": scaling_figure,
    "breakdown": breakdown_figure,
    "communication": communication_figure,
    "single_socket": single_socket_figure,
}


def _layout(fig: go.Figure, title: str) -> go.Figure:
    fig.update_layout(
        title={"text": title},
        template="plotly_white",
        margin={"t": 80, "b": 120},
        height=520,
        legend={"orientation": "h", "y": -0.35},
        hovermode="closest",
    )
    return fig


def _html_table(df: pd.DataFrame) -> str:
    return df.to_html(index=False, classes="raw", border=0, na_rep="", float_format=lambda v: f"{v:.4g}", escape=True)


_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1300px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
.figure { margin: 1em 0; min-height: 520px; } .note { color: #555; font-size: 0.9em; }
table.raw { border-collapse: collapse; font-size: 0.8em; }
table.raw th, table.raw td { border: 1px solid #ddd; padding: 2px 6px; text-align: right; white-space: nowrap; }
table.raw th { background: #f4f4f4; } .tablewrap { overflow: auto; max-height: 480px; }
"""


def build_study_report(result: StudyResult, out: Path) -> Path:
    """Write the self-contained page: per experiment its figure, its baselines and its table."""
    body: list[str] = []
    count = 0
    by_name = {e.name: e for e in result.study.experiments}
    for name, part in result.rows.groupby("experiment", sort=False):
        exp = by_name[str(name)]
        body.append(f'<h2 id="{html.escape(exp.name)}">{html.escape(exp.title)}</h2>')
        notes = [
            f"{series}: baseline {b.ranks} rank{'s' if b.ranks > 1 else ''} - {b.reason}."
            for (e, series), b in result.baselines.items()
            if e == exp.name
        ]
        refused = part[~part["status"].eq("ok")]
        for msg in dict.fromkeys(refused["error"].astype(str)):
            notes.append(f"not simulated: {msg}")
        fig = FIGURES[exp.figure](exp, part)
        div = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"figure-{count}", config=PLOT_CONFIG)
        body.append(f'<div class="figure" data-figure="{count}" data-experiment="{html.escape(exp.name)}">{div}</div>')
        count += 1
        body.extend(f'<p class="note">{html.escape(n)}</p>' for n in notes)
        body.append(f'<div class="tablewrap">{_html_table(experiment_table(part))}</div>')
    study = result.study
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    toc = "".join(
        f'<li><a href="#{html.escape(e)}">{html.escape(by_name[e].title)}</a></li>'
        for e in dict.fromkeys(result.rows["experiment"])
    )
    body_html = f"""<p>Setups from {html.escape(study.source or study.name)}; every number is simulated by dlrmsim
from its YAML specs (none is
taken from the paper). {len(result.rows)} points, {result.simulations} distinct simulations, {result.wall_s:.1f} s.
Written {stamp}.
Times are per training iteration.</p>
<ol>{toc}</ol>
{"".join(body)}
"""
    return write_page(out, html_page(study.title, body_html, _CSS, count))
