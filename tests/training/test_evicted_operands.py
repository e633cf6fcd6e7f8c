"""GEMMs whose inputs the traffic since their last use evicted: the task graph counts, per input, the bytes the rank
moved since a task last touched it (cyclically: the program repeats every iteration), the cost model turns that into
an evicted share, and the simulator charges the share of the calibrated eviction cost."""

from __future__ import annotations

import dataclasses
import math

import pytest

from dlrmsim.engine.costs import cache_miss_share, evicted_operand_share, evicted_operand_time_s, task_bandwidth_cap
from dlrmsim.topologies import load_topology
from dlrmsim.topologies.topology import ComputeSpec
from dlrmsim.training.simulate import TrainingConfig, load_inputs, run_iteration
from dlrmsim.training.taskgraph import GemmReuse, Task, Touches, build_iteration, operand_traffic
from dlrmsim.workloads import model
from tests.engine.handmade import simple_spec

MiB = float(1 << 20)


def _spec(**changes: float) -> ComputeSpec:
    base = simple_spec(cores=2, peak_flops=1e10, memory_bandwidth_Bps=1e10)
    return dataclasses.replace(base, llc_bytes=32 * MiB, gemm_evicted_after_bytes=64 * MiB, **changes)


def test_traffic_since_last_touch_is_counted_between_the_tasks_and_around_the_iteration() -> None:
    program = [
        Task("produce", "copy", 0.0, 10.0),
        Task("stream", "embedding", 0.0, 100.0),
        Task("use", "gemm", 1.0, 5.0),
        Task("optimizer", "optimizer", 0.0, 50.0),
    ]
    touches = {
        0: Touches(writes=("x",)),
        2: Touches(reads=(("x", 4.0), ("w", 8.0), ("own", 2.0)), writes=("y",)),
        3: Touches(writes=("w",)),
    }
    # Because x was written two tasks before, only the stream in between counts (100 B); w was last written by the
    # previous iteration's optimizer, the program's last task, so everything before "use" counts (10 + 100 B); a
    # tensor only "use" touches was last touched by it one iteration ago: every other task's traffic (160 B).
    # The kernel's state was last warmed by the previous GEMM, "use" itself one iteration ago: 160 B as well.
    assert operand_traffic(program, touches) == {2: GemmReuse(((4.0, 100.0), (8.0, 110.0), (2.0, 160.0)), 160.0)}


def test_the_evicted_share_is_byte_weighted_and_full_after_the_calibrations_flush() -> None:
    spec = _spec()
    full = cache_miss_share(64 * MiB, 32 * MiB)
    # Because 32 MiB of traffic misses 1/2 against the flush's 2/3, a 1 MiB input after it is 3/4 evicted, and a
    # 3 MiB input just written (0 B since) not at all: (1 x 3/4 + 3 x 0) / 4.
    assert evicted_operand_share(spec, ((1 * MiB, 32 * MiB), (3 * MiB, 0.0))) == pytest.approx(0.5 / full / 4)
    assert evicted_operand_share(spec, ((1 * MiB, 1e12), (1 * MiB, math.inf))) == 1.0  # capped, and never touched
    assert evicted_operand_share(spec, ()) == 0.0
    # The time: the kernel's share x call + the inputs' share x factor x bytes at the task's bandwidth cap.
    cal = _spec(gemm_evicted_call_s=20e-6, gemm_evicted_traffic_factor=0.5)
    cold = ((1.0, math.inf),)
    assert evicted_operand_time_s(cal, 1e6, 2.0, cold, math.inf) == pytest.approx(20e-6 + 0.5 * 1e6 / 1e10)
    assert evicted_operand_time_s(cal, 1e6, 2.0, cold, 0.0) == pytest.approx(0.5 * 1e6 / 1e10)  # kernel just ran
    assert evicted_operand_time_s(cal, 1e6, 2.0, ((1.0, 0.0),), math.inf) == pytest.approx(20e-6)  # inputs fresh
    assert evicted_operand_time_s(spec, 1e6, 2.0, cold, math.inf) == 0.0  # not calibrated
    # The arithmetic part: the inputs' share x compute factor x the GEMM's arithmetic time, beside the others.
    both = _spec(gemm_evicted_call_s=20e-6, gemm_evicted_traffic_factor=0.5, gemm_evicted_compute_factor=0.3)
    assert evicted_operand_time_s(both, 1e6, 2.0, cold, math.inf, 1e-3) == pytest.approx(20e-6 + 0.5 * 1e6 / 1e10 + 0.3e-3)
    fresh = ((1.0, 0.0),)  # because an input just written is not evicted, nor is the part that scales with its flops
    assert evicted_operand_time_s(both, 1e6, 2.0, fresh, math.inf, 1e-3) == pytest.approx(20e-6)
    assert evicted_operand_time_s(_spec(gemm_evicted_compute_factor=0.3), 1e6, 2.0, cold, 0.0, 1e-3) == pytest.approx(0.3e-3)


def _iteration(call_s: float = 0.0, factor: float = 0.0) -> tuple[float, list[Task], ComputeSpec]:
    cfg = TrainingConfig(topology="host", workload="small", ranks=1, scaling="strong", backend="shm", blocking=True)
    # A 1e-9-byte cache and a flush of 1e30 bytes: any traffic since a last touch evicts the whole input (share 1),
    # none (an input its producer just wrote) evicts nothing.
    topo = load_topology("host", {"compute.host-cpu.cores": 2}, ranks=1).with_specs(
        compute=lambda s: dataclasses.replace(
            s, llc_bytes=1e-9, gemm_evicted_after_bytes=1e30, gemm_evicted_call_s=call_s, gemm_evicted_traffic_factor=factor
        )
    )
    inputs = load_inputs(cfg, topology=topo)
    graph = build_iteration(inputs.workload, inputs.placement, inputs.settings)
    return run_iteration(inputs, cfg).iteration_s, [s for s in graph.programs[0] if isinstance(s, Task)], topo.compute(0)


def test_a_one_rank_iteration_grows_by_each_gemms_evicted_inputs_and_kernel() -> None:
    base, untracked, _ = _iteration()
    # Because the spec charges no eviction, the task graph does not follow the inputs (it costs build time).
    assert not any(t.operands for t in untracked)
    w = load_inputs(TrainingConfig(topology="host", workload="small", ranks=1, scaling="strong")).workload
    n = w.minibatch.strong_global
    eb = w.element_bytes
    layers = model.mlp_layers(w)
    # The kernel's part: every GEMM after another task finds the kernel's state evicted; a layer's input gradient
    # runs right after its weight gradient and finds it warm. So each layer's forward and weight gradient pay it.
    slow, program, _ = _iteration(call_s=100e-6)
    gemms = [t for t in program if t.kind == "gemm"]
    assert len(gemms) == 3 * len(layers) - 1 and all(t.operands for t in gemms)
    assert slow - base == pytest.approx(2 * len(layers) * 100e-6, rel=1e-9)
    # The inputs' part, counted from the workload's layers, not the task graph. Forward: the input comes from the
    # task just before (the previous layer's activation, the interaction), except the bottom MLP's dense input, which
    # the iteration's other work pushed out since the loader; the weights were last touched by the previous
    # iteration's optimizer: evicted. Weight gradient: the output gradient is fresh (the activation's backward just
    # wrote it), the saved input evicted. Input gradient: the gradient fresh, the weights evicted.
    shares = []
    for layer in layers:
        x, g, wb = n * layer.fan_in * eb, n * layer.fan_out * eb, layer.fan_in * layer.fan_out * eb
        first_input = layer.part == "bottom" and layer.index == 0
        shares.append(((x if first_input else 0.0) + wb) / (x + wb))
        shares.append(x / (g + x))
        if not first_input:
            shares.append(wb / (g + wb))
    by_name = {t.name: t for t in gemms}
    names = [f"{layer.name}.{p}" for layer in layers for p in ("fwd", "bwd_weights", "bwd_data")]
    names = [m for m in names if m in by_name]
    # Because one rank runs its tasks one after another and waits on nothing, each GEMM's share of its traffic time
    # (bytes at the 2 cores' bandwidth cap, the same for every task here) adds to the step.
    slow, _, spec = _iteration(factor=0.5)
    expected = sum(
        s * 0.5 * by_name[m].bytes / task_bandwidth_cap(spec, by_name[m].bytes, 2.0) for s, m in zip(shares, names, strict=True)
    )
    assert slow - base == pytest.approx(expected, rel=1e-9)


def test_an_interaction_counts_the_traffic_since_the_previous_interaction() -> None:
    # Because the interaction's forward and backward share their kernels' code and state (stack, batched products,
    # pair gather and scatter): the backward finds what the top MLP moved since the forward (30 B), the forward what
    # the rest of the iteration moved since the previous backward, around the iteration (10 + 100 + 50 B).
    program = [
        Task("emb", "embedding", 0.0, 10.0),
        Task("interaction.fwd", "interaction", 1.0, 5.0),
        Task("top", "gemm", 1.0, 30.0),
        Task("interaction.bwd", "interaction_bwd", 1.0, 7.0),
        Task("update", "update", 0.0, 100.0),
        Task("optimizer", "optimizer", 0.0, 50.0),
    ]
    touches = {1: Touches(writes=("a:interaction",)), 2: Touches(reads=(("a:interaction", 5.0),)), 3: Touches(writes=("g",))}
    got = operand_traffic(program, touches)
    assert got[1] == GemmReuse((), 160.0) and got[3] == GemmReuse((), 30.0)
    assert got[2].operands == ((5.0, 0.0),)  # the GEMM's own bookkeeping is unchanged
