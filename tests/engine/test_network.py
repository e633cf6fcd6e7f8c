"""Flow-level contention against closed forms: one link, shared links, pruned uplinks, NIC limits, routes."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from dlrmsim.engine import CommSettings, Simulation, costs
from dlrmsim.engine.maxmin import maxmin_rates
from dlrmsim.topologies.topology import Link, Topology
from tests.engine.handmade import GB, pruned_tree, simple_spec, star, two_node

MB = 1e6


def run_transfers(
    topo: Topology, flows: list[tuple[int, int, float, float]], comm: CommSettings | None = None
) -> dict[str, float]:
    """flows: (src, dst, bytes, issue time); returns end time per flow name f0, f1, ..."""
    sim = Simulation(topo, comm=comm)
    ends: dict[str, float] = {}

    def go(i: int, s: int, d: int, b: float, t: float):
        yield sim.env.timeout(t)
        yield sim.transfer(s, d, b, name=f"f{i}")
        ends[f"f{i}"] = sim.now

    for i, (s, d, b, t) in enumerate(flows):
        sim.env.process(go(i, s, d, b, t))
    sim.run()
    return ends


def test_one_flow_takes_latency_plus_size_over_bandwidth() -> None:
    ends = run_transfers(two_node(bw=10 * GB, lat=2e-6), [(0, 1, 4 * MB, 0.0)])
    assert ends["f0"] == pytest.approx(2e-6 + 4e6 / 10e9, rel=1e-12)
    assert ends["f0"] == pytest.approx(costs.p2p_time(4e6, 10e9, 2e-6))


def test_two_flows_on_one_link_each_get_half() -> None:
    ends = run_transfers(two_node(bw=10 * GB, lat=1e-6), [(0, 1, 4 * MB, 0.0), (0, 1, 4 * MB, 0.0)])
    assert ends["f0"] == pytest.approx(1e-6 + 4e6 / 5e9, rel=1e-12)
    assert ends["f1"] == pytest.approx(ends["f0"], rel=1e-12)


def test_opposite_directions_do_not_share() -> None:
    ends = run_transfers(two_node(bw=10 * GB, lat=1e-6), [(0, 1, 4 * MB, 0.0), (1, 0, 4 * MB, 0.0)])
    assert ends["f0"] == pytest.approx(1e-6 + 4e6 / 10e9, rel=1e-12)
    assert ends["f1"] == pytest.approx(1e-6 + 4e6 / 10e9, rel=1e-12)


def test_flows_across_a_2_to_1_pruned_uplink_are_limited_by_it() -> None:
    # two ranks per leaf at 10 GB/s each, one 10 GB/s uplink: two cross flows share it (5 GB/s each)
    topo = pruned_tree(per_leaf=2, bw=10 * GB, lat=1e-6)
    ends = run_transfers(topo, [(0, 2, 10 * MB, 0.0), (1, 3, 10 * MB, 0.0)])
    assert ends["f0"] == pytest.approx(3e-6 + 10e6 / 5e9, rel=1e-12)
    assert ends["f1"] == pytest.approx(ends["f0"], rel=1e-12)
    # inside a leaf nothing is pruned
    ends = run_transfers(topo, [(0, 1, 10 * MB, 0.0), (2, 3, 10 * MB, 0.0)])
    assert ends["f0"] == pytest.approx(2e-6 + 10e6 / 10e9, rel=1e-12)


def test_uplink_of_4_to_1_limits_one_of_four_flows_to_quarter() -> None:
    topo = pruned_tree(per_leaf=4, bw=10 * GB, uplink_bw=10 * GB, lat=1e-6)
    ends = run_transfers(topo, [(i, 4 + i, 10 * MB, 0.0) for i in range(4)])
    for i in range(4):
        assert ends[f"f{i}"] == pytest.approx(3e-6 + 10e6 / 2.5e9, rel=1e-12)


def test_nic_injection_limit_holds_however_many_flows_are_open() -> None:
    topo = star(4, bw=10 * GB, lat=1e-6, one_sided=False)
    topo.graph.nodes["r0"]["nic_bandwidth_Bps"] = 4 * GB  # adapter slower than its 10 GB/s port
    comm = CommSettings(copy_traffic_factor=0.0)
    ends = run_transfers(topo, [(0, d, 4 * MB, 0.0) for d in (1, 2, 3)], comm)
    for d in range(3):
        assert ends[f"f{d}"] == pytest.approx(2e-6 + 12e6 / 4e9, rel=1e-12)


def test_per_message_overhead_and_switch_latency_are_paid_once() -> None:
    topo = star(2, bw=10 * GB, lat=1e-6, overhead=3e-6)
    topo.graph.nodes["sw"]["latency_s"] = 0.5e-6
    ends = run_transfers(topo, [(0, 1, 1 * MB, 0.0)], CommSettings(message_overhead_s=1e-6))
    assert ends["f0"] == pytest.approx(2e-6 + 0.5e-6 + 3e-6 + 1e-6 + 1e6 / 10e9, rel=1e-12)


def test_nic_stack_copy_draws_memory_bandwidth_at_both_ends() -> None:
    # memory of 15 GB/s, copy factor 2: a 10 GB/s link flow is held to 7.5 GB/s by the copies
    topo = two_node(bw=10 * GB, lat=1e-6, spec=simple_spec(memory_bandwidth_Bps=15 * GB), one_sided=False)
    ends = run_transfers(topo, [(0, 1, 3 * MB, 0.0)], CommSettings(copy_traffic_factor=2.0))
    assert ends["f0"] == pytest.approx(1e-6 + 3e6 / 7.5e9, rel=1e-12)


def test_intra_node_copies_run_at_the_copy_cores_streaming_rate() -> None:
    # A load/store link of 100 GB/s between two sockets whose memory (100 GB/s) saturates at 10 cores: one core
    # streams 10 GB/s of memory traffic, and a copy reads and writes each payload byte (factor 2), so 2 copy
    # cores move 2 x 10 / 2 = 10 GB/s of payload at each end.
    spec = simple_spec(memory_bandwidth_Bps=100 * GB, saturation_cores=10)
    topo = two_node(bw=100 * GB, lat=1e-6, spec=spec, one_sided=True)
    comm = CommSettings(intra_node_copy_cores=2.0, copy_traffic_factor=2.0)
    ends = run_transfers(topo, [(0, 1, 10 * MB, 0.0)], comm)
    # because the copy ports (10 GB/s), not the link (100 GB/s), bound the flow
    assert ends["f0"] == pytest.approx(1e-6 + 10e6 / 10e9, rel=1e-12)
    # because two messages of one rank share its copy cores: each gets half
    ends = run_transfers(topo, [(0, 1, 10 * MB, 0.0), (0, 1, 10 * MB, 0.0)], comm)
    assert ends["f1"] == pytest.approx(1e-6 + 10e6 / 5e9, rel=1e-12)
    # because without copy cores an intra-node transfer runs at link speed
    ends = run_transfers(topo, [(0, 1, 10 * MB, 0.0)], CommSettings(copy_traffic_factor=2.0))
    assert ends["f0"] == pytest.approx(1e-6 + 10e6 / 100e9, rel=1e-12)


def test_copy_cores_leave_nic_paths_alone() -> None:
    # Because a path through a NIC stack uses the NIC ports, not the shared-memory copy ports: a 10 GB/s NIC link
    # with fast memory runs at 10 GB/s whatever the copy cores.
    spec = simple_spec(memory_bandwidth_Bps=1000 * GB, saturation_cores=10)
    topo = two_node(bw=10 * GB, lat=1e-6, spec=spec, one_sided=False)
    ends = run_transfers(topo, [(0, 1, 10 * MB, 0.0)], CommSettings(intra_node_copy_cores=0.01))
    assert ends["f0"] == pytest.approx(1e-6 + 10e6 / 10e9, rel=1e-12)


def test_trunk_caps_a_single_flow_at_one_lane() -> None:
    g = nx.Graph()
    for n in ("a", "b"):
        g.add_node(n, compute=simple_spec())
    g.add_edge("a", "b", link=Link("a", "b", "trunk", 40 * GB, 1e-6, lanes=4))
    topo = Topology("trunk", g, ["a", "b"])
    ends = run_transfers(topo, [(0, 1, 10 * MB, 0.0)])
    assert ends["f0"] == pytest.approx(1e-6 + 10e6 / 10e9, rel=1e-12)
    ends = run_transfers(topo, [(0, 1, 10 * MB, 0.0)] * 4)
    assert ends["f3"] == pytest.approx(1e-6 + 10e6 / 10e9, rel=1e-12)


def test_maxmin_progressive_filling_textbook_case() -> None:
    # links A (cap 10) and B (cap 4); flow 0 uses A+B, flow 1 uses A, flow 2 uses B: B splits 2/2, flow 1 gets 8
    e_act = np.array([0, 0, 1, 2])
    e_res = np.array([0, 1, 0, 1])
    rates = maxmin_rates(3, e_act, e_res, np.ones(4), np.array([10.0, 4.0]), np.full(3, np.inf))
    assert rates.tolist() == pytest.approx([2.0, 8.0, 2.0])
    capped = maxmin_rates(3, e_act, e_res, np.ones(4), np.array([10.0, 4.0]), np.array([1.0, np.inf, np.inf]))
    assert capped.tolist() == pytest.approx([1.0, 9.0, 3.0])


def test_hashed_routes_are_the_topologys_routes(clx64: Topology) -> None:
    sim = Simulation(clx64)
    net = sim.network
    for s, d in [(0, 1), (0, 2), (0, 63), (5, 40), (63, 0), (31, 32)]:
        path = clx64.route(s, d)
        want = [f"{a}>{b}" for a, b in zip(path, path[1:], strict=False)]
        assert net.path_link_names(int(net.rank_node[s]), int(net.rank_node[d])) == want


def test_split_mode_spreads_over_the_ecmp_set() -> None:
    # a diamond: r0 - swA/swB - r1; split mode sends half of the flow over each switch
    g = nx.Graph()
    for n in ("r0", "r1"):
        g.add_node(n, compute=simple_spec())
    for sw in ("swA", "swB"):
        for n in ("r0", "r1"):
            g.add_edge(n, sw, link=Link(n, sw, "opa", 10 * GB, 1e-6))
    topo = Topology("diamond", g, ["r0", "r1"])
    sim = Simulation(topo, comm=CommSettings(ecmp="split"))
    sr = sim.network.source_routes(sim.network.node_id["r0"])
    d = sim.network.node_id["r1"]
    assert sorted(sr.w[sr.ptr[d] : sr.ptr[d + 1]].tolist()) == [0.5] * 4
    # two flows r0->r1: each draws 1/2 of its rate per path; per-flow lane cap 10 GB/s holds
    ends = run_transfers(topo, [(0, 1, 10 * MB, 0.0), (0, 1, 10 * MB, 0.0)], CommSettings(ecmp="split"))
    assert ends["f0"] == pytest.approx(2e-6 + 10e6 / 10e9, rel=1e-12)
