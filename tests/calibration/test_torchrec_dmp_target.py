"""TorchRec across two ranks: DistributedModelParallel over gloo, sharded by TorchRec's planner, read back as a placement."""

from __future__ import annotations

import pytest

from dlrmsim.workloads.schema import Minibatch, Tables, Workload

TINY = Workload(
    name="tiny-dmp",
    tables=Tables(count=4, rows=2000),
    embedding_dim=16,
    lookups_per_sample=4,
    bottom_mlp=[13, 32, 16],
    top_mlp=[32, 1],
    minibatch=Minibatch(strong_global=64, weak_local=64),
)


@pytest.mark.slow
def test_two_rank_dmp_step_is_measured_with_its_plan() -> None:
    """Two spawned processes (torch and torchrec imported in each: about 10 s on 2 cores, hence slow)."""
    pytest.importorskip("torchrec", reason="TorchRec not installed (make torchrec)")
    from dlrmsim.calibration.targets.torchrec_dmp import measure_dmp_step

    m = measure_dmp_step(TINY, 64, ranks=2, threads=1, samples=3, min_sample_s=0.01, warmup_steps=2)
    # because every table is planned somewhere on the two ranks, whole (table-wise) or in boxes covering it
    covered = {s.table: 0 for s in m.placement.shards}
    for s in m.placement.shards:
        covered[s.table] += s.rows * s.columns
    assert set(covered) | set(m.placement.replicated_tables) == {0, 1, 2, 3}
    assert all(v == 2000 * 16 for v in covered.values())
    # and each sample is a positive per-step time from rank 0, as many as asked
    assert len(m.step.samples_s) == 3 and min(m.step.samples_s) > 0
    assert m.step.target == "torchrec/dmp2"
