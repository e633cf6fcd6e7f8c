"""The HTML report: every chart present with titles, axis units and hover values, and no network reference."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from dlrmsim.studies.report import build_report, scaling_figures
from dlrmsim.studies.results import load_results
from dlrmsim.studies.runner import run_sweep
from dlrmsim.studies.spec import plan_sweep
from tests.studies import sweep_evaluators as ev


@pytest.fixture
def results(write_spec, tmp_path: Path) -> Path:
    """A finished sweep: 2 bandwidths x 2 modes x 4 rank counts, the 4-rank points failed."""
    spec = write_spec(evaluator="failing", blocking=[False, True], topology_overrides={"links.net.bandwidth_GBps": [12.5, 25]})
    out = tmp_path / "sweep"
    run_sweep(plan_sweep(spec).points, out, ev.failing, serial=True, progress=False)
    return out


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.external: list[str] = []
        self.figures = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        for key in ("src", "href"):
            value = a.get(key) or ""
            if value.startswith(("http:", "https:", "//")):
                self.external.append(f"<{tag} {key}={value}>")
        if tag == "div" and "plotly-graph-div" in (a.get("class") or ""):
            self.figures += 1


def test_figures_have_titles_axis_units_and_hover(results: Path) -> None:
    df = load_results(results)
    figs = scaling_figures(df)
    # speedup, efficiency, one breakdown per bandwidth (blocking beside overlapping), communication
    assert len(figs) == 5
    for fig in figs:
        assert fig.layout.title.text
        assert "ranks" in fig.layout.xaxis.title.text  # ranks are the unit of the x axis
        assert "(" in fig.layout.yaxis.title.text  # units in brackets: (ms), (%), (x, ...)
        for trace in fig.data:
            assert trace.hovertemplate, (fig.layout.title.text, trace.name)
    speedup = figs[0]
    ideal = [t for t in speedup.data if t.name.startswith("ideal")]
    assert [list(t.y) for t in ideal] == [[1.0, 2.0, 8.0]]  # from 1 rank; the 4-rank points failed
    breakdown = figs[2]
    assert breakdown.layout.barmode == "stack"
    assert {t.name for t in breakdown.data} >= {"compute", "exposed allreduce", "exposed alltoall", "pre/post-processing"}
    assert set(breakdown.data[0].x[1]) == {"blocking", "overlapping"}


def test_breakdown_bars_add_up_to_the_iteration_time(results: Path) -> None:
    df = load_results(results)
    fig = scaling_figures(df)[2]
    total = sum(pd.Series(list(t.y)) for t in fig.data)
    iteration_ms = [c[2] for c in fig.data[0].customdata]
    assert total.tolist() == pytest.approx(iteration_ms, rel=1e-9)


def test_report_is_one_self_contained_page(results: Path, cli) -> None:
    res = cli("report", str(results))
    assert res.code == 0, res.err
    page = (results / "report.html").read_text()
    tags = _Tags()
    tags.feed(page)
    assert tags.external == []
    assert 'cdn.plot.ly/plotly' not in page.split("</script>", 1)[1]  # nothing after the embedded bundle points at a CDN
    assert "Plotly.newPlot" in page and len(page) > 3_000_000  # plotly.js itself is inside
    # 5 sweep charts and the drawing of the toy topology (valid under the real topology schema, so it is drawn)
    assert tags.figures == 6 and '<meta name="dlrmsim-figures" content="6">' in page
    assert "not drawn" not in page
    assert "ValueError: toy failure at 4 ranks" in page  # failed points listed
    assert "Raw numbers" in page and "topology.links.net.bandwidth_GBps" in page


def test_report_of_a_sweep_with_no_success_still_writes_the_table(write_spec, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    run_sweep(plan_sweep(write_spec(ranks=[4])).points, out, ev.failing, serial=True, progress=False)
    page = build_report(load_results(out), tmp_path / "r.html").read_text()
    assert '<meta name="dlrmsim-figures" content="0">' in page and "toy failure" in page


def test_report_of_a_missing_folder_is_a_one_line_error(cli, tmp_path: Path) -> None:
    from tests.conftest import assert_one_line_error

    assert_one_line_error(cli("report", str(tmp_path / "nowhere")), "no sweep results here")
