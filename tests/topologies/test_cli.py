"""`dlrmsim topology list` and `show` (table, --json, --html)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlrmsim.topologies import figure, load_topology


def test_list(cli) -> None:
    result = cli("topology", "list")
    assert result.code == 0, result.err
    for name in ("skx-8s-upi", "clx-64s-opa", "yosemite-v2-sled", "cpx-64s", "host"):
        assert name in result.out


def test_show_json_has_the_published_numbers(cli) -> None:
    result = cli("topology", "show", "skx-8s-upi", "--json")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert data["ranks"] == 8 and data["unique_links"] == 12
    assert data["hop_histogram"] == {"1": 3, "2": 4}
    assert data["aggregate_link_bandwidth_GBps"] == pytest.approx(264)
    assert data["bisection_bandwidth_GBps"] == pytest.approx(88)
    assert data["peak_tflops"]["fp32"] == pytest.approx(8 * 28 * 2.3 * 64 / 1000)


def test_show_json_with_params_and_overrides(cli) -> None:
    result = cli("topology", "show", "clx-64s-opa", "--json", "--param", "sockets=256", "--set", "links.opa.bandwidth_GBps=25")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert data["ranks"] == 256
    assert data["bisection_bandwidth_GBps"] == pytest.approx(256 / 2 * 25 / 2)
    assert data["hop_histogram"] == {"1": 1, "2": 30, "4": 224}


def test_show_table_and_html(cli, tmp_path: Path) -> None:
    html = tmp_path / "sled.html"
    result = cli("topology", "show", "yosemite-v2-sled", "--html", str(html))
    assert result.code == 0, result.err
    assert "bisection" in result.out and "pcie-x4" in result.out
    text = html.read_text()
    assert "plotly" in text and "sled0.node0.card0" in text and "per direction" in text


def test_figure_has_node_and_link_tooltips() -> None:
    fig = figure(load_topology("clx-64s-opa"))
    texts = [t for trace in fig.data if trace.hovertext is not None for t in trace.hovertext]
    assert any("s00" in t and "peak fp32" in t for t in texts)
    assert any("leaf0 - root0" in t and "16 links" in t for t in texts)
