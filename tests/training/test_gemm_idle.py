"""A GEMM after its rank went a while without one pays by how long (benchmarks/idle.py, costs.gemm_idle_time_s): the
curve, its fit, and an iteration's GEMMs each charged by the time since the previous one, the first by the previous
iteration's tail."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dlrmsim.calibration.calibrate import refitted
from dlrmsim.calibration.fit import fit_gemm_idle
from dlrmsim.calibration.schema import Measurement, load_calibration
from dlrmsim.engine.costs import cold_gemm_time_s, evicted_operand_time_s, gemm_idle_time_s
from dlrmsim.engine.frames import records_frame
from dlrmsim.topologies import load_topology
from dlrmsim.training.simulate import TrainingConfig, load_inputs, run_iteration
from tests.engine.handmade import simple_spec

CURVE = ((1e-3, 10e-6), (10e-3, 100e-6))


def test_the_curve_rises_from_nothing_and_holds_past_its_last_gap() -> None:
    spec = dataclasses.replace(simple_spec(cores=2), gemm_idle_extra_s=CURVE)
    # because no gap costs nothing, the curve is linear between its points (and from 0 to the first), and a gap
    # beyond the last measured costs what the last did
    assert gemm_idle_time_s(spec, 0.0) == 0.0
    assert gemm_idle_time_s(spec, 0.5e-3) == pytest.approx(5e-6)
    assert gemm_idle_time_s(spec, 5.5e-3) == pytest.approx(55e-6)
    assert gemm_idle_time_s(spec, 1.0) == pytest.approx(100e-6)
    assert gemm_idle_time_s(simple_spec(cores=2), 1.0) == 0.0  # not calibrated (built-in presets)


def test_the_curve_takes_the_place_of_the_traffic_keyed_call() -> None:
    spec = dataclasses.replace(simple_spec(cores=2), llc_bytes=1e6, gemm_evicted_call_s=55e-6, gemm_evicted_after_bytes=64e6)
    # because 64 MB of traffic since the previous GEMM evicts what the flush did, the call pays all of its 55 us...
    assert evicted_operand_time_s(spec, 1e6, 2, (), 64e6) == pytest.approx(55e-6)
    # ... unless the spec prices a call by the time since the previous one: then traffic does not price it
    timed = dataclasses.replace(spec, gemm_idle_extra_s=CURVE)
    assert evicted_operand_time_s(timed, 1e6, 2, (), 64e6) == 0.0


def _row(gap_ms: float, us: float) -> Measurement:
    return Measurement(benchmark="gemm_idle", name=f"g{gap_ms}", cores=2, params={"gap_ms": gap_ms}, time_s=us * 1e-6, repeats=15)


def test_the_fit_takes_each_gaps_excess_over_the_least_idle_call_never_falling() -> None:
    rows = [_row(0, 380), _row(1, 260), _row(3, 300), _row(10, 290), _row(30, 640)]
    # because back to back ran slower than after 1 ms here, the base is the 1 ms call's 260 us; 10 ms's 290 us is
    # noise below 3 ms's 300, which a longer gap cannot beat, so it keeps 40
    assert fit_gemm_idle(rows) == [(1.0, 0.0), (3.0, 40.0), (10.0, 40.0), (30.0, 380.0)]
    assert fit_gemm_idle(rows[1:]) == [] and fit_gemm_idle(rows[:1]) == []


def _iteration(curve: tuple[tuple[float, float], ...], sequence_factor: float = 0.0) -> tuple[float, object]:
    cfg = TrainingConfig(topology="host", workload="small", ranks=1, scaling="strong", backend="shm", blocking=True)
    topo = load_topology("host", {"compute.host-cpu.cores": 2}, ranks=1).with_specs(
        compute=lambda s: dataclasses.replace(s, gemm_idle_extra_s=curve, gemm_sequence_l2_factor=sequence_factor)
    )
    res = run_iteration(load_inputs(cfg, topology=topo), cfg)
    df = records_frame(res.records)
    return res.iteration_s, df[df["kind"] == "gemm"].sort_values("start")


def test_each_gemm_of_an_iteration_pays_by_the_gap_before_it_the_first_by_the_last_iterations_tail() -> None:
    base, gemms = _iteration(())
    extra = 50e-6
    flat = ((1e-12, extra), (1.0, extra))  # any gap at all costs 50 us
    timed, gemms_timed = _iteration(flat)
    # because on one rank a fixed time per GEMM adds to the iteration as it is, and every GEMM after some gap pays it:
    # the first one after the previous iteration's tail behind its last GEMM (the first pass gives it), since it
    # starts the iteration at time 0; one right behind another (a layer's two backward GEMMs) has no gap and pays 0
    gaps = gemms["start"].to_numpy()[1:] - gemms["end"].to_numpy()[:-1]
    after_gap = 1 + int((gaps > 0).sum())
    assert 1 < after_gap < len(gemms)
    assert timed == pytest.approx(base + after_gap * extra, rel=1e-9)


def test_the_first_gemm_counts_its_gap_from_the_previous_iterations_last_gemm() -> None:
    _, gemms = _iteration(())
    slope = 1e-3  # a GEMM pays 1 ms per second of gap (up to a second)
    timed, gemms_timed = _iteration(((1.0, slope),))
    first, first_timed = gemms.iloc[0], gemms_timed.iloc[0]
    tail = timed - gemms_timed["end"].max()
    # because the iterations repeat, the first GEMM's gap runs from where the previous iteration's last GEMM ended,
    # the tail before the iteration's end, to where the first starts (nothing before it pays anything)
    assert first_timed["start"] == pytest.approx(first["start"]) and tail > 0
    paid = (first_timed["end"] - first_timed["start"]) - (first["end"] - first["start"])
    assert paid == pytest.approx(slope * (first["start"] + tail), rel=1e-6)


def test_with_the_curve_the_eviction_fit_leaves_the_call_to_it_and_older_calibrations_fit_as_before() -> None:
    results = Path(__file__).resolve().parents[2] / "validation" / "results"
    timed = refitted(load_calibration(results / "20261128T0212-vm-calibration.yaml", warn_other_host=False))
    # because the simulator charges a call by the curve where there is one, the fit fits no call of its own; a
    # flushed row's excess is the traffic's terms alone (the larger of the two losses, costs.cold_gemm_time_s)
    assert all(t.idle_extra_us and t.evicted_call_us == 0.0 and (t.sequence_l2_factor or 0.0) > 0.0 for t in timed.gemm.tables)
    # because a calibration without the curve's rows has no curve, its call keeps its column: the same fit as kept
    kept = load_calibration(results / "20261128T0147-vm-calibration.yaml", warn_other_host=False)
    again = refitted(kept)
    assert [t.evicted_call_us for t in again.gemm.tables] == [t.evicted_call_us for t in kept.gemm.tables]


def test_time_and_traffic_price_one_loss_so_a_gemm_pays_the_larger_not_the_sum() -> None:
    # because a GEMM after a flush and an 8 ms spin cost what the spin alone did (bench_gemm_cold_contexts)
    assert cold_gemm_time_s(100e-6, 30e-6) == 100e-6 and cold_gemm_time_s(10e-6, 30e-6) == 30e-6
    assert cold_gemm_time_s(0.0, 0.0) == 0.0
    tiny, huge = ((1.0, 1e-15),), ((1e-12, 1.0), (1.0, 1.0))
    only_traffic, _ = _iteration((), sequence_factor=1.0)
    only_time, _ = _iteration(huge)
    # because every GEMM's sequence term (its bytes' refill time) beats a femtosecond of idle cost, the idle curve
    # adds nothing to an iteration that pays the sequence term...
    assert _iteration(tiny, sequence_factor=1.0)[0] == pytest.approx(only_traffic, rel=1e-12)
    # ... and where a gap costs a second, the sequence term (microseconds) adds nothing to the GEMMs after a gap; the
    # ones right behind another (no gap) pay it: the iteration is the idle-only one plus exactly those terms
    base, gemms = _iteration(())
    both, gemms_both = _iteration(huge, sequence_factor=1.0)
    _, gemms_time = _iteration(huge)
    gaps = gemms["start"].to_numpy()[1:] - gemms["end"].to_numpy()[:-1]
    no_gap = [i + 1 for i, g in enumerate(gaps) if g <= 0]
    assert no_gap  # a layer's two backward GEMMs follow each other
    _, gemms_seq = _iteration((), sequence_factor=1.0)
    paid_seq = sum(
        (gemms_seq.iloc[i]["end"] - gemms_seq.iloc[i]["start"]) - (gemms.iloc[i]["end"] - gemms.iloc[i]["start"]) for i in no_gap
    )
    assert paid_seq > 0
    assert both == pytest.approx(only_time + paid_seq, rel=1e-9)
    assert only_time > only_traffic > base
