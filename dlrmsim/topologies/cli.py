"""`dlrmsim topology ...`: list the built-in topologies and summarise one (ranks, hops, bandwidths, flops, memory)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from dlrmsim.config import parse_assignments
from dlrmsim.errors import DlrmsimError
from dlrmsim.output import console, print_json, print_table

app = typer.Typer(help="Hardware topologies: built-in presets and their summaries.", no_args_is_help=True)


def register(root: typer.Typer) -> None:
    """Attach the `topology` sub-app to the root CLI."""
    root.add_typer(app, name="topology")


@app.command("list")
def list_cmd(json_out: bool = typer.Option(False, "--json", help="print one JSON object")) -> None:
    """List the built-in topologies."""
    from dlrmsim.topologies import load_topology, summarize, topology_names

    summaries = [(name, summarize(load_topology(name))) for name in topology_names()]
    if json_out:
        print_json(
            {
                "topologies": [
                    {
                        "name": name,
                        "description": load_topology(name).description,
                        "ranks": s.ranks,
                        "rank_kind": s.rank_kind,
                        "links": s.unique_links,
                        "aggregate_link_bandwidth_GBps": s.aggregate_link_bandwidth_GBps,
                        "bisection_bandwidth_GBps": s.bisection_bandwidth_GBps,
                    }
                    for name, s in summaries
                ]
            }
        )
        return
    rows = [
        (name, s.ranks, s.rank_kind, s.unique_links, s.aggregate_link_bandwidth_GBps, s.bisection_bandwidth_GBps)
        for name, s in summaries
    ]
    print_table(
        "Topology presets (details: dlrmsim topology show NAME)",
        ["name", "ranks", "kind", "links", "aggr. GB/s", "bisect. GB/s"],
        rows,
    )


@app.command("show")
def show_cmd(
    topology: str = typer.Argument(..., help="preset name or YAML path"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
    html: Path | None = typer.Option(None, "--html", help="write an interactive plotly drawing to this file"),
    param: list[str] = typer.Option([], "--param", "-p", help="generator parameter KEY=VALUE, e.g. sockets=1024"),
    set_: list[str] = typer.Option([], "--set", help="dotted-path what-if edit KEY=VALUE, e.g. links.opa.bandwidth_GBps=25"),
    sockets: int | None = typer.Option(
        None, "--sockets", help="scale the topology to N sockets (its generator's endpoint count), e.g. 1024"
    ),
) -> None:
    """Summarise a topology: ranks, links, hop histogram from rank 0, aggregate and bisection bandwidth, peak flops, memory."""
    from dlrmsim.topologies import load_topology, summarize
    from dlrmsim.topologies.draw import write_html

    params = parse_assignments(param, "--param", "sockets=1024")
    if sockets is not None:
        params["sockets"] = sockets
    topo = load_topology(topology, parse_assignments(set_, "--set") or None, **params)
    s = summarize(topo)
    if html is not None:
        try:
            write_html(topo, html)  # plotly.js embedded: the page renders offline
        except OSError as exc:
            raise DlrmsimError(
                f"cannot write the drawing ({exc.strerror})", source=str(html), fix="check the directory exists"
            ) from None
    if json_out:
        print_json(s.to_json())
        return
    rows: list[tuple[str, Any]] = [
        ("ranks", f"{s.ranks} ({s.rank_kind})"),
        ("hosts", s.hosts),
        ("switches", s.switches),
        ("unique links", s.unique_links),
        ("physical links", s.physical_links),
        ("links by kind", ", ".join(f"{k}: {v}" for k, v in s.links_by_kind.items())),
        ("hops from rank 0", ", ".join(f"{h} hop{'s' if h != 1 else ''}: {n}" for h, n in s.hop_histogram.items())),
        ("aggregate link bandwidth GB/s", s.aggregate_link_bandwidth_GBps),
        ("bisection bandwidth GB/s", s.bisection_bandwidth_GBps),
    ]
    rows += [(f"peak {p} TFLOPS", v) for p, v in s.peak_tflops.items()]
    rows += [("rank memory GB", s.memory_GB), ("rank memory bandwidth GB/s", s.memory_bandwidth_GBps)]
    if s.hosts:
        rows.append(("host memory GB", s.host_memory_GB))
    if not s.calibrated:
        rows.append(("rates", "UNCALIBRATED placeholders"))
    print_table(f"Topology {s.name}: {s.description}", ["quantity", "value"], rows)
    if s.link_types:
        print_table(
            "Link types (per physical link and direction; latency includes the attached switches' halves)",
            ["type", "kind", "GB/s", "latency us", "overhead us", "one-sided"],
            [
                (k, v["kind"], v["bandwidth_GBps"], v["latency_us"], v["overhead_us"], v["one_sided"])
                for k, v in s.link_types.items()
            ],
        )
    if html is not None:
        console.print(f"wrote {html}")
