"""Hashed-ECMP routes, compiled: one shortest path per (source, destination) chosen without listing the paths.

The engine's hashed ECMP (``CommSettings.ecmp == "hash"``, exactly ``Topology.route``) sends a flow from rank
``s`` to rank ``d`` over ``sorted(all shortest paths)[(s * 7919 + d) % count]``, paths compared as tuples of node
ids. Listing every shortest path per source costs Python time that grows with the fabric (about 4 s of a
1024-rank run). Because the network has at most one link per node pair, a path is fixed by its node tuple and
the k-th tuple in sorted order is found by counting: from the current node, walk the neighbours on a shortest
path to ``d`` in increasing id, skipping each one's number of shortest paths to ``d`` until ``k`` falls inside
one. That needs hop distances and shortest-path counts between all node pairs (:func:`all_pairs_counts`, one
BFS per node, O(nodes x links)), computed once per network.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlrmsim.engine.jit import njit
from dlrmsim.topologies.topology import ECMP_HASH_PRIME


@dataclass(frozen=True)
class Adjacency:
    """Directed links in CSR form: node ``x``'s neighbours ``node[ptr[x]:ptr[x+1]]`` (ascending ids) over links
    ``rid`` (ids into the per-link arrays), and those arrays: latency (s), per-message overhead (s), lane
    bandwidth (B/s), one-sided (load/store, no NIC stack); per node the latency of crossing it (s)."""

    ptr: np.ndarray
    node: np.ndarray
    rid: np.ndarray
    latency: np.ndarray
    overhead: np.ndarray
    lane: np.ndarray
    one_sided: np.ndarray
    node_latency: np.ndarray


@njit(cache=True)
def all_pairs_counts(ptr: np.ndarray, node: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hop distance (-1: unreachable) and number of shortest paths between every pair of nodes (n x n each)."""
    n = ptr.shape[0] - 1
    dist = np.full((n, n), -1, dtype=np.int32)
    count = np.zeros((n, n), dtype=np.int64)
    queue = np.empty(n, dtype=np.int64)
    for r in range(n):
        d, c = dist[r], count[r]
        d[r] = 0
        c[r] = 1
        head, tail = 0, 1
        queue[0] = r
        while head < tail:
            x = queue[head]
            head += 1
            for e in range(ptr[x], ptr[x + 1]):
                y = node[e]
                if d[y] < 0:
                    d[y] = d[x] + 1
                    queue[tail] = y
                    tail += 1
                if d[y] == d[x] + 1:
                    c[y] += c[x]
    return dist, count


@njit(cache=True)
def hashed_source_routes(
    src: int,
    node_rank: np.ndarray,
    dist: np.ndarray,
    count: np.ndarray,
    ptr: np.ndarray,
    node: np.ndarray,
    rid: np.ndarray,
    latency: np.ndarray,
    overhead: np.ndarray,
    lane: np.ndarray,
    one_sided: np.ndarray,
    node_latency: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """From node ``src`` (a rank) to every node: the chosen path's links (CSR: pointers, link ids), latency
    (links' plus intermediate nodes', s), largest per-message overhead (s), narrowest lane (B/s) and whether it
    crosses a NIC stack. A rank destination takes path ``(src_rank * 7919 + dst_rank) % count``, any other node
    the first; an unreachable node gets no links, latency 0, overhead 0, lane inf (the source's own entry)."""
    n = ptr.shape[0] - 1
    s_rank = node_rank[src]
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    for y in range(n):
        out_ptr[y + 1] = out_ptr[y] + max(dist[src, y], 0)
    out_res = np.empty(out_ptr[n], dtype=np.int32)
    lat = np.zeros(n)
    ovh = np.zeros(n)
    cap = np.full(n, np.inf)
    nic = np.zeros(n, dtype=np.bool_)
    for d in range(n):
        if d == src or dist[src, d] < 0:
            continue
        k = (s_rank * ECMP_HASH_PRIME + node_rank[d]) % count[src, d] if node_rank[d] >= 0 else 0
        x = src
        pos = out_ptr[d]
        acc_lat, acc_ovh, acc_cap, acc_nic = 0.0, 0.0, np.inf, False
        while x != d:
            for e in range(ptr[x], ptr[x + 1]):
                y = node[e]
                if dist[y, d] != dist[x, d] - 1:
                    continue
                c = count[y, d]
                if k >= c:
                    k -= c
                    continue
                r = rid[e]
                # The same operations in the same order as extending a path record one link at a time.
                acc_lat = acc_lat + latency[r] + (node_latency[x] if x != src else 0.0)
                acc_ovh = max(acc_ovh, overhead[r])
                acc_cap = min(acc_cap, lane[r])
                acc_nic = acc_nic or not one_sided[r]
                out_res[pos] = r
                pos += 1
                x = y
                break
        lat[d], ovh[d], cap[d], nic[d] = acc_lat, acc_ovh, acc_cap, acc_nic
    return out_ptr, out_res, lat, ovh, cap, nic
