"""`dlrmsim instances`: throughput of k model instances per many-core socket under three gradient-sync schemes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from dlrmsim.errors import DlrmsimError
from dlrmsim.output import console, print_json, print_table

if TYPE_CHECKING:  # imported inside the command: `dlrmsim --help` should not load the engine
    from dlrmsim.instances.simulate import InstancePoint, InstancesResult


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise DlrmsimError(f"'{text}' is not a comma-separated list of integers", field=flag, fix="e.g. 1,2,4,7,14,28") from None
    if not values or min(values) < 1:
        raise DlrmsimError(f"'{text}' needs positive instance counts", field=flag, fix="e.g. 1,2,4,7,14,28")
    return values


def _syncs(text: str) -> list[str]:
    from dlrmsim.instances.simulate import SYNC_SCHEMES

    names = [x.strip() for x in text.split(",") if x.strip()]
    if names == ["all"]:
        return list(SYNC_SCHEMES[:3])
    for name in names or [text]:
        if name not in SYNC_SCHEMES:
            raise DlrmsimError(
                f"unknown sync scheme '{name}'", field="--sync", fix=f"use {', '.join(SYNC_SCHEMES)} or all (comma-separated)"
            )
    return names


def _rows(points: list[InstancePoint]) -> list[tuple]:
    base = points[0].samples_per_s
    return [
        (
            p.instances_per_socket if p.sockets_per_instance == 1 else f"1/{p.sockets_per_instance}",
            p.instances_per_node,
            p.cores_per_instance,
            p.batch_per_instance,
            p.samples_per_s,
            p.samples_per_s / base,
            p.iteration_s * 1e3,
            p.mem_bw_util,
            p.core_busy,
            p.flop_util,
            p.sync_s * 1e3,
            p.sync_core_frac,
        )
        for p in points
    ]


COLUMNS = [
    "per socket",
    "per node",
    "cores/inst",
    "batch/inst",
    "samples/s",
    "vs first",
    "iter ms",
    "mem BW util",
    "core busy",
    "flop util",
    "sync ms",
    "sync cores",
]


def print_result(res: InstancesResult) -> None:
    sync = res.points[0].sync if res.points else ""
    title = (
        f"{res.workload} ({res.workload_kind}) on {res.topology}: {res.sockets} sockets, batch {res.batch_per_socket} "
        f"per socket, "
        f"sync {sync}, model {res.model_bytes / 1e6:.1f} MB"
    )
    print_table(title, COLUMNS, _rows(res.points))


def register(app: typer.Typer) -> None:
    from dlrmsim.config import parse_assignments as parse_sets

    @app.command()
    def instances(
        topology: str = typer.Option("clx-2s-56c", "--topology", "-t", help="topology preset or YAML path (one rank per socket)"),
        workload: str = typer.Option(
            "small", "--workload", "-w", help="DLRM preset (small, ...), layer-list preset (resnet-like, mlp-like) or YAML"
        ),
        instances: str = typer.Option("1,2,4,7,14,28", "--instances", "-k", help="comma-separated instance counts (see --per)"),
        per: str = typer.Option(
            "socket", "--per", help="socket: counts are per socket (NUMA node); node: per node (all sockets)"
        ),
        sync: str = typer.Option(
            "gradient_server",
            "--sync",
            help="gradient_server | parameter_server | ring_allreduce | none, comma-separated, or all",
        ),
        batch: int | None = typer.Option(None, "--batch", help="samples per socket per iteration (default: the workload's)"),
        settings: str = typer.Option("default", "--settings", help="instance settings preset or YAML (delay, jitter, ...)"),
        settings_set: list[str] = typer.Option([], "--settings-set", help="PATH=VALUE on the settings YAML"),
        sockets: int | None = typer.Option(
            None, "--sockets", help="scale the topology's fabric to N sockets (as --topology-set fabric.endpoints=N)"
        ),
        topo_set: list[str] = typer.Option([], "--topology-set", help="what-if: PATH=VALUE on the topology YAML"),
        wl_set: list[str] = typer.Option([], "--workload-set", help="what-if: PATH=VALUE on the workload YAML"),
        json_out: bool = typer.Option(False, "--json", help="print one JSON document"),
    ) -> None:
        """Throughput, memory-bandwidth and core use, and sync time of k instances per socket."""
        from dlrmsim.config import validate
        from dlrmsim.instances.simulate import InstancesConfig, run_instances
        from dlrmsim.topologies import sockets_override

        counts = _ints(instances, "--instances")
        topology_overrides = parse_sets(topo_set, "--topology-set") | sockets_override(topology, sockets)
        results = []
        for s in _syncs(sync):
            cfg = validate(
                InstancesConfig,
                {
                    "topology": topology,
                    "workload": workload,
                    "instances": counts,
                    "per": per,
                    "sync": s,
                    "batch": batch,
                    "settings": settings,
                    "settings_overrides": parse_sets(settings_set, "--settings-set"),
                    "topology_overrides": topology_overrides,
                    "workload_overrides": parse_sets(wl_set, "--workload-set"),
                },
                "command line",
            )
            results.append(run_instances(cfg))
        if json_out:
            print_json(results[0].to_json() if len(results) == 1 else [r.to_json() for r in results])
            return
        for res in results:
            print_result(res)
        console.print("per socket 1/n: one instance spans n sockets (barrier across them after every layer)")
