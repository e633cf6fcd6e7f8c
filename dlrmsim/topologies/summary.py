"""Derived figures of a built topology: hop histogram, aggregate and bisection bandwidth, peak flops, memory.

Definitions (all bandwidths per direction, GB = 1e9 bytes):

- aggregate link bandwidth: the sum over unique links (graph edges; a trunk counts with its whole
  bandwidth) of each link's per-direction bandwidth. For the 8-socket node: 12 UPI links x 22 GB/s =
  264 GB/s, the "about 260 GB/s aggregate" of REFERENCE section 2.
- bisection bandwidth: the minimum cut between the first and second half of the rank order, i.e. the
  most data per second the first half can send to the second (networkx max-flow with each link's
  per-direction bandwidth as capacity). For the 64-socket cluster: the 16-link leaf-to-root trunk,
  200 GB/s.
- hop histogram: for every other rank, the fewest links between rank 0 and it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

import networkx as nx

from dlrmsim.topologies.topology import Topology


@dataclass(frozen=True)
class TopologySummary:
    """What ``dlrmsim topology show`` prints; bandwidths in GB/s per direction, memory in GB (1e9 B)."""

    name: str
    description: str
    ranks: int
    rank_kind: str
    hosts: int
    switches: int
    nodes: int
    unique_links: int
    physical_links: int
    links_by_kind: dict[str, int]
    hop_histogram: dict[int, int]
    diameter_from_rank0: int
    aggregate_link_bandwidth_GBps: float
    bisection_bandwidth_GBps: float
    peak_tflops: dict[str, float]
    memory_GB: float
    memory_bandwidth_GBps: float
    host_memory_GB: float
    calibrated: bool
    link_types: dict[str, dict[str, float | str | bool]] = field(default_factory=dict)

    def to_json(self) -> dict:
        out = asdict(self)
        out["hop_histogram"] = {str(k): v for k, v in sorted(self.hop_histogram.items())}
        return out


def hop_histogram(topo: Topology, rank: int = 0) -> dict[int, int]:
    """Hop count -> number of other ranks at that distance from ``rank``."""
    dist = nx.single_source_shortest_path_length(topo.graph, topo.node(rank))
    hist = Counter(dist[r] for i, r in enumerate(topo.ranks) if i != rank and r in dist)
    return dict(sorted(hist.items()))


def aggregate_link_bandwidth_Bps(topo: Topology) -> float:
    """Sum of every unique link's per-direction bandwidth (B/s)."""
    return sum(link.bandwidth_Bps for link in topo.links)


def min_cut_Bps(topo: Topology, side_a: list[str], side_b: list[str]) -> float:
    """Most data per second (B/s, one direction) the nodes of ``side_a`` together can send to ``side_b``."""
    g = nx.Graph()
    for u, v, data in topo.graph.edges(data=True):
        g.add_edge(u, v, capacity=data["link"].bandwidth_Bps / 1e9)  # GB/s keeps the flow numbers small
    src, dst = ("__cut_src__", "__cut_dst__")
    for r in side_a:
        g.add_edge(src, r)  # no capacity attribute: unbounded
    for r in side_b:
        g.add_edge(dst, r)
    return nx.maximum_flow_value(g, src, dst) * 1e9


def bisection_bandwidth_Bps(topo: Topology) -> float:
    """Min cut between the two halves of the rank order (B/s per direction); 0 for one rank."""
    n = topo.num_ranks
    if n < 2:
        return 0.0
    return min_cut_Bps(topo, topo.ranks[: n // 2], topo.ranks[n // 2 :])


def summarize(topo: Topology) -> TopologySummary:
    """Figures of a topology for people and reports."""
    g = topo.graph
    hist = hop_histogram(topo)
    peak: Counter[str] = Counter()
    mem = mem_bw = 0.0
    domains: dict[str, float] = {}
    for i in range(topo.num_ranks):
        c = topo.compute(i)
        for p, v in c.peak_flops.items():
            peak[p] += v / 1e12
        mem += c.memory_capacity_B / 1e9
        domains[c.memory_domain or topo.node(i)] = c.memory_bandwidth_Bps / 1e9  # a shared domain counts once
    mem_bw = sum(domains.values())
    host_mem = sum(g.nodes[h]["compute"].memory_capacity_B for h in topo.hosts) / 1e9
    kinds = Counter(link.kind for link in topo.links)
    types: dict[str, dict[str, float | str | bool]] = {}
    for link in topo.links:
        key = link.type_name or link.kind
        if key not in types:
            types[key] = {
                "kind": link.kind,
                "bandwidth_GBps": link.bandwidth_Bps / link.lanes / 1e9,
                "latency_us": link.latency_s * 1e6,
                "overhead_us": link.overhead_s * 1e6,
                "one_sided": link.one_sided,
            }
    rank_kinds = Counter(g.nodes[r]["kind"] for r in topo.ranks)
    return TopologySummary(
        name=topo.name,
        description=topo.description,
        ranks=topo.num_ranks,
        rank_kind="/".join(sorted(rank_kinds)),
        hosts=len(topo.hosts),
        switches=sum(1 for _, d in g.nodes(data=True) if d.get("kind") in ("switch", "nic")),
        nodes=g.number_of_nodes(),
        unique_links=g.number_of_edges(),
        physical_links=sum(link.lanes for link in topo.links),
        links_by_kind=dict(sorted(kinds.items())),
        hop_histogram=hist,
        diameter_from_rank0=max(hist) if hist else 0,
        aggregate_link_bandwidth_GBps=aggregate_link_bandwidth_Bps(topo) / 1e9,
        bisection_bandwidth_GBps=bisection_bandwidth_Bps(topo) / 1e9,
        peak_tflops=dict(sorted(peak.items())),
        memory_GB=mem,
        memory_bandwidth_GBps=mem_bw,
        host_memory_GB=host_mem,
        calibrated=all(g.nodes[r].get("calibrated", True) for r in topo.ranks),
        link_types=types,
    )
