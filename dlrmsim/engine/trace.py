"""Chrome/Perfetto trace (traceEvents JSON) from records: one process per rank with a track per kind of work.

Perfetto draws the complete ("X") slices of one thread as a stack, so they must nest: a slice that starts
inside another must also end inside it. Simulated work overlaps freely (a backward GEMM runs while an
alltoall is in flight, seven flows leave a rank at once), so each rank gets separate tracks for compute,
pre/post-processing, collectives and network flows, and any kind of work that still overlaps itself
partially is spread over extra lanes ("flows 2", ...) by :func:`assign_lanes`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from dlrmsim.engine.network import Network
from dlrmsim.engine.records import Record
from dlrmsim.engine.resources import CommSettings
from dlrmsim.topologies.topology import Topology

NS_OFFSET = 0.4  # ns added to every emitted time; see _us
LINKS_PID = 2
OTHER_PID = 3  # records with no rank (a flow whose source is a switch, say)
RANK_PID0 = 100  # rank r is process RANK_PID0 + r, so ranks sort after the links in Perfetto's list

# Track order within a rank's process; the value is the thread id of the track's first lane.
TRACKS: dict[str, int] = {"compute": 0, "pre/post": 1, "communication": 2, "flows": 3}
_LANE_STRIDE = 100  # lane k of track t has thread id TRACKS[t] + k * _LANE_STRIDE


def track_of(rec: Record) -> str:
    """The track a record belongs on: compute, pre/post (copies around collectives), communication, flows."""
    if rec.peer >= 0 or rec.kind == "flow" or (rec.resource is not None and "->" in rec.resource):
        return "flows"
    if rec.category == "prepost":
        return "pre/post"
    if rec.category == "compute":
        return "compute"
    return "communication"  # a rank's span of a collective and the reduction arithmetic inside it


def assign_lanes(spans: Sequence[tuple[float, float]]) -> list[int]:
    """Lane index per (start, end) span so that spans on one lane either nest or do not overlap.

    Greedy in start order (longer first at equal starts, so the enclosing span comes first): each lane keeps
    the stack of its open spans; a span goes on the first lane whose innermost open span (after closing those
    ended by the new start) contains it, or whose stack is empty. Lane 0 gets everything that nests.
    """
    order = sorted(range(len(spans)), key=lambda i: (spans[i][0], -spans[i][1], i))
    stacks: list[list[float]] = []  # per lane: ends of open spans, innermost last
    lanes = [0] * len(spans)
    for i in order:
        start, end = spans[i]
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                stack.append(end)
                lanes[i] = lane
                break
        else:
            stacks.append([end])
            lanes[i] = len(stacks) - 1
    return lanes


def _span_ns(rec: Record) -> tuple[int, int]:
    """(start, end) in whole nanoseconds: the resolution Perfetto stores, so nesting is decided on what it shows."""
    start = round(rec.start * 1e9)
    return start, max(round(rec.end * 1e9), start)


def _us(ns: int) -> float:
    """Whole nanoseconds as traceEvents microseconds that read back as exactly ``ns``.

    Perfetto converts ``ts`` and ``dur`` to integer ns by ``llround(us * 1000)`` (older releases truncate). Times
    computed as ``seconds * 1e6`` differ from one slice to the next in the last bits, so a child that ends where its
    parent ends could come back 1 ns later and break the nesting; integer ns plus 0.4 ns survive both conversions.
    """
    return (ns + NS_OFFSET) / 1000.0


def _slice(rec: Record, span: tuple[int, int], pid: int, tid: int, args: dict) -> dict:
    start, end = span
    return {
        "ph": "X",
        "name": rec.name,
        "cat": rec.category,
        "pid": pid,
        "tid": tid,
        "ts": _us(start),
        "dur": _us(end - start),
        "args": args,
    }


def _meta(kind: str, pid: int, name: str, tid: int | None = None, sort: int | None = None) -> list[dict]:
    ev = {"ph": "M", "name": kind, "pid": pid, "args": {"name": name}}
    if tid is not None:
        ev["tid"] = tid
    out = [ev]
    if sort is not None:
        key = "thread_sort_index" if tid is not None else "process_sort_index"
        out.append(
            {"ph": "M", "name": key, "pid": pid, **({"tid": tid} if tid is not None else {}), "args": {"sort_index": sort}}
        )
    return out


def trace_events(records: list[Record], topology: Topology | None = None, max_link_events: int = 200_000) -> list[dict]:
    """traceEvents for ``records``; timestamps in microseconds (whole nanoseconds, see :func:`_us`).

    Each rank is a process "rank r (node)" with threads "rank r: compute", "rank r: pre/post",
    "rank r: communication" (collective spans and reductions) and "rank r: flows" (its outgoing flows and
    transfers), plus numbered extra lanes where a kind of work overlaps itself. With a ``topology``, process
    "links" gets one track per directed link (extra lanes likewise), each flow drawn on every link of its ECMP
    set (up to ``max_link_events`` events, to keep huge traces loadable).
    """
    names = {r: topology.node(r) for r in range(topology.num_ranks)} if topology is not None else {}
    events: list[dict] = []
    groups: dict[tuple[int, str], list[Record]] = defaultdict(list)
    for rec in records:
        groups[(rec.rank if rec.rank >= 0 else -1, track_of(rec))].append(rec)
    for rank in sorted({r for r, _ in groups}):
        pid = RANK_PID0 + rank if rank >= 0 else OTHER_PID
        label = f"rank {rank}" + (f" ({names[rank]})" if rank in names else "") if rank >= 0 else "not a rank"
        events += _meta("process_name", pid, label, sort=pid)
        for track, base in TRACKS.items():
            recs = groups.get((rank, track), [])
            if not recs:
                continue
            spans = [_span_ns(r) for r in recs]
            lanes = assign_lanes(spans)
            for lane in range(max(lanes) + 1):
                tid = base + lane * _LANE_STRIDE
                suffix = f" {lane + 1}" if lane else ""
                events += _meta("thread_name", pid, f"{label.split(' (')[0]}: {track}{suffix}", tid=tid, sort=tid)
            for rec, span, lane in zip(recs, spans, lanes, strict=True):
                args = {
                    "kind": rec.kind,
                    "bytes": rec.bytes,
                    "flops": rec.flops,
                    "peer": rec.peer,
                    "collective_id": rec.collective_id,
                }
                events.append(_slice(rec, span, pid, base + lane * _LANE_STRIDE, args))
    flowish = [rec for (_, track), recs in groups.items() if track == "flows" for rec in recs]
    if topology is not None and flowish:
        events += _link_events(flowish, topology, max_link_events)
    return events


def _link_events(flows: list[Record], topology: Topology, max_link_events: int) -> list[dict]:
    """Process "links": each flow on every link of its route, lanes per link so that slices nest."""
    net = Network(topology, CommSettings())
    per_link: dict[int, list[Record]] = defaultdict(list)
    count = 0
    for rec in sorted(flows, key=lambda r: (r.start, r.end)):
        if rec.resource is not None and "->" in rec.resource:
            a, b = rec.resource.split("->", 1)
            s, d = net.node_id.get(net._str_node.get(a, a)), net.node_id.get(net._str_node.get(b, b))
        elif rec.rank >= 0 and rec.peer >= 0:
            s, d = int(net.rank_node[rec.rank]), int(net.rank_node[rec.peer])
        else:
            continue
        if s is None or d is None:
            continue
        sr = net.source_routes(s)
        for lid in sr.res[sr.ptr[d] : sr.ptr[d + 1]].tolist():
            if count >= max_link_events:
                break
            count += 1
            per_link[lid].append(rec)
    events = _meta("process_name", LINKS_PID, "links", sort=LINKS_PID)
    for lid, name in enumerate(net.resource_names[: net.n_links]):
        events += _meta("thread_name", LINKS_PID, name, tid=lid, sort=lid)
    extra = net.n_links  # thread ids of extra lanes follow the links'
    for lid in sorted(per_link):
        recs = per_link[lid]
        spans = [_span_ns(r) for r in recs]
        lanes = assign_lanes(spans)
        tids = [lid]
        for lane in range(1, max(lanes) + 1):
            tids.append(extra)
            events += _meta("thread_name", LINKS_PID, f"{net.resource_names[lid]} {lane + 1}", tid=extra, sort=lid)
            extra += 1
        for rec, span, lane in zip(recs, spans, lanes, strict=True):
            events.append(_slice(rec, span, LINKS_PID, tids[lane], {"bytes": rec.bytes, "rank": rec.rank}))
    return events


def write_chrome_trace(records: list[Record], path: str | Path, topology: Topology | None = None) -> Path:
    """Write ``{"traceEvents": [...]}`` to ``path`` (open in ui.perfetto.dev or chrome://tracing).

    No ``displayTimeUnit``: Perfetto reads "ns" there as the unit of every ``ts`` (the file would shrink 1000x).
    """
    path = Path(path)
    path.write_text(json.dumps({"traceEvents": trace_events(records, topology)}))
    return path
