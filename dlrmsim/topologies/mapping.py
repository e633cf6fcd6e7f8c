"""Rank-to-socket mapping: which of a topology's endpoints (sockets, cards) each rank runs on.

The default keeps rank r on endpoint r (the topology lists endpoints node by node, so nodes fill first, one rank
per socket) whenever those endpoints' memory holds the ranks' shards. When it does not, as for a 1-rank MLPerf or a
4-rank Large on clx-64s-opa whose 192 GB sockets are nodes 28-31, the ranks move to the first run of consecutive
endpoints that holds them (still filling nodes in order), and failing that to whichever endpoints do. A user can
also give the endpoints explicitly, in rank order (``--rank-sockets 56-59``, or ``rank_sockets`` in YAML).

Pure functions over per-rank memory needs and per-endpoint capacities (bytes); ``remap`` applies a mapping to a
Topology. The memory needs come from the placement (``dlrmsim.workloads.placement``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dlrmsim.errors import DlrmsimError

if TYPE_CHECKING:  # the CLI parses --rank-sockets with this module; networkx loads only with a topology
    from dlrmsim.topologies.topology import Topology


@dataclass(frozen=True)
class RankMapping:
    """The endpoint index (into the topology's rank list) of each rank, and why it was chosen."""

    sockets: tuple[int, ...]
    reason: str  # "first sockets", "memory-aware", "user-set"

    @property
    def is_identity(self) -> bool:
        return self.sockets == tuple(range(len(self.sockets)))


def parse_socket_list(text: str, field: str = "--rank-sockets") -> tuple[int, ...]:
    """``"56,57,58"`` or ``"56-59,0-3"`` -> endpoint indices in that order (a one-line error for anything else)."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            first, last = (int(lo), int(hi)) if sep else (int(part), int(part))
        except ValueError:
            raise DlrmsimError(f"'{text}' is not a list of socket numbers", field=field, fix="e.g. 56,57,58 or 56-59") from None
        if first < 0 or last < first:
            raise DlrmsimError(f"'{part}' is not a socket range", field=field, fix="give non-negative numbers, low-high")
        out.extend(range(first, last + 1))
    if not out:
        raise DlrmsimError("no sockets given", field=field, fix="e.g. 56,57,58 or 56-59")
    return tuple(out)


def fits(needs: Sequence[float], capacities: Sequence[float], sockets: Sequence[int]) -> bool:
    """Whether rank r's ``needs[r]`` bytes fit endpoint ``sockets[r]``'s capacity, for every rank."""
    return all(n <= capacities[s] for n, s in zip(needs, sockets, strict=True))


def _match(needs: Sequence[float], capacities: Sequence[float], sockets: Sequence[int]) -> tuple[int, ...] | None:
    """Ranks onto the given endpoints: keep their order if it fits, else largest need on largest endpoint.

    Largest-on-largest finds an assignment whenever one exists: sorted needs fit sorted capacities
    element by element exactly when some assignment fits.
    """
    if fits(needs, capacities, sockets):
        return tuple(sockets)
    by_need = sorted(range(len(needs)), key=lambda r: (-needs[r], r))
    by_cap = sorted(sockets, key=lambda s: (-capacities[s], s))
    out = [0] * len(needs)
    for r, s in zip(by_need, by_cap, strict=False):
        if needs[r] > capacities[s]:
            return None
        out[r] = s
    return tuple(out)


def map_ranks(needs: Sequence[float], capacities: Sequence[float]) -> RankMapping | None:
    """The memory-aware default mapping of ``len(needs)`` ranks, or None when no endpoints hold them.

    Rank r on endpoint r when that fits (every existing scenario that fits keeps its endpoints); else the first
    window of consecutive endpoints that holds the ranks (nodes stay filled one after another); else any
    endpoints that do, largest need on largest memory.
    """
    p, n = len(needs), len(capacities)
    if p > n:
        return None
    first = tuple(range(p))
    if fits(needs, capacities, first):
        return RankMapping(first, "first sockets")
    for start in range(1, n - p + 1):
        window = _match(needs, capacities, range(start, start + p))
        if window is not None:
            return RankMapping(window, "memory-aware")
    anywhere = _match(needs, capacities, range(n))
    return RankMapping(anywhere, "memory-aware") if anywhere is not None else None


def check_explicit(
    needs: Sequence[float], capacities: Sequence[float], sockets: Sequence[int], source: str | None = None
) -> RankMapping:
    """The user's endpoints for the first ``len(needs)`` ranks, checked: enough, distinct, in range, holding their shards."""
    p = len(needs)
    field = "rank_sockets"
    if len(set(sockets)) != len(sockets):
        raise DlrmsimError(
            f"rank_sockets lists a socket twice ({_fmt(sockets)})",
            source=source,
            field=field,
            fix="give each socket once: one rank per socket",
        )
    if len(sockets) < p:
        raise DlrmsimError(
            f"{p} ranks but rank_sockets lists only {len(sockets)} sockets",
            source=source,
            field=field,
            fix=f"list at least {p} sockets",
        )
    bad = [s for s in sockets if s >= len(capacities)]
    if bad:
        raise DlrmsimError(
            f"socket {bad[0]} does not exist: the topology has {len(capacities)} (0-{len(capacities) - 1})",
            source=source,
            field=field,
            fix=f"use sockets 0-{len(capacities) - 1}",
        )
    chosen = tuple(sockets[:p])
    for r, (need, s) in enumerate(zip(needs, chosen, strict=True)):
        if need > capacities[s]:
            raise DlrmsimError(
                f"rank {r} needs {need / 1e9:.1f} GB but socket {s} has {capacities[s] / 1e9:.1f} GB",
                source=source,
                field=field,
                fix="give sockets with more memory (or leave rank_sockets out for the memory-aware default)",
            )
    return RankMapping(chosen, "user-set")


def remap(topo: Topology, sockets: Sequence[int]) -> Topology:
    """A view of ``topo`` whose rank r is endpoint ``sockets[r]``; the other endpoints follow in their order.

    The identity mapping returns ``topo`` itself. Otherwise a shallow copy shares the graph and route caches
    (keyed by node names, so still valid) and gets its own rank list.
    """
    if tuple(sockets) == tuple(range(len(sockets))):
        return topo
    chosen = [topo.ranks[s] for s in sockets]
    taken = set(chosen)
    out = copy.copy(topo)
    out.ranks = chosen + [node for node in topo.ranks if node not in taken]
    out.__dict__.pop("_rank_index", None)  # rank_of's index is per rank list
    return out


def capacities(topo: Topology) -> list[float]:
    """Memory capacity of every endpoint, in the topology's order (bytes)."""
    return [topo.compute(i).memory_capacity_B for i in range(topo.num_ranks)]


def _fmt(sockets: Sequence[int]) -> str:
    return format_sockets(sockets)


def format_sockets(sockets: Sequence[int]) -> str:
    """``(56, 57, 58, 59, 0)`` -> ``"56-59,0"``: runs of consecutive endpoints as ranges."""
    parts: list[str] = []
    i = 0
    s = list(sockets)
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        parts.append(str(s[i]) if i == j else f"{s[i]}-{s[j]}")
        i = j + 1
    return ",".join(parts)
