"""Graph invariants of the parametric generators: connected, ports respected, pruning cuts the bisection, routes."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlrmsim.topologies import Topology, build_topology
from dlrmsim.topologies.builder import parse_spec
from dlrmsim.topologies.routing import FatTreeTopology
from dlrmsim.topologies.summary import bisection_bandwidth_Bps, hop_histogram

BW = 10.0  # GB/s per link in these synthetic fabrics


def _file(fabric: dict, ports: int = 48) -> dict:
    return {
        "name": "synthetic",
        "compute": {
            "cpu": {
                "kind": "socket",
                "model": "test",
                "cores": 4,
                "base_avx_clock_GHz": 1.0,
                "turbo_avx_clock_GHz": 2.0,
                "flops_per_cycle_per_core": {"fp32": 16},
                "memory": {"bandwidth_GBps": 10, "capacity_GB": 8},
            }
        },
        "links": {
            "net": {"kind": "opa", "bandwidth_GBps": BW, "latency_us": 1.0, "one_sided": False},
            "upi": {"kind": "upi", "bandwidth_GBps": 2 * BW, "latency_us": 0.1, "one_sided": True},
        },
        "switches": {"sw": {"ports": ports, "latency_us": 0.1}},
        "fabric": fabric,
    }


def build(fabric: dict, ports: int = 48) -> Topology:
    return build_topology(parse_spec(_file(fabric, ports), "synthetic"), "synthetic")


def fat_tree(endpoints: int, per_leaf: int, pruning: float, ports: int, per_node: int = 1, levels: int | None = None) -> Topology:
    fabric = {
        "generator": "fat_tree",
        "endpoints": endpoints,
        "compute": "cpu",
        "endpoints_per_node": per_node,
        "endpoint_link": "net",
        "uplink": "net",
        "switch": "sw",
        "endpoints_per_leaf": per_leaf,
        "pruning": pruning,
        "levels": levels,
    }
    if per_node > 1:
        fabric["intra_node_link"] = "upi"
    return build(fabric, ports)


def assert_ports_respected(topo: Topology) -> None:
    g = topo.graph
    for node, d in g.nodes(data=True):
        if "ports" in d:
            assert sum(e["trunk"] for _, _, e in g.edges(node, data=True)) <= d["ports"], node


def assert_routes_match_networkx(topo: Topology, pairs: list[tuple[int, int]]) -> None:
    for a, b in pairs:
        expected = sorted(nx.all_shortest_paths(topo.graph, topo.node(a), topo.node(b))) if a != b else [[topo.node(a)]]
        assert topo.routes(a, b) == expected, (a, b)
        assert topo.route(a, b) in expected
        assert topo.hops(a, b) == len(expected[0]) - 1


@st.composite
def fat_tree_shapes(draw):
    uplinks = draw(st.sampled_from([1, 2, 3, 4, 6, 8]))
    pruning = draw(st.sampled_from([1, 2, 3]))
    per_leaf = uplinks * pruning
    leaves = draw(st.integers(min_value=1, max_value=12))
    # Upper levels need switches of at least 4 ports (2 down, 2 up) to shrink the tree; smaller ones are refused.
    ports = draw(st.integers(min_value=max(4, per_leaf + uplinks), max_value=per_leaf + uplinks + 24))
    return per_leaf * leaves, per_leaf, pruning, ports


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fat_tree_shapes(), st.data())
def test_fat_tree_invariants(shape, data) -> None:
    endpoints, per_leaf, pruning, ports = shape
    topo = fat_tree(endpoints, per_leaf, pruning, ports)
    assert isinstance(topo, FatTreeTopology)
    assert topo.num_ranks == endpoints
    assert nx.is_connected(topo.graph)
    assert_ports_respected(topo)
    g = topo.graph
    for leaf in (n for n, d in g.nodes(data=True) if d.get("level") == 1):
        ups = sum(d["trunk"] for _, v, d in g.edges(leaf, data=True) if g.nodes[v].get("level") == 2)
        assert ups == (per_leaf // pruning if endpoints > per_leaf else 0)
    pairs = data.draw(st.lists(st.tuples(st.integers(0, endpoints - 1), st.integers(0, endpoints - 1)), min_size=1, max_size=6))
    assert_routes_match_networkx(topo, pairs)


@settings(max_examples=25, deadline=None)
@given(
    uplinks=st.sampled_from([1, 2, 4]),
    pruning=st.sampled_from([2, 3, 4]),
    half_leaves=st.integers(min_value=1, max_value=4),
)
def test_fat_tree_bisection_falls_by_the_pruning_ratio(uplinks: int, pruning: int, half_leaves: int) -> None:
    per_leaf = uplinks * pruning
    endpoints = per_leaf * 2 * half_leaves  # rank halves fall on leaf boundaries
    ports = 2 * per_leaf * 2 * half_leaves  # roomy enough that the full tree is 2 levels too
    full = fat_tree(endpoints, per_leaf, 1, ports)
    pruned = fat_tree(endpoints, per_leaf, pruning, ports)
    assert bisection_bandwidth_Bps(full) == pytest.approx(endpoints / 2 * BW * 1e9)
    assert bisection_bandwidth_Bps(pruned) == pytest.approx(bisection_bandwidth_Bps(full) / pruning)


def test_three_level_fat_tree_when_one_root_level_cannot_reach_every_leaf() -> None:
    # 8-port switches: leaves of 4 endpoints with 2 uplinks; 12 leaves > 8 ports -> pods of 4 below the roots
    topo = fat_tree(48, 4, 2, ports=8)
    levels = {d["level"] for _, d in topo.graph.nodes(data=True) if "level" in d}
    assert levels == {1, 2, 3}
    assert nx.is_connected(topo.graph)
    assert_ports_respected(topo)
    assert hop_histogram(topo) == {2: 3, 4: 12, 6: 32}
    assert_routes_match_networkx(topo, [(0, 5), (0, 47), (7, 20), (13, 14), (46, 1)])
    # unpruned above the leaves: the halves meet at the leaves' uplink capacity, 6 leaves x 2 x BW
    assert bisection_bandwidth_Bps(topo) == pytest.approx(6 * 2 * BW * 1e9)


def test_forced_extra_level_keeps_routes_shortest() -> None:
    topo = fat_tree(16, 4, 2, ports=16, per_node=2, levels=3)
    assert max(d.get("level", 0) for _, d in topo.graph.nodes(data=True)) == 3
    assert_ports_respected(topo)
    assert_routes_match_networkx(topo, [(a, b) for a in range(0, 16, 3) for b in range(16)])


@pytest.mark.parametrize("dimension", [3, 4, 5, 6])
def test_twisted_hypercube_degree_and_diameter(dimension: int) -> None:
    topo = build({"generator": "twisted_hypercube", "dimension": dimension, "compute": "cpu", "link": "upi"})
    g = topo.graph
    assert topo.num_ranks == 2**dimension
    assert all(d == dimension for _, d in g.degree())
    assert g.number_of_edges() == dimension * 2 ** (dimension - 1)
    assert nx.diameter(g) == dimension - 1  # one hop less than the plain hypercube


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_ring_and_full_mesh(n: int) -> None:
    ring = build({"generator": "ring", "endpoints": n, "compute": "cpu", "link": "net"})
    assert nx.is_connected(ring.graph)
    assert ring.graph.number_of_edges() == (1 if n == 2 else n)
    assert max(hop_histogram(ring)) == n // 2
    mesh = build({"generator": "full_mesh", "endpoints": n, "compute": "cpu", "link": "net"})
    assert mesh.graph.number_of_edges() == n * (n - 1) // 2
    assert hop_histogram(mesh) == {1: n - 1}


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 6), cols=st.integers(1, 6))
def test_torus_2d(rows: int, cols: int) -> None:
    topo = build({"generator": "torus_2d", "rows": rows, "cols": cols, "compute": "cpu", "link": "net"})
    g = topo.graph
    assert topo.num_ranks == rows * cols
    assert nx.is_connected(g)
    deg = (min(rows - 1, 2)) + (min(cols - 1, 2))
    assert all(d == deg for _, d in g.degree())
    assert max(hop_histogram(topo), default=0) == rows // 2 + cols // 2


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 40), ports=st.integers(1, 48))
def test_single_switch_ports_bound(n: int, ports: int) -> None:
    fabric = {"generator": "single_switch", "endpoints": n, "compute": "cpu", "link": "net", "switch": "sw"}
    if n > ports:
        from dlrmsim.errors import DlrmsimError

        with pytest.raises(DlrmsimError, match="ports"):
            build(fabric, ports)
        return
    topo = build(fabric, ports)
    assert topo.graph.degree("sw0") == n
    assert hop_histogram(topo) == ({2: n - 1} if n > 1 else {})
    assert bisection_bandwidth_Bps(topo) == pytest.approx((n // 2) * BW * 1e9)


def test_explicit_fabric_and_unit_spellings() -> None:
    data = _file(
        {
            "generator": "explicit",
            "nodes": [
                {"name": "a", "kind": "socket", "compute": "cpu"},
                {"name": "b", "kind": "socket", "compute": "cpu"},
                {"name": "s", "kind": "switch", "switch": "sw"},
            ],
            "edges": [{"u": "a", "v": "s", "link": "fast"}, {"u": "s", "v": "b", "link": "fast", "trunk": 2}],
        }
    )
    data["links"]["fast"] = {"kind": "ethernet", "bandwidth_Gbps": 100, "latency_ns": 500, "one_sided": False}
    data["compute"]["cpu"]["memory"]["capacity_GiB"] = 1
    del data["compute"]["cpu"]["memory"]["capacity_GB"]
    topo = build_topology(parse_spec(data, "x"), "x")
    assert topo.ranks == ["a", "b"]
    link = topo.link("a", "s")
    assert link.bandwidth_Bps == pytest.approx(12.5e9)
    assert link.latency_s == pytest.approx(0.5e-6)  # the link's own latency; the switch keeps its own
    # a path pays each link once and the switch it crosses once
    assert topo.path_latency_s(["a", "s", "b"]) == pytest.approx(2 * 0.5e-6 + topo.graph.nodes["s"]["latency_s"])
    assert topo.link("s", "b").bandwidth_Bps == pytest.approx(25e9) and topo.link("s", "b").lanes == 2
    assert topo.compute(0).memory_capacity_B == pytest.approx(2**30)
    data["links"]["fast"]["bandwidth_Gbps"] = "100 Gb/s"
    assert build_topology(parse_spec(data, "x"), "x").link("a", "s").bandwidth_Bps == pytest.approx(12.5e9)


@pytest.mark.parametrize("ports", [2, 3])
def test_multi_level_tree_of_tiny_switches_is_refused_not_recursed(ports: int) -> None:
    from dlrmsim.errors import DlrmsimError

    with pytest.raises(DlrmsimError, match="cannot build a tree of more than one level"):
        fat_tree(endpoints=12, per_leaf=1, pruning=1, ports=ports)
