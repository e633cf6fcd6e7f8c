"""RankPrograms: the ranks walk their programs together, batching the tasks that start at one instant."""

from __future__ import annotations

import dataclasses

import pytest

from dlrmsim.engine import Simulation
from dlrmsim.engine.costs import RowVisit
from dlrmsim.engine.frames import records_frame
from dlrmsim.training.ranks import NOT_COSTED, cost_key
from dlrmsim.training.simulate import TrainingConfig, simulate_training
from dlrmsim.training.taskgraph import Task


def test_the_cost_key_holds_every_field_the_costs_read() -> None:
    # Because tasks with equal cost keys share one computation of their static overheads, a Task field missing
    # from the key would silently give one task another's costs: every field but the named ones must change it.
    base = Task("t", "gemm", 1.0, 2.0)
    others = {"visit": RowVisit(10.0, 100.0, 128.0), "operands": ((1.0, 2.0),), "op_elements": (4.0,)}
    for f in dataclasses.fields(Task):
        value = getattr(base, f.name)
        other = others.get(f.name, "x" if isinstance(value, str) else True if isinstance(value, bool) else 7.0)
        changed = cost_key(dataclasses.replace(base, **{f.name: other}))
        assert (changed == cost_key(base)) == (f.name in NOT_COSTED), f.name


def test_ranks_that_start_tasks_together_start_them_as_one_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    # Because eight identical ranks of MLPerf (column-wise) start each task at the same instants, the engine
    # hears one batch per distinct start instant, not one call per task.
    batches: list[int] = []
    real = Simulation.compute_batch

    def counting(self: Simulation, calls, on_done) -> None:  # noqa: ANN001
        batches.append(len(calls))
        real(self, calls, on_done)

    monkeypatch.setattr(Simulation, "compute_batch", counting)
    cfg = TrainingConfig(
        topology="clx-64s-opa", workload="mlperf", ranks=8, placement={"strategy": "column_wise", "replicate_below_rows": 2048}
    )
    res = simulate_training(cfg, record_flows=False)
    df = records_frame(res.records)
    tasks = df[df["resource"].eq("compute")]
    assert sum(batches) == len(tasks)
    assert len(batches) == tasks["start"].nunique() < len(tasks) / 4
