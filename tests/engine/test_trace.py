"""The Perfetto trace: slices on every track nest (Perfetto stacks a thread's slices), and each rank's tracks split
work by kind."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import pytest

from dlrmsim.engine.trace import assign_lanes, trace_events, write_chrome_trace
from dlrmsim.training.simulate import TrainingConfig, load_inputs, simulate_training


def perfetto_ns(us: float, rounding: str) -> int:
    """A traceEvents time as Perfetto stores it: integer ns by llround(us * 1000) (older releases: truncation)."""
    return math.floor(us * 1000.0 + 0.5) if rounding == "llround" else math.trunc(us * 1000.0)


def partial_overlaps(events: list[dict], rounding: str = "llround") -> list[tuple]:
    """(pid, tid, outer, inner) for every pair of slices on one track that overlap without nesting, in Perfetto's ns."""
    by_track: dict[tuple[int, int], list[tuple[int, int, str]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            start = perfetto_ns(e["ts"], rounding)
            by_track[(e["pid"], e["tid"])].append((start, start + perfetto_ns(e["dur"], rounding), e["name"]))
    bad = []
    for (pid, tid), slices in by_track.items():
        stack: list[tuple[int, int, str]] = []
        for start, end, name in sorted(slices, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack and end > stack[-1][1]:
                bad.append((pid, tid, stack[-1][2], name))
            stack.append((start, end, name))
    return bad


def test_lanes_keep_nesting_and_separate_partial_overlaps() -> None:
    # because [0,10] contains [1,2] they share lane 0; [5,15] crosses [0,10]'s end so it needs lane 1;
    # [12,13] nests in [5,15] (lane 1) but also fits lane 0, which is free after 10 - the first fitting lane wins
    assert assign_lanes([(0, 10), (1, 2), (5, 15), (12, 13)]) == [0, 0, 1, 0]
    assert assign_lanes([]) == []


def _records(**kw):
    cfg = TrainingConfig(topology="clx-64s-opa", workload="small", ranks=8, **kw)
    res = simulate_training(cfg, record_flows=True)
    return res.records, load_inputs(cfg).topology


@pytest.mark.parametrize("backend", ["ccl", "mpi"])
def test_training_trace_slices_nest_on_every_track(backend: str, tmp_path: Path) -> None:
    # an overlapping (non-blocking) run: backward GEMMs overlap the allreduce, flows overlap each other
    records, topo = _records(backend=backend, blocking=False)
    events = json.loads(write_chrome_trace(records, tmp_path / "t.json", topo).read_text())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    # because every record and every flow-on-a-link becomes a slice, nothing is dropped
    assert len([e for e in slices if e["pid"] != 2]) == len(records)
    assert any(e["pid"] == 2 for e in slices), "flows are drawn on their links too (process 'links')"
    # rank tracks and link tracks alike, whichever way this Perfetto turns microseconds into integer ns
    assert partial_overlaps(events, "llround") == [] and partial_overlaps(events, "trunc") == []
    # because the old one-thread-per-rank layout had compute and communication crossing, check they are apart
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    rank0 = {name for (pid, _), name in threads.items() if pid == 100}
    assert {"rank 0: compute", "rank 0: pre/post", "rank 0: communication", "rank 0: flows"} <= rank0
    kinds = defaultdict(set)
    for e in slices:
        if e["pid"] == 100:
            kinds[threads[(100, e["tid"])].split(": ")[1].split(" ")[0]].add(e["cat"])
    assert kinds["compute"] == {"compute"} and kinds["pre/post"] == {"prepost"}
    assert kinds["communication"] <= {"allreduce", "alltoall"} and kinds["flows"] <= {"allreduce", "alltoall"}


def test_no_display_time_unit(tmp_path: Path) -> None:
    # because Perfetto reads "displayTimeUnit": "ns" as the unit of every ts (the iteration would show 1000x shorter)
    records, _ = _records(blocking=False)
    doc = json.loads(write_chrome_trace(records, tmp_path / "t.json").read_text())
    assert "displayTimeUnit" not in doc
    iteration = max(r.end for r in records)
    last = max(perfetto_ns(e["ts"], "llround") + perfetto_ns(e["dur"], "llround") for e in doc["traceEvents"] if e["ph"] == "X")
    assert last == round(iteration * 1e9)  # ts in microseconds, read back to the nanosecond


def test_the_old_layout_would_have_crossed() -> None:
    # because a test that cannot fail is a defect: all of a rank's records on one track must show partial overlaps
    records, _ = _records(blocking=False)
    flat = [{**e, "pid": e["pid"], "tid": 0} for e in trace_events(records) if e["ph"] == "X" and e["pid"] == 100]
    assert partial_overlaps(flat)
