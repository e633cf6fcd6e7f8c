"""Interactive plotly drawing of a topology graph, with node and link tooltips (used by ``topology show --html``)."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import networkx as nx
import plotly.graph_objects as go

from dlrmsim.topologies.topology import Topology

_COLORS = {
    "socket": "#1f77b4",
    "card": "#2ca02c",
    "host": "#9467bd",
    "switch": "#7f7f7f",
    "nic": "#ff7f0e",
}
_LINK_COLORS = ["#d62728", "#17becf", "#8c564b", "#bcbd22", "#e377c2", "#1f77b4", "#2ca02c"]


def layout(topo: Topology) -> dict[str, tuple[float, float]]:
    """Node positions: ranks in a circle when there are no switches, else layers by hops from the ranks."""
    g = topo.graph
    if all(g.nodes[n].get("kind") in ("socket", "card") for n in g.nodes):
        n = len(topo.ranks)
        return {r: (math.cos(2 * math.pi * i / n), math.sin(2 * math.pi * i / n)) for i, r in enumerate(topo.ranks)}
    layer = nx.multi_source_dijkstra_path_length(g, topo.ranks, weight=None)
    by_layer: dict[int, list[str]] = defaultdict(list)
    rank_set = set(topo.ranks)
    for r in topo.ranks:
        by_layer[0].append(r)
    for node in g.nodes:
        if node not in rank_set:
            by_layer[layer.get(node, 0)].append(node)
    pos: dict[str, tuple[float, float]] = {}
    for depth, nodes in by_layer.items():
        for i, node in enumerate(nodes):
            pos[node] = ((i + 0.5) / len(nodes), float(depth))
    return pos


def _node_text(topo: Topology, node: str) -> str:
    d = topo.graph.nodes[node]
    lines = [f"<b>{node}</b>", f"kind: {d.get('kind')}"]
    if node in topo.ranks:
        lines.append(f"rank: {topo.ranks.index(node)}")
    c = d.get("compute")
    if c is not None:
        if d.get("model"):
            lines.append(f"model: {d['model']}")
        lines.append(f"cores: {c.cores}")
        lines += [f"peak {p}: {v / 1e12:.2f} T/s" for p, v in c.peak_flops.items()]
        lines.append(f"memory: {c.memory_capacity_B / 1e9:.0f} GB at {c.memory_bandwidth_Bps / 1e9:.0f} GB/s")
        if not d.get("calibrated", True):
            lines.append("rates: uncalibrated placeholders")
    if "ports" in d:
        used = sum(e["trunk"] for _, _, e in topo.graph.edges(node, data=True))
        lines.append(f"ports: {used} used of {d['ports']}")
        lines.append(f"latency: {d.get('latency_s', 0.0) * 1e6:.2f} us")
    return "<br>".join(lines)


def _link_text(link) -> str:
    lanes = f" ({link.lanes} links)" if link.lanes > 1 else ""
    return "<br>".join(
        [
            f"<b>{link.u} - {link.v}</b>",
            f"{link.type_name or link.kind} ({link.kind}){lanes}",
            f"bandwidth: {link.bandwidth_Bps / 1e9:.3g} GB/s per direction",
            f"latency: {link.latency_s * 1e6:.3g} us, overhead: {link.overhead_s * 1e6:.3g} us",
            "one-sided" if link.one_sided else "through a NIC stack",
        ]
    )


def figure(topo: Topology) -> go.Figure:
    """A plotly Figure of the graph: nodes coloured by kind, links by type; hover for details."""
    pos = layout(topo)
    fig = go.Figure()
    by_type: dict[str, list] = defaultdict(list)
    for link in topo.links:
        by_type[link.type_name or link.kind].append(link)
    for i, (type_name, links) in enumerate(sorted(by_type.items())):
        color = _LINK_COLORS[i % len(_LINK_COLORS)]
        xs: list[float | None] = []
        ys: list[float | None] = []
        mx, my, text, widths = [], [], [], []
        for link in links:
            (x0, y0), (x1, y1) = pos[link.u], pos[link.v]
            xs += [x0, x1, None]
            ys += [y0, y1, None]
            mx.append((x0 + x1) / 2)
            my.append((y0 + y1) / 2)
            text.append(_link_text(link))
            widths.append(link.bandwidth_Bps)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line={"color": color, "width": 1.5}, hoverinfo="skip", name=type_name))
        fig.add_trace(
            go.Scatter(
                x=mx,
                y=my,
                mode="markers",
                marker={"size": 6, "color": color, "opacity": 0.5},
                hovertext=text,
                hoverinfo="text",
                name=f"{type_name} links",
                showlegend=False,
            )
        )
    kinds: dict[str, list[str]] = defaultdict(list)
    for node, d in topo.graph.nodes(data=True):
        kinds[d.get("kind", "?")].append(node)
    for kind, nodes in sorted(kinds.items()):
        fig.add_trace(
            go.Scatter(
                x=[pos[n][0] for n in nodes],
                y=[pos[n][1] for n in nodes],
                mode="markers",
                marker={
                    "size": 12 if kind in ("switch", "nic") else 9,
                    "color": _COLORS.get(kind, "#000000"),
                    "symbol": "square" if kind in ("switch", "nic") else "circle",
                },
                hovertext=[_node_text(topo, n) for n in nodes],
                hoverinfo="text",
                name=kind,
            )
        )
    fig.update_layout(
        title=f"{topo.name}: {topo.num_ranks} ranks, {topo.graph.number_of_edges()} links",
        showlegend=True,
        xaxis={"visible": False},
        yaxis={"visible": False},
        plot_bgcolor="white",
        hovermode="closest",
    )
    return fig


def write_html(topo: Topology, path: str | Path) -> Path:
    """Write the drawing as one self-contained HTML page and return its path.

    plotly.js (about 4.7 MB) is embedded rather than loaded from a CDN, so the page renders offline: on an
    air-gapped cluster login node, from a mail attachment, years later. Raises OSError when ``path`` cannot be written.
    """
    path = Path(path)
    figure(topo).write_html(str(path), include_plotlyjs=True, full_html=True, config={"displaylogo": False})
    return path
