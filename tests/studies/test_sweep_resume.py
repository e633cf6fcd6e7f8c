"""An interrupted sweep, killed part way (SIGKILL to the whole process group), resumes with each point exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[2]


def _sweep(spec: Path, out: Path, sleep_s: float, *extra: str) -> subprocess.Popen[str]:
    env = os.environ | {"PYTHONPATH": str(REPO), "DLRMSIM_TEST_SLEEP_S": str(sleep_s)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.studies.sweep_evaluators", "sweep", str(spec), "--out", str(out), "--workers", "2", *extra],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _landed(out: Path) -> int:
    path = out / "results.csv"
    return max(0, path.read_text().count("\n") - 1) if path.exists() else 0


def test_killed_sweep_resumes_with_each_point_exactly_once(write_spec, tmp_path: Path) -> None:
    spec = write_spec(evaluator="slow", ranks=[1, 2, 4, 8], scaling=["strong", "weak"], blocking=[False, True])  # 16 points
    out = tmp_path / "out"
    proc = _sweep(spec, out, 0.3, "--no-progress")
    try:
        deadline = time.monotonic() + 60
        while _landed(out) < 4 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, f"sweep ended before it could be killed: {proc.communicate()}"
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI, the Dask scheduler and its worker processes at once
    finally:
        proc.wait(timeout=30)
    before = pd.read_csv(out / "results.csv", dtype={"point_id": str})
    assert 4 <= len(before) < 16, len(before)

    proc = _sweep(spec, out, 0.01, "--json")
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    summary = json.loads(stdout)
    assert (summary["total"], summary["skipped"], summary["ran"]) == (16, len(before), 16 - len(before))

    after = pd.read_csv(out / "results.csv", dtype={"point_id": str})  # the raw file: no dedupe
    assert len(after) == 16 and after["point_id"].is_unique and set(after["status"]) == {"ok"}
    # the points that landed before the kill were not computed again
    kept = after.set_index("point_id").loc[before["point_id"], "wall_s"]
    assert (kept.to_numpy() == before["wall_s"].to_numpy()).all()
    assert (after.set_index("point_id").loc[before["point_id"], "wall_s"] >= 0.3).all()
