"""`dlrmsim sweep SPEC --out DIR`, `dlrmsim report DIR` and `dlrmsim scaling`."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import typer

from dlrmsim.errors import DlrmsimError, check_output_file
from dlrmsim.output import console, err_console, print_json, print_table
from dlrmsim.training.cli import COMMON, make_config


def sweep_cmd(
    spec: Path = typer.Argument(..., help="sweep spec YAML (see dlrmsim/studies/examples/)"),
    out: Path = typer.Option(..., "--out", help="output folder; results.csv there is appended to and resumed from"),
    scheduler: str | None = typer.Option(None, "--scheduler", help="address of an existing Dask scheduler, e.g. tcp://host:8786"),
    workers: int | None = typer.Option(None, "--workers", help="local cluster worker processes (default: one per CPU)"),
    serial: bool = typer.Option(False, "--serial", help="run the points one after another in this process, without Dask"),
    retry_failed: bool = typer.Option(True, "--retry-failed/--keep-failed", help="run points that failed before again"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="show the progress bar"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON summary"),
) -> None:
    """Run every point of a sweep spec on Dask, appending each result at once; re-running resumes."""
    from dlrmsim.errors import DlrmsimError
    from dlrmsim.studies.runner import run_sweep
    from dlrmsim.studies.spec import plan_sweep

    if serial and scheduler:
        raise DlrmsimError("--serial and --scheduler exclude each other", field="--serial", fix="give one of them")
    plan = plan_sweep(spec)
    evaluator = plan.evaluator()
    if plan.infeasible and not json_out:
        err_console.print(f"{plan.infeasible} grid points left out: their placement cannot hold their rank count")
    summary = run_sweep(plan.points, out, evaluator, scheduler=scheduler, workers=workers, serial=serial,
                        progress=progress and not json_out, retry_failed=retry_failed)  # fmt: skip
    record = asdict(summary) | {"results": str(summary.results), "infeasible": plan.infeasible, "spec": str(spec)}
    if json_out:
        print_json(record)
        return
    print_table(
        f"Sweep {plan.spec.name}",
        ["points", "already done", "ran now", "ok", "failed", "wall s", "mode"],
        [(summary.total, summary.skipped, summary.ran, summary.ok, summary.failed, summary.wall_s, summary.mode)],
    )
    err_console.print(f"results: {summary.results}  (report: dlrmsim report {out})")


def report_cmd(
    folder: Path = typer.Argument(..., help="sweep output folder (holding results.csv)"),
    out: Path | None = typer.Option(None, "--out", help="HTML file to write (default FOLDER/report.html)"),
    title: str | None = typer.Option(None, "--title", help="page title"),
) -> None:
    """Write one self-contained HTML report of a sweep: scaling curves, breakdowns, topology, raw numbers."""
    from dlrmsim.studies.report import build_report, topology_figures
    from dlrmsim.studies.results import load_results

    if out is not None:
        check_output_file(out, "--out")
    df = load_results(folder)
    figs, notes = topology_figures(df)
    path = build_report(df, out or Path(folder) / "report.html", topology_figures=figs, title=title or f"dlrmsim sweep: {folder}",
                        notes=notes)  # fmt: skip
    typer.echo(str(path))


def scaling_cmd(
    topology: str = COMMON["topology"],
    workload: str = COMMON["workload"],
    ranks: str = typer.Option("1,2,4,8", "--ranks", "-r", help="comma-separated rank counts"),
    scaling: str = typer.Option("strong", help="strong | weak"),
    backend: str = typer.Option("ccl"),
    comm: str = typer.Option("alltoall"),
    placement: str = typer.Option("table_wise"),
    replicate_below_rows: int | None = typer.Option(None),
    blocking: bool = typer.Option(False, "--blocking"),
    precision: str | None = typer.Option(None),
    comm_cores: int | None = typer.Option(None),
    calibration: str | None = typer.Option(None),
    topo_set: list[str] = typer.Option([], "--topology-set"),
    wl_set: list[str] = typer.Option([], "--workload-set"),
    json_out: bool = typer.Option(False, "--json"),
    html: Path | None = typer.Option(None, help="write an HTML report here"),
) -> None:
    """Strong or weak scaling: iteration time, speedup and efficiency per rank count."""
    from dlrmsim.studies.scaling import print_scaling_table, scaling_study

    try:
        counts = [int(x) for x in ranks.split(",") if x.strip()]
    except ValueError:
        raise DlrmsimError(f"'{ranks}' is not a comma-separated list of integers", field="--ranks", fix="e.g. 1,2,4,8") from None
    if not counts:
        raise DlrmsimError("no rank counts given", field="--ranks", fix="e.g. 1,2,4,8")
    if html is not None:
        check_output_file(html, "--html")  # before the study runs, not after
    params = {k: v for k, v in locals().items() if k not in ("json_out", "html", "ranks", "counts", "scaling_study", "print_scaling_table")}
    cfg = make_config(ranks=max(counts), **params)
    from rich.progress import Progress

    with Progress(console=err_console, transient=True, disable=json_out) as bar:
        task = bar.add_task(f"{workload} on {topology}", total=len(set(counts)) + 1)
        df = scaling_study(cfg, counts, on_point=lambda _res: bar.advance(task))
    if html is not None:
        from dlrmsim.studies.report import build_report

        df_report = df.assign(topology=topology, workload=workload, backend=backend, blocking=blocking, status="ok")
        build_report(df_report, html, title=f"{workload} {scaling} scaling on {topology}")
    if json_out:
        cols = ["ranks", "iteration_s", "speedup", "efficiency", "compute_s", "prepost_s", "exposed_allreduce_s", "exposed_alltoall_s"]
        print_json(df[cols].to_dict(orient="records"))
        return
    print_scaling_table(df, f"{workload} {scaling} scaling on {topology} ({backend})")
    if html is not None:
        console.print(f"report written to {html}")


def register(app: typer.Typer) -> None:
    """Add `sweep`, `report` and `scaling` to the root CLI."""
    app.command("sweep")(sweep_cmd)
    app.command("report")(report_cmd)
    app.command("scaling")(scaling_cmd)
