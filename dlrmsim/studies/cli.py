"""`dlrmsim sweep SPEC --out DIR` and `dlrmsim report DIR`."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import typer

from dlrmsim.output import err_console, print_json, print_table


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

    df = load_results(folder)
    figs, notes = topology_figures(df)
    path = build_report(df, out or Path(folder) / "report.html", topology_figures=figs, title=title or f"dlrmsim sweep: {folder}",
                        notes=notes)  # fmt: skip
    typer.echo(str(path))


def register(app: typer.Typer) -> None:
    """Add `sweep` and `report` to the root CLI."""
    app.command("sweep")(sweep_cmd)
    app.command("report")(report_cmd)
