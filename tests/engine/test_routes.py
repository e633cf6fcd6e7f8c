"""Hashed-ECMP routes found by counting (engine/routes.py) are exactly the ones listing every path gives."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest

from dlrmsim.engine import CommSettings
from dlrmsim.engine.network import Network
from dlrmsim.topologies import load_topology


def listed_hashed_routes(net: Network, src: int) -> dict[int, tuple[tuple[int, ...], float, float, float, bool]]:
    """The definition, by brute force: every shortest path from ``src`` as (node ids, link ids, latency,
    overhead, lane, NIC), sorted by node ids; a rank takes entry (src_rank * 7919 + dst_rank) % count, any other
    node the first. (The engine listed them like this before routes.py; it cost seconds at 1024 ranks.)"""
    n = len(net.nodes)
    dist = [-1] * n
    dist[src] = 0
    order, preds = [src], [[] for _ in range(n)]
    q = deque([src])
    while q:
        x = q.popleft()
        for y, rid in net._adj[x]:
            if dist[y] < 0:
                dist[y] = dist[x] + 1
                order.append(y)
                q.append(y)
            if dist[y] == dist[x] + 1:
                preds[y].append((x, rid))
    paths = {src: [((src,), (), 0.0, 0.0, math.inf, False)]}
    for y in order[1:]:
        lst = [
            (p[0] + (y,), p[1] + (rid,), p[2] + net._lat[rid] + (net._node_lat[x] if x != src else 0.0),
             max(p[3], net._ovh[rid]), min(p[4], net._lane[rid]), p[5] or not net._one_sided[rid])
            for x, rid in preds[y]
            for p in paths[x]
        ]  # fmt: skip
        paths[y] = sorted(lst, key=lambda p: p[0])
    s_rank = int(net.node_rank[src])
    out = {}
    for y in order:
        r = int(net.node_rank[y])
        p = paths[y][(s_rank * 7919 + r) % len(paths[y])] if r >= 0 else paths[y][0]
        out[y] = (p[1], p[2], p[3], p[4], p[5])
    return out


@pytest.mark.parametrize(
    ("preset", "params"),
    [("clx-64s-opa", {}), ("skx-8s-upi", {}), ("clx-64s-opa", {"fabric.endpoints": 128}), ("yosemite-v2-sled", {})],
)
def test_counted_routes_equal_the_listed_ones(preset: str, params: dict) -> None:
    """Because the network has one link per node pair, a path is its node tuple and counting shortest paths
    picks the same k-th tuple as sorting them all: links, latency, overhead, lane and NIC flag are identical
    (latency to the last bit: the same additions in the same order)."""
    topo = load_topology(preset, params or None)
    net = Network(topo, CommSettings(ecmp="hash"))
    for src in net.rank_node[:: max(1, len(net.rank_node) // 16)].tolist():
        sr = net.source_routes(src)
        want = listed_hashed_routes(net, src)
        assert sr.reachable.sum() == len(want)
        for y, (links, lat, ovh, lane, nic) in want.items():
            got = tuple(sr.res[sr.ptr[y] : sr.ptr[y + 1]].tolist())
            assert got == links and sr.latency[y] == lat and sr.overhead[y] == ovh
            assert sr.lane_cap[y] == lane and bool(sr.nic[y]) == nic
        assert np.all(sr.w == 1.0)


def test_a_fat_tree_spreads_a_sources_flows_over_its_spines() -> None:
    """Because the hash adds the destination rank, one source's flows to the ranks behind another leaf take
    different shortest paths (the point of hashed ECMP), not all the first one."""
    topo = load_topology("clx-64s-opa")
    net = Network(topo, CommSettings(ecmp="hash"))
    src = int(net.rank_node[0])
    sr = net.source_routes(src)
    far = [
        int(y) for y in net.rank_node if sr.ptr[y + 1] - sr.ptr[y] == sr.ptr[net.rank_node[-1] + 1] - sr.ptr[net.rank_node[-1]]
    ]
    used = {tuple(sr.res[sr.ptr[y] : sr.ptr[y + 1]].tolist()) for y in far}
    assert len(used) > 1
