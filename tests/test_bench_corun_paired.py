"""benchmarks/bench_corun_paired.py: the slot schedule and the per-phase ratio (the processes themselves are slow)."""

from __future__ import annotations

from benchmarks import bench_corun_paired as bench


def test_every_block_runs_each_mode_once_so_drift_spreads_over_all_modes_alike() -> None:
    slots = bench.schedule(12, seed=3)
    assert len(slots) == 36
    # because each block is a shuffle of all modes, no mode can bunch into one stretch of the host's drift
    for b in range(12):
        assert sorted(slots[3 * b : 3 * b + 3]) == sorted(bench.MODES)
    assert slots != bench.schedule(12, seed=4)  # the order is shuffled, not fixed
    # because in "both" each process runs, and in a solo slot only its owner does
    assert bench.active("both", 0) and bench.active("both", 1)
    assert bench.active("solo1", 1) and not bench.active("solo1", 0)


def test_the_ratio_compares_a_process_beside_the_other_with_its_own_solo_slots_only() -> None:
    rows = [
        {"slot": 0, "mode": "both", "total": 0.012, "mlp": 0.002},
        {"slot": 1, "mode": "solo0", "total": 0.010, "mlp": 0.002},
        {"slot": 2, "mode": "solo1", "total": 0.050, "mlp": 0.001},  # the other process's solo: not process 0's
    ]
    got = bench.ratios(rows, 0)
    # because a solo slot of the other process says nothing of this one, only solo0 is the baseline
    assert got["total"]["solo_ms"] == 10.0 and abs(got["total"]["ratio"] - 1.2) < 1e-12
    assert got["mlp"]["ratio"] == 1.0 and got["mlp"]["n_both"] == 1 and got["mlp"]["n_solo"] == 1
