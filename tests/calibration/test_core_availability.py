"""Core availability (benchmarks/availability.py): what a multi-threaded kernel typically gets of its cores, against the
moments the kernel benchmarks keep, and how a calibration applies it."""

from __future__ import annotations

import networkx as nx
import pytest

from dlrmsim.calibration.agreement import fitted_parameters
from dlrmsim.calibration.apply import (
    apply_calibration,
    available_gemm_points,
    available_stream_fraction,
    available_update_fit,
    embedding_fits,
    kept_gain_time,
)
from dlrmsim.calibration.benchmarks.availability import (
    AVAILABILITY_KERNELS,
    TORCH_AVAILABILITY_KERNELS,
    availability_of,
    availability_task,
    combine_runs,
)
from dlrmsim.calibration.benchmarks.plan import build_plan, combine_passes
from dlrmsim.calibration.benchmarks.timing import TimingPolicy
from dlrmsim.calibration.fit import fit_core_availability
from dlrmsim.calibration.ops import get_ops
from dlrmsim.calibration.schema import Calibration, CoreAvailabilityFit, EmbeddingFit, Measurement, memory_bandwidth_GBps
from dlrmsim.topologies.topology import ComputeSpec, Link, Topology

UPDATE_AVAILABILITY = CoreAvailabilityFit(kernel="update", cores=2, availability=0.6, speedup_median=1.2,
                                         speedup_best=2.0, runs=5)  # fmt: skip


def _run(median: float, best: float, pairs: int = 100, cores: int = 2, kernel: str = "gemm") -> Measurement:
    return Measurement(
        benchmark="availability",
        name=f"core availability {kernel} c{cores}",
        cores=cores,
        params={"kernel": kernel, "speedup_median": median, "speedup_best": best, "availability": median / best, "pairs": pairs},
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


def test_a_lone_ranks_gemms_keep_their_tables_multicore_rates(quick_cal: Calibration) -> None:
    # Because a lone rank's MLP steps gained from their second thread what the GEMM tables gained (1.85x against
    # 1.89-1.94x on the two 2-vCPU VMs), not the 1.68x the GEMM pairs' typical moment would keep, a 2-core GEMM that
    # ran at 70 GF/s in the benchmarks keeps 70 GF/s with a measured availability of 0.8; two ranks on those cores
    # would not (next test).
    base = _tables(quick_cal)
    cal = base.model_copy(update={"core_availability": [
        CoreAvailabilityFit(cores=2, availability=0.8, speedup_median=1.6, speedup_best=2.0, runs=5)]})  # fmt: skip
    assert available_gemm_points(cal, 2) == [(1e6, 0.1), (1e9, 0.35)] == available_gemm_points(base, 2)
    assert available_gemm_points(cal, 1) == [(1e6, 0.2), (1e9, 0.4)]
    spec = apply_calibration(_host(2, 1), cal).compute(0)
    assert spec.peak_flops["fp32"] * spec.gemm_efficiency(1e9) == pytest.approx(70e9)


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


def test_a_term_keeps_the_share_of_its_speedup_the_typical_moment_keeps() -> None:
    # Because a cost term is a time per unit of work, it is its rate that moves: 2 ns on one core and 1 ns on two
    # is a rate of 0.5 and 1 per ns; keeping 0.6 of the gain gives 0.5 + 0.6 x 0.5 = 0.8 per ns, 1.25 ns.
    assert kept_gain_time(1.0, 2.0, 0.6) == pytest.approx(1.25)
    assert kept_gain_time(1.0, 2.0, 1.0) == pytest.approx(1.0) and kept_gain_time(1.0, 2.0, 0.0) == pytest.approx(2.0)
    # A term that did not speed up on two cores, or that the two-core fit has not, stays as fitted.
    assert kept_gain_time(3.0, 2.0, 0.5) == 3.0 and kept_gain_time(0.0, 2.0, 0.5) == 0.0


def _update(cores: int, row_ns: float, fixed_us: float, gbps: float) -> EmbeddingFit:
    return EmbeddingFit(op="update", distribution="uniform", cores=cores, bandwidth_GBps=gbps, stream_fraction=gbps / 10.0,
                        row_time_ns=row_ns, fixed_us=fixed_us)  # fmt: skip


def test_the_update_on_two_cores_runs_at_the_typical_speedup_of_its_pairs() -> None:
    # Because the fit's two-core terms are those of the good moments, when they ran 2x the one-core ones (the pairs'
    # best speedup) a typical moment's median speedup of 1.2 puts every term at 2 / 1.2 of its two-core value:
    # the update as a whole then runs 1.2x faster than on one core, as its pairs typically did.
    one, two = _update(1, 40.0, 20.0, 2.0), _update(2, 20.0, 10.0, 4.0)
    typical = available_update_fit(two, one, UPDATE_AVAILABILITY.retained_gain)
    assert UPDATE_AVAILABILITY.retained_gain == pytest.approx(0.2)
    assert typical.row_time_ns == pytest.approx(20.0 * 2 / 1.2) and typical.fixed_us == pytest.approx(10.0 * 2 / 1.2)
    # the bandwidth, a rate, keeps 0.2 of its gain over one core: 2 + 0.2 x 2; its share of the stream scales with it
    assert typical.bandwidth_GBps == pytest.approx(2.4) and typical.stream_fraction == pytest.approx(0.24)
    assert (typical.cores, typical.op) == (2, "update")


def test_apply_gives_the_update_its_own_availability_and_nothing_else(quick_cal: Calibration) -> None:
    # Because the update's availability pairs time the update alone, they move the update's two-core fit toward its
    # one-core one and leave the forward, the backward and the GEMMs as fitted; one core is unchanged.
    rows = [_update(1, 40.0, 20.0, 2.0), _update(2, 20.0, 10.0, 4.0)]
    others = [e for e in quick_cal.embedding if e.op != "update"]
    base = _tables(quick_cal).model_copy(update={"embedding": others + rows})
    cal = base.model_copy(update={"core_availability": [UPDATE_AVAILABILITY]})
    assert embedding_fits(cal, cores=2)["update"].row_time_ns == pytest.approx(20.0 * 2 / 1.2)
    assert embedding_fits(cal, cores=1)["update"] == embedding_fits(base, cores=1)["update"]
    before, after = (apply_calibration(_host(2, 1), c).compute(0) for c in (base, cal))
    assert after.row_time_s_by_kind["update"] == pytest.approx(before.row_time_s_by_kind["update"] * 2 / 1.2)
    for kind in ("embedding", "embedding_bwd"):
        assert after.row_time_s_by_kind.get(kind) == before.row_time_s_by_kind.get(kind)
        assert after.bandwidth_fraction_by_kind.get(kind) == before.bandwidth_fraction_by_kind.get(kind)
    assert after.gemm_efficiency(1e9) == before.gemm_efficiency(1e9)  # the GEMM's own pairs were not measured
    # Without a one-core update fit to keep a share of, the two-core fit stays as it is.
    alone = cal.model_copy(update={"embedding": others + rows[1:]})
    assert embedding_fits(alone, cores=2)["update"] == rows[1]


def test_ranks_sharing_the_busy_cores_update_at_their_availability(quick_cal: Calibration) -> None:
    # Because two one-thread ranks on two cores wait for the slower core at every collective, as a 2-thread team
    # does, each rank's update runs at the update's availability of the two cores (0.6) of its one-core fit: its
    # time terms 1/0.6 of their value, its bandwidth 0.6 of it. The forward and backward keep their fits.
    rows = [_update(1, 40.0, 20.0, 2.0), _update(2, 20.0, 10.0, 4.0)]
    others = [e for e in quick_cal.embedding if e.op != "update"]
    base = _tables(quick_cal).model_copy(update={"embedding": others + rows})
    cal = base.model_copy(update={"core_availability": [UPDATE_AVAILABILITY]})
    shared = embedding_fits(cal, cores=1, sharing_ranks=2)["update"]
    assert shared.row_time_ns == pytest.approx(40.0 / 0.6) and shared.fixed_us == pytest.approx(20.0 / 0.6)
    assert shared.bandwidth_GBps == pytest.approx(2.0 * 0.6) and shared.stream_fraction == pytest.approx(0.2 * 0.6)
    before, after = (apply_calibration(_host(1, 2), c).compute(0) for c in (base, cal))
    assert after.row_time_s_by_kind["update"] == pytest.approx(before.row_time_s_by_kind["update"] / 0.6)
    assert after.row_time_s_by_kind.get("embedding") == before.row_time_s_by_kind.get("embedding")
    # fbgemm's fused update (TorchRec) is another kernel than the one the pairs time: as fitted.
    tbe = cal.model_copy(update={"tbe": [r.model_copy() for r in rows]})
    assert embedding_fits(tbe, cores=1, embedding_kernel="tbe", sharing_ranks=2)["update"] == rows[0]


def test_fits_and_agreement_keep_each_kernels_availability_apart(quick_cal: Calibration) -> None:
    # Because the GEMM's and the update's gains come from different places (arithmetic, overlapped misses), each
    # kernel's rows fit on their own; rows from before the kernel field are the GEMM's.
    legacy = _run(1.6, 2.0).model_copy(update={"params": {"m": 384, "speedup_median": 1.6, "speedup_best": 2.0,
                                                          "availability": 0.8, "pairs": 100}})  # fmt: skip
    fits = fit_core_availability([_run(1.2, 2.0, kernel="update"), legacy])
    assert [(f.kernel, f.availability) for f in fits] == [("gemm", 0.8), ("update", 0.6)]
    cal = quick_cal.model_copy(update={"core_availability": fits})
    assert cal.availability(2) == 0.8 and cal.availability(2, "update") == 0.6 and cal.availability(1, "update") == 1.0
    params = fitted_parameters(cal)
    assert params["core_availability.c2"] == 0.8 and params["core_availability.update.c2"] == 0.6


def test_the_benchmark_times_pairs_and_the_plans_spread_it() -> None:
    k = get_ops("numpy")
    policy = TimingPolicy(warmup=1, repeats=1, min_sample_s=0.001)
    for kernel in AVAILABILITY_KERNELS:
        (row,) = availability_task(k, 2, policy, seconds=0.05, kernel=kernel).run()
        assert row.benchmark == "availability" and row.cores == 2 and int(row.params["pairs"]) >= 3
        assert row.params["kernel"] == kernel and 0 < float(row.params["availability"]) <= 1.0
        assert float(row.params["speedup_best"]) >= float(row.params["speedup_median"])
    assert row.bytes > 0 and row.params["lookups"] == 16384  # the update's row: bytes as the embedding fits count them
    with pytest.raises(ValueError, match="unknown availability kernel"):
        availability_task(k, 2, policy, seconds=0.05, kernel="conv").run()
    # The quick plan runs each kernel at every core count above one, at the calibration's five spread moments; the
    # tiny plan each once.
    quick = [t for t in build_plan(k, True, 2, "shm") if t.stage.startswith("core availability")]
    names = {t.id.split(" c2")[0] for t in quick}
    assert len(quick) == 10 and names == {"core availability gemm 384", "core availability update 131072x64 16384"}
    assert len([t for t in build_plan(k, True, 2, "shm", tiny=True) if t.stage.startswith("core availability")]) == 2
    assert not [t for t in build_plan(k, True, 1, "shm", tiny=True) if t.stage.startswith("core availability")]


ELEMENTWISE_AVAILABILITY = CoreAvailabilityFit(kernel="elementwise", cores=2, availability=0.6, speedup_median=1.2,
                                              speedup_best=2.0, runs=5)  # fmt: skip


def test_element_wise_ops_keep_the_share_of_their_bandwidth_gain_their_pairs_keep(quick_cal: Calibration) -> None:
    # Because a step's element-wise op ends with its slowest thread, a lone rank on two cores gets its one-core stream
    # bandwidth (20 GB/s) plus the pairs' retained gain (0.2) of what the second core adds (20 GB/s more): 24 of the
    # 40 GB/s the triad fit gives two cores, a fraction of 0.6 for the element-wise and optimizer tasks alone.
    memory = quick_cal.memory.model_copy(update={"bandwidth_GBps": 40.0, "per_core_GBps": 20.0, "saturation_cores": 2.0})
    base = _tables(quick_cal).model_copy(update={"memory": memory})
    cal = base.model_copy(update={"core_availability": [ELEMENTWISE_AVAILABILITY]})
    assert memory_bandwidth_GBps(memory, 1) == 20.0 and memory_bandwidth_GBps(memory, 2) == 40.0
    assert available_stream_fraction(cal, 2) == pytest.approx((20.0 + 0.2 * 20.0) / 40.0)
    # one core has no team to wait for; a calibration without the pairs (numpy's, older ones) changes nothing
    assert available_stream_fraction(cal, 1) == 1.0 and available_stream_fraction(base, 2) == 1.0
    # two one-thread ranks share the busy cores: each keeps the pairs' availability, as their GEMMs do
    assert available_stream_fraction(cal, 1, ranks=2) == pytest.approx(0.6)
    before, after = (apply_calibration(_host(2, 1), c).compute(0) for c in (base, cal))
    for kind in ("elementwise", "optimizer"):
        assert after.bandwidth_fraction_by_kind[kind] == pytest.approx(0.6) and kind not in before.bandwidth_fraction_by_kind
    assert after.gemm_efficiency(1e9) == before.gemm_efficiency(1e9) and after.row_time_s_by_kind == before.row_time_s_by_kind
    assert {k: v for k, v in after.bandwidth_fraction_by_kind.items() if k not in ("elementwise", "optimizer")} == (
        before.bandwidth_fraction_by_kind
    )


def test_torch_calibrations_time_the_element_wise_pairs_and_numpy_ones_do_not() -> None:
    pytest.importorskip("torch")
    k = get_ops("torch")
    (row,) = availability_task(
        k, 2, TimingPolicy(warmup=1, repeats=1, min_sample_s=0.001), seconds=0.05, kernel="elementwise"
    ).run()
    # because the element-wise kernel is one dense SGD update of a 1024 x 1024 weight: 3 x 4 MiB of traffic a call
    assert row.params["kernel"] == "elementwise" and row.bytes == 3 * 4 * 2**20 and int(row.params["pairs"]) >= 3
    assert 0 < float(row.params["availability"]) <= 1.0
    quick = {t.id.split(" c2")[0] for t in build_plan(k, True, 2, "shm") if t.stage == "core availability"}
    assert "core availability elementwise 1048576" in quick and len(TORCH_AVAILABILITY_KERNELS) == len(quick) == 3
    numpy_plan = build_plan(get_ops("numpy"), True, 2, "shm")
    assert not [t for t in numpy_plan if "elementwise" in t.id]  # numpy's element-wise ops run on one thread
