"""Writing a result into memory evicted since its last use: the benchmark's rows, their fit and what the simulator
charges an MLP layer's outputs for it."""

from __future__ import annotations

import dataclasses
import math

import pytest

from dlrmsim.calibration.apply import elementwise_cache_Bps
from dlrmsim.calibration.fit import cached_elementwise_GBps, fit_cold_output
from dlrmsim.calibration.schema import Calibration, ColdOutputFit, CoreAvailabilityFit, Measurement, OverheadFit
from dlrmsim.engine.costs import cache_miss_share, cold_output_time_s
from dlrmsim.topologies import load_topology
from dlrmsim.topologies.topology import ComputeSpec
from dlrmsim.training.simulate import TrainingConfig, load_inputs, run_iteration
from dlrmsim.training.taskgraph import Task, build_iteration
from dlrmsim.workloads import model

MiB = float(1 << 20)


def _row(op: str, position: str, cores: int, t: float) -> Measurement:
    return Measurement(
        benchmark="cold_output",
        name=f"output {op} {position} c{cores}",
        cores=cores,
        params={"op": op, "position": position},
        bytes=MiB,
        time_s=t,
        repeats=10,
    )


def test_the_fit_is_cold_minus_warm_per_byte_and_never_negative() -> None:
    rows = [
        _row("gemm", "warm", 2, 173e-6),
        _row("gemm", "cold", 2, 230e-6),
        _row("elementwise", "warm", 2, 15e-6),
        _row("elementwise", "cold", 2, 43e-6),
        _row("gemm", "warm", 1, 336e-6),
        _row("gemm", "cold", 1, 330e-6),  # a noisy pair: cold measured faster
        _row("elementwise", "warm", 1, 24e-6),
        _row("elementwise", "cold", 1, 58e-6),
    ]
    fits = {f.cores: f for f in fit_cold_output(rows)}
    # because 57 us more for 1024 KiB is 55.7 ns a KiB, and 28 us more is 27.3 ns a KiB
    assert fits[2].gemm_ns_per_KiB == pytest.approx(57e-6 / 1024 * 1e9, rel=1e-3)
    assert fits[2].elementwise_ns_per_KiB == pytest.approx(28e-6 / 1024 * 1e9, rel=1e-3)
    assert fits[1].gemm_ns_per_KiB == 0.0  # because a write cannot get faster for being cold: noise, floored
    assert fit_cold_output([]) == []


def test_the_cached_relu_rate_is_its_bytes_over_its_time_beyond_dispatch_and_fork_join() -> None:
    overhead = OverheadFit(
        task_overhead_us_by_cores=[(1, 20.0), (2, 20.0)],
        op_overhead_us_by_cores=[(1, 3.0), (2, 4.0)],
        fork_join_us_by_cores=[(2, 6.0)],
        parallel_grain_elements=32768,
    )
    rows = [
        _row("elementwise", "warm", 2, 15e-6),
        _row("elementwise", "cached", 2, 30e-6),
        _row("elementwise", "cached", 1, 43e-6),
    ]
    fits = {f.cores: f for f in fit_cold_output(rows, overhead)}
    # Because the ReLU reads 1 MiB and writes 1 MiB: at two cores in 30 us less a further op's 4 us and a fork and join's
    # 6 us, 2 MiB in 20 us; on one core nothing forks, 2 MiB in 40 us. The warm row (L2-hot at two threads) is not it.
    assert fits[2].elementwise_cached_GBps == pytest.approx(2 * MiB / 20e-6 / 1e9, rel=1e-3)
    assert fits[1].elementwise_cached_GBps == pytest.approx(2 * MiB / 40e-6 / 1e9, rel=1e-3)
    # because a call all software leaves no streaming time to speak of, and a calibration without the row has no rate
    assert cached_elementwise_GBps(_row("elementwise", "cached", 2, 9e-6), overhead) is None
    assert fit_cold_output([_row("elementwise", "warm", 2, 15e-6)])[0].elementwise_cached_GBps is None


def test_the_cache_rate_a_rank_gets_keeps_the_element_wise_pairs_share_of_its_gain(quick_cal: Calibration) -> None:
    cold = [
        ColdOutputFit(cores=1, gemm_ns_per_KiB=0.0, elementwise_ns_per_KiB=0.0, elementwise_cached_GBps=50.0),
        ColdOutputFit(cores=2, gemm_ns_per_KiB=0.0, elementwise_ns_per_KiB=0.0, elementwise_cached_GBps=90.0),
    ]
    pairs = CoreAvailabilityFit(kernel="elementwise", cores=2, availability=0.6, speedup_median=1.2, speedup_best=2.0, runs=5)
    # a two-core host's calibration, whatever this machine has (busy cores count up to the host's)
    two_core = quick_cal.host.model_copy(update={"cores": 2})
    plain = quick_cal.model_copy(update={"cold_output": cold, "core_availability": [], "host": two_core})
    cal = plain.model_copy(update={"core_availability": [pairs]})
    # Because without the pairs a rank streams at the measured rate, one core at its own
    assert elementwise_cache_Bps(plain, 2) == pytest.approx(90e9) and elementwise_cache_Bps(cal, 1) == pytest.approx(50e9)
    # and with them a lone two-core rank keeps the retained gain (0.2) of the 40 GB/s the second core adds, as its memory
    # stream does; two one-thread ranks on the two cores keep the availability (0.6) of the rate at the cores they load
    assert elementwise_cache_Bps(cal, 2) == pytest.approx((50.0 + 0.2 * 40.0) * 1e9)
    assert elementwise_cache_Bps(cal, 1, ranks=2) == pytest.approx(0.6 * 50e9)
    # because a calibration without the cached row (before 2026-11-28) leaves every byte at memory bandwidth
    assert elementwise_cache_Bps(quick_cal.model_copy(update={"cold_output": []}), 2) == 0.0


def _spec(**kw: object) -> ComputeSpec:
    base = ComputeSpec(
        name="cpu", cores=2, clock_hz=1e9, peak_flops={"fp32": 1e11}, memory_bandwidth_Bps=1e10, memory_capacity_B=1e9
    )
    return dataclasses.replace(base, llc_bytes=32 * MiB, **kw)


def test_the_cost_is_per_byte_at_the_share_of_the_calibrations_cold_buffers() -> None:
    spec = _spec(cold_output_s_per_byte_by_kind={"gemm": 5e-11, "elementwise": 2e-11}, cold_output_after_bytes=64 * MiB)
    # because traffic like the benchmark's (64 MiB) evicts the buffer as its cold writes found it: the full per-byte cost
    assert cold_output_time_s(spec, "gemm", MiB, 64 * MiB) == pytest.approx(5e-11 * MiB)
    # because 32 MiB of traffic through a 32 MiB cache misses 1/2 of the time against the benchmark's 2/3
    half = cache_miss_share(32 * MiB, 32 * MiB) / cache_miss_share(64 * MiB, 32 * MiB)
    assert cold_output_time_s(spec, "elementwise", MiB, 32 * MiB) == pytest.approx(2e-11 * MiB * half)
    assert cold_output_time_s(spec, "elementwise", MiB, 1e15) == pytest.approx(2e-11 * MiB)  # capped at the full cost
    assert cold_output_time_s(spec, "gemm", 0.0, 64 * MiB) == 0.0
    assert cold_output_time_s(_spec(), "gemm", MiB, 64 * MiB) == 0.0  # not calibrated: not charged


def test_mlp_tasks_carry_the_tensor_they_return() -> None:
    inputs = load_inputs(TrainingConfig(topology="host", workload="small", ranks=1, scaling="strong"))
    w, n = inputs.workload, inputs.workload.minibatch.strong_global
    graph = build_iteration(inputs.workload, inputs.placement, inputs.settings)
    tasks = {t.name: t for t in graph.programs[0] if isinstance(t, Task)}
    layer = model.mlp_layers(w)[1]
    eb = w.element_bytes
    # because a layer's forward returns its pre-activation (batch x fan_out), its weight gradient dW (fan_in x fan_out),
    # its input gradient (batch x fan_in), and the activation a tensor of the forward's shape
    assert tasks[f"{layer.name}.fwd"].out_bytes == n * layer.fan_out * eb
    assert tasks[f"{layer.name}.bwd_weights"].out_bytes == layer.fan_in * layer.fan_out * eb
    assert tasks[f"{layer.name}.bwd_data"].out_bytes == n * layer.fan_in * eb
    assert tasks[f"{layer.name}.act.fwd"].out_bytes == n * layer.fan_out * eb


def test_a_one_rank_iteration_grows_by_every_layer_output_at_the_full_cost() -> None:
    cfg = TrainingConfig(topology="host", workload="small", ranks=1, scaling="strong", backend="shm", blocking=True)

    def run(per_byte: float) -> tuple[float, list[Task]]:
        # A 1e-9-byte cache: any traffic since a buffer's last use evicts all of it (share 1)
        topo = load_topology("host", {"compute.host-cpu.cores": 2}, ranks=1).with_specs(
            compute=lambda s: dataclasses.replace(
                s,
                llc_bytes=1e-9,
                cold_output_after_bytes=1.0,
                cold_output_s_per_byte_by_kind={"gemm": per_byte, "elementwise": 2 * per_byte} if per_byte else {},
            )
        )
        inputs = load_inputs(cfg, topology=topo)
        graph = build_iteration(inputs.workload, inputs.placement, inputs.settings)
        return run_iteration(inputs, cfg).iteration_s, [s for s in graph.programs[0] if isinstance(s, Task)]

    base, tasks = run(0.0)
    slow, _ = run(1e-12)
    gemm = sum(t.out_bytes for t in tasks if t.kind == "gemm")
    act = sum(t.out_bytes for t in tasks if t.kind == "elementwise")
    # because one rank runs its tasks one after another and waits on nothing, each output's cost adds to the step
    assert gemm > 0 and act > 0
    assert slow - base == pytest.approx(1e-12 * gemm + 2e-12 * act, rel=1e-9)
    assert not math.isnan(slow)
