"""A validation report as one interactive page: measured against predicted step time per case, and per thread
count where the cases were swept (``validate --threads``), so thread scaling is seen, not read off a table."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from dlrmsim.calibration.validate import CaseResult, ValidationReport, base_case_name


def thread_series(report: ValidationReport) -> dict[str, list[CaseResult]]:
    """Per base case with more than one thread count, its results in thread order (the swept cases)."""
    groups: dict[str, list[CaseResult]] = defaultdict(list)
    for c in report.cases:
        groups[base_case_name(c.name)].append(c)
    return {k: sorted(v, key=lambda c: c.threads) for k, v in groups.items() if len({c.threads for c in v}) > 1}


def figure(report: ValidationReport, title: str):  # noqa: ANN201 (plotly's Figure; imported lazily)
    """Swept cases: step time (ms) against threads, measured solid and predicted dashed, one colour per case, on
    log-log axes (perfect scaling is a straight line). Otherwise measured and predicted bars per case."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative

    fig = go.Figure()
    series = thread_series(report)
    if series:
        for i, (name, cs) in enumerate(series.items()):
            colour = qualitative.Plotly[i % len(qualitative.Plotly)]
            threads = [c.threads for c in cs]
            errors = [f"{100 * c.error:+.1f} %" for c in cs]
            for label, times, dash in (
                ("measured", [c.measured_s for c in cs], "solid"),
                ("predicted", [c.predicted_s for c in cs], "dash"),
            ):
                fig.add_trace(
                    go.Scatter(
                        x=threads,
                        y=[t * 1e3 for t in times],
                        name=f"{name} {label}",
                        mode="lines+markers",
                        line={"color": colour, "dash": dash},
                        text=errors,
                        hovertemplate=f"%{{x}} threads: %{{y:.2f}} ms {label} (error %{{text}})",
                    )
                )
        fig.update_xaxes(type="log", title="threads per rank", tickvals=sorted({c.threads for cs in series.values() for c in cs}))
        fig.update_yaxes(type="log", title="step time (ms)")
    else:
        names = [c.name for c in report.cases]
        fig.add_trace(go.Bar(x=names, y=[c.measured_s * 1e3 for c in report.cases], name="measured"))
        fig.add_trace(go.Bar(x=names, y=[c.predicted_s * 1e3 for c in report.cases], name="predicted"))
        fig.update_yaxes(title="step time (ms)")
    fig.update_layout(title=title, template="plotly_white", hovermode="closest")
    return fig


def write_html(report: ValidationReport, path: str | Path, title: str) -> Path:
    """The report's figure as one self-contained page (plotly.js embedded: it renders offline)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure(report, title).write_html(str(path), include_plotlyjs=True, full_html=True, config={"displaylogo": False})
    return path
