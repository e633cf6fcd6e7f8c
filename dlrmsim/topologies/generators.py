"""Fabric generators: turn one validated fabric description into graph nodes and edges.

Each generator gets the fabric model and a ``Wiring`` (which knows the file's compute, link and switch
types and adds typed nodes and edges) and wires endpoints, switches and links in rank order. Checks that
need the whole graph (ports, connectivity) are the builder's job.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from itertools import combinations

import networkx as nx

from dlrmsim.errors import DlrmsimError, closest, unknown_name_error
from dlrmsim.topologies import schema
from dlrmsim.topologies.topology import ComputeSpec, Link


class Wiring:
    """Adds typed nodes and edges to a graph, resolving type names against the topology file."""

    def __init__(
        self,
        spec: schema.TopologyFile,
        source: str,
        compute_specs: dict[str, ComputeSpec],
        compute_attrs: dict[str, dict],
    ) -> None:
        self.spec = spec
        self.source = source
        self.compute_specs = compute_specs
        self.compute_attrs = compute_attrs
        self.graph = nx.Graph()
        self.ranks: list[str] = []
        self.hosts: list[str] = []
        self._links: dict[tuple[str, int], tuple[str, float, float, float, bool, int]] = {}

    # -- type look-ups ------------------------------------------------------------------------------
    def _compute(self, type_name: str, field: str) -> ComputeSpec:
        if type_name not in self.compute_specs:
            raise unknown_name_error("compute type", type_name, self.compute_specs, source=self.source, field=field)
        return self.compute_specs[type_name]

    def link_type(self, type_name: str, field: str) -> schema.LinkType:
        if type_name not in self.spec.links:
            raise unknown_name_error("link type", type_name, self.spec.links, source=self.source, field=field)
        return self.spec.links[type_name]

    def switch_type(self, type_name: str, field: str) -> schema.SwitchType:
        if type_name not in self.spec.switches:
            raise unknown_name_error("switch type", type_name, self.spec.switches, source=self.source, field=field)
        return self.spec.switches[type_name]

    # -- nodes and edges ----------------------------------------------------------------------------
    def endpoint(
        self, name: str, type_name: str, field: str, *, rank: bool = True, spec: ComputeSpec | None = None, **attrs
    ) -> None:
        """A compute node (socket, card or host); ``rank`` appends it to the rank order."""
        compute = spec or self._compute(type_name, field)
        self._new_node(name, field)
        kind = compute.kind
        self.graph.add_node(
            name, kind=kind, compute=compute, compute_type=type_name, **self.compute_attrs.get(type_name, {}), **attrs
        )
        if rank:
            self.ranks.append(name)
        if kind == "host":
            self.hosts.append(name)

    def switch(self, name: str, type_name: str, field: str, **attrs) -> None:
        sw = self.switch_type(type_name, field)
        self._new_node(name, field)
        self.graph.add_node(
            name,
            kind=sw.kind,
            switch_type=type_name,
            model=sw.model,
            ports=sw.ports,
            latency_s=sw.latency_us * 1e-6,
            power_W=sw.power_W,
            **attrs,
        )

    def _new_node(self, name: str, field: str) -> None:
        if name in self.graph:
            raise DlrmsimError(
                f"node '{name}' is defined twice", source=self.source, field=field, fix="give each node a unique name"
            )

    def connect(self, u: str, v: str, type_name: str, field: str, trunk: int = 1) -> None:
        """A full-duplex edge of ``trunk`` parallel links of ``type_name``; both nodes must exist."""
        for end in (u, v):
            if end not in self.graph:
                raise DlrmsimError(
                    f"link to unknown node '{end}'",
                    source=self.source,
                    field=field,
                    fix=_did_you_mean(end, self.graph.nodes, "declare the node in fabric.nodes"),
                )
        if u == v:
            raise DlrmsimError(f"link from '{u}' to itself", source=self.source, field=field, fix="link two different nodes")
        lt = self.link_type(type_name, field)
        if self.graph.has_edge(u, v):
            raise DlrmsimError(
                f"nodes '{u}' and '{v}' are linked twice", source=self.source, field=field, fix="use one edge with trunk: N"
            )
        # A switch's own latency stays on its node (``latency_s``); paths add it once per switch they cross.
        link = Link(
            u=u,
            v=v,
            kind=lt.kind,
            bandwidth_Bps=lt.link_bandwidth_GBps * 1e9 * trunk,
            latency_s=lt.latency_us * 1e-6,
            overhead_s=lt.overhead_us * 1e-6,
            one_sided=lt.one_sided,
            lanes=trunk,
            width=lt.width or 1,
            type_name=type_name,
        )
        self.graph.add_edge(u, v, link=link, link_type=type_name, trunk=trunk)


def _did_you_mean(word: str, choices, otherwise: str) -> str:
    guess = closest(word, [str(c) for c in choices])
    return f"did you mean '{guess}'?" if guess else otherwise


# -------------------------------------------------------------------------------------------------------
# Generators


def full_mesh(f: schema.FullMesh, w: Wiring) -> None:
    names = [f"r{i}" for i in range(f.endpoints)]
    for n in names:
        w.endpoint(n, f.compute, "fabric.compute")
    for a, b in combinations(names, 2):
        w.connect(a, b, f.link, "fabric.link")


def ring(f: schema.Ring, w: Wiring) -> None:
    names = [f"r{i}" for i in range(f.endpoints)]
    for n in names:
        w.endpoint(n, f.compute, "fabric.compute")
    if f.endpoints == 2:
        w.connect(names[0], names[1], f.link, "fabric.link")
    elif f.endpoints > 2:
        for i, n in enumerate(names):
            w.connect(n, names[(i + 1) % len(names)], f.link, "fabric.link")


def torus_2d(f: schema.Torus2D, w: Wiring) -> None:
    def name(r: int, c: int) -> str:
        return f"r{r}.{c}"

    for r in range(f.rows):
        for c in range(f.cols):
            w.endpoint(name(r, c), f.compute, "fabric.compute", row=r, col=c)
    for r in range(f.rows):
        for c in range(f.cols):
            for nr, nc in ((r, (c + 1) % f.cols), ((r + 1) % f.rows, c)):
                a, b = name(r, c), name(nr, nc)
                if a != b and not w.graph.has_edge(a, b):  # dimensions of size 2 have one link, of size 1 none
                    w.connect(a, b, f.link, "fabric.link")


def single_switch(f: schema.SingleSwitch, w: Wiring) -> None:
    w.switch("sw0", f.switch, "fabric.switch", level=1)
    for i in range(f.endpoints):
        w.endpoint(f"r{i}", f.compute, "fabric.compute")
        w.connect(f"r{i}", "sw0", f.link, "fabric.link")


def twisted_hypercube(f: schema.TwistedHypercube, w: Wiring) -> None:
    """Hypercube Q_d with edges (2, 2+h) and (3, 3+h) swapped for (2, 3+h) and (3, 2+h), h = 2**(d-1).

    Twisting one pair of edges of a 4-cycle keeps every degree at d and cuts the diameter to d-1
    (Esfahanian, Ni and Sagan, "The twisted N-cube", 1991). For d=3: two 4-socket boards (rings
    0-1-3-2 and 4-5-7-6) joined by 0-4, 1-5, 2-7, 3-6: 3 peers at one hop, 4 at two.
    """
    d = f.dimension
    n, h = 2**d, 2 ** (d - 1)
    for i in range(n):
        w.endpoint(f"s{i}", f.compute, "fabric.compute", board=i // h)
    edges = {(i, i ^ (1 << b)) for i in range(n) for b in range(d) if i < i ^ (1 << b)}
    edges -= {(2, 2 + h), (3, 3 + h)}
    edges |= {(2, 3 + h), (3, 2 + h)}
    for a, b in sorted(edges):
        w.connect(f"s{a}", f"s{b}", f.link, "fabric.link")


def fat_tree(f: schema.FatTree, w: Wiring) -> None:
    """Leaves of ``endpoints_per_leaf`` endpoints, then up-levels of folded-Clos planes.

    Leaf uplink j goes to plane j. While one switch per plane cannot take a link from every switch
    below (more switches than ports), switches are grouped in pods of ports/2, each pod getting one
    switch per plane with ports/2 uplinks (no pruning above the leaves). At the top, a plane's switch
    takes one link from each switch below; planes are packed m to a physical switch (m the largest
    divisor of the uplink count that fits the ports), so their parallel links become trunks of m.
    With 2 leaves of 16 uplinks on 48-port switches that is one root with a 16-link trunk per leaf.
    """
    sw = w.switch_type(f.switch, "fabric.switch")
    ports = sw.ports
    d, up = f.endpoints_per_leaf, f.uplinks_per_leaf
    n_leaves = math.ceil(f.endpoints / d)
    epn = f.endpoints_per_node
    overrides: dict[int, tuple[str, str]] = {}
    for i, nc in enumerate(f.node_compute):
        for node in nc.nodes:
            overrides[node] = (nc.compute, f"fabric.node_compute.{i}.compute")
    n_nodes = f.endpoints // epn
    width = len(str(f.endpoints - 1))
    names = [f"s{i:0{width}d}" for i in range(f.endpoints)]
    leaves = [f"leaf{j}" for j in range(n_leaves)]
    for leaf in leaves:
        w.switch(leaf, f.switch, "fabric.switch", level=1)
    for i, name in enumerate(names):
        node = i // epn
        type_name, field = overrides.get(node, (f.compute, "fabric.compute"))
        w.endpoint(name, type_name, field, machine=node, leaf=leaves[i // d])
        w.connect(name, leaves[i // d], f.endpoint_link, "fabric.endpoint_link")
    if f.intra_node_link is not None:
        for node in range(n_nodes):
            for a, b in combinations(names[node * epn : (node + 1) * epn], 2):
                w.connect(a, b, f.intra_node_link, "fabric.intra_node_link", trunk=f.intra_node_trunk)
    if n_leaves == 1 and f.levels in (None, 1):
        return
    if f.levels == 1:
        raise DlrmsimError(
            f"{n_leaves} leaves need at least 2 switch levels",
            source=w.source,
            field="fabric.levels",
            fix="remove levels or set it to 2 or more",
        )
    counters = {"agg": 0, "root": 0}

    def build_up(group: list[str], uplinks: int, level: int) -> None:
        n = len(group)
        is_top = level + 1 == f.levels if f.levels is not None else n <= ports
        if is_top:
            if n > ports:
                raise DlrmsimError(
                    f"a top-level switch would need {n} ports but has {ports}",
                    source=w.source,
                    field="fabric.levels",
                    fix="add a level (or remove levels to pick the fewest that fit)",
                )
            m = max(k for k in range(1, uplinks + 1) if uplinks % k == 0 and k * n <= ports)
            for _ in range(uplinks // m):
                root = f"root{counters['root']}"
                counters["root"] += 1
                w.switch(root, f.switch, "fabric.switch", level=level + 1)
                for s in group:
                    w.connect(s, root, f.uplink, "fabric.uplink", trunk=m)
            return
        half = ports // 2
        if half < 2:
            # With one downlink per switch a level does not shrink the group: the tree would never close.
            raise DlrmsimError(
                f"{ports}-port switches cannot build a tree of more than one level",
                source=w.source,
                field="fabric.switch",
                fix="use switches with at least 4 ports",
            )
        pods = math.ceil(n / half)
        for _plane in range(uplinks):
            new_group = []
            for pod in range(pods):
                agg = f"agg{counters['agg']}"
                counters["agg"] += 1
                w.switch(agg, f.switch, "fabric.switch", level=level + 1)
                for s in group[pod * half : (pod + 1) * half]:
                    w.connect(s, agg, f.uplink, "fabric.uplink")
                new_group.append(agg)
            build_up(new_group, half, level + 1)

    build_up(leaves, up, 1)


def sled_rack(f: schema.SledRack, w: Wiring) -> None:
    w.switch("tor", f.tor_switch, "fabric.tor_switch", level=2)
    for s in range(f.sleds):
        nic = f"sled{s}.nic"
        w.switch(nic, f.nic, "fabric.nic", sled=s, level=1)
        w.connect(nic, "tor", f.uplink, "fabric.uplink", trunk=f.nodes_per_sled)
        for n in range(f.nodes_per_sled):
            base = f"sled{s}.node{n}"
            psw = f"{base}.pcie"
            w.switch(psw, f.pcie_switch, "fabric.pcie_switch", sled=s, machine=n, level=0)
            host = f"{base}.host"
            w.endpoint(host, f.host, "fabric.host", rank=False, sled=s, machine=n)
            w.connect(psw, host, f.host_link, "fabric.host_link")
            w.connect(host, nic, f.nic_link, "fabric.nic_link")
            for c in range(f.cards_per_node):
                card = f"{base}.card{c}"
                w.endpoint(card, f.card, "fabric.card", sled=s, machine=n, host=host)
                w.connect(card, psw, f.card_link, "fabric.card_link")


def host(f: schema.HostFabric, w: Wiring) -> None:
    """R ranks of (detected cores)/R cores each; memory bandwidth is the whole machine's, shared by domain."""
    base = w._compute(f.compute, "fabric.compute")
    if base.cores < f.ranks:
        raise DlrmsimError(
            f"{f.ranks} ranks but this machine has {base.cores} cores",
            source=w.source,
            field="fabric.ranks",
            fix=f"use at most {base.cores} ranks",
        )
    per_rank = base.cores // f.ranks
    scale = per_rank / base.cores
    spec = replace(
        base,
        cores=per_rank,
        peak_flops={p: v * scale for p, v in base.peak_flops.items()},
        memory_capacity_B=base.memory_capacity_B / f.ranks,
        memory_domain="host",
    )
    names = [f"host.r{i}" for i in range(f.ranks)]
    for n in names:
        w.endpoint(n, f.compute, "fabric.compute", spec=spec)
    for a, b in combinations(names, 2):
        w.connect(a, b, f.link, "fabric.link")


def explicit(f: schema.Explicit, w: Wiring) -> None:
    for i, node in enumerate(f.nodes):
        field = f"fabric.nodes.{i}"
        if node.kind in ("switch", "nic"):
            assert node.switch is not None
            sw = w.switch_type(node.switch, f"{field}.switch")
            if sw.kind != node.kind:
                raise DlrmsimError(
                    f"node kind '{node.kind}' but switch type '{node.switch}' is a {sw.kind}",
                    source=w.source,
                    field=f"{field}.kind",
                )
            w.switch(node.name, node.switch, f"{field}.name")
        else:
            assert node.compute is not None
            spec = w._compute(node.compute, f"{field}.compute")
            if spec.kind != node.kind:
                raise DlrmsimError(
                    f"node kind '{node.kind}' but compute type '{node.compute}' is a {spec.kind}",
                    source=w.source,
                    field=f"{field}.kind",
                    fix=f"set kind: {spec.kind}",
                )
            w.endpoint(node.name, node.compute, f"{field}.name", rank=f.ranks is None and node.kind != "host")
    for i, edge in enumerate(f.edges):
        w.connect(edge.u, edge.v, edge.link, f"fabric.edges.{i}", trunk=edge.trunk)
    if f.ranks is not None:
        for i, r in enumerate(f.ranks):
            if r not in w.graph:
                raise DlrmsimError(
                    f"rank '{r}' is not a node",
                    source=w.source,
                    field=f"fabric.ranks.{i}",
                    fix=_did_you_mean(r, w.graph.nodes, "list a node name"),
                )
            if w.graph.nodes[r].get("kind") not in ("socket", "card", "host"):
                raise DlrmsimError(
                    f"rank '{r}' is a {w.graph.nodes[r]['kind']}, not a compute node", source=w.source, field=f"fabric.ranks.{i}"
                )
        if len(set(f.ranks)) != len(f.ranks):
            raise DlrmsimError(
                "a node is listed twice in ranks", source=w.source, field="fabric.ranks", fix="list each rank once"
            )
        w.ranks = list(f.ranks)


GENERATE: dict[str, Callable] = {
    "full_mesh": full_mesh,
    "ring": ring,
    "torus_2d": torus_2d,
    "single_switch": single_switch,
    "twisted_hypercube": twisted_hypercube,
    "fat_tree": fat_tree,
    "sled_rack": sled_rack,
    "host": host,
    "explicit": explicit,
}
