"""Cheap, deterministic evaluators for testing the sweep machinery without the training simulator.

The cost model here is a toy (made-up link and compute rates, not any machine's): it only has to be
deterministic, depend on every knob the tests sweep, and run in well under 10 ms. Volumes are the real
Eq. 1 / Eq. 2 from dlrmsim.workloads.model.

Run as ``python -m tests.studies.sweep_evaluators ARGS`` it is the `dlrmsim` CLI with this module importable
(its evaluators named in a spec as ``tests.studies.sweep_evaluators:cheap``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from functools import lru_cache

from dlrmsim.studies.spec import SweepPoint
from dlrmsim.workloads import load_workload, model
from dlrmsim.workloads.schema import Workload

TOY_FLOPS = 1e12  # flop/s per rank, toy value
TOY_BANDWIDTH_GBPS = 10.0  # GB/s per rank when the topology override does not give one, toy value


@lru_cache(maxsize=64)
def _workload(name: str, overrides_json: str) -> Workload:
    return load_workload(name, json.loads(overrides_json) or None)


def cheap(point: SweepPoint) -> dict[str, float]:
    """A toy alpha-beta time per iteration from Eq. 1 / Eq. 2 volumes."""
    w = _workload(point.workload, json.dumps(point.workload_overrides, sort_keys=True))
    p = point.ranks
    batch = model.global_batch(w, p, point.scaling)
    fwd, bwd = model.flops_per_sample(w)
    speed = 2.0 if point.precision == "bf16" else 1.0
    compute = (fwd + bwd) * batch / p / (TOY_FLOPS * speed)
    bw = float(point.topology_overrides.get("links.net.bandwidth_GBps", TOY_BANDWIDTH_GBPS)) * 1e9
    allreduce = 2.0 * (p - 1) / p * model.allreduce_bytes(w) / bw
    alltoall = 2.0 * model.alltoall_bytes(w, batch) / p * (p - 1) / p / bw
    hidden = 0.0 if point.blocking else 0.5
    prepost = 1e-5 * p
    exposed_ar, exposed_a2a = allreduce * (1 - hidden), alltoall * (1 - hidden / 2)
    return {
        "iteration_s": compute + exposed_ar + exposed_a2a + prepost,
        "compute_s": compute,
        "exposed_allreduce_s": exposed_ar,
        "exposed_alltoall_s": exposed_a2a,
        "prepost_s": prepost,
        "allreduce_s": allreduce,
        "alltoall_s": alltoall,
        "allreduce_bytes": model.allreduce_bytes(w),
        "alltoall_bytes": model.alltoall_bytes(w, batch),
    }


def busy(point: SweepPoint) -> dict[str, float]:
    """``cheap`` plus DLRMSIM_TEST_BUSY_S seconds of CPU work (default 0.008 s), to measure parallel speedup."""
    end = time.perf_counter() + float(os.environ.get("DLRMSIM_TEST_BUSY_S", "0.008"))
    x = 0
    while time.perf_counter() < end:
        x += 1
    return cheap(point)


def slow(point: SweepPoint) -> dict[str, float]:
    """``cheap`` after sleeping DLRMSIM_TEST_SLEEP_S seconds (default 0.3), so a test can kill the sweep part way."""
    time.sleep(float(os.environ.get("DLRMSIM_TEST_SLEEP_S", "0.3")))
    return cheap(point)


def failing(point: SweepPoint) -> dict[str, float]:
    """``cheap``, except that 4-rank points raise."""
    if point.ranks == 4:
        raise ValueError("toy failure at 4 ranks")
    return cheap(point)


def main() -> None:
    from dlrmsim.cli import main as cli_main

    cli_main(sys.argv[1:])


if __name__ == "__main__":
    main()
