"""The Perfetto trace: slices on every track nest (Perfetto stacks a thread's slices), and each rank's tracks split work by kind."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from dlrmsim.engine.trace import assign_lanes, trace_events, write_chrome_trace
from dlrmsim.training.simulate import TrainingConfig, load_inputs, simulate_training

EPS_US = 1e-6  # 1 ps: microsecond timestamps are floats, so an end may differ from the next start in the last bit


def partial_overlaps(events: list[dict]) -> list[tuple]:
    """(pid, tid, outer, inner) for every pair of slices on one track that overlap without nesting."""
    by_track: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            by_track[(e["pid"], e["tid"])].append(e)
    bad = []
    for (pid, tid), slices in by_track.items():
        stack: list[dict] = []
        for e in sorted(slices, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"] + EPS_US:
                stack.pop()
            if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + EPS_US:
                bad.append((pid, tid, stack[-1]["name"], e["name"]))
            stack.append(e)
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
    assert partial_overlaps(events) == []  # rank tracks and link tracks alike
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


def test_the_old_layout_would_have_crossed() -> None:
    # because a test that cannot fail is a defect: all of a rank's records on one track must show partial overlaps
    records, _ = _records(blocking=False)
    flat = [{**e, "pid": e["pid"], "tid": 0} for e in trace_events(records) if e["ph"] == "X" and e["pid"] == 100]
    assert partial_overlaps(flat)
