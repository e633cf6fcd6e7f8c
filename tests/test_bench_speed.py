"""benchmarks/bench_speed.py --compile times the kernels' compilation into an empty cache, leaving the project's own."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from benchmarks import bench_speed


def test_compile_row_runs_the_warm_up_on_an_empty_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    # because what an install pays is compiling every kernel, the warm-up must run with numba's cache pointed at a
    # fresh, empty directory (the project's cache next to the sources would make it a load, not a compile), and
    # that directory must be gone afterwards
    seen: dict = {}

    def fake_run(cmd: list[str], env: dict, **kw: object) -> subprocess.CompletedProcess:
        cache = Path(env["NUMBA_CACHE_DIR"])
        seen.update(cmd=cmd, cache=cache, empty=cache.is_dir() and not any(cache.iterdir()))
        return subprocess.CompletedProcess(cmd, 0, "dlrmsim: compiled kernels ready (1.0 s)\n", "")

    monkeypatch.setattr(bench_speed.subprocess, "run", fake_run)
    row = bench_speed.time_compile(timeout_s=5)
    assert seen["cmd"][1:] == ["-m", "dlrmsim.warmup"] and seen["empty"]
    assert seen["cache"] != Path(os.environ.get("NUMBA_CACHE_DIR", "/nonexistent")) and not seen["cache"].exists()
    assert row["row"] == "compile" and row["wall_s"] >= 0


def test_a_failed_compile_is_reported_not_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    # because a warm-up that failed compiled nothing, its time must not stand as the row's
    monkeypatch.setattr(
        bench_speed.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "Traceback\nTypingError: x\n")
    )
    row = bench_speed.time_compile(timeout_s=5)
    assert row["wall_s"] is None and row["error"] == "TypingError: x"
