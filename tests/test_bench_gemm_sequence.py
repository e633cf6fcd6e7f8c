"""benchmarks/bench_gemm_sequence.py: every GEMM of a cycle timed in the three contexts it compares."""

from __future__ import annotations

import pytest

from benchmarks import bench_gemm_sequence


def test_every_gemm_of_each_cycle_is_timed_in_step_order_in_the_cycle_and_in_a_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from dlrmsim.calibration.ops import get_ops

    monkeypatch.setattr(bench_gemm_sequence, "CYCLES", ((64, (16, 32, 1)),))
    rows = bench_gemm_sequence.measure(get_ops("torch"), 1, rounds=2, repeats=2)
    # because the sequence cost is the cycle's time less the loop's and the eviction the flushed cycle's less the
    # cycle's, each GEMM (two layers, three passes each) needs all three, and its bytes for the knee
    assert {(r["layer"], r["pass"]) for r in rows} == {(i, p) for i in (0, 1) for p in ("fwd", "bwd_data", "bwd_weights")}
    for r in rows:
        assert min(r["step_s"], r["cycle_s"], r["loop_s"]) > 0 and r["bytes"] > 0
        assert r["sequence_s"] == pytest.approx(r["cycle_s"] - r["loop_s"])
        assert r["eviction_s"] == pytest.approx(r["step_s"] - r["cycle_s"])
