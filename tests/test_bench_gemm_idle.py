"""benchmarks/bench_gemm_idle.py's DLRM-sized GEMMs after gaps: every fill at every gap, timed."""

from __future__ import annotations

import pytest

from benchmarks import bench_gemm_idle


def test_small_gemms_are_timed_after_each_fill_of_each_gap() -> None:
    torch = pytest.importorskip("torch")
    rows = bench_gemm_idle.small_gap_conditions(1, 2, torch.empty(1 << 16))
    conds = {(r["n"], r["cond"]) for r in rows}
    # because the question is whether elapsed time or our own traffic sets the cost after a gap, each size needs its
    # loop baseline and all three fills (spin: time alone, sleep: halted vCPUs, stream: time and traffic) at each gap
    for n in (32, 256):
        assert (n, "small_loop") in conds
        for ms in (1.0, 3.0, 10.0):
            assert {(n, f"small_gap_{fill}_{ms}") for fill in ("spin", "sleep", "stream")} <= conds
    assert len(rows) == 2 * (1 + 3 * 3) and all(r["med_us"] > 0 and r["threads"] == 1 for r in rows)
