"""Chrome/Perfetto trace (traceEvents JSON) from records: one track per rank and one per link direction."""

from __future__ import annotations

import json
from pathlib import Path

from dlrmsim.engine.records import Record
from dlrmsim.topologies.topology import Topology

_US = 1e6
RANKS_PID = 1
LINKS_PID = 2


def trace_events(records: list[Record], topology: Topology | None = None, max_link_events: int = 200_000) -> list[dict]:
    """traceEvents for ``records``; timestamps in microseconds.

    Process "ranks" has one thread (track) per rank with its tasks, reductions and collective spans; process
    "ranks (comm)" one per rank with its outgoing flows and transfers. With a ``topology``, process "links"
    gets one track per directed link, each flow drawn on every link of its ECMP set (up to
    ``max_link_events`` events, to keep huge traces loadable).
    """
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": RANKS_PID, "args": {"name": "ranks"}},
        {"ph": "M", "name": "process_name", "pid": RANKS_PID + 10, "args": {"name": "ranks (comm)"}},
    ]
    ranks = sorted({r.rank for r in records if r.rank >= 0})
    names = {}
    if topology is not None:
        names = {r: topology.node(r) for r in range(topology.num_ranks)}
    for r in ranks:
        label = f"rank {r}" + (f" ({names[r]})" if r in names else "")
        events.append({"ph": "M", "name": "thread_name", "pid": RANKS_PID, "tid": r, "args": {"name": label}})
        events.append({"ph": "M", "name": "thread_name", "pid": RANKS_PID + 10, "tid": r, "args": {"name": label}})
    flowish: list[Record] = []
    for rec in records:
        is_flow = rec.peer >= 0 or rec.kind == "flow" or (rec.resource is not None and "->" in rec.resource)
        pid = RANKS_PID + 10 if is_flow else RANKS_PID
        if is_flow:
            flowish.append(rec)
        tid = rec.rank if rec.rank >= 0 else -1
        events.append(
            {
                "ph": "X", "name": rec.name, "cat": rec.category, "pid": pid, "tid": tid,
                "ts": rec.start * _US, "dur": max(rec.end - rec.start, 0.0) * _US,
                "args": {"kind": rec.kind, "bytes": rec.bytes, "flops": rec.flops, "peer": rec.peer, "collective_id": rec.collective_id},
            }
        )
    if topology is not None and flowish:
        from dlrmsim.engine.network import Network
        from dlrmsim.engine.resources import CommSettings

        net = Network(topology, CommSettings())
        events.append({"ph": "M", "name": "process_name", "pid": LINKS_PID, "args": {"name": "links"}})
        for lid, name in enumerate(net.resource_names[: net.n_links]):
            events.append({"ph": "M", "name": "thread_name", "pid": LINKS_PID, "tid": lid, "args": {"name": name}})
        count = 0
        for rec in flowish:
            if rec.resource is not None and "->" in rec.resource:
                a, b = rec.resource.split("->", 1)
                s, d = net.node_id.get(_node(net, a)), net.node_id.get(_node(net, b))
            else:
                s, d = int(net.rank_node[rec.rank]), int(net.rank_node[rec.peer])
            if s is None or d is None:
                continue
            sr = net.source_routes(s)
            for lid in sr.res[sr.ptr[d] : sr.ptr[d + 1]].tolist():
                if count >= max_link_events:
                    break
                count += 1
                events.append(
                    {"ph": "X", "name": rec.name, "cat": rec.category, "pid": LINKS_PID, "tid": lid,
                     "ts": rec.start * _US, "dur": max(rec.end - rec.start, 0.0) * _US, "args": {"bytes": rec.bytes, "rank": rec.rank}}
                )
    return events


def _node(net, text: str):  # noqa: ANN001, ANN202
    return net._str_node.get(text, text)


def write_chrome_trace(records: list[Record], path: str | Path, topology: Topology | None = None) -> Path:
    """Write ``{"traceEvents": [...]}`` to ``path`` (open in ui.perfetto.dev or chrome://tracing)."""
    path = Path(path)
    path.write_text(json.dumps({"traceEvents": trace_events(records, topology), "displayTimeUnit": "ns"}))
    return path
