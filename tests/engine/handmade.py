"""Small hand-built topologies (networkx graphs) for engine tests.

These do not replace the YAML builders in :mod:`dlrmsim.topologies`; they exist so the engine can be tested
against closed forms on fabrics whose every number is visible here. :func:`clx_like` approximates the
64-socket CLX/Omni-Path cluster of [Kalamkar20] (docs/sources.md) (and its scaled versions).
"""

from __future__ import annotations

import networkx as nx

from dlrmsim.topologies.topology import ComputeSpec, EfficiencyTable, Link, Topology

GB = 1e9


def simple_spec(
    name: str = "socket",
    cores: int = 28,
    peak_flops: float = 4.3e12,
    memory_bandwidth_Bps: float = 1e15,
    saturation_cores: float | None = None,
    gemm_efficiency: float = 1.0,
    memory_efficiency: float = 1.0,
) -> ComputeSpec:
    """A ComputeSpec with constant efficiencies; the default memory is so fast it never matters."""
    return ComputeSpec(
        name=name,
        cores=cores,
        clock_hz=2.4e9,
        peak_flops={"fp32": peak_flops},
        memory_bandwidth_Bps=memory_bandwidth_Bps,
        memory_capacity_B=96e9,
        gemm_efficiency=EfficiencyTable.constant(gemm_efficiency),
        memory_efficiency=EfficiencyTable.constant(memory_efficiency),
        saturation_cores=saturation_cores,
    )


def _add_link(
    g: nx.Graph,
    u: str,
    v: str,
    bw: float,
    lat: float,
    kind: str = "upi",
    one_sided: bool = True,
    overhead: float = 0.0,
    lanes: int = 1,
) -> None:
    g.add_edge(u, v, link=Link(u, v, kind, bw, lat, overhead_s=overhead, one_sided=one_sided, lanes=lanes))


def two_node(bw: float = 10 * GB, lat: float = 1e-6, spec: ComputeSpec | None = None, one_sided: bool = True) -> Topology:
    """Ranks r0 and r1 joined by one link."""
    g = nx.Graph()
    for n in ("r0", "r1"):
        g.add_node(n, compute=spec or simple_spec())
    _add_link(g, "r0", "r1", bw, lat, one_sided=one_sided)
    return Topology("two-node", g, ["r0", "r1"])


def ring(p: int, bw: float = 10 * GB, lat: float = 1e-6, spec: ComputeSpec | None = None) -> Topology:
    """p ranks in a ring, each joined to its two neighbours by a one-sided link."""
    g = nx.Graph()
    names = [f"r{i}" for i in range(p)]
    for n in names:
        g.add_node(n, compute=spec or simple_spec())
    for i in range(p):
        _add_link(g, names[i], names[(i + 1) % p], bw, lat)
    return Topology(f"ring-{p}", g, names)


def star(
    p: int, bw: float = 10 * GB, lat: float = 1e-6, spec: ComputeSpec | None = None, one_sided: bool = True, overhead: float = 0.0
) -> Topology:
    """p ranks, each with one link to a central switch."""
    g = nx.Graph()
    names = [f"r{i}" for i in range(p)]
    g.add_node("sw")
    for n in names:
        g.add_node(n, compute=spec or simple_spec())
        _add_link(g, n, "sw", bw, lat, kind="opa", one_sided=one_sided, overhead=overhead)
    return Topology(f"star-{p}", g, names)


def pruned_tree(
    per_leaf: int = 2, bw: float = 10 * GB, uplink_bw: float | None = None, lat: float = 1e-6, spec: ComputeSpec | None = None
) -> Topology:
    """Two leaf switches of ``per_leaf`` ranks each, joined by one uplink (default per_leaf*bw/2: 2:1 pruned)."""
    g = nx.Graph()
    names = []
    up = uplink_bw if uplink_bw is not None else per_leaf * bw / 2
    _add_link(g, "leaf0", "leaf1", up, lat, kind="trunk")
    for leaf in range(2):
        for i in range(per_leaf):
            n = f"r{leaf * per_leaf + i}"
            names.append(n)
            g.add_node(n, compute=spec or simple_spec())
            _add_link(g, n, f"leaf{leaf}", bw, lat, kind="opa")
    return Topology("pruned-tree", g, names)


# Numbers from [Kalamkar20] (64-socket CLX cluster): 100 Gb/s OPA per socket, 1 us, NIC stack;
# 16 uplinks per 32-socket leaf (2:1); UPI ~22 GB/s bidirectional inside a node (11 GB/s each way).
OPA_BW = 100e9 / 8
OPA_LAT = 1e-6
UPI_BW = 22e9 / 2


def clx_like(sockets: int = 64, per_leaf: int = 32, uplinks: int = 16) -> Topology:
    """Dual-socket CLX nodes on a 2:1 pruned two-level fat-tree of 48-port switches, one root.

    Each socket has its own OPA adapter to its leaf; the two sockets of a node share a UPI link; each leaf
    has ``uplinks`` OPA links to the root, modelled as one trunk with that many lanes.
    """
    spec = ComputeSpec(
        name="xeon-8280",
        cores=28,
        clock_hz=2.4e9,
        peak_flops={"fp32": 4.3e12},
        memory_bandwidth_Bps=105e9,
        memory_capacity_B=96e9,
        saturation_cores=7.0,
    )
    g = nx.Graph()
    names = [f"n{s // 2}s{s % 2}" for s in range(sockets)]
    leaves = (sockets + per_leaf - 1) // per_leaf
    g.add_node("root")
    for leaf in range(leaves):
        g.add_node(f"leaf{leaf}")
        _add_link(g, f"leaf{leaf}", "root", uplinks * OPA_BW, OPA_LAT, kind="opa", one_sided=False, lanes=uplinks)
    for s, n in enumerate(names):
        g.add_node(n, compute=spec)
        _add_link(g, n, f"leaf{s // per_leaf}", OPA_BW, OPA_LAT, kind="opa", one_sided=False)
        if s % 2 == 1:
            _add_link(g, names[s - 1], n, UPI_BW, 0.1e-6, kind="upi")
    return Topology(f"clx-like-{sockets}", g, names)
