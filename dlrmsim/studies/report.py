"""One self-contained HTML page of a sweep: the metric against the swept values, scaling curves, time breakdowns,
communication, topology, raw numbers.

Designed for the question a sweep asks: each chart is a grid of small subplots (facets: rank count, scaling,
a swept number), one line per remaining configuration, so a legend lists the lines of one subplot rather than
every point of the sweep, and every configuration gets its time breakdown.

plotly.js is embedded once in the page's head, so it opens with no network access. Times are plotted in
milliseconds per training iteration; the data stay in seconds.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from dlrmsim.output import write_page
from dlrmsim.studies.derive import config_columns, config_keys, derive_scaling
from dlrmsim.studies.spec import OVERRIDE_PREFIXES
from dlrmsim.topologies import figure, load_topology

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
OTHER_NAME = "other (not in the breakdown)"
RANKS_TITLE = "ranks"
PALETTE: tuple[str, ...] = (*qualitative.D3, *qualitative.Dark2)  # 18 colours, then dashes repeat them
DASHES: tuple[str, ...] = ("solid", "dot", "dashdot", "longdash")
FACET_HEIGHT_PX = 320  # per row of subplots in a line chart
BREAKDOWN_ROW_PX = 260  # per row of breakdown subplots
BREAKDOWN_ROWS_PER_FIGURE = 8  # rows of breakdown subplots per figure; bigger sweeps get more figures, never fewer configurations
BREAKDOWN_WRAP = 3  # breakdown subplots per row when there is no blocking/overlapping pair to put side by side
PLOT_CONFIG = {"displaylogo": False, "responsive": True}


def html_page(title: str, body: str, css: str, figures: int) -> str:
    """A self-contained report page: plotly.js embedded (it renders offline), ``figures`` counted in a meta tag for
    the tests, the title as the page's heading, then ``body``."""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="dlrmsim-figures" content="{figures}">
<title>{html.escape(title)}</title>
<style>{css}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head>
<body>
<h1>{html.escape(title)}</h1>
{body}
</body>
</html>
"""


# --- labels ---------------------------------------------------------------------------------------------------


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    text = str(value)
    if text.endswith((".yaml", ".yml")) and "/" in text:
        return Path(text).stem
    return text


def _pretty(column: str) -> str:
    """A swept column as people wrote it in the spec: ``topology.links.opa.bandwidth_GBps`` -> ``links.opa.bandwidth_GBps``."""
    for prefix in OVERRIDE_PREFIXES:
        if column.startswith(prefix):
            return column[len(prefix) :]
    return column


def _brief(column: str) -> str:
    """The last two parts of an override path (``opa.bandwidth_GBps``): short enough for legends and subplot titles."""
    return ".".join(_pretty(column).split(".")[-2:])


def _mode(blocking: Any) -> str:
    if isinstance(blocking, bool):
        return "blocking" if blocking else "overlapping"
    return {"true": "blocking", "false": "overlapping"}.get(str(blocking).lower(), str(blocking))


def _value(column: str, value: Any) -> str:
    return _mode(value) if column == "blocking" else f"{_brief(column)}={_short(value)}"


def _varying(df: pd.DataFrame, columns: Sequence[str]) -> list[str]:
    return [c for c in columns if c in df and df[c].map(str).nunique() > 1]


def _label(row: pd.Series, columns: Sequence[str], sep: str = ", ") -> str:
    if not columns:
        return "all points"
    return sep.join(_value(c, row[c]) for c in columns)


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    if "status" in df:
        df = df[df["status"].eq("ok")]
    if "iteration_s" in df:
        df = df[pd.to_numeric(df["iteration_s"], errors="coerce").gt(0)]
    return df


def _configs(df: pd.DataFrame, exclude: Sequence[str] = (), sep: str = ", ") -> list[tuple[str, pd.DataFrame]]:
    """(label, rows sorted by ranks) per configuration, labelled by the parameters that vary across the sweep.

    Configurations come in the sweep's order of values (numbers numerically), so 6.25 GB/s precedes 25 GB/s.
    """
    cols = [c for c in config_columns(df) if c not in exclude]
    varying = _varying(df, cols)
    keys = config_keys(df, cols)
    groups = []
    for _, idx in keys.groupby(keys, sort=False).groups.items():
        part = df.loc[idx].sort_values("ranks")
        groups.append((_label(part.iloc[0], varying, sep), part))
    groups.sort(key=lambda g: tuple(_sort_key(g[1].iloc[0][c]) for c in varying))
    return groups


def _sort_key(value: Any) -> tuple[int, float, str]:
    number = pd.to_numeric(pd.Series([value]), errors="coerce").iloc[0]
    if isinstance(value, bool) or pd.isna(number):
        return (1, 0.0, str(value))
    return (0, float(number), str(value))


def _sorted_values(series: pd.Series) -> list[Any]:
    return sorted(dict.fromkeys(series.dropna().tolist()), key=_sort_key)


def _facet_values(df: pd.DataFrame, column: str | None) -> list[Any]:
    """A facet's values: swept values in order; the communication kinds (``_metric``) in the order given."""
    if column is None:
        return [None]
    if column == "_metric":
        return list(dict.fromkeys(df[column]))
    return _sorted_values(df[column])


def swept_columns(df: pd.DataFrame) -> list[str]:
    """Numeric swept parameters other than ranks (e.g. a link bandwidth): the x axes of the sweep's main question."""
    out = []
    for c in _varying(df, config_columns(df)):
        values = df[c].dropna()
        if values.map(lambda v: isinstance(v, bool)).any():
            continue
        if pd.to_numeric(values, errors="coerce").notna().all():
            out.append(c)
    return out


# --- faceted line charts --------------------------------------------------------------------------------------


def _axis(values: Sequence[float], title: str) -> dict[str, Any]:
    """A numeric axis ticked at exactly the swept values; log-scaled when they span a factor of 4 or more."""
    values = sorted({float(v) for v in values})
    ticks = {"tickvals": values, "ticktext": [f"{v:g}" for v in values], "title": {"text": title}}
    if values and values[0] > 0 and values[-1] / values[0] >= 4:
        return {"type": "log", **ticks}
    return ticks


def _facet_title(column: str | None, value: Any) -> str:
    if column is None:
        return ""
    if column == "ranks":
        return f"{int(value)} ranks"
    if column == "_metric":
        return str(value)
    return _value(column, value)


def _line_style(i: int) -> dict[str, Any]:
    colors = PALETTE
    return {"color": colors[i % len(colors)], "dash": DASHES[(i // len(colors)) % len(DASHES)]}


def faceted_lines(
    df: pd.DataFrame,
    x: str,
    y: str,
    *,
    title: str,
    x_title: str,
    y_title: str,
    facet_col: str | None = None,
    facet_row: str | None = None,
    y_unit: str = "",
    ideal: Callable[[list[float], pd.DataFrame], list[tuple[str, list[float], list[float]]]] | None = None,
    shared_y: bool = False,
    exclude: Sequence[str] = (),
) -> go.Figure:
    """``y`` against ``x``: one subplot per value of ``facet_row`` x ``facet_col``, one line per configuration.

    A configuration is a combination of the other swept parameters; it keeps one colour (and one legend entry)
    across all subplots, so the legend lists the lines of one subplot, not of the whole sweep. ``ideal`` gives
    dashed reference lines per subplot: (name, xs, ys).
    """
    rows = _facet_values(df, facet_row)
    cols = _facet_values(df, facet_col)
    line_cols = [c for c in _varying(df, config_columns(df)) if c not in (x, facet_col, facet_row, *exclude)]
    titles = ["<br>".join(t for t in (_facet_title(facet_row, r), _facet_title(facet_col, c)) if t) for r in rows for c in cols]
    fig = make_subplots(
        rows=len(rows),
        cols=len(cols),
        subplot_titles=titles if any(titles) else None,
        shared_yaxes=shared_y,
        shared_xaxes=True,
        horizontal_spacing=0.04 if shared_y else 0.06,
        vertical_spacing=min(0.12, 0.3 / max(1, len(rows))),
    )
    df = df.sort_values(x, key=lambda v: pd.to_numeric(v, errors="coerce"), kind="stable")
    # subplot of each row, computed once (text keys, as the facet values are compared as text)
    row_of = {str(v): i for i, v in enumerate(rows)}
    col_of = {str(v): j for j, v in enumerate(cols)}
    df = df.assign(
        _facet_i=df[facet_row].map(str).map(row_of) if facet_row else 0,
        _facet_j=df[facet_col].map(str).map(col_of) if facet_col else 0,
    )
    configs = _configs(df, exclude=[c for c in config_columns(df) if c not in line_cols])
    labels = [label for label, _ in configs]
    traces: list[go.Scatter] = []
    where: list[tuple[int, int]] = []
    shown: set[str] = set()

    def facets(part: pd.DataFrame):  # noqa: ANN202 - (row index, col index, row value, col value, rows of that subplot)
        for (i, j), cell in sorted(part.groupby(["_facet_i", "_facet_j"], sort=False), key=lambda g: g[0]):
            yield int(i), int(j), rows[int(i)], cols[int(j)], cell

    if ideal is not None:
        for i, j, _rv, _cv, cell in facets(df):
            for name, xs, ys in ideal(sorted({float(v) for v in cell[x]}), cell):
                traces.append(
                    go.Scatter(
                        x=xs,
                        y=ys,
                        mode="lines",
                        name=name,
                        legendgroup=name,
                        showlegend=name not in shown,
                        line={"dash": "dash", "color": "gray"},
                        hovertemplate=f"{html.escape(name)}<br>{x_title} %{{x}}<br>%{{y:.3g}} {y_unit}<extra></extra>",
                    )
                )
                where.append((i, j))
                shown.add(name)
    for k, (label, line) in enumerate(configs):
        for i, j, rv, cv, cell in facets(line):
            where_text = " ".join(t for t in (_facet_title(facet_row, rv), _facet_title(facet_col, cv)) if t)
            traces.append(
                go.Scatter(
                    x=cell[x].astype(float).tolist(),
                    y=cell[y].astype(float).tolist(),
                    mode="lines+markers",
                    name=label,
                    legendgroup=label,
                    showlegend=label not in shown,
                    line=_line_style(k),
                    customdata=list(zip((cell["iteration_s"] * MS).tolist(), cell["ranks"].astype(int).tolist(), strict=True)),
                    hovertemplate=(
                        f"{html.escape(label)}<br>{html.escape(where_text)}<br>{html.escape(x_title)} %{{x}}<br>"
                        f"%{{y:.4g}} {y_unit}<br>iteration %{{customdata[0]:.3f}} ms at %{{customdata[1]}} ranks<extra></extra>"
                    ),
                )
            )
            where.append((i, j))
            shown.add(label)
    if traces:
        fig.add_traces(traces, rows=[i + 1 for i, _ in where], cols=[j + 1 for _, j in where])
    fig.update_xaxes(**_axis(df[x].astype(float), ""))
    for j in range(len(cols)):
        fig.update_xaxes(title={"text": x_title}, row=len(rows), col=j + 1)
    fig.update_yaxes(title={"text": y_title}, col=1)
    fig.update_yaxes(rangemode="tozero")
    _layout(
        fig,
        title,
        y_title,
        height=max(450, 120 + FACET_HEIGHT_PX * len(rows)),
        legend={"title": {"text": "configuration" if line_cols else ""}, "groupclick": "togglegroup"},
    )
    fig.update_layout(yaxis={"title": {"text": y_title}})
    fig.update_annotations(font_size=12)  # subplot titles
    fig.update_layout(meta={"facets": len(rows) * len(cols), "lines": labels, "facet_row": facet_row, "facet_col": facet_col})
    return fig


def _layout(fig: go.Figure, title: str, yaxis: str, **kwargs: Any) -> go.Figure:
    fig.update_layout(
        title={"text": title},
        yaxis={"title": {"text": yaxis}},
        legend={"title": {"text": "configuration"}},
        template="plotly_white",
        margin={"t": 90},
        hovermode="closest",
    )
    fig.update_layout(**kwargs)
    return fig


def _scaling_facets(df: pd.DataFrame) -> tuple[str | None, str | None]:
    """(facet_col, facet_row) of a chart against ranks: the first swept number across, strong/weak down."""
    swept = swept_columns(df)
    row = "scaling" if "scaling" in _varying(df, ["scaling"]) else None
    return (swept[0] if swept else None), row


# --- figures --------------------------------------------------------------------------------------------------


def swept_figures(df: pd.DataFrame) -> list[go.Figure]:
    """The sweep's question: iteration time against each swept number (e.g. bandwidth), one subplot per rank count."""
    ok = _ok(df)
    if ok.empty or "ranks" not in ok:
        return []
    ok = ok.assign(_iteration_ms=pd.to_numeric(ok["iteration_s"], errors="coerce") * MS)
    figs = []
    for column in swept_columns(ok):
        row = "scaling" if "scaling" in _varying(ok, ["scaling"]) and column != "scaling" else None
        figs.append(
            faceted_lines(
                ok,
                column,
                "_iteration_ms",
                facet_col="ranks" if ok["ranks"].nunique() > 1 else None,
                facet_row=row,
                title=f"Iteration time against {_pretty(column)}",
                x_title=_pretty(column),
                y_title="time per iteration (ms)",
                y_unit="ms",
            )
        )
    return figs


def speedup_figure(df: pd.DataFrame) -> go.Figure | None:
    """Speedup against ranks per configuration, with the ideal (linear) line per baseline rank count."""
    ok = _ok(df)
    if ok.empty or "speedup" not in ok or ok["speedup"].isna().all():
        return None
    ok = ok[ok["speedup"].notna()]

    def ideal(xs: list[float], part: pd.DataFrame) -> list[tuple[str, list[float], list[float]]]:
        out = []
        for base in sorted({int(b) for b in part["ranks_base"].dropna()}):
            above = [v for v in xs if v >= base]
            out.append((f"ideal (from {base} rank{'s' if base > 1 else ''})", above, [v / base for v in above]))
        return out

    col, row = _scaling_facets(ok)
    return faceted_lines(
        ok,
        "ranks",
        "speedup",
        facet_col=col,
        facet_row=row,
        ideal=ideal,
        shared_y=True,
        y_unit="x",
        title="Speedup against ranks (strong: t_base / t; weak: throughput ratio)",
        x_title=RANKS_TITLE,
        y_title="speedup (x, vs the fewest ranks)",
    )


def efficiency_figure(df: pd.DataFrame) -> go.Figure | None:
    """Parallel efficiency (%) against ranks per configuration, with the ideal 100 % line."""
    ok = _ok(df)
    if ok.empty or "efficiency" not in ok or ok["efficiency"].isna().all():
        return None
    ok = ok[ok["efficiency"].notna()].assign(_efficiency_pct=lambda d: d["efficiency"] * 100)
    col, row = _scaling_facets(ok)
    return faceted_lines(
        ok,
        "ranks",
        "_efficiency_pct",
        facet_col=col,
        facet_row=row,
        shared_y=True,
        y_unit="%",
        ideal=lambda xs, _part: [("ideal", xs, [100.0] * len(xs))],
        title="Parallel efficiency against ranks (speedup / rank ratio)",
        x_title=RANKS_TITLE,
        y_title="efficiency (%)",
    )


def breakdown_figures(df: pd.DataFrame, per_figure: int = BREAKDOWN_ROWS_PER_FIGURE) -> list[go.Figure]:
    """Stacked bars of compute / exposed allreduce / exposed alltoall / pre-post (/ idle) (ms) against ranks.

    One subplot per configuration (apart from ranks and blocking), every configuration of the sweep: one row
    per configuration with overlapping and blocking side by side on a shared time axis, ``per_figure`` rows
    per figure (more figures for bigger sweeps).
    """
    ok = _ok(df)
    present = [c for c in COMPONENTS if c[0] in ok]
    if ok.empty or not present or "ranks" not in ok:
        return []
    modes = sorted(set(ok["blocking"].map(_mode)), key=lambda m: (m != "overlapping", m)) if "blocking" in ok else [""]
    ok = ok.assign(_mode=ok["blocking"].map(_mode) if "blocking" in ok else "")
    configs = _configs(ok, exclude=("blocking",))
    ncols = len(modes) if len(modes) > 1 else min(BREAKDOWN_WRAP, len(configs))
    facets = [(label, mode) for label, _ in configs for mode in modes]
    parts = {(label, mode): part[part["_mode"].eq(mode)] for label, part in configs for mode in modes}
    per_page = per_figure * ncols
    figs = []
    for first in range(0, len(facets), per_page):
        page = facets[first : first + per_page]
        nrows = math.ceil(len(page) / ncols)
        titles = [f"{label}<br>{mode}" if mode else label for label, mode in page]
        fig = make_subplots(
            rows=nrows,
            cols=ncols,
            subplot_titles=titles,
            shared_yaxes="rows" if len(modes) > 1 else False,
            horizontal_spacing=0.05,
            vertical_spacing=min(0.1, 0.35 / max(1, nrows)),
        )
        bars: list[go.Bar] = []
        where: list[tuple[int, int]] = []
        seen: set[str] = set()  # one legend entry per component, from its first bar
        for k, key in enumerate(page):
            part = parts[key].sort_values("ranks")
            if part.empty:
                continue
            x = [str(int(r)) for r in part["ranks"]]
            explained = pd.Series(0.0, index=part.index)
            cell = (k // ncols + 1, k % ncols + 1)
            for col, name, color in present:
                y = pd.to_numeric(part[col], errors="coerce").fillna(0.0) * MS
                explained += y
                bars.append(_bar(x, y, name, color, part, show=name not in seen))
                where.append(cell)
                seen.add(name)
            other = (pd.to_numeric(part["iteration_s"], errors="coerce") * MS - explained).clip(lower=0.0)
            if (other > 1e-3 * part["iteration_s"] * MS).any():
                bars.append(_bar(x, other, OTHER_NAME, "#9D755D", part, show=OTHER_NAME not in seen))
                where.append(cell)
                seen.add(OTHER_NAME)
        if bars:
            fig.add_traces(bars, rows=[r for r, _ in where], cols=[c for _, c in where])
        fig.update_xaxes(type="category")
        for j in range(ncols):
            fig.update_xaxes(title={"text": "ranks"}, row=nrows, col=j + 1)
        fig.update_yaxes(title={"text": "time per iteration (ms)"}, col=1)
        pages = math.ceil(len(facets) / per_page)
        title = "Where the time goes: iteration time breakdown per configuration"
        if pages > 1:
            title += f" ({first // per_page + 1} of {pages})"
        _layout(
            fig,
            title,
            "time per iteration (ms)",
            barmode="stack",
            height=max(450, 120 + BREAKDOWN_ROW_PX * nrows),
            legend={"title": {"text": "component"}, "traceorder": "normal"},
        )
        fig.update_annotations(font_size=12)  # subplot titles
        fig.update_layout(meta={"facets": [f"{label}, {mode}" if mode else label for label, mode in page]})
        figs.append(fig)
    return figs


def _bar(x: list[str], y: pd.Series, name: str, color: str, part: pd.DataFrame, show: bool) -> go.Bar:
    total = pd.to_numeric(part["iteration_s"], errors="coerce") * MS
    return go.Bar(
        x=x,
        y=y.astype(float).tolist(),
        name=name,
        marker_color=color,
        legendgroup=name,
        showlegend=show,
        customdata=list(zip(part["ranks"].astype(int).tolist(), part["_mode"].tolist(), total.tolist(), strict=True)),
        hovertemplate=(
            f"{name}: %{{y:.3f}} ms<br>%{{customdata[0]}} ranks, %{{customdata[1]}}<br>"
            "iteration %{customdata[2]:.3f} ms<extra></extra>"
        ),
    )


def communication_figure(df: pd.DataFrame) -> go.Figure | None:
    """Communication times (ms per iteration) against ranks: one subplot per kind (exposed / total allreduce and
    alltoall) and swept number, one line per configuration."""
    ok = _ok(df)
    present = [(c, n) for c, n in COMM_COLUMNS if c in ok and ok[c].notna().any()]
    if ok.empty or not present:
        return None
    swept = swept_columns(ok)
    long = pd.concat([ok.assign(_metric=name, _comm_ms=pd.to_numeric(ok[c], errors="coerce") * MS) for c, name in present])
    long = long[long["_comm_ms"].notna()]
    order = {name: i for i, (_, name) in enumerate(present)}
    long = long.sort_values("_metric", key=lambda s: s.map(order), kind="stable")
    fig = faceted_lines(
        long,
        "ranks",
        "_comm_ms",
        facet_col="_metric",
        facet_row=swept[0] if swept else None,
        y_unit="ms",
        title="Communication per iteration",
        x_title=RANKS_TITLE,
        y_title="time per iteration (ms)",
    )
    return fig


def scaling_figures(df: pd.DataFrame) -> list[go.Figure]:
    """Every data figure of a sweep or scaling run: speedup, efficiency, against the swept numbers, time breakdowns,
    communication."""
    if "speedup" not in df and "iteration_s" in df:
        df = derive_scaling(df)
    figs: list[go.Figure | None] = [
        speedup_figure(df),
        efficiency_figure(df),
        *swept_figures(df),
        *breakdown_figures(df),
        communication_figure(df),
    ]
    return [f for f in figs if f is not None]


def topology_figures(df: pd.DataFrame) -> tuple[list[go.Figure], list[str]]:
    """Drawings of the sweep's topologies, and notes for those it could not draw."""
    names = list(dict.fromkeys(str(t) for t in df.get("topology", pd.Series(dtype=str)).dropna()))
    figs, notes = [], []
    for name in names:
        try:
            fig = figure(load_topology(name))
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

    Sections: iteration time against each swept number, speedup and efficiency curves with the ideal line,
    stacked time breakdowns of every configuration (overlapping beside blocking), communication times, topology
    drawings (``topology_figures``), and a table of every row.
    """
    if "speedup" not in df and "iteration_s" in df and "ranks" in df:
        df = derive_scaling(df)
    sections: list[tuple[str, list[go.Figure]]] = [
        ("Against the swept values", swept_figures(df)),
        ("Scaling", [f for f in (speedup_figure(df), efficiency_figure(df)) if f is not None]),
        ("Where the time goes", breakdown_figures(df)),
        ("Communication", [f for f in (communication_figure(df),) if f is not None]),
        ("Topology", list(topology_figures or [])),
    ]
    notes = list(notes)
    body: list[str] = []
    count = 0
    for heading, figs in sections:
        if not figs:
            continue
        body.append(f"<h2>{html.escape(heading)}</h2>")
        for fig in figs:
            div = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"figure-{count}", config=PLOT_CONFIG)
            body.append(f'<div class="figure" data-figure="{count}">{div}</div>')
            count += 1
    total = len(df)
    ok = int(df["status"].eq("ok").sum()) if "status" in df else total
    summary = f"{total} points, {ok} ok, {total - ok} failed."
    failed_html = ""
    if "status" in df and total - ok:
        failed = df[~df["status"].eq("ok")]
        items = "".join(
            f"<li><code>{html.escape(str(r.get('point_id', '')))}</code>: {html.escape(str(r.get('error', '')))}</li>"
            for _, r in failed.head(50).iterrows()
        )
        failed_html = f"<h2>Failed points</h2><ul>{items}</ul>"
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    body_html = f"""<p>{html.escape(summary)} Times are per training iteration; speedup and efficiency are relative
to the smallest rank
count of each configuration. Written {stamp}.</p>
{"".join(f'<p class="note">{html.escape(n)}</p>' for n in notes)}
{"".join(body)}
{failed_html}
<h2>Raw numbers</h2>
<p class="note">Seconds, bytes and other SI units as in the column names.</p>
<div class="tablewrap">{_table(df)}</div>
"""
    return write_page(out, html_page(title, body_html, _CSS, count))
