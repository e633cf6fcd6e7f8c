"""`dlrmsim serve`: request-level inference serving on accelerator sleds (or CPU sockets), and its max-QPS search."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import typer

from dlrmsim.config import parse_assignments
from dlrmsim.errors import DlrmsimError
from dlrmsim.output import console, err_console, print_json, print_table

# The simulation modules (numpy, simpy, networkx) are imported inside the command: `dlrmsim --help` imports
# every cli module and must stay light (tests/test_cli.py::test_help_imports_no_engine_or_numpy).


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
        ("arrived QPS (in the window)", res.arrived_qps),
        ("achieved QPS", res.achieved_qps),
        ("latency p50 (ms)", res.p50_ms),
        ("latency p95 (ms)", res.p95_ms),
        ("latency p99 (ms)", res.p99_ms),
        ("p99 within budget", f"{'yes' if res.p99_ms <= budget_ms else 'no'} ({budget_ms:g} ms)"),
        ("requests measured / batches", f"{len(res.latencies_s)} / {res.batches}"),
    ]
    print_table(title, ["metric", "value"], rows)
    print_table(
        "Core utilization (busy fraction)",
        ["rank", "node", "lookup cores", "dense cores"],
        [(c.rank, c.node, c.lookup, c.dense) for c in res.cards],
    )
    if res.links:
        print_table(
            "PCIe link utilization",
            ["link", "util ->", "util <-", "GB ->", "GB <-"],
            [(f"{lk.u} - {lk.v}", lk.util_uv, lk.util_vu, lk.bytes_uv / 1e9, lk.bytes_vu / 1e9) for lk in res.links],
        )


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        topology: str = typer.Option("yosemite-v2-sled", "--topology", "-t", help="topology preset or YAML path"),
        workload: str = typer.Option("recsys-inference", "--workload", "-w", help="serving workload preset or YAML path"),
        qps: float | None = typer.Option(None, "--qps", help="Poisson arrival rate (requests/s)"),
        arrivals: Path | None = typer.Option(None, "--arrivals", help="CSV of request timestamps (s) to replay instead of --qps"),
        duration: float | None = typer.Option(
            None, "--duration", help="simulated seconds of arrivals (default 2; 1 per --find-max-qps probe)"
        ),
        warmup: float = typer.Option(0.25, "--warmup", help="seconds of arrivals left out of the statistics"),
        seed: int = typer.Option(0, "--seed"),
        sleds: int | None = typer.Option(None, "--sleds", help="sleds in the rack (sled topologies)"),
        nodes: int | None = typer.Option(None, "--nodes", help="serve on the first N nodes only"),
        cpu_baseline: bool = typer.Option(False, "--cpu-baseline", help="serve on the topology's host CPUs instead of its cards"),
        find_max_qps: bool = typer.Option(
            False, "--find-max-qps", help="search for the highest sustainable QPS within the p99 budget"
        ),
        seeds: int = typer.Option(3, "--seeds", help="--find-max-qps: seeds every answer must hold for"),
        throughput_tol: float = typer.Option(
            0.01, "--throughput-tolerance", help="--find-max-qps: completed may fall short of arrived by this fraction"
        ),
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
            opts = serving.ServeOptions(
                qps=1.0, duration_s=duration, warmup_s=warmup, seed=seed, nodes=nodes, cpu_baseline=cpu_baseline
            )
            opts.check()
            found = serving.find_max_qps(make, w, opts, budget, start_qps=qps, seeds=seeds, throughput_tol=throughput_tol)
            for warning in found.warnings:
                err_console.print(f"warning: {warning}", highlight=False, soft_wrap=True)
            if json_out:
                best = found.result.to_json() if found.result is not None else None
                print_json(
                    {
                        "max_qps": found.qps,
                        "latency_budget_ms": budget,
                        "ci95_qps": list(found.ci_qps),
                        "capacity_bound_qps": found.bound_qps,
                        "criteria": found.criteria,
                        "warnings": found.warnings,
                        "seeds": [
                            {"seed": s, "sustained_qps": lo, "failed_qps": hi if math.isfinite(hi) else None}
                            for s, lo, hi in found.per_seed
                        ],
                        "probes": [
                            {
                                "qps": p.qps,
                                "seed": p.seed,
                                "p99_ms": p.p99_ms,
                                "late_p99_ms": p.late_p99_ms,
                                "completed_over_arrived": p.throughput_ratio,
                                "ok": p.ok,
                                "reason": p.reason,
                            }
                            for p in found.probes
                        ],
                        "at_max": best,
                    }
                )
                return
            print_table(
                f"max QPS search, p99 budget {budget:g} ms",
                ["QPS", "seed", "p99 ms", "2nd-half p99 ms", "completed/arrived", "verdict"],
                [(p.qps, p.seed, p.p99_ms, p.late_p99_ms, p.throughput_ratio, p.reason or "sustained") for p in found.probes],
            )
            console.print(found.criteria, highlight=False)
            console.print(
                "per seed: "
                + "; ".join(
                    f"seed {s} sustained {lo:,.0f}" + (f", not {hi:,.0f}" if math.isfinite(hi) else "")
                    for s, lo, hi in found.per_seed
                ),
                highlight=False,
            )
            console.print(
                f"highest sustainable QPS with p99 <= {budget:g} ms: {found.qps:,.0f} "
                f"(95% CI of the limit {found.ci_qps[0]:,.0f} .. {found.ci_qps[1]:,.0f}; "
                f"capacity bound {found.bound_qps:,.0f})",
                highlight=False,
            )
            if found.result is not None:
                print_serve(found.result, budget)
            return
        opts = serving.ServeOptions(
            qps=qps, duration_s=duration, warmup_s=warmup, seed=seed, arrival_times=times, nodes=nodes, cpu_baseline=cpu_baseline
        )
        if times is not None:
            opts = serving.ServeOptions(
                qps=None,
                duration_s=max(times[-1], 1e-9),
                warmup_s=min(warmup, 0.5 * times[-1]),
                seed=seed,
                arrival_times=times,
                nodes=nodes,
                cpu_baseline=cpu_baseline,
            )
        res = serving.simulate_serving(make(), w, opts)
        if json_out:
            print_json(res.to_json())
        else:
            print_serve(res, budget)
