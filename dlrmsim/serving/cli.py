"""`dlrmsim serve`: request-level inference serving on accelerator sleds (or CPU sockets), and its max-QPS search."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from dlrmsim.config import parse_assignments
from dlrmsim.errors import DlrmsimError
from dlrmsim.output import console, print_json, print_table


def _topology_factory(topology: str, sleds: int | None, overrides: dict[str, Any]):  # noqa: ANN202
    from dlrmsim.topologies import load_topology

    params = {"sleds": sleds} if sleds is not None else {}

    def make():  # noqa: ANN202
        return load_topology(topology, overrides or None, **params)

    make()  # fail early on a bad name
    return make


def print_serve(res: Any, budget_ms: float) -> None:
    title = f"{res.workload} on {res.topology} ({res.mode}): {res.lookup_cores} lookup + {res.dense_cores} dense cores per unit"
    rows = [
        ("offered QPS", res.offered_qps),
        ("achieved QPS", res.achieved_qps),
        ("latency p50 (ms)", res.p50_ms),
        ("latency p95 (ms)", res.p95_ms),
        ("latency p99 (ms)", res.p99_ms),
        ("p99 within budget", f"{'yes' if res.p99_ms <= budget_ms else 'no'} ({budget_ms:g} ms)"),
        ("requests measured / batches", f"{len(res.latencies_s)} / {res.batches}"),
    ]
    print_table(title, ["metric", "value"], rows)
    print_table("Core utilization (busy fraction)", ["rank", "node", "lookup cores", "dense cores"],
                [(c.rank, c.node, c.lookup, c.dense) for c in res.cards])
    if res.links:
        print_table("PCIe link utilization", ["link", "util ->", "util <-", "GB ->", "GB <-"],
                    [(f"{lk.u} - {lk.v}", lk.util_uv, lk.util_vu, lk.bytes_uv / 1e9, lk.bytes_vu / 1e9) for lk in res.links])


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        topology: str = typer.Option("yosemite-v2-sled", "--topology", "-t", help="topology preset or YAML path"),
        workload: str = typer.Option("recsys-inference", "--workload", "-w", help="serving workload preset or YAML path"),
        qps: float | None = typer.Option(None, "--qps", help="Poisson arrival rate (requests/s)"),
        arrivals: Path | None = typer.Option(None, "--arrivals", help="CSV of request timestamps (s) to replay instead of --qps"),
        duration: float | None = typer.Option(None, "--duration", help="simulated seconds of arrivals (default 2; 1 per --find-max-qps probe)"),
        warmup: float = typer.Option(0.25, "--warmup", help="seconds of arrivals left out of the statistics"),
        seed: int = typer.Option(0, "--seed"),
        sleds: int | None = typer.Option(None, "--sleds", help="sleds in the rack (sled topologies)"),
        nodes: int | None = typer.Option(None, "--nodes", help="serve on the first N nodes only"),
        cpu_baseline: bool = typer.Option(False, "--cpu-baseline", help="serve on the topology's host CPUs instead of its cards"),
        find_max_qps: bool = typer.Option(False, "--find-max-qps", help="bisect for the highest QPS whose p99 is within budget"),
        latency_budget_ms: float | None = typer.Option(None, "--latency-budget-ms", help="p99 budget (default: the workload's)"),
        wl_set: list[str] = typer.Option([], "--workload-set", help="what-if: PATH=VALUE on the serving workload YAML"),
        topo_set: list[str] = typer.Option([], "--topology-set", help="what-if: PATH=VALUE on the topology YAML"),
        json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
    ) -> None:
        """Simulate request-level inference serving: achieved QPS, latency percentiles, core and PCIe utilization."""
        from dlrmsim.serving import simulate as serving
        from dlrmsim.workloads.serving import load_serving_workload

        w = load_serving_workload(workload, parse_assignments(wl_set, "--workload-set", "batching.max_requests=4") or None)
        budget = latency_budget_ms if latency_budget_ms is not None else w.latency_budget_ms
        make = _topology_factory(topology, sleds, parse_assignments(topo_set, "--topology-set"))
        times = serving.read_arrivals_csv(arrivals) if arrivals is not None else None
        if duration is None:
            duration = 1.0 if find_max_qps else 2.0
        if find_max_qps:
            if times is not None:
                raise DlrmsimError("--find-max-qps sets the QPS itself; it cannot replay --arrivals", field="--arrivals")
            opts = serving.ServeOptions(qps=1.0, duration_s=duration, warmup_s=warmup, seed=seed, nodes=nodes, cpu_baseline=cpu_baseline)
            opts.check()
            found = serving.find_max_qps(make, w, opts, budget, start_qps=qps)
            if json_out:
                best = found.result.to_json() if found.result is not None else None
                print_json({"max_qps": found.qps, "latency_budget_ms": budget,
                            "probes": [{"qps": q, "p99_ms": p, "ok": ok} for q, p, ok in found.probes], "at_max": best})
                return
            print_table(f"max QPS search, p99 budget {budget:g} ms", ["QPS", "p99 ms", "within budget"],
                        [(q, p, "yes" if ok else "no") for q, p, ok in found.probes])
            console.print(f"highest QPS with p99 <= {budget:g} ms: {found.qps:,.0f}")
            if found.result is not None:
                print_serve(found.result, budget)
            return
        opts = serving.ServeOptions(qps=qps, duration_s=duration, warmup_s=warmup, seed=seed, arrival_times=times, nodes=nodes,
                                    cpu_baseline=cpu_baseline)
        if times is not None:
            opts = serving.ServeOptions(qps=None, duration_s=max(times[-1], 1e-9), warmup_s=min(warmup, 0.5 * times[-1]), seed=seed,
                                        arrival_times=times, nodes=nodes, cpu_baseline=cpu_baseline)
        res = serving.simulate_serving(make(), w, opts)
        if json_out:
            print_json(res.to_json())
        else:
            print_serve(res, budget)
