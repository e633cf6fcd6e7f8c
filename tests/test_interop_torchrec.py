"""Reading a TorchRec model description and sharding plan into a dlrmsim workload and placement."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from dlrmsim.errors import DlrmsimError
from dlrmsim.interop.torchrec import placement_from_plan, workload_from_torchrec
from dlrmsim.training.simulate import TrainingConfig, load_inputs, load_training_topology, run_iteration


@dataclass
class _Table:  # the attributes of torchrec.EmbeddingBagConfig this module reads
    name: str
    num_embeddings: int
    embedding_dim: int = 16
    feature_names: list[str] = field(default_factory=list)


def _box(row: int, col: int, rows: int, cols: int, rank: int) -> SimpleNamespace:
    return SimpleNamespace(shard_offsets=[row, col], shard_sizes=[rows, cols], placement=SimpleNamespace(rank=lambda: rank))


def _sharding(kind: str, *boxes: SimpleNamespace) -> SimpleNamespace:
    return SimpleNamespace(sharding_type=kind, sharding_spec=SimpleNamespace(shards=list(boxes)) if boxes else None)


TABLES = [_Table("t0", 1000), _Table("t1", 2000), _Table("t2", 50)]


def _workload():
    return workload_from_torchrec(TABLES, 13, [64, 16], [64, 1], pooling_factor=4, batch_size=256)


def test_model_description_becomes_the_workload() -> None:
    w = _workload()
    # because DLRM's bottom MLP starts at the dense input width and the top MLP is the over-arch
    assert w.table_rows == [1000, 2000, 50]
    assert w.bottom_mlp == [13, 64, 16] and w.top_mlp == [64, 1]
    assert (w.embedding_dim, w.lookups_per_sample, w.minibatch.strong_global) == (16, 4, 256)


def test_mixed_dims_are_refused() -> None:
    with pytest.raises(DlrmsimError, match="embedding dim"):
        workload_from_torchrec([_Table("a", 10, 16), _Table("b", 10, 32)], 13, [16], [1], pooling_factor=1, batch_size=8)


def test_plan_boxes_become_shards() -> None:
    plan = SimpleNamespace(
        plan={
            "": {
                "t0": _sharding("table_wise", _box(0, 0, 1000, 16, 1)),
                "t1": _sharding("column_wise", _box(0, 0, 2000, 8, 0), _box(0, 8, 2000, 8, 1)),
                "t2": _sharding("data_parallel"),
            }
        }
    )
    p = placement_from_plan(plan, TABLES, 2)
    # because a column split keeps every row and halves the columns; data-parallel tables live on every rank
    assert p.spec.strategy == "column_wise"
    assert [(s.table, s.rank, s.rows, s.columns, s.col_offset) for s in p.shards] == [
        (0, 1, 1000, 16, 0),
        (1, 0, 2000, 8, 0),
        (1, 1, 2000, 8, 8),
    ]
    assert p.replicated_tables == (2,) and p.sharded_tables == (0, 1)

    # and a plan simulates as is: with both tables on rank 0 (its own socket and memory), that rank looks up
    # twice the rows it does when each rank holds one table, so (with lookups dominating the step) the step is slower
    def table_wise(rank_t0: int, rank_t1: int) -> SimpleNamespace:
        return SimpleNamespace(
            plan={
                "": {
                    "t0": _sharding("table_wise", _box(0, 0, 1000, 16, rank_t0)),
                    "t1": _sharding("table_wise", _box(0, 0, 2000, 16, rank_t1)),
                    "t2": _sharding("data_parallel"),
                }
            }
        )

    w = workload_from_torchrec(TABLES, 13, [64, 16], [64, 1], pooling_factor=512, batch_size=4096)
    cfg = TrainingConfig(topology="clx-64s-opa", workload="small", ranks=2, scaling="strong")
    topo = load_training_topology(cfg)

    def step_s(plan: SimpleNamespace) -> float:
        inputs = load_inputs(cfg, workload=w, topology=topo, placement=placement_from_plan(plan, TABLES, 2))
        return run_iteration(inputs, cfg).iteration_s

    assert step_s(table_wise(0, 0)) > step_s(table_wise(1, 0))


def test_plan_errors_name_the_table() -> None:
    bad_rank = SimpleNamespace(plan={"": {t.name: _sharding("table_wise", _box(0, 0, t.num_embeddings, 16, 5)) for t in TABLES}})
    with pytest.raises(DlrmsimError, match="rank 5"):
        placement_from_plan(bad_rank, TABLES, 2)
    missing = SimpleNamespace(plan={"": {"t0": _sharding("data_parallel")}})
    with pytest.raises(DlrmsimError, match="t1 has no sharding"):
        placement_from_plan(missing, TABLES, 2)
    mixed = SimpleNamespace(
        plan={
            "": {
                "t0": _sharding("row_wise", _box(0, 0, 500, 16, 0), _box(500, 0, 500, 16, 1)),
                "t1": _sharding("table_wise", _box(0, 0, 2000, 16, 0)),
                "t2": _sharding("data_parallel"),
            }
        }
    )
    # because dlrmsim's row-wise exchange reduce-scatters every sharded table over all ranks
    with pytest.raises(DlrmsimError, match="by rows"):
        placement_from_plan(mixed, TABLES, 2)


def test_torchrec_planner_plan_is_read() -> None:
    torch = pytest.importorskip("torch")
    torchrec = pytest.importorskip("torchrec", reason="TorchRec not installed (make torchrec)")
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    tables = [
        torchrec.EmbeddingBagConfig(name=f"t{i}", embedding_dim=16, num_embeddings=1000 * (i + 1), feature_names=[f"f{i}"])
        for i in range(4)
    ]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    planner = EmbeddingShardingPlanner(topology=Topology(world_size=2, compute_device="cpu"), batch_size=128)
    plan = planner.plan(ebc, [EmbeddingBagCollectionSharder()])
    p = placement_from_plan(plan, tables, 2)
    # because every table is either sharded (its boxes cover all of its rows and columns) or replicated
    for t, cfg in enumerate(tables):
        if t in p.replicated_tables:
            continue
        boxes = [s for s in p.shards if s.table == t]
        assert sum(s.rows * s.columns for s in boxes) == cfg.num_embeddings * cfg.embedding_dim
    assert set(p.sharded_tables) | set(p.replicated_tables) == {0, 1, 2, 3}
