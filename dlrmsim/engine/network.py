"""Flow-level max-min link contention: routes flows over the topology and turns them into fluid activities.

Resources (indices into one capacity vector shared with memory domains):
- every link contributes two directed halves u>v and v>u, each with the link's full ``bandwidth_Bps``;
- every node with a non-one-sided (NIC-stack) link gets an injection and an ejection port whose capacity
  is the node attribute ``nic_bandwidth_Bps`` if set, else the sum of its NIC-stack links' bandwidth;
- every memory domain (``ComputeSpec.memory_domain``, else the node itself) gets one memory-bandwidth
  resource of ``memory_bandwidth_Bps * memory_efficiency(inf)``;
- with ``CommSettings.intra_node_copy_cores``, every compute node gets a copy-out and a copy-in port.

A transfer between two nodes is one activity. With ``CommSettings.ecmp == "hash"`` (default) a rank-to-rank
flow follows ``Topology.route(src, dst)``, the topology's deterministic pick from its ECMP set (what static
fabric routing does); with ``"split"`` (and always between non-rank nodes) it spreads evenly over all
fewest-hop paths, drawing ``rate * (fraction of paths using the link)`` from each link direction. Its rate cap is the
narrowest lane on its paths (``bandwidth_Bps / lanes``: one flow hashes onto one lane of a trunk). When a
path crosses a link that is not ``one_sided``, the flow also uses both NIC ports and draws
``copy_traffic_factor * rate`` from the memory domain at each end (the NIC-stack copy). A path of one-sided
(load/store) links only between two compute nodes is an intra-node message: with
``CommSettings.intra_node_copy_cores`` it goes through shared-memory buffers, so it uses the sender's copy-out
and the receiver's copy-in port (each the streaming rate of those cores) and draws the same copy traffic from
both memory domains; without, it runs at link speed. A link half that only ever carries the NIC-stack flows of
one node's injection (or ejection) port, at that port's capacity, states the same constraint as the port, so the
flows leave it out (:meth:`Network.port_bound_links`): the max-min rates are bit-identical, with a third fewer
entries per flow on a fat tree. Before the fluid
part, a flow waits the (mean) path latency, including the ``latency_s`` attribute of transit nodes such as
switches, plus the largest per-message overhead of its link types plus the
backend's per-message overhead.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np

from dlrmsim.engine import costs, routes
from dlrmsim.engine.arrays import any_negative
from dlrmsim.engine.jit import njit
from dlrmsim.engine.resources import CommSettings
from dlrmsim.errors import DlrmsimError
from dlrmsim.topologies.topology import ComputeSpec, Topology


@dataclass
class SourceRoutes:
    """Routes from one source node to every node, as flat arrays indexed by destination node id."""

    ptr: np.ndarray  # (n_nodes+1,) entry ranges
    res: np.ndarray  # directed-link resource ids
    w: np.ndarray  # fraction of the ECMP set using that link
    latency: np.ndarray  # mean path latency (s)
    overhead: np.ndarray  # max per-message overhead over link types on the paths (s)
    lane_cap: np.ndarray  # narrowest lane (B/s); inf for the source itself
    nic: np.ndarray  # bool: some path crosses a NIC-stack link
    reachable: np.ndarray  # bool


@dataclass
class FlowArrays:
    """A batch of flows as fluid-activity arrays (see :class:`dlrmsim.engine.fluid.Batch`)."""

    work: np.ndarray
    cap: np.ndarray
    delay: np.ndarray
    e_act: np.ndarray
    e_res: np.ndarray
    e_w: np.ndarray


class PairTables(NamedTuple):
    """Flow templates per stored node pair: rate cap (B/s), start delay (s), whether it is a node to itself, and its
    resource entries (pair ``i``'s are ``res[ptr[i]:ptr[i+1]]`` with weights ``w``)."""

    cap: np.ndarray
    delay: np.ndarray
    same: np.ndarray
    ptr: np.ndarray
    res: np.ndarray
    w: np.ndarray


class Network:
    """Resource layout and route tables of a topology, built once per simulation."""

    def __init__(self, topology: Topology, comm: CommSettings) -> None:
        self.topology = topology
        self.comm = comm
        g = topology.graph
        self.nodes: list[str] = sorted(g.nodes, key=str)
        self.node_id = {n: i for i, n in enumerate(self.nodes)}
        self._str_node = {str(n): n for n in self.nodes}
        # switch (or any transit node) traversal latency, from the node attribute latency_s
        self._node_lat = [float(g.nodes[n].get("latency_s") or 0.0) for n in self.nodes]
        caps: list[float] = []  # capacity of every resource, in id order: links, then NIC ports, then memory
        self.resource_names: list[str] = []
        self._add_links(caps)
        self._add_nic_ports(caps)
        self._add_memory_domains(caps)
        self._add_copy_ports(caps)
        self.capacity = np.asarray(caps, dtype=float)
        self.rank_node = np.array([self.node_id[n] for n in topology.ranks], dtype=np.int64)
        self.node_rank = np.full(len(self.nodes), -1, dtype=np.int64)
        self.node_rank[self.rank_node] = np.arange(len(self.rank_node))
        self._routes: dict[int, SourceRoutes] = {}
        self._init_pair_tables()

    # ---- resources, by kind (each appends its capacities to ``caps`` and its names) ---------------
    def _add_links(self, caps: list[float]) -> None:
        """Two directed halves per link (u>v and v>u), each with the link's full bandwidth (B/s); adjacency lists
        and the per-half latency, overhead, lane capacity and one-sidedness that routing reads."""
        g = self.topology.graph
        edges = sorted((tuple(sorted((str(u), str(v)))) for u, v in g.edges), key=lambda e: e)
        self.links: list[tuple[str, str]] = []
        self._adj: list[list[tuple[int, int]]] = [[] for _ in self.nodes]
        self._lat: list[float] = []
        self._ovh: list[float] = []
        self._lane: list[float] = []
        self._one_sided: list[bool] = []
        for su, sv in edges:
            u, v = self._str_node[su], self._str_node[sv]
            link = self.topology.link(u, v)
            for a, b in ((u, v), (v, u)):
                rid = len(caps)
                self.resource_names.append(f"{a}>{b}")
                self.links.append((a, b))
                caps.append(link.bandwidth_Bps)
                self._lat.append(link.latency_s)
                self._ovh.append(link.overhead_s)
                self._lane.append(link.bandwidth_Bps / max(link.lanes, 1))
                self._one_sided.append(link.one_sided)
                self._adj[self.node_id[a]].append((self.node_id[b], rid))
        for lst in self._adj:
            lst.sort()
        self._eid = {(self.node_id[a], self.node_id[b]): rid for rid, (a, b) in enumerate(self.links)}
        self.n_links = len(self.links)

    def _add_nic_ports(self, caps: list[float]) -> None:
        """An injection and an ejection port per node with a NIC-stack (not one-sided) link: capacity the node's
        ``nic_bandwidth_Bps``, else the sum of its NIC-stack links' bandwidth (B/s)."""
        g = self.topology.graph
        n_nodes = len(self.nodes)
        nic_bw = np.zeros(n_nodes)
        for rid, (a, _b) in enumerate(self.links):
            if not self._one_sided[rid]:
                nic_bw[self.node_id[a]] += caps[rid]
        self.nic_out = np.full(n_nodes, -1, dtype=np.int64)
        self.nic_in = np.full(n_nodes, -1, dtype=np.int64)
        for i, n in enumerate(self.nodes):
            bw = g.nodes[n].get("nic_bandwidth_Bps", nic_bw[i] if nic_bw[i] > 0 else None)
            if bw:
                self.nic_out[i] = len(caps)
                caps.append(float(bw))
                self.resource_names.append(f"nic_out:{n}")
                self.nic_in[i] = len(caps)
                caps.append(float(bw))
                self.resource_names.append(f"nic_in:{n}")

    def _add_memory_domains(self, caps: list[float]) -> None:
        """One memory-bandwidth resource per memory domain (``ComputeSpec.memory_domain``, else the node):
        ``memory_bandwidth_Bps * memory_efficiency(inf)`` (B/s), shared by the nodes of the domain."""
        g = self.topology.graph
        n_nodes = len(self.nodes)
        self.mem = np.full(n_nodes, -1, dtype=np.int64)
        self.spec: list[ComputeSpec | None] = [None] * n_nodes
        domains: dict[str, int] = {}
        for i, n in enumerate(self.nodes):
            spec = g.nodes[n].get("compute")
            if not isinstance(spec, ComputeSpec):
                continue
            self.spec[i] = spec
            dom = getattr(spec, "memory_domain", None) or f"node:{n}"
            if dom not in domains:
                domains[dom] = len(caps)
                caps.append(spec.memory_bandwidth_Bps * spec.memory_efficiency(math.inf))
                self.resource_names.append(f"mem:{dom}")
            self.mem[i] = domains[dom]

    def _add_copy_ports(self, caps: list[float]) -> None:
        """With ``CommSettings.intra_node_copy_cores``: a copy-out and a copy-in port per compute node, each the
        payload rate those cores copy at, ``task_bandwidth_cap(cores) / copy_traffic_factor`` (B/s; every payload
        byte is read and written once per copy). Intra-node flows share them (see :meth:`_add_pairs`)."""
        n_nodes = len(self.nodes)
        self.copy_out = np.full(n_nodes, -1, dtype=np.int64)
        self.copy_in = np.full(n_nodes, -1, dtype=np.int64)
        cores = self.comm.intra_node_copy_cores
        if cores is None:
            return
        for i, spec in enumerate(self.spec):
            if spec is None:
                continue
            rate = costs.task_bandwidth_cap(spec, math.inf, cores)
            if self.comm.copy_traffic_factor > 0:
                rate /= self.comm.copy_traffic_factor
            for table, kind in ((self.copy_out, "copy_out"), (self.copy_in, "copy_in")):
                table[i] = len(caps)
                caps.append(rate)
                self.resource_names.append(f"{kind}:{self.nodes[i]}")

    def _init_pair_tables(self) -> None:
        """Empty flow-template tables per node pair (see :meth:`_add_pairs`); rows are allocated per source node."""
        n_nodes = len(self.nodes)
        self._src_row = np.full(n_nodes, -1, dtype=np.int64)
        self._n_rows = 0
        self._pair_tab = np.full((0, n_nodes), -1, dtype=np.int64)
        self._n_pairs = 0
        self._pair_cap = np.zeros(0)
        self._pair_delay = np.zeros(0)
        self._pair_same = np.zeros(0, dtype=bool)
        self._any_same_pair = False  # whether a stored pair is a node to itself (its flows move nothing)
        self._pair_ptr = np.zeros(1, dtype=np.int64)
        self._pair_res = np.zeros(0, dtype=np.int64)
        self._pair_w = np.zeros(0)

    # ---- routes --------------------------------------------------------------------------------
    def source_routes(self, src: int) -> SourceRoutes:
        """Route tables from node id ``src`` to all nodes (hashed path for a rank with hashed ECMP, else BFS and
        an even ECMP split), cached."""
        cached = self._routes.get(src)
        if cached is not None:
            return cached
        if self.comm.ecmp == "hash" and self.node_rank[src] >= 0:
            sr = self._hashed_routes(src)
            self._routes[src] = sr
            return sr
        n = len(self.nodes)
        dist = [-1] * n
        dist[src] = 0
        order = [src]
        preds: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        q = deque([src])
        adj = self._adj
        while q:
            x = q.popleft()
            dx = dist[x] + 1
            for y, rid in adj[x]:
                if dist[y] < 0:
                    dist[y] = dx
                    order.append(y)
                    q.append(y)
                    preds[y].append((x, rid))
                elif dist[y] == dx:
                    preds[y].append((x, rid))
        sr = self._split_routes(src, order, preds)
        sr.reachable = np.asarray(dist) >= 0
        self._routes[src] = sr
        return sr

    def _split_routes(self, src: int, order: list[int], preds: list[list[tuple[int, int]]]) -> SourceRoutes:
        """Every destination's flow spread evenly over all its shortest paths (path counting DP)."""
        n = len(self.nodes)
        lat, ovh, lane, one, nlat = self._lat, self._ovh, self._lane, self._one_sided, self._node_lat
        entries: list[tuple] = [()] * n
        npaths = [0] * n
        latency = [0.0] * n
        overhead = [0.0] * n
        lanecap = [math.inf] * n
        nic = [False] * n
        npaths[src] = 1
        for y in order[1:]:
            py = preds[y]
            if len(py) == 1:
                x, rid = py[0]
                entries[y] = entries[x] + ((rid, 1.0),)
                npaths[y] = npaths[x]
                latency[y] = latency[x] + lat[rid] + (nlat[x] if x != src else 0.0)
                overhead[y] = max(overhead[x], ovh[rid])
                lanecap[y] = min(lanecap[x], lane[rid])
                nic[y] = nic[x] or not one[rid]
            else:
                tot = sum(npaths[x] for x, _ in py)
                acc: dict[int, float] = {}
                lt = 0.0
                for x, rid in py:
                    f = npaths[x] / tot
                    for r, wt in entries[x]:
                        acc[r] = acc.get(r, 0.0) + f * wt
                    acc[rid] = acc.get(rid, 0.0) + f
                    lt += f * (latency[x] + lat[rid] + (nlat[x] if x != src else 0.0))
                entries[y] = tuple(sorted(acc.items()))
                npaths[y] = tot
                latency[y] = lt
                overhead[y] = max(max(overhead[x], ovh[rid]) for x, rid in py)
                lanecap[y] = min(min(lanecap[x], lane[rid]) for x, rid in py)
                nic[y] = any(nic[x] or not one[rid] for x, rid in py)
        lens = np.fromiter((len(e) for e in entries), dtype=np.int64, count=n)
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=ptr[1:])
        flat = [p for e in entries for p in e]
        res = np.fromiter((p[0] for p in flat), dtype=np.int32, count=len(flat))
        w = np.fromiter((p[1] for p in flat), dtype=np.float64, count=len(flat))
        return SourceRoutes(
            ptr=ptr,
            res=res,
            w=w,
            latency=np.asarray(latency),
            overhead=np.asarray(overhead),
            lane_cap=np.asarray(lanecap),
            nic=np.asarray(nic),
            reachable=np.zeros(0, dtype=bool),
        )

    def _hashed_routes(self, src: int) -> SourceRoutes:
        """One path per destination: ``sorted(all shortest paths)[(src_rank * 7919 + dst_rank) % count]`` for rank
        destinations (exactly ``Topology.route``), the first sorted path for other nodes; paths compare as tuples
        of node ids, which follow sorted node names. Found by counting, compiled (engine/routes.py)."""
        a = self._adjacency
        dist, count = self._pair_counts
        ptr, res, latency, overhead, lane, nic = routes.hashed_source_routes(
            src, self.node_rank, dist, count, a.ptr, a.node, a.rid, a.latency, a.overhead, a.lane, a.one_sided,
            a.node_latency,
        )  # fmt: skip
        return SourceRoutes(
            ptr=ptr,
            res=res,
            w=np.ones(len(res)),
            latency=latency,
            overhead=overhead,
            lane_cap=lane,
            nic=nic,
            reachable=dist[src] >= 0,
        )

    @cached_property
    def _pair_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """All-pairs hop distances and shortest-path counts (engine/routes.py), once, when a hashed route is needed."""
        return routes.all_pairs_counts(self._adjacency.ptr, self._adjacency.node)

    @cached_property
    def _adjacency(self) -> routes.Adjacency:
        """The directed links as CSR arrays for the compiled route search (neighbours ascending, as ``_adj``)."""
        lens = [len(lst) for lst in self._adj]
        ptr = np.zeros(len(self._adj) + 1, dtype=np.int64)
        np.cumsum(lens, out=ptr[1:])
        flat = [pair for lst in self._adj for pair in lst]
        return routes.Adjacency(
            ptr=ptr,
            node=np.fromiter((y for y, _ in flat), dtype=np.int64, count=len(flat)),
            rid=np.fromiter((r for _, r in flat), dtype=np.int64, count=len(flat)),
            latency=np.asarray(self._lat, dtype=float),
            overhead=np.asarray(self._ovh, dtype=float),
            lane=np.asarray(self._lane, dtype=float),
            one_sided=np.asarray(self._one_sided, dtype=bool),
            node_latency=np.asarray(self._node_lat, dtype=float),
        )

    def path_link_names(self, src: int, dst: int) -> list[str]:
        """Directed link names ('u>v') used by any ECMP path between node ids ``src`` and ``dst``."""
        sr = self.source_routes(src)
        return [self.resource_names[r] for r in sr.res[sr.ptr[dst] : sr.ptr[dst + 1]]]

    # ---- flows ---------------------------------------------------------------------------------
    def pair_tables(self) -> PairTables:
        """The stored node pairs' flow templates (the current arrays: they are replaced when pairs are added)."""
        return PairTables(self._pair_cap, self._pair_delay, self._pair_same, self._pair_ptr, self._pair_res, self._pair_w)

    def pair_ids(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Ids into :meth:`pair_tables` of node pairs ``src[i] -> dst[i]`` (node ids), storing new pairs."""
        return self._pair_ids(np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64))

    def _pair_ids(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Ids into the pair tables (:meth:`_add_pairs`) of node pairs ``src[i] -> dst[i]``, computing new pairs."""
        rows = self._src_row[src]
        if any_negative(rows):
            for s in np.unique(src[rows < 0]).tolist():
                self._src_row[s] = self._n_rows
                self._n_rows += 1
            if self._n_rows > len(self._pair_tab):
                tab = np.full((max(2 * len(self._pair_tab), self._n_rows, 8), len(self.nodes)), -1, dtype=np.int64)
                tab[: len(self._pair_tab)] = self._pair_tab
                self._pair_tab = tab
            rows = self._src_row[src]
        pid = self._pair_tab[rows, dst]
        if any_negative(pid):
            miss = pid < 0
            self._add_pairs(src[miss], dst[miss])
            pid = self._pair_tab[rows, dst]
        return pid

    def _add_pairs(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Store the flow template of new node pairs: rate cap, start delay and resource entries.

        A pair's entries are its route's directed links (with their ECMP fractions), then, if a path crosses
        a NIC stack, the injection and ejection ports (weight 1) and the copy traffic on both memory domains.
        """
        n_nodes = len(self.nodes)
        key = _sorted_unique(src * n_nodes + dst)
        src, dst = key // n_nodes, key % n_nodes
        nf = len(src)
        cap = np.empty(nf)
        delay = np.empty(nf)
        nic = np.empty(nf, dtype=bool)
        starts = np.flatnonzero(np.concatenate([[True], src[1:] != src[:-1]]))  # src is sorted
        uniq = src[starts]
        bounds = np.append(starts, nf).tolist()
        # Each source's route entries go straight into one array of all the pairs' link entries, at an offset
        # counted first (concatenating per-source pieces was a copy of some 4M entries at 1024 ranks).
        routes = []
        offsets = [0]
        for k, s in enumerate(uniq.tolist()):
            sr = self.source_routes(s)
            d = dst[bounds[k] : bounds[k + 1]]
            if not sr.reachable[d].all():
                bad = self.nodes[int(d[~sr.reachable[d]][0])]
                raise DlrmsimError(f"no route from '{self.nodes[s]}' to '{bad}'", source=self.topology.source)
            routes.append((sr, d))
            offsets.append(offsets[-1] + int((sr.ptr[d + 1] - sr.ptr[d]).sum()))
        l_act = np.empty(offsets[-1], dtype=np.int64)  # ascending: sources, then pairs
        l_res = np.empty(offsets[-1], dtype=np.int64)
        l_w = np.empty(offsets[-1])
        for k, (sr, d) in enumerate(routes):
            _source_pairs(bounds[k], d, sr.lane_cap, sr.latency, sr.overhead, sr.nic, sr.ptr, sr.res, sr.w,
                          cap, delay, nic, l_act, l_res, l_w, offsets[k])  # fmt: skip
        delay += self.comm.message_overhead_s
        same = src == dst
        cap[same] = np.inf
        copy = self.comm.copy_traffic_factor
        # A NIC-stack path uses both NIC ports; a load/store path between two compute nodes, with copy cores set,
        # the sender's copy-out and the receiver's copy-in ports. Both copy the payload at each end.
        shm = ~nic & ~same & (self.copy_out[src] >= 0) & (self.copy_in[dst] >= 0)
        # Each pair's entries: its route's links, then its ports in this order (-1: none), then copies.
        ports = np.full((nf, 4), -1, dtype=np.int64)
        port_w = np.array([1.0, 1.0, copy, copy])
        for sel, out_port, in_port in ((nic, self.nic_out, self.nic_in), (shm, self.copy_out, self.copy_in)):
            fi = np.flatnonzero(sel)
            ports[fi, 0] = out_port[src[fi]]
            ports[fi, 1] = in_port[dst[fi]]
            if copy > 0:
                ports[fi, 2] = self.mem[src[fi]]
                ports[fi, 3] = self.mem[dst[fi]]
        out_link, in_link = self.port_bound_links
        k = _drop_port_bound(l_act, l_res, src, dst, nic, out_link, in_link, l_w)
        l_act, l_res, l_w = l_act[:k], l_res[:k], l_w[:k]
        cnt = _pair_entry_counts(l_act, ports)
        first = self._n_pairs
        n_ent = int(self._pair_ptr[first])
        total = int(cnt.sum())
        self._reserve(first + nf, n_ent + total)
        self._pair_cap[first : first + nf] = cap
        self._pair_delay[first : first + nf] = delay
        self._pair_same[first : first + nf] = same
        self._any_same_pair = self._any_same_pair or bool(same.any())
        self._pair_ptr[first + 1 : first + nf + 1] = n_ent + np.cumsum(cnt)
        _write_pair_entries(l_act, l_res, l_w, ports, port_w, self._pair_res, self._pair_w, n_ent)
        self._n_pairs = first + nf
        self._pair_tab[self._src_row[src], dst] = np.arange(first, first + nf)

    @cached_property
    def port_bound_links(self) -> tuple[np.ndarray, np.ndarray]:
        """Per node id, the directed link half whose constraint the node's NIC injection port states exactly, and
        the one its ejection port states (resource ids, -1 none). Flows between nodes omit these entries.

        A NIC-stack flow from node ``i`` draws ``rate`` from ``nic_out[i]``; if every such flow, and nothing else,
        also draws ``rate`` from a link half of the same capacity, the two constraints are one inequality, and
        progressive filling computes the same level for both in every round (the same activities, weights and
        capacity, summed in the same order) and settles them together: dropping the link's entries leaves every
        rate bit-identical. That holds for a link half ``i > x`` when

        - it is ``i``'s only NIC-stack link half out and has the port's capacity;
        - ``i`` is never inside a shortest path, nor any node it reaches over a one-sided link (each has all its
          neighbours pairwise adjacent: a path ``y1 > i > y2`` between adjacent nodes is not a shortest one), so
          no flow crosses ``i``, and every NIC-stack flow from ``i`` leaves through ``i > x``;
        - ``i`` routes by hashed ECMP (a rank, ``CommSettings.ecmp == "hash"``): one path, weight exactly 1 (an
          even split sums path fractions, which may round below 1).

        Likewise for the ejection port and the only NIC-stack half into ``i`` (every route's last hop into such
        a node has a single predecessor, weight exactly 1). Only the flows' entries change: routes, latencies,
        lane caps and traces keep the link. On a fat tree it drops the socket-to-leaf and leaf-to-socket hops, two of
        the six to eight entries of a NIC-stack flow."""
        n = len(self.nodes)
        out_link = np.full(n, -1, dtype=np.int64)
        in_link = np.full(n, -1, dtype=np.int64)
        nbrs: list[set[int]] = [{y for y, _ in lst} for lst in self._adj]
        outs: list[list[int]] = [[] for _ in range(n)]
        ins: list[list[int]] = [[] for _ in range(n)]
        for rid, (a, b) in enumerate(self.links):
            if not self._one_sided[rid]:
                outs[self.node_id[a]].append(rid)
                ins[self.node_id[b]].append(rid)

        def never_inside(i: int) -> bool:
            return all(y2 in nbrs[y1] for y1 in nbrs[i] for y2 in nbrs[i] if y1 < y2)

        for i in range(n):
            one_sided = [y for y, rid in self._adj[i] if self._one_sided[rid]]
            if not (never_inside(i) and all(never_inside(y) for y in one_sided)):
                continue
            if self.nic_out[i] >= 0 and len(outs[i]) == 1 and self.comm.ecmp == "hash" and self.node_rank[i] >= 0:
                if self.capacity[outs[i][0]] == self.capacity[self.nic_out[i]]:
                    out_link[i] = outs[i][0]
            if self.nic_in[i] >= 0 and len(ins[i]) == 1 and self.capacity[ins[i][0]] == self.capacity[self.nic_in[i]]:
                in_link[i] = ins[i][0]
        return out_link, in_link

    def _reserve(self, n_pairs: int, n_entries: int) -> None:
        """Grow the pair tables (capacity doubling) to hold ``n_pairs`` pairs and ``n_entries`` entries."""
        if n_pairs + 1 > len(self._pair_ptr):
            size = max(2 * len(self._pair_ptr), n_pairs + 1)
            for name in ("_pair_cap", "_pair_delay", "_pair_same", "_pair_ptr"):
                old = getattr(self, name)
                new = np.zeros(size, dtype=old.dtype)
                new[: len(old)] = old
                setattr(self, name, new)
        if n_entries > len(self._pair_res):
            size = max(2 * len(self._pair_res), n_entries)
            for name in ("_pair_res", "_pair_w"):
                old = getattr(self, name)
                new = np.zeros(size, dtype=old.dtype)
                new[: len(old)] = old
                setattr(self, name, new)

    def build_flows(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray) -> FlowArrays:
        """Fluid arrays for flows between node ids ``src[i]`` -> ``dst[i]`` of ``nbytes[i]`` bytes.

        Each flow's template (rate cap, start delay, resource entries) is computed once per node pair and
        cached; a batch is then a handful of gathers.
        """
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        nbytes = np.asarray(nbytes, dtype=float)
        pid = self._pair_ids(src, dst)
        e_act, e_res, e_w = _gather_entries(pid, self._pair_ptr, self._pair_res, self._pair_w)
        # a node sending to itself moves nothing over the network: it finishes after its delay
        work = np.where(self._pair_same[pid], 0.0, nbytes) if self._any_same_pair else nbytes
        return FlowArrays(work=work, cap=self._pair_cap[pid], delay=self._pair_delay[pid], e_act=e_act, e_res=e_res, e_w=e_w)


@njit(cache=True)
def _source_pairs(
    first: int,
    d: np.ndarray,
    lane_cap: np.ndarray,
    latency: np.ndarray,
    overhead: np.ndarray,
    nic_of: np.ndarray,
    ptr: np.ndarray,
    res: np.ndarray,
    w: np.ndarray,
    cap: np.ndarray,
    delay: np.ndarray,
    nic: np.ndarray,
    l_act: np.ndarray,
    l_res: np.ndarray,
    l_w: np.ndarray,
    at: int,
) -> None:
    """Templates of one source's new pairs to destinations ``d`` (pairs ``first``, ``first + 1``, ...): write
    each pair's rate cap, start delay and NIC flag from the source's routes (``ptr``/``res``/``w``: per
    destination, its route's resources and weights), and the pairs' link entries (pair, resource, weight) into
    ``l_act``/``l_res``/``l_w`` from index ``at``, pair by pair."""
    k = at
    for j in range(d.shape[0]):
        t = d[j]
        cap[first + j] = lane_cap[t]
        delay[first + j] = latency[t] + overhead[t]
        nic[first + j] = nic_of[t]
        for i in range(ptr[t], ptr[t + 1]):
            l_act[k] = first + j
            l_res[k] = res[i]
            l_w[k] = w[i]
            k += 1


@njit(cache=True)
def _drop_port_bound(
    l_act: np.ndarray,
    l_res: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    nic: np.ndarray,
    out_link: np.ndarray,
    in_link: np.ndarray,
    l_w: np.ndarray,
) -> int:
    """Compact the pairs' link entries in place, in order, without those of NIC-stack pairs on their source's
    ``out_link`` or their destination's ``in_link`` (Network.port_bound_links); returns how many are left."""
    k = 0
    for i in range(l_act.shape[0]):
        p = l_act[i]
        r = l_res[i]
        if nic[p] and (r == out_link[src[p]] or r == in_link[dst[p]]):
            continue
        l_act[k] = p
        l_res[k] = r
        l_w[k] = l_w[i]
        k += 1
    return k


@njit(cache=True)
def _gather_entries(
    pid: np.ndarray, ptr: np.ndarray, res: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The resource entries of flows over stored pairs ``pid``, flow by flow in their pairs' order: (flow index,
    resource, weight) per entry, as a fluid Batch lays them out."""
    total = 0
    for i in range(pid.shape[0]):
        total += ptr[pid[i] + 1] - ptr[pid[i]]
    e_act = np.empty(total, dtype=np.int64)
    e_res = np.empty(total, dtype=np.int64)
    e_w = np.empty(total)
    k = 0
    for i in range(pid.shape[0]):
        for j in range(ptr[pid[i]], ptr[pid[i] + 1]):
            e_act[k] = i
            e_res[k] = res[j]
            e_w[k] = w[j]
            k += 1
    return e_act, e_res, e_w


@njit(cache=True)
def _pair_entry_counts(l_act: np.ndarray, ports: np.ndarray) -> np.ndarray:
    """Entries per pair: its link entries (``l_act``: each one's pair) and its ports (``ports`` row, -1 none)."""
    nf = ports.shape[0]
    cnt = np.zeros(nf, dtype=np.int64)
    for i in range(l_act.shape[0]):
        cnt[l_act[i]] += 1
    for i in range(nf):
        for c in range(ports.shape[1]):
            if ports[i, c] >= 0:
                cnt[i] += 1
    return cnt


@njit(cache=True)
def _write_pair_entries(
    l_act: np.ndarray,
    l_res: np.ndarray,
    l_w: np.ndarray,
    ports: np.ndarray,
    port_w: np.ndarray,
    e_res: np.ndarray,
    e_w: np.ndarray,
    at: int,
) -> None:
    """Pairs' resource entries laid out pair by pair into ``e_res``/``e_w`` from index ``at``: each pair's link
    entries (``l_act`` its pair, ascending) in their order, then its ports (``ports`` row, -1 none) in column order
    with ``port_w``'s weights."""
    k = at
    j = 0
    for i in range(ports.shape[0]):
        while j < l_act.shape[0] and l_act[j] == i:
            e_res[k] = l_res[j]
            e_w[k] = l_w[j]
            k += 1
            j += 1
        for c in range(ports.shape[1]):
            if ports[i, c] >= 0:
                e_res[k] = ports[i, c]
                e_w[k] = port_w[c]
                k += 1


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    """``np.unique`` of a 1-d array by sorting (faster than hashing for the large integer keys here)."""
    a = np.sort(a)
    return a[np.concatenate([[True], a[1:] != a[:-1]])] if a.size else a
