"""benchmarks/bench_gemm_cold_contexts.py: the idle layer timed in each context, and what the model charges there."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import bench_gemm_cold_contexts as bench

RESULTS = Path(__file__).resolve().parents[1] / "validation" / "results"


def test_each_context_is_timed_and_the_flush_has_its_own_duration(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from dlrmsim.calibration.ops import get_ops

    monkeypatch.setattr(bench, "GAP_S", 0.002)
    monkeypatch.setattr(bench, "SHORT_GAP_S", 0.001)
    ops = get_ops("torch")
    monkeypatch.setattr(ops, "flush_limit_bytes", 1 << 20)  # a 1 MiB flush: the protocol, not the host's cache
    row = bench.measure(ops, 1, rounds=5)
    # because the question is whether time and traffic add, every context needs its own distribution
    assert set(row["contexts"]) == {"loop", "spin_3", "spin_8", "flush", "flush_spin_8"}
    assert row["flush_s"] > 0
    for v in row["contexts"].values():
        assert v["samples"] == 5 and 0 < v["p25_s"] <= v["median_s"] <= v["p75_s"]


def test_the_model_rows_charge_the_larger_term_where_a_sum_would_charge_both() -> None:
    rows = bench.model_rows(RESULTS / "20261128T0435-vm-calibration.yaml", 2, 0.003)
    # because back to back nothing is lost, and a spin is time without traffic
    assert rows["loop"]["max_s"] == rows["loop"]["sum_s"] == 0.0
    assert rows["spin_8"]["evicted_s"] == 0.0 and rows["spin_8"]["max_s"] == rows["spin_8"]["idle_s"] > 0
    # because after a flush and a spin both terms apply: the model pays the larger, a sum would pay both
    both = rows["flush_spin_8"]
    assert both["evicted_s"] > 0 and both["max_s"] == max(both["idle_s"], both["evicted_s"]) < both["sum_s"]
