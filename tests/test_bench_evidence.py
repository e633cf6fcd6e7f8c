"""The evidence helper the benchmarks write validation/results with (benchmarks/evidence.py)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.evidence import in_processes, write_evidence


def _double(queue, x: int) -> None:  # noqa: ANN001 - a spawned target: the queue is multiprocessing's
    queue.put(2 * x)


def test_write_evidence_names_the_file_and_carries_host_facts(tmp_path: Path) -> None:
    path = write_evidence(tmp_path / "results", "probe", {"value": 1.5})
    doc = json.loads(path.read_text())
    # because a result is only evidence with its host and time beside it, and the file name sorts by time
    assert path.name.endswith("-probe.json") and path.name[:8].isdigit()
    assert doc["value"] == 1.5 and {"date", "host", "load_average"} <= set(doc)


def test_in_processes_runs_each_argument_once() -> None:
    # because every spawned process puts exactly one result, whatever order they finish in
    assert sorted(in_processes(_double, [(1,), (2,), (3,)])) == [2, 4, 6]
