"""Must-show checks on a real calibration of this host (numpy backend; the session fixture runs the tiny plan)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dlrmsim.calibration.agreement import compare
from dlrmsim.calibration.benchmarks.eq_check import eq_specs
from dlrmsim.calibration.benchmarks.plan import unstable_benchmarks
from dlrmsim.calibration.calibrate import partial_path, run_calibration
from dlrmsim.calibration.compare import error_summary
from dlrmsim.calibration.fit import NO_BYTE_TERM_GBPS
from dlrmsim.calibration.host import peak_gflops
from dlrmsim.calibration.schema import Calibration, load_calibration
from dlrmsim.calibration.validate import load_cases


def test_file_written_valid_and_round_trips(quick_cal_path: Path, quick_cal: Calibration) -> None:
    assert quick_cal_path.is_file()
    assert not partial_path(quick_cal_path).exists(), "the partial-results cache is removed once the YAML is written"
    data = yaml.safe_load(quick_cal_path.read_text())
    assert Calibration.model_validate(data) == quick_cal
    assert quick_cal.host.backend == "numpy" and quick_cal.host.quick
    assert {c.op for c in quick_cal.collectives} == {"allreduce", "alltoall"}
    assert {(e.op, e.distribution) for e in quick_cal.embedding} == {
        (op, d) for op in ("forward", "backward", "update") for d in ("uniform", "zipf")
    }
    benches = {m.benchmark for m in quick_cal.measurements}
    assert benches == {
        "gemm",
        "gemm_columns",
        "linear",
        "stream",
        "embedding",
        "interaction",
        "allreduce",
        "alltoall",
        "dispatch",
        "fork",
        "cold_output",
        "skew",
    } | ({"availability"} if quick_cal.host.cores > 1 else set())  # pairs of one and all cores: more than one
    # Because the availability is a median speedup over a best one, it is a share: above 0, at most 1.
    assert all(0 < f.availability <= 1 and f.cores == quick_cal.host.cores for f in quick_cal.core_availability)
    # Because the calibration's ranks met at barriers after equal work, the fit has the last one's lateness: a
    # fraction of each measured stretch, not negative, at the ranks the collectives were measured with.
    skew = quick_cal.arrival_skew
    assert skew is not None and skew.ranks == 2 and len(skew.points) == 1
    assert all(ms > 0 and fraction >= 0 for ms, fraction in skew.points)
    # because the cold-output benchmark times a warm and a cold write of each op kind, whose difference is not negative
    assert [f.cores for f in quick_cal.cold_output] == [quick_cal.host.cores]
    assert all(f.gemm_ns_per_KiB >= 0 and f.elementwise_ns_per_KiB >= 0 for f in quick_cal.cold_output)
    assert {(f.direction, f.cores) for f in quick_cal.interaction} == {
        (d, c) for d in ("forward", "backward") for c in {1, quick_cal.host.cores}
    }
    assert quick_cal.overhead is not None and all(us > 0 for _, us in quick_cal.overhead.task_overhead_us_by_cores)
    # Every non-Eq. measurement a fitted parameter predicts has a fit-quality row (the dispatch timings are the
    # per-op overhead itself, not predicted by another parameter; the fork, cold-output, skew and availability
    # timings are the fitted quantities themselves).
    itself = ("dispatch", "fork", "cold_output", "skew", "availability")
    assert len(quick_cal.fit_quality) == sum(
        1 for m in quick_cal.measurements if not m.name.startswith("eq ") and m.benchmark not in itself
    )
    # The repeated kernels record how far apart their passes were; the fit keeps the faster one.
    repeated = [m for m in quick_cal.measurements if m.passes > 1]
    assert repeated and all(m.slowest_pass_s is not None and m.slowest_pass_s >= m.time_s for m in repeated)
    # The fit-quality summary counts, per benchmark kind, exactly the fitted runs whose passes disagree.
    moved = {m.name for m in unstable_benchmarks(quick_cal.measurements)}
    for bench, summary in error_summary(quick_cal.fit_quality, quick_cal.measurements).items():
        assert summary.host_moved == sum(r.name in moved for r in quick_cal.fit_quality if r.benchmark == bench)


def test_every_fitted_rate_positive_and_below_physical_peak(quick_cal: Calibration) -> None:
    """GEMM at or below cores x clock x flops/cycle; bandwidths below cores x clock x 192 B/cycle (L1 ports).

    Because the calibration raises the peak clock to what its FMA probe and its fastest GEMM show (a VM reports a
    nominal clock below its boost), the bound holds on any host; the 1e-9 slack is floating-point rounding only.
    """
    host = quick_cal.host
    bound = 1 + 1e-9
    assert host.peak_fp32_GFLOPs == pytest.approx(host.cores * host.clock_GHz * host.flops_per_cycle_fp32, rel=1e-3)
    assert host.clock_GHz >= (host.reported_clock_GHz or 0) and host.clock_source
    for m in quick_cal.measurements:
        if m.benchmark in ("gemm", "linear"):
            assert 0 < m.flops / m.time_s <= peak_gflops(host, m.cores) * 1e9 * bound, m.name
    for table in quick_cal.gemm.tables:
        assert all(0 < e <= 1 for _, e in table.points)
    for cores, gflops in quick_cal.gemm.achieved_GFLOPs_by_cores:  # written to 5 significant digits
        assert 0 < gflops <= peak_gflops(host, cores) * (1 + 1e-4)
    assert 0 < quick_cal.gemm.peak_efficiency <= 1
    mem_bound = host.memory_bound_GBps
    mem = quick_cal.memory
    for value in (mem.bandwidth_GBps, mem.per_core_GBps, *[v for _, v in mem.copy_GBps_by_cores + mem.triad_GBps_by_cores]):
        assert 0 < value < mem_bound
    assert 1 <= mem.saturation_cores <= host.cores
    for e in quick_cal.embedding:  # a measured rate, or the marker of a fit whose data needed no byte term
        assert 0 < e.bandwidth_GBps < mem_bound or e.bandwidth_GBps == NO_BYTE_TERM_GBPS, e
    for c in quick_cal.collectives:
        assert c.alpha_us >= 0 and 0 < c.beta_GBps < mem_bound, c
    for f in quick_cal.interaction:
        assert 0 < f.GFLOPs <= peak_gflops(host, f.cores) * bound and f.fixed_us >= 0 and f.sample_time_ns >= 0, f


def test_eq1_eq2_moved_bytes_match_equations(quick_cal: Calibration) -> None:
    rows = {(r.workload, r.collective): r for r in quick_cal.eq_check}
    assert set(rows) == {(w, op) for w in ("small", "mlperf", "large") for op in ("allreduce", "alltoall")}
    for r in rows.values():
        assert r.moved_bytes == pytest.approx(r.equation_bytes, rel=1e-9), r
        assert r.measured_s > 0 and r.model_s > 0
    # Unscaled presets reproduce [Kalamkar20]: Small Eq. 1 9.5 MiB, Eq. 2 16.0 MiB; MLPerf Eq. 1 9.0 MiB.
    assert rows[("small", "allreduce")].equation_bytes / 2**20 == pytest.approx(9.5, abs=0.05)
    assert rows[("small", "alltoall")].equation_bytes / 2**20 == pytest.approx(16.0, abs=1e-9)
    assert rows[("mlperf", "allreduce")].equation_bytes / 2**20 == pytest.approx(9.0, abs=0.05)
    assert rows[("small", "alltoall")].cross_rank_bytes == pytest.approx(rows[("small", "alltoall")].moved_bytes / 2)


def test_quick_specs_scale_only_what_exceeds_the_cap() -> None:
    specs = {s.workload: s for s in eq_specs(quick=True)}
    assert specs["small"].allreduce_scale == "none" and specs["small"].alltoall_scale == "none"
    assert specs["large"].allreduce_scale != "none" and specs["large"].eq1_bytes <= 32 * 2**20
    full = {s.workload: s for s in eq_specs(quick=False)}
    assert full["large"].allreduce_scale == "none"
    assert full["large"].eq1_bytes / 2**20 == pytest.approx(1047, abs=0.5)


def _agreement(a: Calibration, b: Calibration, gemm_factor: float, memory_factor: float, beta_factor: float) -> None:
    busiest = max(a.host.load_average, b.host.load_average)
    if busiest > 2 * a.host.cores:
        # The calibration's own processes load at most ~cores; beyond twice the cores, other jobs held the CPUs
        # for most of a run and the two runs measured different machines' worth of CPU: not comparable.
        pytest.skip(f"host oversubscribed by other jobs (1-min load {busiest:.1f} on {a.host.cores} cores)")
    assert 1 / gemm_factor < b.gemm.peak_efficiency / a.gemm.peak_efficiency < gemm_factor
    assert 1 / memory_factor < b.memory.bandwidth_GBps / a.memory.bandwidth_GBps < memory_factor
    for op in ("allreduce", "alltoall"):
        ratio = b.collective(op).beta_GBps / a.collective(op).beta_GBps
        assert 1 / beta_factor < ratio < beta_factor, (op, ratio)


@pytest.mark.slow
def test_two_tiny_runs_agree(quick_cal: Calibration, tmp_path: Path) -> None:
    """A second tiny run agrees with the session's within what any host allows, so a gross error (a benchmark
    timing the wrong thing, a fit that turns noise into a different regime) fails while a noisy host passes.
    Slow (opt-in, with the quick runs' test below) since 2026-11-28: a second tiny run is 18-19 s, the largest
    single cost of the default suite, which had reached 265-279 s of its 300 s; the session's tiny calibration
    stays in the default suite, checked against physical bounds above.

    Tolerances, and why each holds on a shared 2-vCPU VM and on a quiet server alike: GEMM peak efficiency (the
    best of the few shapes a tiny run has) within a factor of 2.5, because one other process on 2 cores halves a
    2-thread GEMM for as long as it runs (0.30 and 0.64 seen in one fresh-clone run while another job ran);
    saturated triad bandwidth within a factor of 2, because on a VM it is a state of the vCPUs' placement lasting
    seconds (33 and 52 GB/s both seen on one 2-core host, a 1.6x step) and a tiny run samples it only twice;
    collective bandwidth within a factor of 6, because two
    processes plus any third on 2 cores make process scheduling, not copying, the noise: on a quiet VM the second
    tiny run in one pytest process measured 0.26x (three 5 ms samples per size) and 0.249x (five of 10 ms) the
    first's allreduce bandwidth, while three tiny runs in a plain script agreed within 10 % (2.03-2.22 GB/s). A
    unit slip (1000x) still fails.
    """
    again = run_calibration(quick=True, backend="numpy", out=tmp_path / "again.yaml", progress=False, tiny=True)
    _agreement(quick_cal, again, gemm_factor=2.5, memory_factor=2.0, beta_factor=6.0)
    assert load_calibration(tmp_path / "again.yaml").host == again.host


@pytest.mark.slow
def test_two_quick_runs_agree(tmp_path: Path) -> None:
    """Two quick calibrations back to back (about 4 minutes on 2 cores, hence slow): the same tolerances as the
    tiny runs' but GEMM within a factor of 1.3, since a quick run keeps the faster of two passes over 10 cube sizes.

    And what a user compares (``dlrmsim agreement``): the 15 validation cases' predictions under each, within a
    median of 10 % and a maximum of 25 %. That is the tolerance this 2-vCPU VM allows, not the goal of 3 % for a
    quiet host: back-to-back quick torch calibrations here predicted the cases a median 4.4 and 4.5 % apart, max
    9.9 and 9.0 % (validation/results/20261125T1258-vm-agreement-cal2-cal3.json,
    20261125T2133-vm-agreement-quickB-quickC.json), full ones 1.0 % / 6.2 %. A fit that amplifies noise (an
    update's bandwidth trading against its per-row time, as 352 against 9 GB/s once did) fails it."""
    a = run_calibration(quick=True, backend="numpy", out=tmp_path / "a.yaml", progress=False)
    b = run_calibration(quick=True, backend="numpy", out=tmp_path / "b.yaml", progress=False)
    _agreement(a, b, gemm_factor=1.3, memory_factor=2.0, beta_factor=3.0)
    median, worst = compare(a, b, load_cases()).prediction_median_max
    assert median <= 0.10 and worst <= 0.25, (median, worst)
