"""Structural ECMP routing for fat trees: the same answers as ``Topology.node_routes``, without graph searches.

In a fat tree every shortest path between endpoints on different leaves climbs from the source's leaf
to the lowest level where the two leaves have a common ancestor and comes straight down. The up-paths
of each leaf are enumerated once; the ECMP set of a leaf pair is cached; endpoint pairs reuse it. At
1024 ranks this answers a route in microseconds where ``nx.all_shortest_paths`` needs a full search.
"""

from __future__ import annotations

from collections import OrderedDict

import networkx as nx

from dlrmsim.topologies.topology import Topology, ecmp_index

ROUTE_CACHE_SIZE = 1 << 16  # endpoint pairs kept; an alltoall at 1024 ranks touches 1M pairs


class FatTreeTopology(Topology):
    """A Topology whose graph is a fat tree built by ``generators.fat_tree`` (switch nodes carry ``level``)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        g = self.graph
        self._leaf: dict[str, str] = {}
        for node, data in g.nodes(data=True):
            if data.get("kind") not in ("switch", "nic"):
                leaves = [n for n in g.neighbors(node) if g.nodes[n].get("level") == 1]
                if len(leaves) == 1:
                    self._leaf[node] = leaves[0]
        self._up: dict[str, list[str]] = {}
        for node, data in g.nodes(data=True):
            level = data.get("level")
            if level is not None:
                self._up[node] = sorted(n for n in g.neighbors(node) if (g.nodes[n].get("level") or 0) > level)
        self._up_paths: dict[str, dict[str, list[tuple[str, ...]]]] = {}
        self._leaf_routes: dict[tuple[str, str], list[tuple[str, ...]]] = {}
        self._pair_routes: OrderedDict[tuple[str, str], list[list[str]]] = OrderedDict()

    def _paths_up(self, leaf: str) -> dict[str, list[tuple[str, ...]]]:
        """Every strictly upward path from ``leaf``, keyed by the switch it ends at."""
        if leaf not in self._up_paths:
            out: dict[str, list[tuple[str, ...]]] = {}
            stack: list[tuple[str, ...]] = [(leaf,)]
            while stack:
                path = stack.pop()
                out.setdefault(path[-1], []).append(path)
                stack.extend(path + (nxt,) for nxt in self._up[path[-1]])
            self._up_paths[leaf] = out
        return self._up_paths[leaf]

    def leaf_routes(self, a: str, b: str) -> list[tuple[str, ...]]:
        """All shortest switch paths from leaf ``a`` to leaf ``b`` (both ends included), sorted."""
        key = (a, b)
        if key not in self._leaf_routes:
            if a == b:
                routes = [(a,)]
            else:
                pa, pb = self._paths_up(a), self._paths_up(b)
                common = set(pa) & set(pb)
                if not common:
                    raise nx.NetworkXNoPath(f"no up-down path between {a} and {b}")
                top = min(self.graph.nodes[c]["level"] for c in common)
                routes = []
                for c in common:
                    if self.graph.nodes[c]["level"] != top:
                        continue
                    for up in pa[c]:
                        for down in pb[c]:
                            routes.append(up + tuple(reversed(down[:-1])))
                routes.sort()
            self._leaf_routes[key] = routes
        return self._leaf_routes[key]

    def node_routes(self, src: str, dst: str) -> list[list[str]]:
        """All shortest node paths from src to dst (the ECMP set), sorted like ``Topology.node_routes``."""
        if src == dst:
            return [[src]]
        key = (src, dst)
        cached = self._pair_routes.get(key)
        if cached is not None:
            return cached
        if src not in self._leaf or dst not in self._leaf:
            return super().node_routes(src, dst)  # a switch or an unattached node: search the graph
        if self.graph.has_edge(src, dst):
            routes = [[src, dst]]
        else:
            routes = [[src, *mid, dst] for mid in self.leaf_routes(self._leaf[src], self._leaf[dst])]
        self._pair_routes[key] = routes
        if len(self._pair_routes) > ROUTE_CACHE_SIZE:
            self._pair_routes.popitem(last=False)
        return routes

    def _direct(self, src: str, dst: str) -> tuple[tuple[str, ...], ...] | None:
        """The leaf-level ECMP set for an endpoint pair, or None when the pair is not leaf-to-leaf."""
        if src == dst or src not in self._leaf or dst not in self._leaf or self.graph.has_edge(src, dst):
            return None
        return tuple(self.leaf_routes(self._leaf[src], self._leaf[dst]))

    def route(self, src_rank: int, dst_rank: int) -> list[str]:
        """Same path as ``Topology.route`` (ECMP pick by the pair), built without listing the whole set."""
        src, dst = self.ranks[src_rank], self.ranks[dst_rank]
        mids = self._direct(src, dst)
        if mids is None:
            return super().route(src_rank, dst_rank)
        return [src, *mids[ecmp_index(src_rank, dst_rank, len(mids))], dst]

    def hops(self, src_rank: int, dst_rank: int) -> int:
        src, dst = self.ranks[src_rank], self.ranks[dst_rank]
        mids = self._direct(src, dst)
        if mids is None:
            return super().hops(src_rank, dst_rank)
        return len(mids[0]) + 1
