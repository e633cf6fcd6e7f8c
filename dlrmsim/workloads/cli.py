"""`dlrmsim workload ...`: list the presets and summarise one (sizes, Eq. 1 / Eq. 2, placements, flops)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import typer

from dlrmsim.output import print_json, print_table

if TYPE_CHECKING:  # imported inside the functions: `dlrmsim --help` should not load numpy and the schema
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


@app.command("list")
def list_cmd() -> None:
    """List the built-in workload presets."""
    from dlrmsim.workloads import load_workload, workload_names

    rows = []
    for name in workload_names():
        s = summarize(load_workload(name))
        rows.append((name, s.tables, s.embedding_dim, s.lookups_per_sample, s.tables_gib, s.allreduce_mib, s.alltoall_strong_mib))
    print_table("Workload presets", ["name", "tables", "E", "P", "tables GiB", "allreduce MiB", "alltoall MiB"], rows)


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
            ["rank", "memory GiB"],
            [(r, m) for r, m in enumerate(pl["rank_memory_gib"])],
        )
