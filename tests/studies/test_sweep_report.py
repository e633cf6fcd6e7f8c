"""The HTML report: every chart present with titles, axis units and hover values, and no network reference."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from dlrmsim.studies.report import (
    breakdown_figures,
    build_report,
    communication_figure,
    scaling_figures,
    swept_figures,
    topology_figures,
)
from dlrmsim.studies.results import load_results
from dlrmsim.studies.runner import run_sweep
from dlrmsim.studies.spec import plan_sweep
from tests.conftest import assert_one_line_error
from tests.studies import sweep_evaluators as ev
from tests.studies.html_checks import OfflineParser


@pytest.fixture
def results(write_spec, tmp_path: Path) -> Path:
    """A finished sweep: 2 bandwidths x 2 modes x 4 rank counts, the 4-rank points failed."""
    spec = write_spec(evaluator="failing", blocking=[False, True], topology_overrides={"links.net.bandwidth_GBps": [12.5, 25]})
    out = tmp_path / "sweep"
    run_sweep(plan_sweep(spec).points, out, ev.failing, serial=True, progress=False)
    return out


class _Tags(OfflineParser):
    def __init__(self) -> None:
        super().__init__()
        self.figures = 0

    def on_tag(self, tag: str, attrs: dict[str, str | None]) -> None:
        if tag == "div" and "plotly-graph-div" in (attrs.get("class") or ""):
            self.figures += 1


def test_figures_have_titles_axis_units_and_hover(results: Path) -> None:
    df = load_results(results)
    figs = scaling_figures(df)
    # speedup, efficiency, iteration time against bandwidth, one breakdown figure (2 bandwidths x 2 modes), communication
    assert [f.layout.title.text.split(" ")[0] for f in figs] == ["Speedup", "Parallel", "Iteration", "Where", "Communication"]
    for fig in figs:
        assert fig.layout.title.text
        x_titles = {
            ax.title.text
            for name, ax in fig.layout.to_plotly_json().items()
            if name.startswith("xaxis")
            for ax in [fig.layout[name]]
        }
        assert x_titles & {"ranks", "links.net.bandwidth_GBps"}, x_titles  # ranks or the swept value are the x axis
        assert "(" in fig.layout.yaxis.title.text  # units in brackets: (ms), (%), (x, ...)
        for trace in fig.data:
            assert trace.hovertemplate, (fig.layout.title.text, trace.name)
    speedup = figs[0]
    ideal = [t for t in speedup.data if t.name.startswith("ideal")]
    # one ideal line per bandwidth facet, from 1 rank; the 4-rank points failed
    assert [list(t.y) for t in ideal] == [[1.0, 2.0, 8.0], [1.0, 2.0, 8.0]]
    breakdown = figs[3]
    assert breakdown.layout.barmode == "stack"
    assert {t.name for t in breakdown.data} >= {"compute", "exposed allreduce", "exposed alltoall", "pre/post-processing"}
    assert breakdown.layout.meta["facets"] == [
        "net.bandwidth_GBps=12.5, overlapping",
        "net.bandwidth_GBps=12.5, blocking",
        "net.bandwidth_GBps=25, overlapping",
        "net.bandwidth_GBps=25, blocking",
    ]


def test_breakdown_bars_add_up_to_the_iteration_time(results: Path) -> None:
    df = load_results(results)
    fig = scaling_figures(df)[3]
    by_subplot: dict[str, list] = {}
    for t in fig.data:
        by_subplot.setdefault(t.xaxis, []).append(t)
    assert len(by_subplot) == 4
    for traces in by_subplot.values():
        total = sum(pd.Series(list(t.y)) for t in traces)
        iteration_ms = [c[2] for c in traces[0].customdata]
        assert total.tolist() == pytest.approx(iteration_ms, rel=1e-9)


@pytest.fixture
def big(write_spec, tmp_path: Path) -> pd.DataFrame:
    """The shape of the opa_bandwidth example: 2 scalings x 2 backends x 2 placements x 2 modes x 3 bandwidths
    = 48 configurations."""
    spec = write_spec(
        ranks=[2, 4],
        scaling=["strong", "weak"],
        backend=["ccl", "mpi"],
        placement=["table_wise", "column_wise"],
        blocking=[False, True],
        topology_overrides={"links.net.bandwidth_GBps": [6.25, 12.5, 25]},
    )
    out = tmp_path / "big"
    run_sweep(plan_sweep(spec).points, out, ev.cheap, serial=True, progress=False)
    return load_results(out)


def test_every_configuration_gets_a_breakdown(big: pd.DataFrame) -> None:
    # because the old report drew the first 12 of 24 configurations, and sorted text put every 25 GB/s one after them
    figs = breakdown_figures(big)
    facets = [f for fig in figs for f in fig.layout.meta["facets"]]
    assert len(facets) == 48 and len(set(facets)) == 48
    assert sum("net.bandwidth_GBps=25," in f for f in facets) == 16
    for fig in figs:  # every facet has its bars: one subplot (x axis) per facet
        assert len({t.xaxis for t in fig.data}) == len(fig.layout.meta["facets"])


def test_the_metric_is_plotted_against_the_swept_value(big: pd.DataFrame) -> None:
    (fig,) = swept_figures(big)
    # because the sweep asks "what does bandwidth buy": x is the bandwidth, one subplot per rank count and scaling
    assert (
        fig.layout.meta["facet_col"] == "ranks" and fig.layout.meta["facet_row"] == "scaling" and fig.layout.meta["facets"] == 4
    )
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    assert all(list(t.x) == [6.25, 12.5, 25.0] for t in lines)
    assert len(lines) == 4 * 8  # 8 configurations (backend x placement x mode) in each of the 4 subplots
    row = big[
        (big["ranks"] == 4)
        & (big["scaling"] == "weak")
        & (big["backend"] == "mpi")
        & (big["placement"] == "table_wise")
        & ~big["blocking"].astype(bool)
    ].sort_values("topology.links.net.bandwidth_GBps")
    match = [
        t
        for t in lines
        if t.name == "backend=mpi, placement=table_wise, overlapping"
        and "weak" in t.hovertemplate
        and "4 ranks" in t.hovertemplate
    ]
    assert len(match) == 1 and list(match[0].y) == pytest.approx((row["iteration_s"] * 1e3).tolist(), rel=1e-12)


def test_facets_keep_the_legend_to_one_entry_per_line(big: pd.DataFrame) -> None:
    # because one 48-entry legend squashed the plots: each figure's legend lists only what varies inside a subplot
    for fig in scaling_figures(big):
        legend = [t.name for t in fig.data if t.showlegend is not False]
        assert len(legend) == len(set(legend)) <= 16, (fig.layout.title.text, len(legend))
        assert fig.layout.legend.groupclick in (None, "togglegroup")


def test_communication_x_labels_are_rank_counts(big: pd.DataFrame) -> None:
    fig = communication_figure(big)
    # because "config 17 / 8 ranks" category labels were unreadable: every x axis is ticked with plain rank counts
    axes = [fig.layout[name] for name in fig.layout.to_plotly_json() if name.startswith("xaxis")]
    assert len(axes) == 3 * 4  # 3 bandwidths x 4 kinds of communication time
    assert all(list(ax.ticktext) == ["2", "4"] for ax in axes)
    assert {a.text.split("<br>")[1] for a in fig.layout.annotations} == {
        "exposed allreduce",
        "exposed alltoall",
        "allreduce (total)",
        "alltoall (total)",
    }


def test_topology_drawing_of_an_unknown_name_is_a_note_not_a_failure() -> None:
    figs, notes = topology_figures(pd.DataFrame({"topology": ["skx-8s-upi", "no-such-topology"]}))
    assert len(figs) == 1 and len(notes) == 1 and "no-such-topology" in notes[0]


def test_report_is_one_self_contained_page(results: Path, cli) -> None:
    res = cli("report", str(results))
    assert res.code == 0, res.err
    page = (results / "report.html").read_text()
    tags = _Tags()
    tags.feed(page)
    assert tags.external == []
    assert "cdn.plot.ly/plotly" not in page.split("</script>", 1)[1]  # nothing after the embedded bundle points at a CDN
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
    assert_one_line_error(cli("report", str(tmp_path / "nowhere")), "no sweep results here")
