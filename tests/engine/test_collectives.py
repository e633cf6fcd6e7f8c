"""Collectives against closed forms, the algorithm registry, and the alltoall bisection bound."""

from __future__ import annotations

import numpy as np
import pytest

from dlrmsim.engine import ALGORITHMS, CommSettings, FlowSpec, Phase, Simulation, algorithm, costs
from dlrmsim.errors import DlrmsimError
from dlrmsim.topologies.topology import Topology
from tests.engine.handmade import GB, OPA_BW, OPA_LAT, UPI_BW, clx_like, ring, simple_spec, star

NO_REDUCE = CommSettings(reduce_traffic_factor=0.0)
B = 10 * GB
LAT = 1e-6


def run(topo: Topology, op: str, nbytes: float, comm: CommSettings = NO_REDUCE, **kw) -> Simulation:
    sim = Simulation(topo, comm=comm)
    sim.collective(op, list(range(topo.num_ranks)), nbytes, name=op, **kw)
    sim.run()
    return sim


@pytest.mark.parametrize("p", [2, 4, 8])
def test_ring_allreduce_matches_closed_form(p: int) -> None:
    sim = run(ring(p, bw=B, lat=LAT), "allreduce", 8e6, algorithm="ring")
    assert sim.now == pytest.approx(costs.ring_allreduce_time(p, 8e6, B, LAT), rel=1e-9)
    assert sim.now == pytest.approx(2 * (p - 1) / p * 8e6 / B + 2 * (p - 1) * LAT, rel=1e-9)


def test_reduction_arithmetic_costs_memory_bandwidth() -> None:
    p, s = 4, 8e6
    spec = simple_spec(memory_bandwidth_Bps=20 * GB)
    sim = run(ring(p, bw=B, lat=LAT, spec=spec), "allreduce", s, comm=CommSettings(reduce_traffic_factor=3.0))
    # each of p-1 reduce-scatter steps reads two chunks and writes one at 20 GB/s on the reducing rank
    assert sim.now == pytest.approx(costs.ring_allreduce_time(p, s, B, LAT) + (p - 1) * 3 * (s / p) / 20e9, rel=1e-9)
    reduces = [r for r in sim.records if r.kind == "reduce"]
    assert len(reduces) == p * (p - 1)
    assert sum(r.bytes for r in reduces) == pytest.approx(p * (p - 1) * 3 * s / p)


@pytest.mark.parametrize("p", [4, 8])
def test_recursive_halving_doubling_matches_closed_form_on_a_switch(p: int) -> None:
    sim = run(star(p, bw=B, lat=LAT), "allreduce", 8e6, algorithm="rhd")
    assert sim.now == pytest.approx(costs.rhd_allreduce_time(p, 8e6, B, 2 * LAT), rel=1e-9)


def test_rhd_with_non_power_of_two_ranks_folds_the_extra_ones() -> None:
    p, s = 6, 8e6
    sim = run(star(p, bw=B, lat=LAT), "allreduce", s, algorithm="rhd")
    a = 2 * LAT
    # fold (S), 2 halving + 2 doubling steps of the 4-rank core, unfold (S)
    assert sim.now == pytest.approx(2 * (a + s / B) + costs.rhd_allreduce_time(4, s, B, a), rel=1e-9)


def test_reduce_scatter_plus_allgather_direct() -> None:
    p, s = 4, 8e6
    sim = run(star(p, bw=B, lat=LAT), "allreduce", s, algorithm="rsag")
    # each phase: every rank sends (p-1) chunks of S/p through its one link
    assert sim.now == pytest.approx(2 * (2 * LAT + (p - 1) * (s / p) / B), rel=1e-9)


def test_hierarchical_allreduce_inside_nodes_then_across() -> None:
    topo = clx_like(8, per_leaf=8)
    s = 8e6
    sim = run(topo, "allreduce", s, algorithm="hierarchical")
    upi = 0.1e-6 + (s / 2) / UPI_BW  # reduce-scatter / allgather inside a dual-socket node
    opa = 2 * OPA_LAT + (s / 2 / 4) / OPA_BW  # one ring step among the 4 nodes on the S/2 shard
    assert sim.now == pytest.approx(2 * upi + 2 * 3 * opa, rel=1e-9)


def test_pairwise_alltoall_matches_closed_form() -> None:
    p, s = 4, 3e6
    sim = run(star(p, bw=B, lat=LAT), "alltoall", s, algorithm="pairwise")
    assert sim.now == pytest.approx((p - 1) * (2 * LAT + s / (p - 1) / B), rel=1e-9)


def test_direct_alltoall_on_a_switch_is_bound_by_each_rank_link() -> None:
    p, s = 8, 7e6
    sim = run(star(p, bw=B, lat=LAT), "alltoall", s)
    assert sim.now == pytest.approx(2 * LAT + s / B, rel=1e-9)
    assert sum(r.bytes for r in sim.records if r.kind == "flow") == pytest.approx(p * s)


def test_direct_alltoall_on_the_64_socket_cluster_is_bound_by_the_root_bisection(clx64: Topology) -> None:
    # MLPerf strong scaling, Eq. 2: 26 x 16384 x 128 x 4 B = 208 MiB in all, evenly over the 64 x 63 pairs
    total = 26 * 16384 * 128 * 4
    p = clx64.num_ranks
    pair = total / (p * (p - 1))
    sim = Simulation(clx64)
    sim.collective("alltoall", list(range(p)), total / p, name="a2a")
    sim.run()
    leaf = clx64.graph.nodes[clx64.node(0)].get("leaf", "leaf0")
    uplinks = [clx64.link(leaf, n) for n in clx64.graph.neighbors(leaf) if n not in clx64.ranks]
    bisection = sum(link.bandwidth_Bps for link in uplinks)  # one direction
    per_leaf = p // 2
    cross = per_leaf * per_leaf * pair  # bytes leaf0 -> leaf1
    bound = costs.direct_alltoall_bisection_time(cross, bisection)
    nic_bound = (p - 1) * pair / OPA_BW
    assert bound > nic_bound  # the 2:1 pruned root, not the adapters, is the bottleneck
    delay = max(r.end - r.start for r in sim.records if r.kind == "flow") - bound
    assert sim.now >= bound
    assert sim.now == pytest.approx(bound, rel=0.02)
    assert 0 < delay < 10e-6  # what is left is latency and per-message overhead


@pytest.mark.parametrize("p", [3, 5])
def test_ring_allgather_and_reduce_scatter(p: int) -> None:
    s = 6e6
    expected = (p - 1) * (LAT + s / p / B)
    assert run(ring(p, bw=B, lat=LAT), "allgather", s).now == pytest.approx(expected, rel=1e-9)
    assert run(ring(p, bw=B, lat=LAT), "reduce_scatter", s).now == pytest.approx(expected, rel=1e-9)


def test_scatter_variants() -> None:
    p, s = 5, 4e6
    topo = star(p, bw=B, lat=LAT)
    assert run(topo, "scatter", s, algorithm="direct").now == pytest.approx(2 * LAT + s / B, rel=1e-9)
    assert run(topo, "scatter", s, algorithm="linear").now == pytest.approx((p - 1) * (2 * LAT + s / (p - 1) / B), rel=1e-9)
    sim = run(topo, "scatter", s, algorithm="binomial", root=2)
    got = {(r.rank, r.peer): r.bytes for r in sim.records if r.kind == "flow"}
    assert sum(got.values()) == pytest.approx(s / 4 * (2 + 1 + 1 + 1))  # 2 shares then 3 single shares
    assert {r for r, _ in got} <= {2, 3, 4, 0, 1}
    assert all(src != 2 or b > 0 for (src, _), b in got.items())


def test_alltoallv_matrix() -> None:
    topo = star(3, bw=B, lat=LAT)
    m = np.array([[0, 1e6, 2e6], [0, 0, 0], [3e6, 0, 0]])
    sim = Simulation(topo, comm=NO_REDUCE)
    sim.alltoallv([0, 1, 2], m, name="v")
    sim.run()
    assert sim.now == pytest.approx(2 * LAT + 3e6 / B, rel=1e-9)  # rank 0 sends 3 MB; rank 2 sends 3 MB


def test_per_rank_completion_events() -> None:
    sim = Simulation(star(4, bw=B, lat=LAT), comm=NO_REDUCE)
    ev = sim.collective("scatter", [0, 1, 2, 3], 3e6, name="sc", algorithm="linear")
    seen: dict[int, float] = {}
    for r, e in ev.rank_events.items():
        e.callbacks.append(lambda _e, r=r: seen.__setitem__(r, sim.now))
    sim.run()
    share = 2 * LAT + 1e6 / B
    assert seen == pytest.approx({1: share, 2: 2 * share, 3: 3 * share, 0: 3 * share}, rel=1e-9)


def test_a_new_algorithm_is_one_registered_function() -> None:
    @algorithm("allreduce", "test_gather_bcast")
    def gather_bcast(ctx):  # noqa: ANN001, ANN202
        others = range(1, ctx.p)
        up = Phase.from_flows(
            [FlowSpec(r, 0, ctx.nbytes) for r in others], reduce_bytes=[ctx.nbytes * (ctx.p - 1)] + [0] * (ctx.p - 1)
        )
        down = Phase.from_flows([FlowSpec(0, r, ctx.nbytes) for r in others])
        return [up, down]

    try:
        comm = CommSettings(reduce_traffic_factor=0.0, algorithms={"allreduce": "test_gather_bcast"})
        sim = run(star(4, bw=B, lat=LAT), "allreduce", 1e6, comm=comm)
        assert sim.now == pytest.approx(2 * (2 * LAT + 3e6 / B), rel=1e-9)
    finally:
        del ALGORITHMS["allreduce"]["test_gather_bcast"]


def test_unknown_algorithm_is_a_one_line_error() -> None:
    with pytest.raises(DlrmsimError, match="did you mean 'ring'"):
        run(star(2), "allreduce", 1e6, algorithm="rign")
    with pytest.raises(DlrmsimError, match="unknown collective"):
        run(star(2), "allreduse", 1e6)
