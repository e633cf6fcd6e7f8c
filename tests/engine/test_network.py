"""Flow-level contention against closed forms: one link, shared links, pruned uplinks, NIC limits, routes."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from dlrmsim.engine import CommSettings, Simulation, costs
from dlrmsim.engine.maxmin import maxmin_rates
from dlrmsim.topologies.topology import Link, Topology
from tests.engine.handmade import GB, clx_like, pruned_tree, simple_spec, star, two_node

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


def test_each_sockets_own_opa_halves_are_bound_to_its_nic_ports(clx64: Topology) -> None:
    # Because a socket's one OPA half out carries exactly the flows of its injection port (nothing crosses a
    # socket, and its node-mate reaches the leaf directly), at the port's capacity, the port states the link's
    # constraint; the same for the half in and the ejection port. Switch uplinks carry many ports' flows: kept.
    net = Simulation(clx64).network
    out_link, in_link = net.port_bound_links
    for i in net.rank_node.tolist():
        node = str(net.nodes[i])
        out_name, in_name = net.resource_names[out_link[i]], net.resource_names[in_link[i]]
        assert out_name.startswith(f"{node}>leaf") and in_name.endswith(f">{node}"), (out_name, in_name)
        assert net.capacity[out_link[i]] == net.capacity[net.nic_out[i]] == net.capacity[in_link[i]]
    switches = [i for i in range(len(net.nodes)) if net.node_rank[i] < 0]
    assert switches and all(out_link[i] == -1 and in_link[i] == -1 for i in switches)


def test_a_node_that_flows_cross_keeps_its_link() -> None:
    # Because r1 sits inside the only path r0 - r1 - sw - r2, its OPA half out also carries r0's flows, which
    # r1's injection port does not: that link states a constraint of its own. r2, a leaf of the fabric, does not.
    g = nx.Graph()
    for n in ("r0", "r1", "r2"):
        g.add_node(n, compute=simple_spec())
    g.add_edge("r0", "r1", link=Link("r0", "r1", "upi", 20 * GB, 1e-7))
    for n in ("r1", "r2"):
        g.add_edge(n, "sw", link=Link(n, "sw", "opa", 10 * GB, 1e-6, one_sided=False))
    net = Simulation(Topology("chain", g, ["r0", "r1", "r2"])).network
    out_link, in_link = net.port_bound_links
    r1, r2 = net.node_id["r1"], net.node_id["r2"]
    assert out_link[r1] == -1 and in_link[r1] == -1
    assert net.resource_names[out_link[r2]] == "r2>sw" and net.resource_names[in_link[r2]] == "sw>r2"


def test_leaving_port_bound_links_out_changes_no_time() -> None:
    # Because a dropped link half and its port are one inequality over the same flows, progressive filling
    # computes the same level for both in every round: every flow of contending collectives (an alltoall across
    # a 4:1 pruned root that binds, an allreduce, both drawing copy traffic from the sockets' memory) ends at the
    # same instant, bit for bit, as with the links' entries kept.
    topo = clx_like(sockets=16, per_leaf=8, uplinks=2)

    def run(keep_links: bool) -> list[tuple[str, float, float]]:
        sim = Simulation(topo, record_flows=True)
        if keep_links:
            none = np.full(len(sim.network.nodes), -1, dtype=np.int64)
            sim.network.__dict__["port_bound_links"] = (none, none)  # before any flow is built
        sim.collective("alltoall", list(range(16)), 24 * MB, name="a2a")
        sim.collective("allreduce", list(range(0, 16, 3)), 16 * MB, name="ar")
        sim.run()
        return [(r.name, r.start, r.end) for r in sim.records]

    kept, dropped = run(True), run(False)
    assert len(kept) > 250
    assert dropped == kept


def test_a_cross_leaf_flow_has_two_entries_fewer(clx64: Topology) -> None:
    # Because the socket-to-leaf and leaf-to-socket halves are stated by the NIC ports, a flow across the root
    # draws from the two uplink halves, its two ports and its two memory domains: 6 entries, not 8.
    net = Simulation(clx64).network
    s, d = int(net.rank_node[0]), int(net.rank_node[63])
    pid = int(net.pair_ids(np.array([s]), np.array([d]))[0])
    t = net.pair_tables()
    names = sorted(net.resource_names[r] for r in t.res[t.ptr[pid] : t.ptr[pid + 1]])
    path = clx64.route(0, 63)
    hops = [f"{a}>{b}" for a, b in zip(path, path[1:], strict=False)]
    assert len(hops) == 4 and len(names) == 6
    assert set(hops[1:3]) < set(names) and not {hops[0], hops[3]} & set(names)
