"""Skipping repeated collective cycles (simulation._CollectiveRun._try_skip) and running collectives ahead in
compiled code (engine.phases.run_ahead) are exact, not approximations."""

from __future__ import annotations

import pytest

from dlrmsim.engine.simulation import RUN_TOTALS
from dlrmsim.training.simulate import TrainingConfig, load_inputs, run_iteration

CASES = [
    TrainingConfig(topology="skx-8s-upi", workload="large", ranks=8),
    TrainingConfig(topology="clx-64s-opa", workload="large", ranks=8, backend="mpi"),
    TrainingConfig(topology="skx-8s-upi", workload="small", ranks=8, blocking=True),
]


@pytest.mark.parametrize("cfg", CASES, ids=lambda c: f"{c.topology}-{c.workload}-{c.backend}{'-blocking' if c.blocking else ''}")
def test_skipping_cycles_changes_no_number(cfg: TrainingConfig) -> None:
    # Per-flow records need every flow simulated, so recording them turns skipping off: the two runs are the
    # step-by-step simulation and the skipping one (without running ahead, which would take the cycles first).
    RUN_TOTALS.clear()
    stepped = run_iteration(load_inputs(cfg), cfg, record_flows=True)
    stepped_acts = RUN_TOTALS["activities"]
    RUN_TOTALS.clear()
    skipped = run_iteration(load_inputs(cfg), cfg, record_flows=False, run_ahead=False)
    # Because a skipped cycle replays the last one exactly (same activities, same max-min rates), every time
    # agrees to rounding, while fewer activities were started.
    assert skipped.iteration_s == pytest.approx(stepped.iteration_s, rel=1e-9)
    for a, b in zip(skipped.per_rank, stepped.per_rank, strict=True):
        for field in ("compute_s", "prepost_s", "exposed_allreduce_s", "exposed_alltoall_s", "other_s"):
            assert getattr(a, field) == pytest.approx(getattr(b, field), rel=1e-9, abs=1e-15)
    if cfg.workload == "large":
        assert RUN_TOTALS["activities"] < stepped_acts


AHEAD_CASES = [*CASES, TrainingConfig(topology="clx-64s-opa", workload="large", ranks=32, scaling="weak")]


@pytest.mark.parametrize(
    "cfg", AHEAD_CASES, ids=lambda c: f"{c.topology}-{c.workload}-{c.ranks}-{c.backend}{'-b' if c.blocking else ''}"
)
def test_running_ahead_changes_no_number(cfg: TrainingConfig) -> None:
    RUN_TOTALS.clear()
    python = run_iteration(load_inputs(cfg), cfg, record_flows=False, run_ahead=False)
    python_events, python_solves = RUN_TOTALS["simpy_events"], RUN_TOTALS["solves"]
    RUN_TOTALS.clear()
    ahead = run_iteration(load_inputs(cfg), cfg, record_flows=False)
    # Because the kernel replays the Python path's instants (drain, start, finish, advance, re-solve) in the same
    # order, skips the repeated cycles the Python path skips (all ranks entering a phase together, with or without
    # lockstep) and stops before anything else could act, every time is the same number to the bit (before the
    # kernel skipped in lockstep only, the 32-rank case differed in the last bits of every rank's prepost_s and took
    # 5,478 solves against 3,267); the instants it took left no SimPy events behind.
    assert ahead.iteration_s == python.iteration_s
    for a, b in zip(ahead.per_rank, python.per_rank, strict=True):
        for field in ("compute_s", "prepost_s", "exposed_allreduce_s", "exposed_alltoall_s", "other_s"):
            assert getattr(a, field) == getattr(b, field), field
    assert RUN_TOTALS["solves"] < 1.3 * python_solves
    assert RUN_TOTALS["simpy_events"] < python_events
