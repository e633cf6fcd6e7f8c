"""The last-level cache a process gets: the cache-reuse benchmark, the capacity fitted to it, and where the model
uses it (miss shares) and where it does not (the bytes a flush moves)."""

from __future__ import annotations

import pytest

from dlrmsim.calibration.apply import apply_calibration
from dlrmsim.calibration.benchmarks.cache import cache_reuse_task, reuse_footprints
from dlrmsim.calibration.benchmarks.timing import QUICK_POLICY
from dlrmsim.calibration.calibrate import TINY_FLUSH_BYTES
from dlrmsim.calibration.fit import fit_effective_llc
from dlrmsim.calibration.schema import Calibration, Measurement
from dlrmsim.engine.costs import cache_miss_share
from dlrmsim.host import last_level_cache_bytes
from dlrmsim.topologies import load_topology

MiB = 1 << 20
HIT_S, MISS_S = 18e-9, 37e-9


def curve(capacity: float, llc: int = 32 * MiB, l2: int = MiB) -> list[Measurement]:
    """Cache-reuse rows of a host whose misses follow the model's share at ``capacity``."""
    rows = []
    for f in reuse_footprints(l2, llc):
        t = HIT_S + cache_miss_share(f, capacity) * (MISS_S - HIT_S)
        rows.append(Measurement(benchmark="cache_reuse", name=f"cache reuse f{f} c1", cores=1,
                                params={"footprint_bytes": f, "llc_bytes": llc}, time_s=t, repeats=3))  # fmt: skip
    return rows


def test_the_footprints_run_from_twice_the_l2_to_four_times_the_reported_cache() -> None:
    f = reuse_footprints(MiB, 32 * MiB)
    # because below twice a core's L2 the L2 serves the rows, and beyond 4x the cache every footprint misses alike
    assert f[0] == 2 * MiB and 4 * 32 * MiB * 0.7 < f[-1] <= 4 * 32 * MiB
    assert all(b / a == pytest.approx(2**0.5, rel=0.01) for a, b in zip(f, f[1:], strict=False))


@pytest.mark.parametrize("capacity_mib", [6.0, 10.0, 20.0])
def test_the_fit_recovers_the_capacity_that_made_the_curve(capacity_mib: float, quick_cal: Calibration) -> None:
    c = fit_effective_llc(curve(capacity_mib * MiB), quick_cal.host)
    # because the fit is least squares of the model's own form (a hit plus the missing share of a miss's extra
    # cost): times drawn from the model at capacity C are explained best at C, to the grid's 1.6 % steps
    assert c is not None and c == pytest.approx(capacity_mib * MiB, rel=0.02)


def test_no_rows_or_no_miss_cost_leaves_the_reported_cache(quick_cal: Calibration) -> None:
    flat = [m.model_copy(update={"time_s": HIT_S}) for m in curve(10 * MiB)]
    # because a host whose gathers cost the same at every footprint shows no capacity to fit
    assert fit_effective_llc(flat, quick_cal.host) is None
    assert fit_effective_llc(curve(10 * MiB)[:3], quick_cal.host) is None
    assert quick_cal.host.model_copy(update={"effective_llc_bytes": None}).model_llc_bytes == quick_cal.host.llc_bytes


def test_the_model_takes_the_measured_capacity_and_flushes_stay_sized_by_the_reported_one(quick_cal: Calibration) -> None:
    topo = load_topology("host")
    host = quick_cal.host.model_copy(update={"llc_bytes": 32 * MiB, "effective_llc_bytes": 8 * MiB})
    measured = apply_calibration(topo, quick_cal.model_copy(update={"host": host})).compute(0)
    plain_host = host.model_copy(update={"effective_llc_bytes": None})
    reported = apply_calibration(topo, quick_cal.model_copy(update={"host": plain_host})).compute(0)
    # because miss shares are the cache a process gets, while a benchmark's flush moved 2x the reported cache's bytes
    assert measured.llc_bytes == 8 * MiB and reported.llc_bytes == 32 * MiB
    assert measured.task_overhead_after_bytes == reported.task_overhead_after_bytes


def test_a_tiny_run_records_its_flush_and_the_model_takes_it_as_the_traffic_before_a_timed_call(quick_cal: Calibration) -> None:
    # because the suite's tiny run limits its flush to twice a 32 MiB cache, whatever this host's cache is
    assert quick_cal.host.flush_bytes == min(2 * last_level_cache_bytes(), TINY_FLUSH_BYTES)
    spec = apply_calibration(load_topology("host"), quick_cal).compute(0)
    # because the dispatch benchmark timed its first op after that flush, the first-op cost's traffic is that flush
    assert spec.task_overhead_after_bytes == quick_cal.host.flush_bytes
    # because a file from before the field flushed twice its reported cache
    older = quick_cal.host.model_copy(update={"flush_bytes": None, "llc_bytes": 32 * MiB})
    assert older.flushed_bytes == 64 * MiB


def test_the_benchmark_rows_are_one_core_gathers_per_footprint() -> None:
    rows = cache_reuse_task(64 << 10, MiB, QUICK_POLICY).run()  # a tiny cache: footprints 128 KiB to 4 MiB
    assert {m.benchmark for m in rows} == {"cache_reuse"} and {m.cores for m in rows} == {1}
    assert [m.params["footprint_bytes"] for m in rows] == reuse_footprints(64 << 10, MiB)
    # because each row is the time of one 64-byte gather: tens of nanoseconds on any current CPU
    assert all(1e-10 < m.time_s < 1e-6 for m in rows)


def test_a_rise_steeper_than_the_models_form_fits_no_less_than_a_cores_l2(quick_cal: Calibration) -> None:
    # because a shared cache that other tenants thrash still leaves a process its core's private L2: times that jump
    # from hit to miss between the two smallest footprints and stay flat (a knee the model's F / (F + C) cannot make)
    # once fitted C at the grid's lower end, 0.12 MiB on a VM with 0.5 MiB of L2 a core
    rows = curve(10 * MiB)
    knee = [
        r.model_copy(update={"time_s": HIT_S if i == 0 else MISS_S, "params": {**r.params, "l2_bytes": MiB}})
        for i, r in enumerate(rows)
    ]
    c = fit_effective_llc(knee, quick_cal.host)
    assert c is not None and c >= MiB
