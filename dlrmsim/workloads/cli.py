"""`dlrmsim workload ...`: list the presets and summarise one (sizes, Eq. 1 / Eq. 2, placements, flops)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import typer

from dlrmsim.output import console, print_json, print_table

if TYPE_CHECKING:  # imported inside the functions: `dlrmsim --help` should not load numpy and the schema
    from dlrmsim.workloads.placement import Placement
    from dlrmsim.workloads.schema import Workload

app = typer.Typer(help="DLRM workload presets and their derived sizes.", no_args_is_help=True)


def register(root: typer.Typer) -> None:
    """Attach the `workload` sub-app to the root CLI."""
    root.add_typer(app, name="workload")


MIB = 2.0**20
GIB = 2.0**30


@dataclass(frozen=True)
class WorkloadSummary:
    """Derived figures of a workload (sizes in MiB/GiB for reading; the model itself works in bytes)."""

    name: str
    tables: int
    embedding_dim: int
    lookups_per_sample: int
    tables_gib: float
    mlp_mib: float
    allreduce_mib: float
    alltoall_strong_mib: float
    alltoall_weak_mib_per_rank: float
    interaction_width: int
    max_ranks_table_wise: int
    max_ranks_column_wise: int
    max_ranks_row_wise: int
    flops_per_sample_forward: float
    flops_per_sample_backward: float


def summarize(w: Workload) -> WorkloadSummary:
    from dlrmsim.workloads import model
    from dlrmsim.workloads.placement import PlacementSpec, max_ranks

    fwd, bwd = model.flops_per_sample(w)
    return WorkloadSummary(
        name=w.name,
        tables=w.num_tables,
        embedding_dim=w.embedding_dim,
        lookups_per_sample=w.lookups_per_sample,
        tables_gib=model.tables_bytes(w) / GIB,
        mlp_mib=model.mlp_bytes(w) / MIB,
        allreduce_mib=model.allreduce_bytes(w) / MIB,
        alltoall_strong_mib=model.alltoall_bytes(w, w.minibatch.strong_global) / MIB,
        alltoall_weak_mib_per_rank=model.alltoall_bytes(w, w.minibatch.weak_local) / MIB,
        interaction_width=model.interaction_width(w),
        max_ranks_table_wise=max_ranks(w, PlacementSpec(strategy="table_wise")),
        max_ranks_column_wise=max_ranks(w, PlacementSpec(strategy="column_wise")),
        max_ranks_row_wise=max_ranks(w, PlacementSpec(strategy="row_wise")),
        flops_per_sample_forward=fwd,
        flops_per_sample_backward=bwd,
    )


def table_layout(p: Placement, table: int) -> dict[str, Any]:
    """How ``table`` is placed: replicated on every rank, whole on one rank, or split (its shards' ranks and blocks)."""
    if table in p.replicated_tables:
        return {"table": table, "layout": "replicated"}
    shards = [s for s in p.shards if s.table == table]
    if len(shards) == 1:
        return {"table": table, "layout": "whole", "rank": shards[0].rank}
    return {
        "table": table,
        "layout": "split",
        "shards": [
            {"rank": s.rank, "rows": [s.row_offset, s.row_offset + s.rows], "columns": [s.col_offset, s.col_offset + s.columns]}
            for s in shards
        ],
    }


def rank_tables(p: Placement, rank: int) -> str:
    """The shards a rank holds, compactly: t3 (whole), t5:c0-31 (columns 0..31), t7:r0-999 (rows 0..999)."""
    parts = []
    for s in p.shards_on(rank):
        pieces = [x for x in p.shards if x.table == s.table]
        if len(pieces) == 1:
            parts.append(f"t{s.table}")
        elif all(x.rows == pieces[0].rows for x in pieces) and s.columns != sum(x.columns for x in pieces):
            parts.append(f"t{s.table}:c{s.col_offset}-{s.col_offset + s.columns - 1}")
        else:
            parts.append(f"t{s.table}:r{s.row_offset}-{s.row_offset + s.rows - 1}")
    return " ".join(parts) or "-"


@app.command("list")
def list_cmd(json_out: bool = typer.Option(False, "--json", help="print one JSON object")) -> None:
    """List every built-in workload: DLRM training presets, serving workloads and layer workloads."""
    from dlrmsim.workloads import load_workload, workload_names
    from dlrmsim.workloads.layers import layer_workload_names, load_layer_workload
    from dlrmsim.workloads.serving import load_serving_workload, serving_workload_names

    training = [summarize(load_workload(name)) for name in workload_names()]
    others = [("serving", n, load_serving_workload(n).description, "dlrmsim serve -w " + n) for n in serving_workload_names()]
    others += [("layers", n, load_layer_workload(n).description, "dlrmsim instances -w " + n) for n in layer_workload_names()]
    if json_out:
        print_json(
            {
                "training": [asdict(s) for s in training],
                "other": [{"kind": k, "name": n, "description": d, "used_by": u} for k, n, d, u in others],
            }
        )
        return
    print_table(
        "DLRM training workloads (dlrmsim simulate/scaling -w NAME; details: dlrmsim workload show NAME)",
        ["name", "tables", "E", "P", "tables GiB", "allreduce MiB", "alltoall MiB"],
        [
            (s.name, s.tables, s.embedding_dim, s.lookups_per_sample, s.tables_gib, s.allreduce_mib, s.alltoall_strong_mib)
            for s in training
        ],
    )
    print_table("Serving and layer workloads", ["kind", "name", "description", "used by"], others)


@app.command("show")
def show_cmd(
    workload: str = typer.Argument(..., help="preset name or YAML path"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
    ranks: int | None = typer.Option(None, help="also place the tables on this many ranks"),
    placement: str = typer.Option("table_wise", help="placement strategy: table_wise, column_wise, row_wise"),
    replicate_below_rows: int | None = typer.Option(None, help="replicate tables with fewer rows than this"),
) -> None:
    """Summarise a workload: table memory, Eq. 1 allreduce and Eq. 2 alltoall volumes, placement limits, flops."""
    from dlrmsim.workloads import load_workload

    w = load_workload(workload)
    s = summarize(w)
    out = asdict(s)
    if ranks is not None:
        from dlrmsim.config import validate
        from dlrmsim.workloads.placement import PlacementSpec, place

        spec = validate(PlacementSpec, {"strategy": placement, "replicate_below_rows": replicate_below_rows}, "--placement")
        p = place(w, spec, ranks)
        out["placement"] = {
            "strategy": placement,
            "ranks": ranks,
            "max_rank_memory_gib": p.max_memory(w) / GIB,
            "rank_memory_gib": [p.memory_on(w, r) / GIB for r in range(ranks)],
            "replicated_tables": list(p.replicated_tables),
            # table -> how it is split: whole on one rank, or its column/row blocks and the ranks holding them
            "tables": [table_layout(p, t) for t in range(w.num_tables)],
        }
    if json_out:
        print_json(out)
        return
    rows = [(k.replace("_", " "), v) for k, v in out.items() if k != "placement"]
    print_table(f"Workload {w.name}: {w.description}", ["quantity", "value"], rows)
    if ranks is not None:
        pl = out["placement"]
        print_table(
            f"{placement} placement on {ranks} ranks",
            ["rank", "memory GiB", "tables (t3: whole, t5:c0-31: columns 0..31, t7:r0-999: rows 0..999)"],
            [(r, m, rank_tables(p, r)) for r, m in enumerate(pl["rank_memory_gib"])],
        )
        split = [t for t in pl["tables"] if t["layout"] == "split"]
        whole = sum(1 for t in pl["tables"] if t["layout"] == "whole")
        console.print(
            f"{whole} tables whole on one rank, {len(split)} split over ranks, "
            f"{len(pl['replicated_tables'])} replicated on every rank"
            + (f" (replicated: {', '.join(f't{t}' for t in pl['replicated_tables'])})" if pl["replicated_tables"] else ""),
            highlight=False,
            soft_wrap=True,
        )
