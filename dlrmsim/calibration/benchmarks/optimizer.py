"""The software cost of stepping parameters with a ``torch.optim`` optimizer object (fit.fit_optimizer).

The reference DLRM and TorchRec's DLRM step their parameters with ``torch.optim.SGD`` and clear the gradients with
``zero_grad(set_to_none=True)`` every iteration; the project runner updates each tensor by hand (one ``add_``).
The optimizer object's Python (its step decorators, the parameter-group walk, grouping the tensors by device and
dtype, the per-tensor checks) costs far more than the update's one op per tensor: timed alone on the 2-vCPU VM
(2026-11-26), TorchRec's base model's 10 dense tensors took 290-310 us a step, where the per-op dispatch the
simulator charges for the update comes to about 20 us. This benchmark times ``step()`` plus ``zero_grad()`` over
``P`` tiny tensors (their arithmetic negligible) for several ``P``, each call cold as a step meets it, so the fit
separates a cost per call from one per tensor. "Cold as a step meets it" is after the flush and a small layer's
backward (``Ops.then_rewarm``, since 2026-11-27): the backward that precedes a step's optimizer leaves the framework's
shared state warm, and after the flush alone the call cost more again (10 tensors on the 2-vCPU Intel VM,
benchmarks/bench_rewarm.py: 0.55 ms after the flush, 0.40 after the flush and a layer's backward, 0.08 after itself;
0.20-0.29 in TorchRec's steps).
"""

from __future__ import annotations

import time

from dlrmsim.calibration.benchmarks.timing import BenchTask, TimingPolicy, median_spread
from dlrmsim.calibration.ops import Ops
from dlrmsim.calibration.ops.base import Op
from dlrmsim.calibration.schema import Measurement

OPTIMIZER_TENSORS = (1, 4, 16, 64)
OPTIMIZER_ELEMENTS = 64  # per tensor: a few cache lines, so the update's own arithmetic is negligible
LEARNING_RATE = 0.01


def time_optimizer(tensors: int, flush: Op, policy: TimingPolicy) -> tuple[float, float, int]:
    """(median seconds of one ``torch.optim.SGD`` step plus ``zero_grad(set_to_none=True)`` over ``tensors``
    parameters, spread %, repeats), each call right after ``flush``. A training step calls it once, after its
    backward pushed the optimizer's code and objects out of the caches: cold, it costs 4-6x what a loop of it does
    (on the 2-vCPU VM, 10 tensors: 240-330 us after a flush or a real backward, 50-60 us called again at once), so
    a warm loop would time the wrong thing. Every parameter gets its gradient before the flush, as backward leaves
    them. ``flush``: what runs before each call (the task passes the flush and the rewarm)."""
    import torch

    params = [torch.zeros(OPTIMIZER_ELEMENTS, requires_grad=True) for _ in range(tensors)]
    grads = [torch.full((OPTIMIZER_ELEMENTS,), 1e-3) for _ in range(tensors)]
    opt = torch.optim.SGD(params, lr=LEARNING_RATE)
    samples = []
    # twice the policy's repeats: one cold call a sample is short and noisy, and the whole benchmark takes ~1 s
    for i in range(policy.warmup + 2 * policy.repeats):
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        flush()
        t0 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= policy.warmup:
            samples.append(time.perf_counter() - t0)
    med, spread = median_spread(samples)
    return med, spread, len(samples)


def optimizer_task(k: Ops, cores: int, policy: TimingPolicy) -> BenchTask:
    """``torch.optim.SGD``'s step and zero_grad over 1-64 tiny tensors at ``cores`` threads, each call after the
    ops' cache flush (torch backend only)."""
    name = f"optimizer c{cores}"

    def run() -> list[Measurement]:
        # the flush, then the framework work a step's backward has just run (Ops.then_rewarm)
        after = k.then_rewarm(k.flush)
        with k.threads(cores):
            rows = []
            for n in OPTIMIZER_TENSORS:
                t, spread, repeats = time_optimizer(n, after, policy)
                rows.append(
                    Measurement(
                        benchmark="optimizer",
                        name=f"optimizer sgd p{n} c{cores}",
                        cores=cores,
                        params={"optimizer": "sgd", "tensors": n, "elements": OPTIMIZER_ELEMENTS},
                        bytes=12.0 * OPTIMIZER_ELEMENTS * n,  # read weight and gradient, write weight (fp32)
                        time_s=t,
                        spread_pct=spread,
                        repeats=repeats,
                    )
                )
            return rows

    return BenchTask("torch.optim step", name, run, repeat=True)
