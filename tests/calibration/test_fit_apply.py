"""Fitting against closed forms, applying a calibration to a hand-built topology, loading files."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import yaml

from dlrmsim.calibration.apply import apply_calibration, calibrated_compute
from dlrmsim.calibration.benchmarks.interaction import interaction_context_task
from dlrmsim.calibration.benchmarks.tbe import TbeConfig, TbeTiming, fused_update_bytes, tbe_measurements
from dlrmsim.calibration.benchmarks.timing import TimingPolicy
from dlrmsim.calibration.fit import (
    BANDWIDTH_GRID_POINTS,
    INTERACTION_BANDWIDTH_FLOOR,
    NO_BYTE_TERM_GBPS,
    RATE_GRID_POINTS,
    FittedModel,
    dispatch_s,
    fit_alpha_beta,
    fit_embedding,
    fit_gemm,
    fit_interaction,
    fit_interaction_context,
    fit_memory,
    fit_overhead,
    fit_tbe,
    measured_gemm,
    memory_bandwidth_GBps,
    nonnegative_least_squares,
    nonnegative_least_squares_many,
    predict_gemm_s,
    predict_s,
)
from dlrmsim.calibration.host import host_differences, peak_gflops
from dlrmsim.calibration.ops import get_ops
from dlrmsim.calibration.schema import Calibration, EmbeddingFit, InteractionFit, Measurement, OverheadFit, load_calibration
from dlrmsim.engine.costs import fixed_time_s, task_time, traffic_share
from dlrmsim.errors import DlrmsimError
from dlrmsim.topologies.topology import ComputeSpec, EfficiencyTable, Link, Topology
from dlrmsim.training.implementations import ImplementationProfile


@pytest.fixture
def quick_cal(quick_cal: Calibration) -> Calibration:
    """The session's tiny calibration without its core availability: these tests check the fits' own values, which
    apply would scale for a rank on more than one busy core (tests/calibration/test_core_availability.py)."""
    return quick_cal.model_copy(update={"core_availability": []})


def test_alpha_beta_recovers_a_closed_form() -> None:
    alpha, beta = 12e-6, 3.5e9
    sizes = [4 * 4**i * 1024 for i in range(9)]
    a, b = fit_alpha_beta(sizes, [alpha + n / beta for n in sizes])
    assert a == pytest.approx(alpha, rel=1e-6)
    assert b == pytest.approx(beta, rel=1e-6)


def test_alpha_averages_every_latency_regime_size() -> None:
    # Because every size below the bandwidth regime (1 KiB..256 KiB here) carries the same alpha, +-40 % wake-up
    # noise on them (the 2-vCPU VM's spread) cancels in their mean, where the median of the three smallest would
    # land on one noisy value (alpha x 1.4 here).
    alpha, beta = 1e-3, 3.5e9
    sizes = [4**i * 1024 for i in range(11)]
    noise = [1.4, 0.6, 1.4, 0.6, 1.0] + [1.0] * 6
    a, b = fit_alpha_beta(sizes, [alpha * k + n / beta for n, k in zip(sizes, noise, strict=True)])
    assert b == pytest.approx(beta, rel=1e-6)
    assert a == pytest.approx(alpha, rel=1e-6)


def test_alpha_never_negative() -> None:
    a, b = fit_alpha_beta([1e6, 4e6, 16e6], [0.9e-3, 4e-3, 16e-3])
    assert a >= 0 and b > 0


def _m(bench: str, cores: int, time_s: float, **kw: object) -> Measurement:
    return Measurement(
        benchmark=bench, name=f"{bench} {kw} c{cores}", cores=cores, time_s=time_s, repeats=3, params=kw.pop("params", {}), **kw
    )  # type: ignore[arg-type]


def _synthetic_host(cal: Calibration):
    """The calibration's host with a fixed 3 GHz x 32 flop/cycle (96 GFLOP/s a core): the GEMM-fit tests build
    their measurements against this peak, so they do not depend on the clock of the machine running them."""
    return cal.host.model_copy(update={"clock_GHz": 3.0, "flops_per_cycle_fp32": 32.0, "peak_fp32_GFLOPs": 96.0 * cal.host.cores})


def test_gemm_table_reproduces_its_measurements(quick_cal: Calibration) -> None:
    host = _synthetic_host(quick_cal)
    ms = [
        _m("gemm", 1, 2.0 * n**3 / (peak * 1e9), flops=2.0 * n**3, params={"m": n, "n": n, "k": n})
        for n, peak in ((64, 10.0), (512, 50.0), (2048, 80.0))
    ]
    fit = fit_gemm(ms, host)
    peak1 = host.clock_GHz * host.flops_per_cycle_fp32
    assert [e for _, e in fit.tables[0].points] == pytest.approx([10 / peak1, 50 / peak1, 80 / peak1], rel=1e-3)
    for m in ms:
        assert predict_gemm_s(fit, m.flops, 1) == pytest.approx(m.time_s, rel=1e-3)
    # Skinny (matrix-vector) shapes stay out of the table.
    skinny = _m("linear", 1, 1.0, flops=2.0 * 256 * 4096, params={"batch": 256, "fan_in": 4096, "fan_out": 1, "pass": "fwd"})
    assert fit_gemm([*ms, skinny], host).tables == fit.tables


def _cubes_at_half_peak(peak: float) -> list[Measurement]:
    """Cubic GEMMs on 1 core, each at 50 % of ``peak`` (flop/s)."""
    return [
        _m("gemm", 1, 2.0 * n**3 / (0.5 * peak), flops=2.0 * n**3, params={"m": n, "n": n, "k": n}) for n in (64, 256, 1024, 2048)
    ]


def test_gemm_fit_recovers_aspect_factor(quick_cal: Calibration) -> None:
    """Synthetic host: cubes at 50 % of peak and a narrow layer at half that: the aspect factor is 0.5 at the
    layer's aspect and 1 for cubes, and both are predicted exactly."""
    from dlrmsim.calibration.fit import measured_aspect

    host = _synthetic_host(quick_cal)
    peak = peak_gflops(host, 1) * 1e9
    cubes = _cubes_at_half_peak(peak)
    flops = 2.0 * 2048 * 512 * 32
    narrow = _m(
        "linear", 1, flops / (0.25 * peak), flops=flops, params={"batch": 2048, "fan_in": 512, "fan_out": 32, "pass": "fwd"}
    )
    fit = fit_gemm([*cubes, narrow], host)
    aspect = EfficiencyTable(tuple(fit.table(1).aspect_points))
    assert aspect(measured_aspect(narrow)) == pytest.approx(0.5, rel=1e-3)
    assert aspect(1.0) == 1.0
    model = FittedModel(fit, quick_cal.memory)
    for m in [*cubes, narrow]:
        assert predict_s(m, model) == pytest.approx(m.time_s, rel=1e-3)


@pytest.mark.parametrize(("call_us", "overlap"), [(40.0, 0.3), (0.0, 0.0), (15.0, 1.0)])
def test_gemm_fit_recovers_cold_call_and_overlap_in_step_order(quick_cal: Calibration, call_us: float, overlap: float) -> None:
    """Layers timed in training-step order at dispatch + cold call + max(arithmetic, traffic) + (1 - overlap) x the
    shorter, over batches whose traffic times differ: the fit gives back the call time and the overlap, and the
    simulator's task time (dispatch and the kind's fixed time included) matches each row."""
    from dlrmsim.calibration.apply import calibrated_compute
    from dlrmsim.calibration.fit import dispatch_s, gemm_parts_s
    from dlrmsim.engine.costs import fixed_time_s, gemm_time_s, task_time
    from dlrmsim.workloads.model import Layer, Pass, layer_gemm

    host, memory, overhead = _synthetic_host(quick_cal), quick_cal.memory, quick_cal.overhead
    peak = peak_gflops(host, 1) * 1e9
    cubes = _cubes_at_half_peak(peak)
    warm_fit = fit_gemm(cubes, host)
    step = []
    for batch in (256, 1024, 4096, 16384):
        params = {"batch": batch, "fan_in": 1024, "fan_out": 1024, "pass": "fwd", "context": "step"}
        row = _m("linear", 1, 1.0, flops=2.0 * batch * 1024 * 1024, params=params)
        t_f, t_b = gemm_parts_s(warm_fit, memory, row)
        t = dispatch_s(overhead, 1, 1.0) + call_us * 1e-6 + gemm_time_s(t_f, t_b, overlap)
        step.append(row.model_copy(update={"time_s": t}))
    fit = fit_gemm([*cubes, *step], host, memory, overhead)
    table = fit.table(1)
    assert table.cold_call_us == pytest.approx(call_us, abs=0.05)
    assert table.memory_overlap == pytest.approx(overlap, abs=2e-3)
    spec = calibrated_compute(
        ComputeSpec(
            name="cpu", cores=1, clock_hz=1e9, peak_flops={"fp32": 1e12}, memory_bandwidth_Bps=1e11, memory_capacity_B=64e9
        ),
        quick_cal.model_copy(update={"gemm": fit, "host": host}),
    )
    for m in step:
        g = layer_gemm(Layer("l", 1024, 1024, "top", 0), int(m.params["batch"]), Pass.FORWARD)
        simulated = fixed_time_s(spec, "gemm", 1.0, 0.0) + task_time(m.flops, g.bytes_moved(4.0), spec, kind="gemm")
        assert predict_s(m, FittedModel(fit, memory, overhead=overhead)) == pytest.approx(m.time_s, rel=1e-3)
        assert simulated == pytest.approx(m.time_s, rel=1e-3)
    # Without step-order rows (or without the memory fit) the roofline holds: overlap 1, no cold call.
    assert fit_gemm(cubes, host, memory).table(1).memory_overlap == 1.0
    assert fit_gemm([*cubes, *step], host).table(1).cold_call_us == 0.0


def test_gemm_rows_are_predicted_with_the_simulators_roofline(quick_cal: Calibration) -> None:
    """A matrix-vector layer costs its compulsory bytes at the cores' memory bandwidth (the flops-keyed table
    would make it several times faster); a square GEMM costs its flops. Both as the simulator's task_time."""
    from dlrmsim.calibration.apply import calibrated_compute
    from dlrmsim.engine.costs import fixed_time_s, task_time
    from dlrmsim.workloads.model import Gemm

    # Step-order values set here, so the check does not depend on what this host's fit found; without an
    # evicted-operand fit, as a calibration made before that benchmark (the simulator then charges the step fit).
    cold = {"cold_call_us": 30.0, "memory_overlap": 0.4, "evicted_call_us": None, "evicted_traffic_factor": None}
    tables = [t.model_copy(update=cold) for t in quick_cal.gemm.tables]
    quick_cal = quick_cal.model_copy(update={"gemm": quick_cal.gemm.model_copy(update={"tables": tables})})
    model = FittedModel(quick_cal.gemm, quick_cal.memory, overhead=quick_cal.overhead)
    matvec = _m("linear", 1, 1.0, flops=2.0 * 256 * 4096, params={"batch": 256, "fan_in": 4096, "fan_out": 1, "pass": "fwd"})
    nbytes = 4.0 * (256 * 4096 + 4096 + 2 * 256)  # read x and w, read and write y
    assert predict_s(matvec, model) == pytest.approx(nbytes / (memory_bandwidth_GBps(quick_cal.memory, 1) * 1e9), rel=1e-9)
    assert predict_s(matvec, model) > 2 * predict_gemm_s(quick_cal.gemm, matvec.flops, 1)
    cores = quick_cal.host.cores
    square = _m("gemm", cores, 1.0, flops=2.0 * 512**3, params={"m": 512, "n": 512, "k": 512})
    assert predict_s(square, model) == pytest.approx(predict_gemm_s(quick_cal.gemm, square.flops, cores), rel=1e-9)
    # In training-step order the operands come from memory: the calibrated overlap combines the two times, and the
    # task pays its first op's dispatch and the cold-call time (costs.fixed_time_s), whatever this fit's values.
    in_step = _m(
        "linear",
        cores,
        1.0,
        flops=2.0 * 2048 * 128 * 512,
        params={"batch": 2048, "fan_in": 128, "fan_out": 512, "pass": "fwd", "context": "step"},
    )
    for m, g in ((matvec, Gemm(256, 1, 4096)), (square, Gemm(512, 512, 512)), (in_step, Gemm(2048, 512, 128))):
        spec = calibrated_compute(
            ComputeSpec(
                name="cpu",
                cores=m.cores,
                clock_hz=1e9,
                peak_flops={"fp32": 1e12},
                memory_bandwidth_Bps=1e11,
                memory_capacity_B=64e9,
            ),
            quick_cal,
        )
        fixed = fixed_time_s(spec, "gemm", 1.0, 0.0)
        if m is not in_step:  # a warm loop finds its operands in cache: the roofline, nothing cold
            spec, fixed = dataclasses.replace(spec, gemm_memory_overlap=1.0), 0.0
        assert predict_s(m, model) == pytest.approx(fixed + task_time(m.flops, g.bytes_moved(4.0), spec, kind="gemm"), rel=1e-3)


@pytest.mark.parametrize(
    "call_us,factor,compute,sequence",
    [
        (0.0, 0.0, 0.0, 0.0),
        (40.0, 0.0, 0.0, 0.0),
        (0.0, 1.7, 0.0, 0.0),
        (25.0, 0.6, 0.0, 0.0),
        (30.0, 0.0, 0.5, 0.0),
        (20.0, 0.4, 0.3, 0.0),
        (0.0, 0.0, 0.0, 0.8),
        (25.0, 0.6, 0.2, 0.5),
    ],
)
def test_evicted_gemm_fit_recovers_call_and_factor_as_the_simulator_charges_them(
    quick_cal: Calibration, call_us: float, factor: float, compute: float, sequence: float
) -> None:
    """GEMMs timed right after a flush of their own, made up as roofline + dispatch + call + factor x traffic time +
    compute x arithmetic time + sequence x the traffic time of the bytes its cores' L2 holds: the fit recovers the
    four terms (the call and the sequence term apart only with the step-order rows, where the kernel's share is
    below 1), and the simulator charges a GEMM whose inputs are all evicted (share 1) exactly the measured time,
    because its fixed time is the same dispatch plus costs.sequence_time_s plus costs.evicted_operand_time_s."""
    from dlrmsim.calibration.fit import first_op_dispatch_s, fit_gemm, gemm_parts_s, reuse_in_cycle, sequence_part
    from dlrmsim.engine.costs import evicted_operand_time_s, fixed_time_s, sequence_time_s

    host, memory, overhead = quick_cal.host, quick_cal.memory, quick_cal.overhead
    cubes = [m for m in quick_cal.measurements if m.benchmark == "gemm" and m.cores == 1]
    # The warm table the fit below derives from the same 1-core rows. (The calibration's own may differ in its aspect
    # factors: the MLP layers' timings, "linear" rows at the host's cores, are 1-core rows on a one-core host.)
    warm = fit_gemm(cubes, host, memory, overhead)
    rows = []
    for batch, fi, fo, which in ((512, 128, 512, "fwd"), (2048, 512, 32, "bwd_weights"), (1024, 512, 512, "bwd_data")):
        params = {"batch": batch, "fan_in": fi, "fan_out": fo, "pass": which, "context": "evicted"}
        m = _m("linear", 1, 1.0, flops=2.0 * batch * fi * fo, params=params)
        t_f, t_b = gemm_parts_s(warm, memory, m)
        refill = sequence * sequence_part(m, host) * t_b
        t = max(t_f, t_b) + dispatch_s(overhead, 1, 1.0) + call_us * 1e-6 + refill + factor * t_b + compute * t_f
        rows.append(m.model_copy(update={"time_s": t}))
    # The same GEMMs in a step-order cycle flushed once: each pays the call at its kernel's share and the traffic
    # term at its inputs' share, the shares the simulator's cost model gives it in that cycle (cycle.cycle_gemms).
    step = []
    for fi, fo in ((128, 512), (512, 32)):
        for which in ("fwd", "bwd_weights", "bwd_data"):
            params = {"batch": 512, "fan_in": fi, "fan_out": fo, "pass": which, "context": "step", "mlp": "128-512-32"}
            m = _m("linear", 1, 1.0, flops=2.0 * 512 * fi * fo, params=params)
            kernel, inputs, prev = reuse_in_cycle(m, host)
            assert kernel is not None and 0.0 <= kernel <= 1.0 and 0.0 <= inputs <= 1.0
            t_f, t_b = gemm_parts_s(warm, memory, m)
            cold = kernel * call_us * 1e-6 + inputs * (factor * t_b + compute * t_f) + sequence * sequence_part(m, host) * t_b
            t = max(t_f, t_b) + first_op_dispatch_s(overhead, 1, prev, host) + cold
            step.append(m.model_copy(update={"time_s": t}))
    # The chained forward input of the second layer is fresh, so its share is below a flushed GEMM's.
    assert reuse_in_cycle(step[3], host)[1] < 1.0
    # Flushed rows alone cannot tell the sequence term from the eviction's (every share 1): it is not fitted.
    alone = fit_gemm([*cubes, *rows], host, memory, overhead).table(1)
    assert alone.sequence_l2_factor == 0.0 and alone.sequence_call_us == 0.0
    gemm = fit_gemm([*cubes, *rows, *step], host, memory, overhead)
    table = gemm.table(1)
    assert table.evicted_call_us == pytest.approx(call_us, abs=1e-3)
    assert table.evicted_traffic_factor == pytest.approx(factor, abs=1e-3)
    assert table.evicted_compute_factor == pytest.approx(compute, abs=1e-3)
    assert table.sequence_l2_factor == pytest.approx(sequence, abs=1e-3) and table.sequence_call_us == 0.0
    # The calibration's fit-quality table predicts each row with all three terms, as the simulator charges them, so
    # the made-up times come back (it once left the compute term out: evicted rows then read 16 % short).
    model = FittedModel(gemm, memory, overhead=overhead, host=host)
    for m in (*rows, *step):
        assert predict_s(m, model) == pytest.approx(m.time_s, rel=1e-3)
    one_core = quick_cal.model_copy(update={"host": host.model_copy(update={"cores": 1})})
    fitted = one_core.model_copy(update={"gemm": warm.model_copy(update={"tables": [table]})})
    base = ComputeSpec(
        name="cpu", cores=1, clock_hz=1e9, peak_flops={"fp32": 1e12}, memory_bandwidth_Bps=1e11, memory_capacity_B=64e9
    )
    spec = calibrated_compute(base, fitted)
    for m in rows:
        g = measured_gemm(m)
        inputs = ((1.0, math.inf),)  # inputs and kernel state evicted by infinite traffic: share 1
        simulated = (
            fixed_time_s(spec, "gemm", 1.0, 0.0)
            + evicted_operand_time_s(spec, g.bytes_moved(4.0), 1.0, inputs, math.inf, gemm_parts_s(warm, memory, m)[0])
            + sequence_time_s(spec, g.bytes_moved(4.0), 1.0)
            + task_time(m.flops, g.bytes_moved(4.0), spec, kind="gemm")
        )
        assert simulated == pytest.approx(m.time_s, rel=1e-3)


def test_memory_fit_finds_the_knee(quick_cal: Calibration) -> None:
    gb = 1e9
    ms = [
        _m("stream", c, 12 * 2**24 / (bw * gb), bytes=12.0 * 2**24, params={"kind": "triad"})
        for c, bw in ((1, 10.0), (2, 20.0), (4, 30.0), (8, 30.0))
    ]
    fit = fit_memory(ms, quick_cal.host)
    assert fit.per_core_GBps == pytest.approx(10.0, rel=1e-4)
    assert fit.bandwidth_GBps == pytest.approx(30.0, rel=1e-4)
    assert fit.saturation_cores == pytest.approx(3.0, rel=1e-3)
    assert fit.saturated


def test_embedding_fit_exact_for_one_bandwidth(quick_cal: Calibration) -> None:
    ms = [_m("embedding", 2, nb / 5e9, bytes=nb, params={"op": "forward", "distribution": "zipf"}) for nb in (1e6, 3e7, 2e8)]
    (fit,) = fit_embedding(ms, quick_cal.memory)
    assert fit.bandwidth_GBps == pytest.approx(5.0, rel=1e-4)


def test_embedding_fit_never_claims_a_stream_faster_than_the_hosts_l1_ports(quick_cal: Calibration) -> None:
    """Times that are a per-lookup cost plus a sliver growing with bytes: unconstrained least squares reads
    the sliver as a byte term of about 1.5 TB/s on 2 cores (the CI failure of 2026-11-24). Because no stream is
    faster than the cores' L1 ports (host.memory_bound_GBps), the fit must drop that term and explain the time
    by the lookups, recorded as the no-byte-term marker."""
    host = quick_cal.host.model_copy(update={"cores": 2, "memory_bound_GBps": 1000.0})
    cases = [(2e4, 5e6), (8e4, 1e8), (3.2e5, 3e8), (1.28e6, 5e8)]
    ms = [
        _m("embedding", 2, n * 2.8e-9 + nb / 1.5e12, bytes=nb, params={"op": "backward", "distribution": "zipf", "lookups": n})
        for n, nb in cases
    ]
    (free,) = fit_embedding(ms, quick_cal.memory)  # no host facts: nothing bounds the byte term
    assert free.bandwidth_GBps == pytest.approx(1500.0, rel=1e-3)
    (fit,) = fit_embedding(ms, quick_cal.memory, host=host)
    assert fit.bandwidth_GBps == NO_BYTE_TERM_GBPS
    assert fit.row_time_ns > 2.8


def test_overhead_fit_splits_first_op_from_further_ops() -> None:
    ms = [
        _m("dispatch", c, t, params={"elements": n, "position": pos})
        for c, first, rest in ((1, 40e-6, 3e-6), (2, 25e-6, 2e-6))
        for n in (1, 16, 256)
        for pos, t in (("first", first), ("rest", rest))
    ]
    fit = fit_overhead(ms)
    assert fit is not None
    assert fit.task_overhead_s(1) == pytest.approx(40e-6) and fit.op_overhead_s(1) == pytest.approx(3e-6)
    assert fit.task_overhead_s(2) == pytest.approx(25e-6) and fit.op_overhead_s(2) == pytest.approx(2e-6)
    # A file from before the split: every op costs the first op's time.
    old = OverheadFit(task_overhead_us_by_cores=[(2, 25.0)])
    assert old.op_overhead_s(2) == pytest.approx(25e-6)


def test_overhead_fit_takes_a_scalar_operand_and_a_reduction_beyond_a_multiply() -> None:
    ms = [
        _m("dispatch", c, t, params={"elements": n, "position": pos})
        for c in (1, 2)
        for n in (1, 16, 256)
        for pos, t in (("first", 40e-6), ("rest", 3e-6 + 1e-9 * n))
    ]
    classes = [
        _m("dispatch", c, 3e-6 + 1e-9 * n + extra, params={"elements": n, "position": "rest", "op": op})
        for c, scalar, reduce in ((1, 5e-6, 7e-6), (2, 4e-6, 0.0))
        for n in (1, 16, 256)
        for op, extra in (("scalar", scalar), ("reduce", reduce - 1e-6 if reduce == 0.0 else reduce))
    ]
    fit = fit_overhead(ms + classes)
    assert fit is not None
    # because each class's further op is compared with the multiply at the same element count, the size's own cost
    # cancels and the difference is the class's; one that ran faster than the multiply costs nothing extra
    assert fit.scalar_op_extra_s(1) == pytest.approx(5e-6) and fit.reduce_op_extra_s(1) == pytest.approx(7e-6)
    assert fit.scalar_op_extra_s(2) == pytest.approx(4e-6) and fit.reduce_op_extra_s(2) == 0.0
    # because the classes' rows are further ops of another kind, they leave the multiplies' fit as it was
    alone = fit_overhead(ms)
    assert alone is not None and fit.op_overhead_s(1) == alone.op_overhead_s(1)
    assert fit.task_overhead_s(2) == alone.task_overhead_s(2)
    # a calibration without the classes' rows charges none
    assert alone.scalar_op_extra_s(1) == 0.0 and alone.reduce_op_extra_s(2) == 0.0


def test_embedding_fit_takes_the_cold_start_off_and_predicts_it_back(quick_cal: Calibration) -> None:
    """Times made of the first-op cost, a fixed time per op, a time per lookup, a time per L2-missing page
    walk, a time per row reloaded into the last-level cache and a bandwidth come back as the same five fitted
    terms (the cold start is not mistaken for the fixed term) and are predicted back."""
    from dlrmsim.engine.costs import cache_miss_share, page_walk_miss_share

    host = quick_cal.host.model_copy(update={"page_bytes": 4096, "l2_bytes": 1 << 20, "llc_bytes": 32 << 20})
    start, fixed, row, walk, reload, bw = 30e-6, 100e-6, 20e-9, 60e-9, 90e-9, 8e9
    overhead = OverheadFit(task_overhead_us_by_cores=[(2, start * 1e6)], op_overhead_us_by_cores=[(2, 1.0)])
    ms = []
    for lk, unique, nb, rows, tables in (
        (1024, 1000, 5e5, 2**18, 2),
        (8192, 8000, 3e6, 2**18, 2),
        (65536, 58000, 2.4e7, 2**18, 2),
        (8192, 8100, 1.3e7, 2**21, 2),
        (65536, 64000, 9e7, 2**21, 2),
        (65536, 64000, 2.4e7, 2**21, 4),
        (16384, 15000, 1e7, 2**18, 4),
    ):
        walk_share = page_walk_miss_share(tables * rows * 32 * 4.0, 4096, 1 << 20)
        reload_share = cache_miss_share(tables * (unique + lk) * 32 * 4.0, 32 << 20)
        ms.append(
            _m(
                "embedding",
                2,
                start + fixed + lk * (row + walk_share * walk + reload_share * reload) + nb / bw,
                bytes=nb,
                params={
                    "op": "update",
                    "distribution": "uniform",
                    "lookups": lk,
                    "unique_rows": unique,
                    "rows": rows,
                    "dim": 32,
                    "tables": tables,
                },
            )
        )
    (fit,) = fit_embedding(ms, quick_cal.memory, overhead, host)
    assert fit.fixed_us == pytest.approx(fixed * 1e6, rel=1e-3)
    assert fit.row_time_ns == pytest.approx(row * 1e9, rel=1e-3)
    assert fit.walk_time_ns == pytest.approx(walk * 1e9, rel=1e-3)
    assert fit.reload_time_ns == pytest.approx(reload * 1e9, rel=1e-3)
    assert fit.bandwidth_GBps == pytest.approx(bw / 1e9, rel=1e-3)
    for m in ms:
        pred = predict_s(m, FittedModel(quick_cal.gemm, quick_cal.memory, [fit], overhead=overhead, host=host))
        assert pred == pytest.approx(m.time_s, rel=1e-3)
    # The backward never reads the table, and only the update re-reads what the forward read: no walk or
    # reload term for the backward, whatever its tables.
    bwd = [m.model_copy(update={"params": {**m.params, "op": "backward"}, "time_s": start + fixed + m.bytes / bw}) for m in ms]
    (bfit,) = fit_embedding(bwd, quick_cal.memory, overhead, host)
    assert bfit.walk_time_ns == 0 and bfit.reload_time_ns == 0 and bfit.fixed_us == pytest.approx(fixed * 1e6, rel=1e-3)


def test_embedding_fit_separates_the_first_call_of_a_run(quick_cal: Calibration) -> None:
    """The per-call terms come from the later calls of a run only; the first call's extra time over the later
    calls of the same configuration is the median over configurations, charged back to first-call rows."""
    fixed, bw = 50e-6, 10e9
    ms = []
    for nb, extra in ((1e6, 180e-6), (4e6, 200e-6), (1.6e7, 260e-6)):
        params = {"op": "forward", "distribution": "uniform", "lookups": 0}
        ms.append(_m("embedding", 2, fixed + nb / bw, bytes=nb, params={**params, "position": "rest"}))
        ms.append(_m("embedding", 2, fixed + nb / bw + extra, bytes=nb, params={**params, "position": "first"}))
    (fit,) = fit_embedding(ms, quick_cal.memory)
    assert fit.fixed_us == pytest.approx(fixed * 1e6, rel=1e-3) and fit.bandwidth_GBps == pytest.approx(bw / 1e9, rel=1e-3)
    assert fit.run_start_us == pytest.approx(200.0, rel=1e-3)
    model = FittedModel(quick_cal.gemm, quick_cal.memory, [fit])
    assert [predict_s(m, model) for m in ms] == pytest.approx(
        [fixed + m.bytes / bw + (200e-6 if m.params["position"] == "first" else 0.0) for m in ms], rel=1e-3
    )
    # Rows from before the split time every call of a cycle together: no run start is made up for them.
    old = [m.model_copy(update={"params": {k: v for k, v in m.params.items() if k != "position"}}) for m in ms[::2]]
    (old_fit,) = fit_embedding(old, quick_cal.memory)
    assert old_fit.run_start_us == 0.0


def test_nonnegative_least_squares_meets_the_optimality_conditions_for_each_right_hand_side() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(9, 3))
    ys = rng.normal(size=(9, 40))
    cs = nonnegative_least_squares_many(x, ys)
    for j in range(ys.shape[1]):
        c = cs[:, j]
        grad = x.T @ (x @ c - ys[:, j])
        # because c minimises |x c - y|^2 over c >= 0 exactly when (Karush-Kuhn-Tucker) c >= 0, the gradient is zero
        # on the columns in the fit and non-negative on those held at zero (moving them up cannot help)
        assert (c >= 0).all()
        assert np.allclose(grad[c > 0], 0.0, atol=1e-9)
        assert (grad[c == 0] >= -1e-9).all()
        # and each right-hand side is solved on its own: the one-target call gives the same coefficients (to
        # rounding: LAPACK orders a many-column solve's arithmetic differently)
        assert np.allclose(nonnegative_least_squares(x, ys[:, j]), c, rtol=1e-12, atol=1e-15)
    # because a floor excludes a subset whose solution puts a column in the fit below it
    floors = np.array([0.0, 10.0, 0.0])
    floored = nonnegative_least_squares_many(x, ys, floors)
    assert ((floored[1] == 0) | (floored[1] >= 10.0)).all()


def test_interaction_fit_recovers_its_own_model(quick_cal: Calibration) -> None:
    """Times made by the simulator's interaction formula come back as the same three parameters (the rate
    is one of the fit's grid points, so the recovery is exact) and are predicted back."""
    cores = 2
    overhead = OverheadFit(task_overhead_us_by_cores=[(cores, 20.0)], op_overhead_us_by_cores=[(cores, 2.0)])
    peak = peak_gflops(quick_cal.host, cores) * 1e9
    rate = peak * 10 ** (-3 + 3 * 40 / (RATE_GRID_POINTS - 1))  # a grid point, far below the peak
    fixed, sample = 150e-6, 200e-9
    bw = memory_bandwidth_GBps(quick_cal.memory, cores) * 1e9
    ms = []
    for n, s, e in ((256, 4, 32), (2048, 4, 32), (256, 26, 64), (2048, 26, 64), (1024, 16, 128)):
        flops, nbytes, ops = 2.0 * (s + 1) ** 2 * e * n, 4.0 * n * (s + 1) * e * 3, 5.0
        t = 20e-6 + 4 * 2e-6 + fixed + n * sample + max(flops / rate, nbytes / bw)
        ms.append(
            _m(
                "interaction",
                cores,
                t,
                flops=flops,
                bytes=nbytes,
                params={"direction": "forward", "batch": n, "tables": s, "dim": e, "ops": ops},
            )
        )
    (fit,) = fit_interaction(ms, quick_cal.memory, quick_cal.host, overhead)
    assert fit.GFLOPs == pytest.approx(rate / 1e9, rel=1e-4)
    assert fit.fixed_us == pytest.approx(fixed * 1e6, rel=1e-3)
    assert fit.sample_time_ns == pytest.approx(sample * 1e9, rel=1e-3)
    for m in ms:
        pred = predict_s(m, FittedModel(quick_cal.gemm, quick_cal.memory, overhead=overhead, interaction=[fit]))
        assert pred == pytest.approx(m.time_s, rel=1e-3)


def test_interaction_fit_recovers_a_byte_rate_below_stream_bandwidth(quick_cal: Calibration) -> None:
    """An interaction whose bytes move at a fifth of stream bandwidth (small, strided tensors): because the shapes
    are byte-bound, only that rate explains their times, and the fit finds it (a grid point) with the other terms."""
    cores = 2
    overhead = OverheadFit(task_overhead_us_by_cores=[(cores, 20.0)], op_overhead_us_by_cores=[(cores, 2.0)])
    peak = peak_gflops(quick_cal.host, cores) * 1e9
    rate = peak * 10 ** (-3 + 3 * 120 / (RATE_GRID_POINTS - 1))
    stream = memory_bandwidth_GBps(quick_cal.memory, cores) * 1e9
    k = 19  # a grid point of the byte rates
    bw = stream * INTERACTION_BANDWIDTH_FLOOR ** (1 - k / (BANDWIDTH_GRID_POINTS - 1))
    assert 0.1 * stream < bw < 0.5 * stream
    fixed, sample = 150e-6, 200e-9
    ms = []
    for n, s, e in ((256, 4, 32), (2048, 4, 32), (256, 26, 64), (2048, 26, 64), (1024, 16, 128), (4096, 4, 128)):
        flops, nbytes = 2.0 * (s + 1) ** 2 * e * n, 4.0 * n * (s + 1) * e * 3
        t = 20e-6 + 4 * 2e-6 + fixed + n * sample + max(flops / rate, nbytes / bw)
        params = {"direction": "backward", "batch": n, "tables": s, "dim": e, "ops": 5.0}
        ms.append(_m("interaction_torchrec", cores, t, flops=flops, bytes=nbytes, params=params))
    (fit,) = fit_interaction(ms, quick_cal.memory, quick_cal.host, overhead, benchmark="interaction_torchrec")
    assert fit.bandwidth_GBps == pytest.approx(bw / 1e9, rel=1e-3)
    assert fit.fixed_us == pytest.approx(fixed * 1e6, rel=1e-3) and fit.sample_time_ns == pytest.approx(200.0, rel=1e-3)
    # the framework's rows are another benchmark: none here
    assert fit_interaction(ms, quick_cal.memory, quick_cal.host, overhead) == []
    model = FittedModel(quick_cal.gemm, quick_cal.memory, overhead=overhead, interaction_torchrec=[fit])
    assert all(predict_s(m, model) == pytest.approx(m.time_s, rel=1e-3) for m in ms)


def test_torchrec_interaction_kernel_takes_its_own_fits_and_byte_rate(quick_cal: Calibration) -> None:
    """TorchRec's interaction (autograd's backward) is calibrated apart from the runner's: a profile whose
    interaction_kernel is torchrec gets those fits, and their byte rate as a share of the fit cores' stream
    bandwidth; without them (no TorchRec at calibration time) the runner's fits apply."""
    runner = [
        InteractionFit(direction=d, cores=1, fixed_us=100.0, sample_time_ns=300.0, GFLOPs=20.0) for d in ("forward", "backward")
    ]
    trec = [
        InteractionFit(direction=d, cores=1, fixed_us=200.0, sample_time_ns=600.0, GFLOPs=10.0, bandwidth_GBps=5.0)
        for d in ("forward", "backward")
    ]
    cal = quick_cal.model_copy(update={"interaction": runner, "interaction_torchrec": trec})
    profile = ImplementationProfile(name="trec", interaction_kernel="torchrec")
    spec = apply_calibration(_tiny_host_topology(), cal, implementation=profile).compute(0)
    assert spec.row_time_s_by_kind["interaction_bwd"] == pytest.approx(600e-9)
    assert spec.bandwidth_fraction_by_kind["interaction"] == pytest.approx(5.0 / memory_bandwidth_GBps(cal.memory, 1))
    plain = apply_calibration(_tiny_host_topology(), cal).compute(0)
    assert plain.row_time_s_by_kind["interaction_bwd"] == pytest.approx(300e-9)
    assert "interaction" not in plain.bandwidth_fraction_by_kind  # no byte rate fitted: stream bandwidth
    no_trec = cal.model_copy(update={"interaction_torchrec": []})
    fallback = apply_calibration(_tiny_host_topology(), no_trec, implementation=profile)
    assert fallback.compute(0).row_time_s_by_kind["interaction_bwd"] == pytest.approx(300e-9)


def test_apply_gives_interaction_kinds_their_fitted_costs(quick_cal: Calibration) -> None:
    fits = [
        InteractionFit(direction="forward", cores=1, fixed_us=100.0, sample_time_ns=300.0, GFLOPs=20.0),
        InteractionFit(direction="backward", cores=1, fixed_us=50.0, sample_time_ns=150.0, GFLOPs=40.0),
    ]
    spec = apply_calibration(_tiny_host_topology(), quick_cal.model_copy(update={"interaction": fits})).compute(0)
    assert spec.flop_rate_by_kind == {"interaction": 20e9, "interaction_bwd": 40e9}
    assert spec.fixed_time_s_by_kind["interaction"] == pytest.approx(100e-6)
    assert spec.fixed_time_s_by_kind["interaction_bwd"] == pytest.approx(50e-6)
    assert spec.row_time_s_by_kind["interaction"] == pytest.approx(300e-9)
    assert spec.row_time_s_by_kind["interaction_bwd"] == pytest.approx(150e-9)
    # Without the benchmark (an older file) the interaction keeps the GEMM table.
    old = apply_calibration(_tiny_host_topology(), quick_cal.model_copy(update={"interaction": []})).compute(0)
    assert old.flop_rate_by_kind == {} and "interaction" not in old.row_time_s_by_kind


def test_apply_gives_embedding_kinds_their_fixed_and_row_times(quick_cal: Calibration) -> None:
    fits = [
        EmbeddingFit(
            op=op,
            distribution="uniform",
            cores=1,
            bandwidth_GBps=5.0,
            stream_fraction=0.5,
            row_time_ns=row,
            fixed_us=fixed,
            walk_time_ns=walk,
        )
        for op, row, fixed, walk in (("forward", 2.0, 120.0, 25.0), ("backward", 0.0, 150.0, 0.0), ("update", 60.0, 0.0, 70.0))
    ]
    fits[2] = fits[2].model_copy(update={"reload_time_ns": 90.0})
    fits[0] = fits[0].model_copy(update={"run_start_us": 250.0})
    spec = apply_calibration(_tiny_host_topology(), quick_cal.model_copy(update={"embedding": fits})).compute(0)
    assert spec.run_start_s_by_kind == pytest.approx({"embedding": 250e-6})
    assert spec.walk_time_s_by_kind == pytest.approx({"embedding": 25e-9, "update": 70e-9})
    assert spec.reload_time_s_by_kind == pytest.approx({"update": 90e-9})
    assert (spec.page_bytes, spec.l2_bytes) == (quick_cal.host.page_bytes, quick_cal.host.l2_bytes)
    # the tiny host runs two ranks: each has half the cache they share
    assert spec.llc_bytes == pytest.approx(quick_cal.host.llc_bytes / 2)
    assert spec.fixed_time_s_by_kind["embedding"] == pytest.approx(120e-6)
    assert spec.fixed_time_s_by_kind["embedding_bwd"] == pytest.approx(150e-6)
    assert "update" not in spec.fixed_time_s_by_kind  # a zero term is left out, not stored as 0
    assert spec.row_time_s_by_kind["embedding"] == pytest.approx(2e-9)
    assert spec.row_time_s_by_kind["update"] == pytest.approx(60e-9)
    assert "embedding_bwd" not in spec.row_time_s_by_kind
    # A zipf workload gets the zipf fit where one was measured (the forward here), the uniform one elsewhere.
    zipf = [EmbeddingFit(op="forward", distribution="zipf", cores=1, bandwidth_GBps=20.0, stream_fraction=0.9, fixed_us=80.0)]
    cal = quick_cal.model_copy(update={"embedding": fits + zipf})
    skewed = apply_calibration(_tiny_host_topology(), cal, "zipf").compute(0)
    assert skewed.fixed_time_s_by_kind["embedding"] == pytest.approx(80e-6) and "embedding" not in skewed.row_time_s_by_kind
    assert skewed.bandwidth_fraction_by_kind["embedding"] == pytest.approx(20.0 / memory_bandwidth_GBps(quick_cal.memory, 1))
    assert skewed.fixed_time_s_by_kind["embedding_bwd"] == pytest.approx(150e-6)
    assert apply_calibration(_tiny_host_topology(), cal).compute(0).fixed_time_s_by_kind["embedding"] == pytest.approx(120e-6)


@pytest.mark.parametrize("cores", [1, 2])
def test_an_embedding_task_on_the_fits_cores_moves_its_bytes_at_the_fitted_bandwidth(quick_cal: Calibration, cores: int) -> None:
    """A lookup measured at 1 core ran at its fitted bandwidth with only that core's share of the socket's
    stream bandwidth; the simulator, which caps a 1-core task at that share, must give it the same rate, not
    the share of the share (apply once divided by the saturated bandwidth and charged the 1-core share twice)."""
    memory = quick_cal.memory.model_copy(update={"bandwidth_GBps": 40.0, "saturation_cores": 1.6})
    fits = [EmbeddingFit(op="forward", distribution="uniform", cores=cores, bandwidth_GBps=8.0, stream_fraction=0.2)]
    topo = _tiny_host_topology()
    cal = quick_cal.model_copy(update={"embedding": fits, "memory": memory})
    spec = dataclasses.replace(apply_calibration(topo, cal).compute(0), cores=cores)
    nbytes = 4e6
    t = task_time(0.0, nbytes, spec, cores=cores, kind="embedding")
    assert t == pytest.approx(nbytes / 8e9, rel=1e-9)  # 0.5 ms, whatever the core count's share of 40 GB/s


def test_gemm_fit_refuses_a_measurement_above_the_peak_and_the_bound_raises_it(quick_cal: Calibration) -> None:
    """Because a kernel cannot beat cores x clock x flops/cycle, a GEMM measured above it means the peak is wrong:
    the fit refuses to clip it, and peak_bound_host raises the clock (with a warning) until the fastest GEMM sits at
    efficiency 1, after which the fit's table holds every point at or below 1 and predicts the measurements."""
    from dlrmsim.calibration.fit import peak_bound_host

    host = _synthetic_host(quick_cal)  # 96 GFLOP/s a core
    ms = [
        _m("gemm", 1, 2.0 * n**3 / (rate * 1e9), flops=2.0 * n**3, params={"m": n, "n": n, "k": n})
        for n, rate in ((256, 60.0), (1024, 110.0))
    ]
    with pytest.raises(ValueError, match="above the host's peak"):
        fit_gemm(ms, host)
    bounded = peak_bound_host(ms, host)
    assert bounded.clock_GHz == pytest.approx(110.0 / 32.0) and bounded.clock_source.startswith("measured")
    assert peak_bound_host(ms, bounded) == bounded  # already bounding: unchanged
    fit = fit_gemm(ms, bounded)
    assert [e for _, e in fit.tables[0].points] == pytest.approx([60 / 110, 1.0], rel=1e-3)
    assert all(predict_gemm_s(fit, m.flops, 1) == pytest.approx(m.time_s, rel=1e-3) for m in ms)


def _tiny_host_topology() -> Topology:
    g = nx.Graph()
    spec = ComputeSpec(
        name="host-half",
        cores=1,
        clock_hz=1e9,
        peak_flops={"fp32": 1e9, "bf16": 2e9},
        memory_bandwidth_Bps=1e9,
        memory_capacity_B=8e9,
        kind="host",
    )
    g.add_node("r0", compute=spec)
    g.add_node("r1", compute=spec)
    g.add_edge("r0", "r1", link=Link("r0", "r1", "shm", bandwidth_Bps=1e9, latency_s=1e-6))
    g.add_node("nic")
    g.add_edge("r1", "nic", link=Link("r1", "nic", "ethernet", bandwidth_Bps=1.25e9, latency_s=5e-6))
    return Topology("tiny-host", g, ["r0", "r1"])


def test_apply_calibration_uses_fitted_rates_consistently(quick_cal: Calibration) -> None:
    topo = _tiny_host_topology()
    cal_topo = apply_calibration(topo, quick_cal)
    host = quick_cal.host
    spec = cal_topo.compute(0)
    assert spec.peak_flops["fp32"] == pytest.approx(host.clock_GHz * 1e9 * host.flops_per_cycle_fp32)
    assert spec.peak_flops["bf16"] == 2e9  # other precisions untouched
    table = quick_cal.gemm.table(1)
    for flops, eff in table.points:  # achieved = peak x gemm_efficiency(flops), at the table's own points
        assert spec.peak_flops["fp32"] * spec.gemm_efficiency(flops) == pytest.approx(table.peak_GFLOPs * 1e9 * eff, rel=1e-3)
    assert spec.memory_bandwidth_Bps == pytest.approx(quick_cal.memory.bandwidth_GBps * 1e9)
    assert spec.saturation_cores == pytest.approx(quick_cal.memory.saturation_cores)
    assert spec.memory_efficiency(1e6) == 1.0
    link = cal_topo.link("r0", "r1")
    a2a = quick_cal.collective("alltoall")
    assert link.bandwidth_Bps == pytest.approx(a2a.bus_bandwidth_GBps * 1e9)
    assert link.overhead_s == pytest.approx(a2a.alpha_us * 1e-6)
    assert cal_topo.link("r1", "nic") == topo.link("r1", "nic")  # non-shm links kept
    # The input is untouched and the copy still routes.
    assert topo.compute(0).peak_flops["fp32"] == 1e9 and topo.link("r0", "r1").bandwidth_Bps == 1e9
    assert cal_topo.route(0, 1) == ["r0", "r1"] and cal_topo.num_ranks == 2
    assert all(lk.kind != "shm" or lk.bandwidth_Bps != 1e9 for lk in cal_topo.links)


@pytest.mark.parametrize(("ranks", "threads"), [(1, 1), (1, 2), (2, 1)])
def test_a_rank_shares_the_last_level_cache_only_with_the_other_ranks(quick_cal: Calibration, ranks: int, threads: int) -> None:
    from dlrmsim.training.simulate import TrainingConfig, load_training_topology

    # Because the cache is shared by the processes that run, not by cores: a lone rank on one thread of a 2-core
    # host has all of it (the idle core evicts nothing, and the calibration's benchmarks ran that way), two ranks
    # half each.
    topo = load_training_topology(TrainingConfig(topology="host", ranks=ranks, threads_per_rank=threads))
    two_core = quick_cal.model_copy(update={"host": quick_cal.host.model_copy(update={"cores": 2})})  # whatever this one has
    spec = apply_calibration(topo, two_core).compute(0)
    assert spec.cores == threads
    assert spec.llc_bytes == pytest.approx(quick_cal.host.llc_bytes / ranks)


def test_apply_works_with_the_host_topology_builder_when_present(quick_cal: Calibration) -> None:
    topologies = pytest.importorskip("dlrmsim.topologies")
    load = getattr(topologies, "load_topology", None)
    if load is None:
        pytest.skip("the host topology builder (dlrmsim.topologies.load_topology) is not written yet")
    from dlrmsim.training.simulate import TrainingConfig, load_training_topology

    assert load("host").num_ranks == 1
    # two one-thread ranks, as on any machine (without threads per rank, a one-core machine refuses two)
    topo = apply_calibration(load_training_topology(TrainingConfig(topology="host", ranks=2, threads_per_rank=1)), quick_cal)
    assert topo.compute(0).peak_flops["fp32"] > 0
    assert any(
        lk.kind == "shm" and lk.bandwidth_Bps == pytest.approx(quick_cal.collective("alltoall").bus_bandwidth_GBps * 1e9)
        for lk in topo.links
    )


def test_bad_calibration_file_is_one_line_error(quick_cal_path: Path, tmp_path: Path) -> None:
    data = yaml.safe_load(quick_cal_path.read_text())
    data["memory"]["bandwidth_GBps"] = -3
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(DlrmsimError) as err:
        load_calibration(bad)
    assert "memory.bandwidth_GBps" in str(err.value) and "\n" not in str(err.value)
    data = yaml.safe_load(quick_cal_path.read_text())
    data["gemm"]["peak_efficency"] = 0.5
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(DlrmsimError, match="did you mean 'peak_efficiency'"):
        load_calibration(bad)
    with pytest.raises(DlrmsimError, match="cannot read file"):
        load_calibration(tmp_path / "missing.yaml")


def test_other_host_warns_naming_differences(quick_cal_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    load_calibration(quick_cal_path)
    assert "another host" not in capsys.readouterr().err
    data = yaml.safe_load(quick_cal_path.read_text())
    data["host"]["cpu_model"] = "Intel(R) Xeon(R) Platinum 8180"
    data["host"]["cores"] = 28
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump(data))
    cal = load_calibration(other)
    err = capsys.readouterr().err
    assert "another host" in err and "cpu_model" in err and "cores 28" in " ".join(err.split())
    assert cal.host.cores == 28
    assert host_differences(cal.host, cal.host) == []


def test_efficiency_table_type_matches_simulator() -> None:
    assert EfficiencyTable(((1e6, 0.2), (1e9, 0.6)))(1e7) == pytest.approx(0.2 + 0.4 / 3)


def test_a_kind_an_implementation_runs_on_one_thread_takes_the_one_core_fit(quick_cal: Calibration) -> None:
    """A 2-core rank whose implementation runs the fused update on one thread (fbgemm's CPU TBE) runs that task on
    one core, so it must take the fit measured on one core: the 2-core fit's per-row time is already the two
    cores' share, and its bandwidth fraction is relative to two cores' stream bandwidth."""
    fits = [
        EmbeddingFit(op=op, distribution="uniform", cores=c, bandwidth_GBps=4.0 * c, stream_fraction=0.3, row_time_ns=60.0 / c)
        for op in ("forward", "update")
        for c in (1, 2)
    ]
    cal = quick_cal.model_copy(update={"embedding": fits, "host": quick_cal.host.model_copy(update={"cores": 2})})
    spec = dataclasses.replace(_tiny_host_topology().compute(0), cores=2)
    plain = calibrated_compute(spec, cal)
    pinned = calibrated_compute(spec, cal, threads_by_kind={"update": 1})
    # Because only the update is pinned, it alone takes the 1-core fit (60 ns a row); the forward keeps the 2-core one.
    assert plain.row_time_s_by_kind["update"] == pytest.approx(30e-9)
    assert pinned.row_time_s_by_kind["update"] == pytest.approx(60e-9)
    assert pinned.row_time_s_by_kind["embedding"] == pytest.approx(30e-9)
    assert pinned.bandwidth_fraction_by_kind["update"] == pytest.approx(4.0 / memory_bandwidth_GBps(cal.memory, 1))
    # A thread count at or above the rank's cores changes nothing.
    assert calibrated_compute(spec, cal, threads_by_kind={"update": 8}) == plain


def test_tbe_kernel_takes_the_tbe_fits_and_the_framework_fits_where_none_was_measured(quick_cal: Calibration) -> None:
    """An implementation running fbgemm's table-batched embedding (TorchRec) costs what that kernel costs alone,
    not what the framework's embedding bags cost: its kinds take the calibration's tbe fits."""
    emb = [
        EmbeddingFit(op=op, distribution="uniform", cores=1, bandwidth_GBps=5.0, stream_fraction=0.5, row_time_ns=100.0)
        for op in ("forward", "backward", "update")
    ]
    tbe = [
        EmbeddingFit(
            op=op, distribution="uniform", cores=1, bandwidth_GBps=9.0, stream_fraction=0.9, row_time_ns=t, sorted_rows=s
        )
        for op, t, s in (("forward", 3.0, False), ("update", 25.0, True))
    ]
    cal = quick_cal.model_copy(update={"embedding": emb, "tbe": tbe})
    tbe_kernel = ImplementationProfile(name="tbe-kernel", embedding_kernel="tbe")
    spec = apply_calibration(_tiny_host_topology(), cal, implementation=tbe_kernel).compute(0)
    assert spec.row_time_s_by_kind["embedding"] == pytest.approx(3e-9)
    assert spec.row_time_s_by_kind["update"] == pytest.approx(25e-9)
    # fbgemm's update fit counted its rows visited in ascending order, so the simulator charges its update that way.
    assert spec.sorted_visit_kinds == ("update",)
    assert apply_calibration(_tiny_host_topology(), cal).compute(0).sorted_visit_kinds == ()
    # fbgemm's fused backward has no separate backward kernel measured: that kind keeps the framework's fit.
    assert spec.row_time_s_by_kind["embedding_bwd"] == pytest.approx(100e-9)
    # Without the profile's kernel, or without tbe fits (a calibration without fbgemm), the framework's fits apply.
    assert apply_calibration(_tiny_host_topology(), cal).compute(0).row_time_s_by_kind["update"] == pytest.approx(100e-9)
    no_tbe = cal.model_copy(update={"tbe": []})
    assert apply_calibration(_tiny_host_topology(), no_tbe, implementation=tbe_kernel).compute(0).row_time_s_by_kind[
        "update"
    ] == pytest.approx(100e-9)


def test_tbe_rows_are_per_table_and_fit_back_to_their_own_model(quick_cal: Calibration) -> None:
    """The TBE benchmark times one call over all its tables; its rows are per table (the simulator has one task a
    table), and the embedding fit recovers a closed form t = fixed + lookups x row + bytes / bandwidth from them."""
    fixed, row, bw = 20e-6, 30e-9, 10e9
    rows = []
    first_forward = 0.0
    for pooling in (4, 16, 64):
        for dim in (32, 128):
            cfg = TbeConfig(rows=2**18, dim=dim, pooling=pooling, batch=2048, tables=4)
            unique = min(cfg.rows, cfg.batch * pooling) // 2
            per_table = {
                op: fixed + cfg.batch * pooling * row + b / bw
                for op, b in (
                    ("forward", cfg.batch * pooling * (dim * 4 + 8) + cfg.batch * dim * 4),
                    ("update", fused_update_bytes(cfg.batch, pooling, dim, unique)),
                )
            }
            t = TbeTiming(cfg, 1, 4 * per_table["forward"], 4 * per_table["update"], 1.0, 1.0, 9)
            rows += tbe_measurements(t, unique, (1.0, 1.0))
            first_forward = first_forward or per_table["forward"]
    # Because the simulator runs one task per table, a row holds the 4-table call's time / 4.
    assert rows[0].params["op"] == "forward" and rows[0].time_s == pytest.approx(first_forward)
    fits = {f.op: f for f in fit_tbe(rows, quick_cal.memory)}
    for op in ("forward", "update"):
        assert fits[op].fixed_us == pytest.approx(20.0, rel=1e-3)
        assert fits[op].row_time_ns == pytest.approx(30.0, rel=1e-3)
        assert fits[op].bandwidth_GBps == pytest.approx(10.0, rel=1e-3)


def test_tbe_reload_term_is_told_apart_by_the_read_between_forward_and_backward(quick_cal: Calibration) -> None:
    """A fused backward whose time grows with the rows pushed out of the last-level cache: fbgemm's update visits its
    rows in ascending order, so it reloads only the rows not adjacent to the previous one (costs.sorted_visits),
    each with probability cache_miss_share(tables' working set + bytes read between forward and backward). The TBE
    rows swept by 0, 1 and 4 caches carry the reload term, and the fit recovers it (with the fixed and per-lookup
    terms), because only it changes with between_bytes at a fixed shape; the fit says it counted sorted visits."""
    from dlrmsim.engine.costs import cache_miss_share, sorted_visits

    host = quick_cal.host.model_copy(update={"llc_bytes": 32 << 20, "memory_bound_GBps": 1e4, "cores": 1})
    fixed, row, reload = 20e-6, 30e-9, 40e-9
    rows = []
    for pooling in (4, 16, 64):
        for between in (0, 32 << 20, 128 << 20):
            cfg = TbeConfig(rows=2**18, dim=32, pooling=pooling, batch=1024, tables=4, between_bytes=between)
            lookups = cfg.batch * pooling
            unique = min(cfg.rows, lookups) // 2
            reuse = 4 * (unique + lookups) * 32 * 4.0 + between
            _, jumps = sorted_visits(unique, cfg.rows, 32 * 4.0, host.page_bytes)
            update = fixed + lookups * row + jumps * reload * cache_miss_share(reuse, host.llc_bytes)
            t = TbeTiming(cfg, 1, 4 * 1e-4, 4 * update, 1.0, 1.0, 9)
            rows += [m for m in tbe_measurements(t, unique, (1.0, 1.0)) if m.params["op"] == "update"]
    assert {m.params["between_bytes"] for m in rows} == {0, 32 << 20, 128 << 20}
    (fit,) = fit_tbe(rows, quick_cal.memory, host=host)
    assert fit.sorted_rows
    assert fit.reload_time_ns == pytest.approx(40.0, rel=1e-3)
    assert fit.row_time_ns == pytest.approx(30.0, rel=1e-3) and fit.fixed_us == pytest.approx(20.0, rel=1e-3)


def _context_rows(host, direction: str, cores: int, e2: float, e3: float, flushed: float) -> list[Measurement]:
    """Context rows (benchmarks.interaction.interaction_context_task) of a call that pays ``e2`` and ``e3`` (s) of the
    flush at the shares the simulator charges (costs.traffic_share in a core's L2 and in the last-level cache)."""
    l2, llc = float(host.l2_bytes), float(host.model_llc_bytes)
    after = float(host.flushed_bytes)
    rows = []
    for ctx, traffic in (("flush", after), ("warm", 0.0), ("l2", 4.0 * l2), ("llc", 0.5 * llc)):
        t = flushed - e2 * (1 - traffic_share(traffic, after, l2)) - e3 * (1 - traffic_share(traffic, after, llc))
        params = {"direction": direction, "context": ctx, "traffic_bytes": traffic, "batch": 1024}
        rows.append(_m("interaction_context", cores, t, params=params))
    return rows


def test_interaction_context_fit_recovers_what_a_warm_call_saves_in_each_cache(quick_cal: Calibration) -> None:
    """Because a call timed right after the flush refetches code and state that the L2 and the last-level cache held,
    and traffic evicts them by its share in each: context rows made by the simulator's own charge come back as the
    two parts, and the interaction fit keeps them beside its flushed fixed time."""
    host = quick_cal.host
    e2, e3 = 120e-6, 210e-6
    rows = _context_rows(host, "forward", 2, e2, e3, flushed=900e-6)
    assert fit_interaction_context(rows, host) == {("forward", 2): (pytest.approx(e2), pytest.approx(e3))}
    # TorchRec's rows are another benchmark's
    assert fit_interaction_context(rows, host, "interaction_torchrec") == {}


def test_interaction_fit_keeps_the_evicted_parts_within_its_fixed_time(quick_cal: Calibration) -> None:
    """Because a warm call cannot save more than the fixed time the flushed fit found: context rows that say more
    are scaled down to it, in their proportion."""
    cores = 2
    overhead = OverheadFit(task_overhead_us_by_cores=[(cores, 20.0)], op_overhead_us_by_cores=[(cores, 2.0)])
    ms = []
    for n, s, e in ((256, 4, 32), (2048, 4, 32), (256, 26, 64), (2048, 26, 64)):
        flops, nbytes = 2.0 * (s + 1) ** 2 * e * n, 4.0 * n * (s + 1) * e * 3
        t = 28e-6 + 150e-6 + n * 200e-9 + flops / 5e9
        params = {"direction": "forward", "batch": n, "tables": s, "dim": e, "ops": 5.0}
        ms.append(_m("interaction", cores, t, flops=flops, bytes=nbytes, params=params))
    (plain,) = fit_interaction(ms, quick_cal.memory, quick_cal.host, overhead)
    assert plain.evicted_l2_us is None and plain.evicted_llc_us is None  # no context rows: charged in full
    rows = _context_rows(quick_cal.host, "forward", cores, 100e-6, 200e-6, flushed=900e-6)
    (fit,) = fit_interaction(ms + rows, quick_cal.memory, quick_cal.host, overhead)
    assert fit.evicted_l2_us + fit.evicted_llc_us == pytest.approx(fit.fixed_us, rel=1e-3)
    assert fit.evicted_llc_us / fit.evicted_l2_us == pytest.approx(2.0, rel=1e-3)


def test_a_step_interaction_pays_what_its_traffic_evicted_of_the_flushed_fixed_time(quick_cal: Calibration) -> None:
    """Because the fit's fixed time was timed after the flush: a calibrated spec charges the warm part always, and
    the evicted parts at the traffic's share in the L2 and the last-level cache; unknown traffic pays the fixed time
    in full, as right after the flush (calibrations without the context benchmark are unchanged)."""
    fits = [
        InteractionFit(
            direction="forward",
            cores=1,
            fixed_us=400.0,
            sample_time_ns=300.0,
            GFLOPs=20.0,
            evicted_l2_us=100.0,
            evicted_llc_us=200.0,
        ),
        InteractionFit(direction="backward", cores=1, fixed_us=50.0, sample_time_ns=150.0, GFLOPs=40.0),
    ]
    spec = apply_calibration(_tiny_host_topology(), quick_cal.model_copy(update={"interaction": fits})).compute(0)
    assert spec.fixed_time_s_by_kind["interaction"] == pytest.approx(100e-6)  # warm: 400 - 100 - 200 us
    assert spec.fixed_time_s_by_kind["interaction_bwd"] == pytest.approx(50e-6)
    assert spec.evicted_fixed_after_bytes == quick_cal.host.flushed_bytes
    warm = fixed_time_s(spec, "interaction", 0.0, 0.0, kernel_traffic=0.0)
    assert warm == pytest.approx(100e-6)
    assert fixed_time_s(spec, "interaction", 0.0, 0.0) == pytest.approx(400e-6)  # traffic unknown
    t = 8 << 20
    share2 = traffic_share(t, spec.evicted_fixed_after_bytes, spec.l2_bytes)
    share3 = traffic_share(t, spec.evicted_fixed_after_bytes, spec.llc_bytes)
    assert fixed_time_s(spec, "interaction", 0.0, 0.0, kernel_traffic=t) == pytest.approx(
        100e-6 + 100e-6 * share2 + 200e-6 * share3
    )
    assert fixed_time_s(spec, "interaction_bwd", 0.0, 0.0, kernel_traffic=0.0) == pytest.approx(50e-6)


def test_the_context_benchmark_times_each_direction_in_each_context_for_the_fit(quick_cal: Calibration) -> None:
    """Because the fit reads the rows by benchmark, direction, context and traffic: the benchmark's own rows (NumPy
    ops, a small flush) carry them, one per direction and context, and the fit finds its key in them."""
    k = get_ops("numpy")
    k.limit_flush(4 << 20)
    try:
        task = interaction_context_task(k, 1, TimingPolicy(warmup=0, repeats=2, min_sample_s=0.0), 1 << 20, 2 << 20)
        rows = task.run()
    finally:
        k.limit_flush(None)
    got = {(m.params["direction"], m.params["context"]): m.params["traffic_bytes"] for m in rows}
    assert got == {
        (d, c): t
        for d in ("forward", "backward")
        for c, t in (("flush", 4 << 20), ("warm", 0), ("l2", 4 << 20), ("llc", 1 << 20))
    }
    assert all(m.benchmark == "interaction_context" and m.time_s > 0 for m in rows)
    host = quick_cal.host.model_copy(update={"l2_bytes": 1 << 20})
    assert set(fit_interaction_context(rows, host)) == {("forward", 1), ("backward", 1)}
