"""benchmarks/bench_gap_in_step.py: a step's first GEMM after its gap, filled by the update, a spin, or both."""

from __future__ import annotations

import pytest

from benchmarks import bench_gap_in_step


def test_each_fill_is_timed_and_the_same_time_fills_take_the_long_updates_time() -> None:
    pytest.importorskip("torch")
    rows = {r["cond"]: r for r in bench_gap_in_step.measure(1, 3)}
    # because telling time from traffic needs both updates, the short one stretched to the long one's time, and the
    # bare spin of that time, beside the loop
    assert set(rows) == {"loop", "update_short", "update_long", "update_short_then_spin", "spin_long"}
    assert rows["loop"]["fill_ms"] < 0.05 and all(r["gemm_med_us"] > 0 for r in rows.values())
    # because the stretched fill and the spin run until the long update's median time, never shorter
    long_ms = rows["update_long"]["fill_ms"]
    assert rows["update_short"]["fill_ms"] < long_ms
    assert rows["spin_long"]["fill_ms"] >= 0.5 * long_ms and rows["update_short_then_spin"]["fill_ms"] >= 0.5 * long_ms
