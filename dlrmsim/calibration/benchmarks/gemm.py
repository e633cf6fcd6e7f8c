"""GEMM benchmarks (fit.fit_gemm, fit.fit_cold_gemm): square GEMMs over sizes and core counts, the preset
MLPs' layers, narrow layers (the aspect factor), and whole MLPs timed GEMM by GEMM in training-step order."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dlrmsim.calibration.benchmarks.timing import BenchTask, TimingPolicy, median_spread, time_op
from dlrmsim.calibration.dlrm_runner import mlp_backward, mlp_forward, new_mlp
from dlrmsim.calibration.ops import Op, Ops
from dlrmsim.calibration.schema import Measurement
from dlrmsim.workloads import load_workload, workload_names
from dlrmsim.workloads.model import Pass, mlp_layers


def gemm_sizes(quick: bool) -> list[int]:
    if quick:
        return [32, 64, 128, 192, 256, 384, 512, 768, 1024, 1536]
    return [16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072]


# The stages of the square-GEMM sweep and of the preset MLP layers (plan.SPREAD_STAGES samples them across the run).
SWEEP_STAGE = "gemm size sweep"
PRESET_STAGE = "gemm preset MLP shapes"


def gemm_task(k: Ops, n: int, cores: int, policy: TimingPolicy) -> BenchTask:
    name = f"gemm {n}x{n}x{n} c{cores}"

    def run() -> list[Measurement]:
        with k.threads(cores):
            t, spread, reps = time_op(k.make_gemm(n, n, n), policy)
        return [
            Measurement(
                benchmark="gemm",
                name=name,
                cores=cores,
                params={"m": n, "n": n, "k": n},
                flops=2.0 * n**3,
                bytes=4.0 * 4 * n * n,
                time_s=t,
                spread_pct=spread,
                repeats=reps,
            )
        ]

    return BenchTask(SWEEP_STAGE, name, run, repeat=True)


# Output widths n of C[1024, n] = A[1024, 256] B[256, n], one core: multiples of 16 and the widths around them that
# a kernel's micro-kernel leaves a remainder at (fit.fit_vector_block). Generic widths, not any workload's.
COLUMN_WIDTHS = (16, 17, 20, 24, 28, 31, 32, 33, 36, 40, 42, 44, 48, 52, 56, 60, 64)
TINY_COLUMN_WIDTHS = (32, 33, 40, 44, 48, 64)
COLUMN_ROWS, COLUMN_DEPTH = 1024, 256


def columns_task(k: Ops, n: int, policy: TimingPolicy) -> BenchTask:
    """One width of the output-columns sweep, on one core (benchmark "gemm_columns")."""
    m, depth = COLUMN_ROWS, COLUMN_DEPTH
    name = f"gemm columns {m}x{n}x{depth} c1"

    def run() -> list[Measurement]:
        with k.threads(1):
            t, spread, reps = time_op(k.make_gemm(m, n, depth), policy)
        return [
            Measurement(
                benchmark="gemm_columns",
                name=name,
                cores=1,
                params={"m": m, "n": n, "k": depth},
                flops=2.0 * m * n * depth,
                bytes=4.0 * (m * depth + depth * n + 2 * m * n),
                time_s=t,
                spread_pct=spread,
                repeats=reps,
            )
        ]

    return BenchTask("gemm output columns", name, run, repeat=True)


def preset_linear_shapes(batch_of: Callable[[str], int]) -> list[tuple[str, int, int, int, str]]:
    """Unique (workloads, batch, fan_in, fan_out, pass) of the preset MLPs; no input gradient for the first layer."""
    shapes: dict[tuple[int, int, int, str], list[str]] = {}
    for wname in workload_names():
        w = load_workload(wname)
        batch = batch_of(wname)
        for layer in mlp_layers(w):
            for p in Pass:
                if p is Pass.BACKWARD_DATA and layer.is_first:
                    continue
                shapes.setdefault((batch, layer.fan_in, layer.fan_out, p.value), []).append(wname)
    return [(",".join(sorted(set(ws))), b, fi, fo, p) for (b, fi, fo, p), ws in sorted(shapes.items())]


def linear_task(
    k: Ops,
    workloads: str,
    batch: int,
    fi: int,
    fo: int,
    which: str,
    cores: int,
    policy: TimingPolicy,
    stage: str = PRESET_STAGE,
) -> BenchTask:
    name = f"linear {fi}->{fo} {which} b{batch} c{cores}"

    def run() -> list[Measurement]:
        with k.threads(cores):
            t, spread, reps = time_op(k.make_linear(batch, fi, fo, which), policy)
        return [linear_measurement(name, cores, {"workloads": workloads}, batch, fi, fo, which, t, spread, reps)]

    return BenchTask(stage, name, run, repeat=True)


def linear_measurement(
    name: str,
    cores: int,
    params: dict[str, float | int | str],
    batch: int,
    fi: int,
    fo: int,
    which: str,
    time_s: float,
    spread_pct: float,
    repeats: int,
) -> Measurement:
    """A "linear" row: one pass of a fan_in -> fan_out layer at ``batch``, with its flops and fp32 operand bytes;
    ``params`` adds to the shape (the presets it comes from, the context it was timed in)."""
    return Measurement(
        benchmark="linear",
        name=name,
        cores=cores,
        params={**params, "batch": batch, "fan_in": fi, "fan_out": fo, "pass": which},
        flops=2.0 * batch * fi * fo,
        bytes=4.0 * (batch * fi + fi * fo + batch * fo),
        time_s=time_s,
        spread_pct=spread_pct,
        repeats=repeats,
    )


# Layers with one narrow side (fan_in, fan_out), at two batches: the shapes DLRM's narrow layers (a 32- or
# 64-wide bottom output, a 13-feature input) have, and cubes do not. Their efficiency over the cubes' at the same
# flops is the aspect factor (fit.fit_gemm). Generic widths, not any workload's.
NARROW_LAYERS = ((32, 512), (512, 32), (128, 512))
NARROW_BATCHES = (512, 2048)


def narrow_linear_shapes() -> list[tuple[int, int, int, str]]:
    """(batch, fan_in, fan_out, pass) of the narrow-layer sweep."""
    return [(b, fi, fo, p) for b in NARROW_BATCHES for fi, fo in NARROW_LAYERS for p in ("fwd", "bwd_data", "bwd_weights")]


# MLPs timed in training-step order (batch, widths): a narrow one at two batches, a square one, and a small one
# whose GEMMs move 320-384 KiB, under one core's L2, where the sequence term grows with the bytes
# (costs.sequence_time_s; the others' GEMMs move 1-5.3 MiB, about the L2 of two cores and past it). Generic widths, not any
# workload's.
CYCLE_MLPS = ((512, (128, 512, 32)), (2048, (128, 512, 32)), (1024, (512, 512, 512)), (256, (32, 256, 64)))


def time_mlp_cycle(
    ops: Ops, batch: int, widths: Sequence[int], policy: TimingPolicy, flush: Op, flush_each: bool = False
) -> dict[tuple[str, int], list[float]]:
    """Per cycle, seconds of each GEMM of an MLP's forward and backward (keyed (pass, layer index)), run as the
    DLRM runner runs them (``dlrm_runner.mlp_forward`` / ``mlp_backward``, activations and bias gradients
    included) after ``flush``: each GEMM finds what its predecessors left in the caches, and the first ones find
    them evicted, as in a training step where embedding lookups stream between the MLPs. ``flush_each``: a
    flush (untimed) before every GEMM, so that each one finds all its operands, the kernel's packing buffers
    and its code evicted (fit.fit_evicted_gemm)."""
    rng = np.random.default_rng(0)
    layers = new_mlp(ops, widths, rng)
    x = ops.tensor(rng.standard_normal((batch, widths[0])).astype(np.float32))
    dz = ops.tensor(np.full((batch, widths[-1]), 1e-3, dtype=np.float32))
    clock = time.perf_counter
    out: dict[tuple[str, int], list[float]] = {}
    times: dict[tuple[str, int], float] = {}

    def timed(which: str, layer: int, call: Callable[[], Any]) -> Any:
        if flush_each:
            flush()
        t0 = clock()
        result = call()
        times[(which, layer)] = clock() - t0
        return result

    for i in range(policy.warmup + policy.repeats):
        flush()
        _, acts = mlp_forward(ops, layers, x, sigmoid_last=False, gemm=timed)
        mlp_backward(ops, layers, acts, dz, need_dx=True, gemm=timed)
        if i >= policy.warmup:
            for key, t in times.items():
                out.setdefault(key, []).append(t)
    return out


# The "context" param of the cycle's rows: flushed once per cycle (step order) or before every GEMM (evicted).
CYCLE_CONTEXTS = {False: ("step", "in step order"), True: ("evicted", "evicted")}


def mlp_cycle_task(
    k: Ops, batch: int, widths: Sequence[int], cores: int, policy: TimingPolicy, evicted: bool = False
) -> BenchTask:
    """An MLP's GEMMs in training-step order (:func:`time_mlp_cycle`), flushed once per cycle or, ``evicted``,
    before each GEMM."""
    context, label = CYCLE_CONTEXTS[evicted]
    name = f"mlp cycle {'-'.join(map(str, widths))} b{batch} c{cores}{' evicted' if evicted else ''}"

    def run() -> list[Measurement]:
        with k.threads(cores):
            per_op = time_mlp_cycle(k, batch, widths, policy, k.flush, flush_each=evicted)
        rows = []
        for (which, i), ts in sorted(per_op.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            fi, fo = widths[i], widths[i + 1]
            med, spread = median_spread(ts)
            rows.append(
                linear_measurement(
                    f"linear {fi}->{fo} {which} b{batch} c{cores} {label}",
                    cores,
                    {"workloads": "", "context": context, "mlp": "-".join(map(str, widths))},
                    batch,
                    fi,
                    fo,
                    which,
                    med,
                    spread,
                    len(ts),
                )
            )
        return rows

    return BenchTask("gemm with evicted operands" if evicted else "gemm in training-step order", name, run, repeat=True)
