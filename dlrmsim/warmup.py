"""Compile the simulator's numba kernels into their on-disk cache, once, at install time.

The fluid solver, the collectives' bookkeeping and the hashed-ECMP route search are numba functions cached next to
their modules (``cache=True``). The first simulation after a fresh install would pay their compilation (about a
minute on a 2-core VM, most of it the run-ahead kernel) inside whatever the user ran first; ``make`` runs this
module after installing instead, so ``make demo`` and the first ``dlrmsim simulate`` start warm. It simulates one
small iteration on the fat-tree cluster three times: with and without per-flow records (without, collectives run
ahead in compiled code), and under the lockstep approximation (its barrier is a kernel of its own on the Python
path), then one setting of ``instances`` (whose layers run as chains, a kernel of their own), which calls every
kernel, and prints how long that took.

It also writes the package's bytecode (``__pycache__``): where ``PYTHONDONTWRITEBYTECODE`` is set (container images
often set it), Python never caches it on import, and every command compiled dlrmsim's source again, about 0.15 s
of a 2-vCPU VM's start (`docs/architecture.md`).

    python -m dlrmsim.warmup
"""

from __future__ import annotations

import compileall
import time
from pathlib import Path

import numpy as np

from dlrmsim.engine.fluid import grow_tables
from dlrmsim.engine.phases import NO_COLLECTIVE, RunnerListPacking, cycles_to_skip
from dlrmsim.instances.simulate import InstancesConfig, load_inputs, simulate_point
from dlrmsim.training.simulate import TrainingConfig, simulate_training

PACKAGE = Path(__file__).resolve().parent


def write_bytecode() -> bool:
    """Byte-compile every module of the package into its ``__pycache__`` (py_compile writes whatever
    ``sys.dont_write_bytecode`` says; an up-to-date file is left as it is). Returns whether all compiled."""
    return bool(compileall.compile_dir(PACKAGE, quiet=1))


def warm_up() -> float:
    """Run one small hashed-ECMP, multi-collective iteration three times (every compiled kernel); return the wall
    time (s)."""
    t0 = time.perf_counter()
    cfg = TrainingConfig(topology="clx-64s-opa", workload="small", ranks=8, placement={"strategy": "column_wise"})
    simulate_training(cfg)
    simulate_training(cfg, record_flows=False)
    simulate_training(cfg.model_copy(update={"lockstep_collectives": True}))
    # Instances' layers run as chains, which the scheduler's chain kernel drives (no collective does).
    simulate_point(load_inputs(InstancesConfig(workload="mlp-like", settings_overrides={"iterations": 1})), 2)
    # The Python path's cycle skip calls this kernel only when a skip is in reach, which these runs need not be.
    cycles_to_skip(np.zeros(1), np.zeros(1), 2, 1.0, np.inf)
    # The scheduler grows its tables only when a run outgrows their first size, which a small run need not
    # (with a NIC port's own link halves left out of the flows' entries, this one no longer does).
    grow_tables(np.zeros((7, 1)), np.zeros((5, 1), dtype=np.int64), np.zeros((2, 1), dtype=np.int64), np.zeros(1), 0, 0, 2, 2)
    # The run-ahead kernel's list of collectives drops one only when a collective ends while another runs on,
    # which these runs need not have.
    packing = RunnerListPacking()
    packing.drop(packing.pack([NO_COLLECTIVE]), 0)
    return time.perf_counter() - t0


if __name__ == "__main__":
    write_bytecode()
    print(f"dlrmsim: compiled kernels ready ({warm_up():.1f} s)")
