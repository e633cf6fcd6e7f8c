"""TorchRec interop: a TorchRec DLRM description and sharding plan as a dlrmsim workload and placement.

TorchRec users describe their tables as ``EmbeddingBagConfig``s, the dense part as ``torchrec.models.dlrm.DLRM``'s
layer sizes, and shard with ``EmbeddingShardingPlanner``, whose ``ShardingPlan`` gives each table a sharding type,
its ranks and, except for data-parallel tables, one box per shard (row and column offsets and sizes, and the rank
it lives on). This module reads those into :class:`~dlrmsim.workloads.schema.Workload` and
:class:`~dlrmsim.workloads.placement.Placement`, so that the plan a user is about to run can be simulated as is
(``dlrmsim.training.simulate.load_inputs(..., placement=...)``).

It reads the objects by their documented attributes (``num_embeddings``, ``embedding_dim``, ``sharding_type``,
``sharding_spec.shards[i].shard_offsets / shard_sizes / placement.rank()``), so it imports nothing from TorchRec
and works on any object with those attributes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dlrmsim.errors import DlrmsimError
from dlrmsim.workloads.placement import Placement, PlacementSpec, Shard
from dlrmsim.workloads.schema import Minibatch, Tables, UniformIndices, Workload

SOURCE = "TorchRec plan"
# Sharding types (torchrec.distributed.types.ShardingType values) and how dlrmsim places their shards.
SHARDED = ("table_wise", "column_wise", "row_wise", "table_row_wise", "table_column_wise", "grid_shard")
REPLICATED = ("data_parallel",)


def workload_from_torchrec(
    tables: Sequence[Any],
    dense_in_features: int,
    dense_arch_layer_sizes: Sequence[int],
    over_arch_layer_sizes: Sequence[int],
    *,
    pooling_factor: int,
    batch_size: int,
    name: str = "torchrec",
    index_distribution: Any = None,
) -> Workload:
    """The dlrmsim workload of a TorchRec DLRM (``DLRM(embedding_bag_collection, dense_in_features,
    dense_arch_layer_sizes, over_arch_layer_sizes)``) over ``tables`` (``EmbeddingBagConfig``s, one feature each).

    ``pooling_factor``: ids per table per sample (TorchRec keeps it in the planner's ``ParameterConstraints``,
    not in the model); ``batch_size``: the global batch of one step (as ``strong_global``).
    """
    if not tables:
        raise DlrmsimError("a TorchRec model without tables", source=SOURCE, field="tables", fix="pass its EmbeddingBagConfigs")
    dims = {int(t.embedding_dim) for t in tables}
    if len(dims) != 1:
        raise DlrmsimError(
            f"tables have embedding dims {sorted(dims)}",
            source=SOURCE,
            field="embedding_dim",
            fix="DLRM's dot interaction needs one embedding dim for every table",
        )
    for t in tables:
        if len(getattr(t, "feature_names", [t.name])) > 1:
            raise DlrmsimError(
                f"table {t.name} is shared by features {list(t.feature_names)}",
                source=SOURCE,
                field="feature_names",
                fix="one feature per table (shared tables are not modelled)",
            )
    return Workload(
        name=name,
        description="read from a TorchRec model description",
        tables=Tables(count=len(tables), rows=[int(t.num_embeddings) for t in tables]),
        embedding_dim=dims.pop(),
        lookups_per_sample=pooling_factor,
        index_distribution=index_distribution or UniformIndices(),
        bottom_mlp=[int(dense_in_features), *(int(x) for x in dense_arch_layer_sizes)],
        top_mlp=[int(x) for x in over_arch_layer_sizes],
        minibatch=Minibatch(strong_global=batch_size, weak_local=batch_size),
    )


def placement_from_plan(plan: Any, tables: Sequence[Any], world_size: int, *, module_path: str | None = None) -> Placement:
    """The placement of ``tables`` (in workload order) that TorchRec's ``plan`` (a ``ShardingPlan``, or its
    per-module dict of ``ParameterSharding``) chose on ``world_size`` ranks.

    ``module_path``: which module of the plan holds the tables (default: the plan's only module). Every shard box
    becomes a :class:`Shard`; data-parallel tables are replicated. dlrmsim exchanges row-wise shards' partial
    sums for every sharded table at once, so a plan is placed as ``row_wise`` if any table is split by rows (then
    every sharded table must have a row slice on every rank), else ``column_wise`` if any is split by columns,
    else ``table_wise``.
    """
    per_module = getattr(plan, "plan", plan)
    if module_path is None:
        if len(per_module) != 1:
            raise DlrmsimError(
                f"the plan shards {len(per_module)} modules: {sorted(per_module)}",
                source=SOURCE,
                field="module_path",
                fix="name the embedding module's path (module_path=...)",
            )
        module_path = next(iter(per_module))
    if module_path not in per_module:
        raise DlrmsimError(
            f"module '{module_path}' is not in the plan", source=SOURCE, field="module_path", fix=f"one of {sorted(per_module)}"
        )
    shardings: Mapping[str, Any] = per_module[module_path]
    shards: list[Shard] = []
    replicated: list[int] = []
    split_rows = split_cols = False
    for index, table in enumerate(tables):
        ps = shardings.get(table.name)
        field = f"{module_path or '<root>'}.{table.name}"
        if ps is None:
            raise DlrmsimError(
                f"table {table.name} has no sharding in the plan", source=SOURCE, field=field, fix="plan every table"
            )
        kind = str(getattr(ps.sharding_type, "value", ps.sharding_type))
        if kind in REPLICATED:
            replicated.append(index)
            continue
        if kind not in SHARDED or ps.sharding_spec is None:
            raise DlrmsimError(
                f"sharding type '{kind}' of table {table.name} is not modelled",
                source=SOURCE,
                field=field,
                fix=f"one of {SHARDED + REPLICATED}",
            )
        for box in ps.sharding_spec.shards:
            (row0, col0), (rows, cols) = box.shard_offsets, box.shard_sizes
            rank = int(box.placement.rank())
            if not 0 <= rank < world_size:
                raise DlrmsimError(
                    f"table {table.name} has a shard on rank {rank}",
                    source=SOURCE,
                    field=field,
                    fix=f"plan for {world_size} ranks",
                )
            split_rows |= int(rows) < int(table.num_embeddings)
            split_cols |= int(cols) < int(table.embedding_dim)
            shards.append(
                Shard(table=index, rank=rank, rows=int(rows), columns=int(cols), row_offset=int(row0), col_offset=int(col0))
            )
    if split_rows:
        # dlrmsim's row-wise exchange reduce-scatters partial sums of every sharded table over all ranks
        spread = {t: {s.rank for s in shards if s.table == t} for t in {s.table for s in shards}}
        if any(len(r) != world_size for r in spread.values()):
            raise DlrmsimError(
                "the plan splits some tables by rows and places others whole",
                source=SOURCE,
                field=module_path or "<root>",
                fix="row-wise plans are modelled when every sharded table has a row slice on every rank",
            )
    strategy = "row_wise" if split_rows else "column_wise" if split_cols else "table_wise"
    return Placement(
        spec=PlacementSpec(strategy=strategy),
        ranks=world_size,
        shards=tuple(shards),
        replicated_tables=tuple(replicated),
        sharded_tables=tuple(sorted({s.table for s in shards})),
    )
