"""The built-in topologies reproduce the published properties of their sources (docs/sources.md)."""

from __future__ import annotations

import math
from collections import Counter

import networkx as nx
import pytest

from dlrmsim.host import usable_cores
from dlrmsim.topologies import load_topology, summarize, topology_names
from dlrmsim.topologies.summary import bisection_bandwidth_Bps, hop_histogram, min_cut_Bps

GB = 1e9


def test_preset_names() -> None:
    assert topology_names() == ["clx-2s-56c", "clx-64s-opa", "cpx-64s", "host", "skx-8s-upi", "yosemite-v2-sled"]


# ---- 8-socket SKX node --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def skx():
    return load_topology("skx-8s-upi")


def test_skx_every_socket_has_3_one_hop_and_4_two_hop_peers(skx) -> None:
    assert skx.num_ranks == 8
    for r in range(8):
        assert hop_histogram(skx, r) == {1: 3, 2: 4}
        assert skx.graph.degree(skx.node(r)) == 3  # 3 UPI links per socket


def test_skx_12_upi_links_about_260_GBps_aggregate(skx) -> None:
    s = summarize(skx)
    assert s.unique_links == 12
    assert s.links_by_kind == {"upi": 12}
    assert s.aggregate_link_bandwidth_GBps == pytest.approx(12 * 22)  # 264
    assert s.aggregate_link_bandwidth_GBps == pytest.approx(260, rel=0.02)  # "about 260 GB/s aggregate"
    assert s.hop_histogram == {1: 3, 2: 4}
    # The two 4-socket boards are joined by 4 UPI links: 4 x 22 GB/s between the rank halves.
    assert s.bisection_bandwidth_GBps == pytest.approx(88)


def test_skx_two_boards_are_4_cycles(skx) -> None:
    g = skx.graph
    for board in (0, 1):
        nodes = [n for n in g if g.nodes[n]["board"] == board]
        sub = g.subgraph(nodes)
        assert sub.number_of_edges() == 4 and all(d == 2 for _, d in sub.degree())


def test_skx_socket_compute(skx) -> None:
    c = skx.compute(0)
    assert c.peak_flops["fp32"] == pytest.approx(28 * 2.3e9 * 64)
    assert c.peak_flops["fp32"] / 1e12 == pytest.approx(4.1, abs=0.05)  # [Kalamkar20]: 4.1 TFLOPS
    assert c.memory_bandwidth_Bps == 100 * GB and c.memory_capacity_B == 192 * GB
    assert c.kind == "socket" and c.numa_nodes == 1 and c.memory_domain is None
    assert c.gemm_efficiency(4e9) == pytest.approx(0.72)  # [Kalamkar20], large blocked GEMMs
    assert c.gemm_efficiency(1e7) < 0.72
    assert summarize(skx).memory_GB == pytest.approx(1536)  # 1.5 TB in total
    link = skx.link("s0", "s1")
    assert link.one_sided and link.kind == "upi" and link.bandwidth_Bps == 22 * GB


def test_skx_routes_are_all_shortest_paths(skx) -> None:
    # two-hop peers have two equal-cost paths in a twisted cube (a 4-cycle through both neighbours)
    for dst in range(1, 8):
        routes = skx.routes(0, dst)
        assert {len(p) - 1 for p in routes} == {skx.hops(0, dst)}
        assert routes == sorted(nx.all_shortest_paths(skx.graph, "s0", skx.node(dst)))
        assert skx.route(0, dst) in routes


# ---- 64-socket CLX cluster ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clx():
    return load_topology("clx-64s-opa")


def _switches(topo, level: int) -> list[str]:
    return sorted(n for n, d in topo.graph.nodes(data=True) if d.get("kind") == "switch" and d.get("level") == level)


def test_clx_64_ranks_2_leaves_of_32_16_uplinks_each(clx) -> None:
    g = clx.graph
    assert clx.num_ranks == 64
    leaves, roots = _switches(clx, 1), _switches(clx, 2)
    assert leaves == ["leaf0", "leaf1"] and roots == ["root0"]
    for i, leaf in enumerate(leaves):
        endpoints = [n for n in g.neighbors(leaf) if g.nodes[n]["kind"] == "socket"]
        assert endpoints == clx.ranks[32 * i : 32 * (i + 1)]  # nodes filled in order
        trunk = clx.link(leaf, "root0")
        assert trunk.lanes == 16 and trunk.bandwidth_Bps == pytest.approx(16 * 12.5 * GB)
        assert sum(d["trunk"] for _, _, d in g.edges(leaf, data=True)) == 48  # 32 down + 16 up = all 48 ports
    # 2:1 pruning: 32 x 12.5 GB/s into a leaf, 16 x 12.5 GB/s out of it
    assert clx.link("s00", "leaf0").bandwidth_Bps == 12.5 * GB


def test_clx_200_GBps_inside_a_leaf_and_between_the_leaves(clx) -> None:
    leaf0 = clx.ranks[:32]
    assert min_cut_Bps(clx, leaf0[:16], leaf0[16:]) == pytest.approx(200 * GB)
    assert clx.link("leaf0", "root0").bandwidth_Bps == pytest.approx(200 * GB)
    assert bisection_bandwidth_Bps(clx) == pytest.approx(200 * GB)
    assert summarize(clx).bisection_bandwidth_GBps == pytest.approx(200)


def test_clx_sockets_and_intra_node_traffic(clx) -> None:
    c = clx.compute(0)
    assert c.peak_flops["fp32"] / 1e12 == pytest.approx(4.3, abs=0.05)
    assert c.memory_bandwidth_Bps == 105 * GB and c.memory_capacity_B == 96 * GB
    # 4 nodes (8 sockets) with 192 GB per socket, the rest 96 GB
    caps = Counter(clx.compute(r).memory_capacity_B for r in range(64))
    assert caps == {96 * GB: 56, 192 * GB: 8}
    # the two sockets of a node talk over UPI; everything else crosses the OPA adapters
    assert clx.routes(0, 1) == [["s00", "s01"]] and clx.link("s00", "s01").kind == "upi"
    assert clx.route(0, 2) == ["s00", "leaf0", "s02"]
    assert clx.route(0, 40) == ["s00", "leaf0", "root0", "leaf1", "s40"]
    assert [link.one_sided for link in clx.path_links(clx.route(0, 40))] == [False] * 4
    assert summarize(clx).hop_histogram == {1: 1, 2: 30, 4: 32}
    # the published 1 us is adapter to adapter through one switch
    assert clx.path_latency_s(clx.route(0, 2)) == pytest.approx(1e-6)


@pytest.mark.parametrize("sockets", [128, 256, 1024])
def test_clx_scales_with_same_leaves_and_pruning(sockets: int) -> None:
    topo = load_topology("clx-64s-opa", sockets=sockets)
    g = topo.graph
    assert topo.num_ranks == sockets
    leaves = _switches(topo, 1)
    assert len(leaves) == sockets // 32
    for leaf in leaves:
        ups = [d["trunk"] for _, v, d in g.edges(leaf, data=True) if g.nodes[v].get("level") == 2]
        assert sum(ups) == 16
    for node, d in g.nodes(data=True):
        if "ports" in d:
            assert sum(e["trunk"] for _, _, e in g.edges(node, data=True)) <= d["ports"]
    # pruned 2:1 above the leaves: half the ranks send at 12.5 GB/s / 2
    assert bisection_bandwidth_Bps(topo) == pytest.approx(sockets / 2 * 12.5 * GB / 2)
    assert nx.is_connected(g)


def test_clx_1024_builds_and_routes() -> None:
    # Its speed is measured in benchmarks/, not asserted here: a timed test passes or fails with the host's load.
    topo = load_topology("clx-64s-opa", sockets=1024)
    for dst in range(1024):
        topo.route(0, dst)
    routes = topo.routes(0, 1000)
    assert len(routes) == 16  # one path per root switch
    assert routes == sorted(nx.all_shortest_paths(topo.graph, topo.node(0), topo.node(1000)))


def test_override_reaches_the_whole_opa_fabric() -> None:
    topo = load_topology("clx-64s-opa", overrides={"links.opa.bandwidth_GBps": 25})
    assert topo.link("s00", "leaf0").bandwidth_Bps == 25 * GB
    assert topo.link("leaf0", "root0").bandwidth_Bps == 16 * 25 * GB  # uplinks are "like: opa"
    assert summarize(topo).bisection_bandwidth_GBps == pytest.approx(400)


def test_socket_count_is_a_yaml_field_too() -> None:
    a = load_topology("clx-64s-opa", overrides={"fabric.endpoints": 128})
    b = load_topology("clx-64s-opa", sockets=128)
    assert a.num_ranks == b.num_ranks == 128
    assert summarize(a).bisection_bandwidth_GBps == summarize(b).bisection_bandwidth_GBps


# ---- Yosemite v2 sled ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sled():
    return load_topology("yosemite-v2-sled")


def test_sled_6_cards_per_node_on_x4_behind_x16(sled) -> None:
    g = sled.graph
    assert sled.num_ranks == 12
    assert len(sled.hosts) == 2
    lane = 0.985 * GB
    for n in range(2):
        psw = f"sled0.node{n}.pcie"
        cards = [v for v in g.neighbors(psw) if g.nodes[v]["kind"] == "card"]
        assert len(cards) == 6
        for card in cards:
            link = sled.link(card, psw)
            assert link.kind == "pcie" and link.width == 4 and link.bandwidth_Bps == pytest.approx(4 * lane)
        host_link = sled.link(psw, f"sled0.node{n}.host")
        assert host_link.width == 16 and host_link.bandwidth_Bps == pytest.approx(16 * lane)
        # the six x4 cards together can use exactly the x16 host link
        assert sum(sled.link(c, psw).bandwidth_Bps for c in cards) == pytest.approx(host_link.bandwidth_Bps * 6 / 4)
        # 50 Gb/s per node to the multi-host NIC
        assert sled.link(f"sled0.node{n}.host", "sled0.nic").bandwidth_Bps == pytest.approx(50e9 / 8)


def test_sled_peer_to_peer_without_the_host(sled) -> None:
    assert sled.route(0, 1) == ["sled0.node0.card0", "sled0.node0.pcie", "sled0.node0.card1"]
    across = sled.route(0, 6)
    assert "sled0.nic" in across and across.count("sled0.node0.host") == 1
    assert summarize(sled).hop_histogram == {2: 5, 6: 6}
    assert summarize(sled).bisection_bandwidth_GBps == pytest.approx(6.25)  # the two nodes meet at 50 Gb/s


def test_sled_cards_hosts_memory_and_power(sled) -> None:
    card = sled.compute(0)
    assert card.kind == "card"
    assert card.peak_flops["int8"] == 30e12 and card.peak_flops["fp16"] == 4e12
    assert card.memory_capacity_B == 16 * GB
    host = sled.host_compute(0)
    assert host.kind == "host" and host.memory_capacity_B == 64 * GB
    g = sled.graph
    node0 = [n for n, d in g.nodes(data=True) if d.get("machine") == 0 and "compute" in d]
    assert sum(g.nodes[n]["compute"].memory_capacity_B for n in node0) == pytest.approx(160 * GB)  # about 160 GB
    cards_and_switch = sum(
        g.nodes[n]["power_W"] for n in g if n.startswith("sled0.node0.") and g.nodes[n]["kind"] in ("card", "switch")
    )
    assert cards_and_switch == pytest.approx(91)  # 91 W for cards plus switch


def test_rack_of_sleds_on_a_tor() -> None:
    rack = load_topology("yosemite-v2-sled", sleds=4)
    assert rack.num_ranks == 48 and len(rack.hosts) == 8
    assert nx.is_connected(rack.graph)
    assert rack.route(0, 12)[len(rack.route(0, 12)) // 2] == "tor"
    assert rack.link("sled3.nic", "tor").lanes == 2  # one 50 Gb/s port per node


# ---- Cooper Lake cluster and the host ---------------------------------------------------------------------


def test_cpx_has_bf16_and_states_its_assumed_interconnect() -> None:
    topo = load_topology("cpx-64s")
    assert topo.num_ranks == 64
    c = topo.compute(0)
    assert c.peak_flops["bf16"] == pytest.approx(2 * c.peak_flops["fp32"])
    assert "ASSUMED" in topo.description
    from dlrmsim.topologies import PRESET_DIR

    assert "INTERCONNECT IS NOT PUBLISHED" in (PRESET_DIR / "cpx-64s.yaml").read_text()
    assert summarize(topo).hop_histogram == {1: 3, 2: 28, 4: 32}


def test_host_is_detected_and_splits_into_ranks() -> None:
    one = load_topology("host")
    cores = usable_cores()
    assert one.num_ranks == 1 and one.compute(0).cores == cores
    assert one.graph.nodes[one.node(0)]["calibrated"] is False
    meminfo = open("/proc/meminfo").read().split()
    assert one.compute(0).memory_capacity_B == pytest.approx(float(meminfo[meminfo.index("MemTotal:") + 1]) * 1024)
    if cores < 2:
        pytest.skip("needs 2 cores to split")
    two = load_topology("host", ranks=2)
    specs = [two.compute(r) for r in range(2)]
    assert all(s.cores == cores // 2 and s.memory_domain == "host" for s in specs)
    assert math.isclose(sum(s.peak_flops["fp32"] for s in specs), one.compute(0).peak_flops["fp32"] * (2 * (cores // 2)) / cores)
    assert two.link(two.node(0), two.node(1)).kind == "shm"
    assert summarize(two).memory_bandwidth_GBps == pytest.approx(one.compute(0).memory_bandwidth_Bps / GB)  # shared once


def test_gemm_memory_overlap_is_a_yaml_field_with_the_roofline_as_default(tmp_path) -> None:
    import yaml

    from dlrmsim.engine import costs
    from dlrmsim.errors import DlrmsimError
    from dlrmsim.topologies import PRESET_DIR

    base = load_topology("clx-64s-opa")
    assert base.compute(0).gemm_memory_overlap == 1.0
    doc = yaml.safe_load((PRESET_DIR / "clx-64s-opa.yaml").read_text())
    doc["compute"]["xeon-8280"]["gemm_memory_overlap"] = 0.0
    (tmp_path / "summed.yaml").write_text(yaml.safe_dump(doc))
    summed = load_topology(tmp_path / "summed.yaml").compute(0)
    assert summed.gemm_memory_overlap == 0.0
    flops, nbytes = 1e9, 1e8
    t_f = flops / costs.task_flop_rate(summed, flops, summed.cores, nbytes=nbytes)
    t_b = nbytes / costs.task_bandwidth_cap(summed, nbytes, summed.cores)
    assert costs.task_time(flops, nbytes, summed, kind="gemm") == pytest.approx(t_f + t_b, rel=1e-12)
    assert costs.task_time(flops, nbytes, base.compute(0), kind="gemm") == pytest.approx(max(t_f, t_b), rel=1e-12)
    with pytest.raises(DlrmsimError, match="gemm_memory_overlap"):
        load_topology(tmp_path / "summed.yaml", overrides={"compute.xeon-8280.gemm_memory_overlap": 1.5})
