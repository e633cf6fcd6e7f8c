"""Activations on tensors still in the last-level cache: a ReLU reads what its GEMM wrote a moment before, so its
bytes stream at the calibrated cache rate, and only its inputs' evicted share goes through the memory domain."""

from __future__ import annotations

import dataclasses
import math

import pytest

from dlrmsim.calibration.benchmarks.outputs import CACHED_MIN_BYTES, OUTPUT_COLS, OUTPUT_ROWS, cached_pairs
from dlrmsim.engine.costs import cache_miss_share, elementwise_cached_split, task_time
from dlrmsim.topologies import load_topology
from dlrmsim.training.simulate import TrainingConfig, load_inputs, run_iteration
from dlrmsim.training.taskgraph import Task, build_iteration
from tests.engine.handmade import simple_spec

MiB = float(1 << 20)


def test_cached_inputs_stream_at_the_cache_rate_and_evicted_ones_through_memory() -> None:
    spec = dataclasses.replace(simple_spec(cores=2), llc_bytes=32 * MiB, elementwise_cache_Bps=100e9)
    # Because a ReLU's 1 MiB input was written just before (no traffic since), it misses the 32 MiB cache only by its
    # own footprint's share, 1 / 33; the rest of its 2 MiB (the cached input and its output) goes at 100 GB/s.
    missed = 1 * MiB * cache_miss_share(1 * MiB, 32 * MiB)
    assert missed == pytest.approx(MiB / 33)
    assert elementwise_cached_split(spec, 2 * MiB, ((1 * MiB, 0.0),)) == pytest.approx((missed, (2 * MiB - missed) / 100e9))
    # A gradient's saved activation 31 MiB of traffic ago is half gone (32 / 64); one never touched all of it.
    got, _ = elementwise_cached_split(spec, 3 * MiB, ((1 * MiB, 0.0), (1 * MiB, 31 * MiB)))
    assert got == pytest.approx(missed + 0.5 * MiB)
    assert elementwise_cached_split(spec, 2 * MiB, ((1 * MiB, math.inf),)) == pytest.approx((1 * MiB, 1 * MiB / 100e9))
    # because without a calibrated cache rate (built-in presets) or without inputs every byte goes to memory
    plain = dataclasses.replace(spec, elementwise_cache_Bps=0.0)
    assert elementwise_cached_split(plain, 2 * MiB, ((1 * MiB, 0.0),)) == (2 * MiB, 0.0)
    assert elementwise_cached_split(spec, 2 * MiB, ()) == (2 * MiB, 0.0)


def _iteration(cache_Bps: float) -> tuple[float, list[Task], object]:
    cfg = TrainingConfig(topology="host", workload="small", ranks=1, scaling="strong", backend="shm", blocking=True)
    # A cache so large that no traffic evicts anything, and memory slow enough that the activations are bound by it.
    topo = load_topology("host", {"compute.host-cpu.cores": 2}, ranks=1).with_specs(
        compute=lambda s: dataclasses.replace(s, llc_bytes=1e30, memory_bandwidth_Bps=1e9, elementwise_cache_Bps=cache_Bps)
    )
    inputs = load_inputs(cfg, topology=topo)
    graph = build_iteration(inputs.workload, inputs.placement, inputs.settings)
    return run_iteration(inputs, cfg).iteration_s, [s for s in graph.programs[0] if isinstance(s, Task)], topo.compute(0)


def test_activations_read_what_their_gemm_just_wrote() -> None:
    _, program, _ = _iteration(1e12)
    acts = {t.name: t for t in program if t.kind == "elementwise"}
    assert acts and all(t.operands for t in acts.values())
    # Because a layer's forward GEMM runs right before its ReLU, nothing moved in between; the ReLU's gradient reads
    # the output gradient its upstream GEMM just wrote and the activation saved in the forward pass, long before.
    fwd = [t for n, t in acts.items() if n.endswith(".act.fwd")]
    assert all(t.operands == ((t.out_bytes, 0.0),) for t in fwd)
    last = max(n.split(".")[0] for n in acts if n.startswith("top"))  # the sigmoid and loss: no GEMM above them
    bwd = [t for n, t in acts.items() if n.endswith(".act.bwd") and not n.startswith(f"{last}.")]
    assert bwd and all(t.operands[0][1] == 0.0 and t.operands[1][1] > 0.0 for t in bwd)
    _, untracked, _ = _iteration(0.0)
    # because without a cache rate (and without a GEMM eviction cost) nothing follows the inputs
    assert not any(t.operands for t in untracked)


def test_a_one_rank_iteration_loses_its_activations_memory_time_with_a_fast_cache() -> None:
    slow, program, spec = _iteration(0.0)
    fast, _, _ = _iteration(1e30)
    acts = [t for t in program if t.kind == "elementwise"]
    # Because one rank runs its tasks one after another, each activation at memory bandwidth takes the roofline max of
    # its vector arithmetic and its bytes; with an endless cache and cache rate only the arithmetic is left.
    expected = sum(
        task_time(t.flops, t.bytes, spec, 2.0, kind="elementwise") - task_time(t.flops, 0.0, spec, 2.0, kind="elementwise")
        for t in acts
    )
    assert expected > 0 and slow - fast == pytest.approx(expected, rel=1e-6)


def test_the_cached_row_cycles_past_the_l2_caches_and_within_the_last_level_cache() -> None:
    pair = 2 * 4 * OUTPUT_ROWS * OUTPUT_COLS
    # Because two 2 MiB L2s need 2 x 4 MiB of pairs to be left behind (8 MiB: 4 pairs of 2 MiB) under a 300 MiB cache;
    # 16 of them would be 64 MiB, more than a quarter of a 128 MiB cache, so 32 MiB; and never under 4 MiB.
    assert cached_pairs(2, 2 << 20, 300 << 20) == 8 * 2**20 // pair
    assert cached_pairs(16, 2 << 20, 128 << 20) == 32 * 2**20 // pair
    assert cached_pairs(1, 256 << 10, 32 << 20) == CACHED_MIN_BYTES // pair
