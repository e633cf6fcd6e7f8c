"""Core availability (benchmarks/availability.py): what a multi-threaded kernel typically gets of its cores, against the
moments the kernel benchmarks keep, and how a calibration applies it."""

from __future__ import annotations

import networkx as nx
import pytest

from dlrmsim.calibration.apply import apply_calibration, available_gemm_points
from dlrmsim.calibration.benchmarks.availability import availability_of, availability_task, combine_runs
from dlrmsim.calibration.benchmarks.plan import build_plan, combine_passes
from dlrmsim.calibration.benchmarks.timing import TimingPolicy
from dlrmsim.calibration.fit import fit_core_availability
from dlrmsim.calibration.ops import get_ops
from dlrmsim.calibration.schema import Calibration, CoreAvailabilityFit, Measurement
from dlrmsim.topologies.topology import ComputeSpec, Link, Topology


def _run(median: float, best: float, pairs: int = 100, cores: int = 2) -> Measurement:
    return Measurement(
        benchmark="availability",
        name=f"core availability gemm 384 c{cores}",
        cores=cores,
        params={"m": 384, "speedup_median": median, "speedup_best": best, "availability": median / best, "pairs": pairs},
        flops=2.0 * 384**3,
        time_s=1e-3,
        repeats=pairs,
    )


def test_availability_is_the_median_speedup_over_the_upper_decile() -> None:
    # Because a team of c threads runs at full speed only while all c cores are there, half the pairs at 1.2 and half
    # at 2.0 put the median between them and the upper decile at 2.0: the typical moment gets (1.2+2)/2 / 2 of it.
    speedups = [1.2] * 50 + [2.0] * 50
    med, best, avail = availability_of(speedups)
    assert med == pytest.approx(1.6) and best == pytest.approx(2.0) and avail == pytest.approx(0.8)
    # Every moment alike: all of it.
    assert availability_of([1.9] * 20)[2] == pytest.approx(1.0)
    # Linear interpolation between order statistics, as numpy's default quantile.
    assert availability_of([1.0, 2.0, 3.0, 4.0, 5.0])[1] == pytest.approx(4.6)


def test_runs_combine_to_their_mean_median_over_their_best_moment() -> None:
    # Because the kernel benchmarks keep their fastest pass over the whole calibration, a run that found the second
    # core gone throughout (its own ratio near 1) must still count as a bad moment against the best run's.
    gone, there = _run(1.05, 1.17), _run(1.55, 1.87)
    kept = combine_runs([gone, there])
    assert kept.params["speedup_median"] == pytest.approx(1.30)
    assert kept.params["speedup_best"] == pytest.approx(1.87)
    assert kept.params["availability"] == pytest.approx(1.30 / 1.87)
    assert kept.params["pairs"] == 200
    # combine_passes routes the benchmark there, and the fit reads the combined row.
    (row,) = combine_passes([gone, there])
    assert row.passes == 2 and row.params["availability"] == pytest.approx(1.30 / 1.87)
    (fit,) = fit_core_availability([row])
    assert (fit.cores, fit.runs) == (2, 2) and fit.availability == pytest.approx(1.30 / 1.87, rel=1e-4)


def test_calibration_availability_is_one_on_one_core_and_where_not_measured(quick_cal: Calibration) -> None:
    cal = quick_cal.model_copy(
        update={
            "core_availability": [
                CoreAvailabilityFit(cores=2, availability=0.8, speedup_median=1.6, speedup_best=2.0, runs=5),
                CoreAvailabilityFit(cores=8, availability=0.6, speedup_median=4.2, speedup_best=7.0, runs=5),
            ]
        }
    )
    assert cal.availability(1) == 1.0
    assert cal.availability(2) == 0.8 and cal.availability(3) == 0.8 and cal.availability(16) == 0.6
    assert quick_cal.model_copy(update={"core_availability": []}).availability(2) == 1.0


def _host(cores: int, ranks: int) -> Topology:
    g = nx.Graph()
    spec = ComputeSpec(name="host", cores=cores, clock_hz=1e9, peak_flops={"fp32": 1e9}, memory_bandwidth_Bps=1e9,
                       memory_capacity_B=8e9, kind="host")  # fmt: skip
    names = [f"r{i}" for i in range(ranks)]
    for n in names:
        g.add_node(n, compute=spec)
    for a, b in zip(names, names[1:], strict=False):
        g.add_edge(a, b, link=Link(a, b, "shm", bandwidth_Bps=1e9, latency_s=1e-6))
    return Topology("host", g, names)


def _tables(quick_cal: Calibration) -> Calibration:
    """quick_cal with a 2-core host whose 1-core GEMMs run at 0.4 of peak and 2-core ones at 0.35 (of twice the
    peak: a gain of 0.75x) from 1 GFLOP up, and at 0.2 and 0.1 below it (the second core loses there)."""
    one = quick_cal.gemm.tables[0].model_copy(update={"cores": 1, "peak_GFLOPs": 100.0, "points": [(1e6, 0.2), (1e9, 0.4)]})
    two = one.model_copy(update={"cores": 2, "peak_GFLOPs": 200.0, "points": [(1e6, 0.1), (1e9, 0.35)]})
    host = quick_cal.host.model_copy(update={"cores": 2, "clock_GHz": 1.0, "flops_per_cycle_fp32": 100.0})
    gemm = quick_cal.gemm.model_copy(update={"tables": [one, two]})
    return quick_cal.model_copy(update={"host": host, "gemm": gemm, "core_availability": []})


def test_a_lone_ranks_gemms_keep_the_share_of_their_multicore_gain_the_typical_moment_keeps(quick_cal: Calibration) -> None:
    # Because the operating system gives a busy process one core and the others come and go, a 2-core GEMM that ran at
    # 70 GF/s against 40 on one core in the benchmarks' good moments keeps 40 + 30 x (1.6 - 1) / (2 - 1) = 58 GF/s at
    # a typical speedup of 1.6 against a best of 2; a size that ran slower on two cores (20 against 20 on one) loses
    # nothing; one core is unchanged.
    base = _tables(quick_cal)
    cal = base.model_copy(update={"core_availability": [
        CoreAvailabilityFit(cores=2, availability=0.8, speedup_median=1.6, speedup_best=2.0, runs=5)]})  # fmt: skip
    assert cal.core_availability[0].retained_gain == pytest.approx(0.6)
    rates = dict(available_gemm_points(cal, 2))
    assert rates[1e9] * 200 == pytest.approx(40 + 30 * 0.6) and rates[1e6] == pytest.approx(0.1)
    assert available_gemm_points(cal, 1) == [(1e6, 0.2), (1e9, 0.4)]
    assert available_gemm_points(base, 2) == [(1e6, 0.1), (1e9, 0.35)]  # not measured: as fitted
    spec = apply_calibration(_host(2, 1), cal).compute(0)
    assert spec.peak_flops["fp32"] * spec.gemm_efficiency(1e9) == pytest.approx(58e9)


def test_ranks_sharing_the_busy_cores_each_get_their_availability(quick_cal: Calibration) -> None:
    # Because two one-thread ranks on a 2-core host need both cores, as a 2-thread team does, and share one when the
    # other is taken, each rank's GEMMs run at the availability of the two cores (0.8) of their 1-core rate.
    cal = _tables(quick_cal).model_copy(update={"core_availability": [
        CoreAvailabilityFit(cores=2, availability=0.8, speedup_median=1.6, speedup_best=2.0, runs=5)]})  # fmt: skip
    assert available_gemm_points(cal, 1, ranks=2) == [(1e6, pytest.approx(0.16)), (1e9, pytest.approx(0.32))]
    spec = apply_calibration(_host(1, 2), cal).compute(0)
    assert spec.peak_flops["fp32"] * spec.gemm_efficiency(1e9) == pytest.approx(0.8 * 40e9)


def test_apply_leaves_the_other_kernels_as_fitted(quick_cal: Calibration) -> None:
    # The embedding and interaction fits gained little or nothing from a second core on the VM that measured the
    # availability, and their phases showed no shortfall at 2 threads: only the GEMMs take it.
    base = _tables(quick_cal)
    cal = base.model_copy(update={"core_availability": [
        CoreAvailabilityFit(cores=2, availability=0.8, speedup_median=1.6, speedup_best=2.0, runs=5)]})  # fmt: skip
    before, after = (apply_calibration(_host(2, 1), c).compute(0) for c in (base, cal))
    for field in ("row_time_s_by_kind", "flop_rate_by_kind", "bandwidth_fraction_by_kind", "fixed_time_s_by_kind"):
        assert getattr(after, field) == getattr(before, field)
    assert after.memory_bandwidth_Bps == before.memory_bandwidth_Bps


def test_the_benchmark_times_pairs_and_the_plans_spread_it() -> None:
    k = get_ops("numpy")
    (row,) = availability_task(k, 2, TimingPolicy(warmup=1, repeats=1, min_sample_s=0.001), seconds=0.05).run()
    assert row.benchmark == "availability" and row.cores == 2 and int(row.params["pairs"]) >= 3
    assert 0 < float(row.params["availability"]) <= 1.0
    assert float(row.params["speedup_best"]) >= float(row.params["speedup_median"])
    # The quick plan runs it at every core count above one, at the calibration's five spread moments; the tiny
    # plan once.
    quick = [t for t in build_plan(k, True, 2, "shm") if t.stage.startswith("core availability")]
    assert len(quick) == 5 and {t.id.split(" c2")[0] for t in quick} == {"core availability gemm 384"}
    assert len([t for t in build_plan(k, True, 2, "shm", tiny=True) if t.stage.startswith("core availability")]) == 1
    assert not [t for t in build_plan(k, True, 1, "shm", tiny=True) if t.stage.startswith("core availability")]
