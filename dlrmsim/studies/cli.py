"""`dlrmsim sweep SPEC --out DIR`, `dlrmsim report DIR`, `dlrmsim scaling` and `dlrmsim study NAME`."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import typer
from rich.markup import escape
from rich.progress import Progress

from dlrmsim.errors import DlrmsimError, check_output_file
from dlrmsim.output import console, err_console, print_json, print_table
from dlrmsim.training.cli import COMMON, LOCKSTEP_HELP, RANK_SOCKETS_HELP, make_config, run_notes


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
    # Imports inside the commands: `dlrmsim --help` imports every CLI module and must not load pandas or the engine.
    from dlrmsim.studies.runner import run_sweep
    from dlrmsim.studies.spec import plan_sweep

    if serial and scheduler:
        raise DlrmsimError("--serial and --scheduler exclude each other", field="--serial", fix="give one of them")
    plan = plan_sweep(spec)
    evaluator = plan.evaluator()
    if plan.infeasible and not json_out:
        err_console.print(f"{plan.infeasible} grid points left out: their placement cannot hold their rank count")
    summary = run_sweep(
        plan.points,
        out,
        evaluator,
        scheduler=scheduler,
        workers=workers,
        serial=serial,
        progress=progress and not json_out,
        retry_failed=retry_failed,
    )
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
    from dlrmsim.studies.report import build_report, topology_figures  # plotly: loaded only for a report
    from dlrmsim.studies.results import load_results

    if out is not None:
        check_output_file(out, "--out")
    df = load_results(folder)
    figs, notes = topology_figures(df)
    path = build_report(
        df, out or Path(folder) / "report.html", topology_figures=figs, title=title or f"dlrmsim sweep: {folder}", notes=notes
    )
    typer.echo(str(path))


def scaling_cmd(
    topology: str = COMMON["topology"],
    workload: str = COMMON["workload"],
    ranks: str = typer.Option("1,2,4,8", "--ranks", "-r", help="comma-separated rank counts"),
    scaling: str = typer.Option("strong", help="strong | weak"),
    backend: str | None = typer.Option(None, help="backend preset or YAML (default: the topology's, else ccl)"),
    comm: str = typer.Option("alltoall"),
    placement: str = typer.Option("table_wise"),
    replicate_below_rows: int | None = typer.Option(None),
    blocking: bool = typer.Option(False, "--blocking"),
    precision: str | None = typer.Option(None),
    comm_cores: int | None = typer.Option(None),
    calibration: str | None = typer.Option(None),
    rank_sockets: str | None = typer.Option(None, "--rank-sockets", help=RANK_SOCKETS_HELP),
    sockets: int | None = typer.Option(
        None, "--sockets", help="scale the topology to N sockets (its generator's endpoint count), e.g. 1024"
    ),
    baseline_ranks: int | None = typer.Option(
        None,
        "--baseline-ranks",
        help="rank count speedups are measured against (default: the fewest ranks whose sockets hold the workload)",
    ),
    topo_set: list[str] = typer.Option([], "--topology-set"),
    wl_set: list[str] = typer.Option([], "--workload-set"),
    lockstep_collectives: bool = typer.Option(False, "--lockstep-collectives", help=LOCKSTEP_HELP),
    json_out: bool = typer.Option(False, "--json"),
    html: Path | None = typer.Option(None, help="write an HTML report here"),
) -> None:
    """Strong or weak scaling: iteration time, speedup and efficiency per rank count, against a stated baseline."""
    options = dict(locals())  # the command's options, before any other local name exists
    from dlrmsim.studies.scaling import baseline_note, print_scaling_table, scaling_study

    try:
        counts = [int(x) for x in ranks.split(",") if x.strip()]
    except ValueError:
        raise DlrmsimError(f"'{ranks}' is not a comma-separated list of integers", field="--ranks", fix="e.g. 1,2,4,8") from None
    if not counts:
        raise DlrmsimError("no rank counts given", field="--ranks", fix="e.g. 1,2,4,8")
    if html is not None:
        check_output_file(html, "--html")  # before the study runs, not after
    params = {k: v for k, v in options.items() if k not in ("json_out", "html", "ranks", "baseline_ranks")}
    cfg = make_config(ranks=max(counts), **params)
    with Progress(console=err_console, transient=True, disable=json_out) as bar:
        task = bar.add_task(escape(f"{workload} on {topology}"), total=len(set(counts)) + 1)  # user text, not markup
        df = scaling_study(cfg, counts, on_point=lambda _res: bar.advance(task), baseline=baseline_ranks, keep_baseline=True)
    # Which rates the study used (calibration, bf16 without bf16 units): after it ran, so an error stays one line.
    for note in run_notes(cfg):
        err_console.print(note, highlight=False, soft_wrap=True)
    if html is not None:
        from dlrmsim.studies.report import build_report  # plotly: loaded only for a report

        df_report = df.assign(topology=topology, workload=workload, backend=cfg.backend, blocking=blocking, status="ok")
        build_report(df_report, html, title=f"{workload} {scaling} scaling on {topology}", notes=[baseline_note(df_report)])
    if json_out:
        cols = [
            "ranks",
            "sockets",
            "iteration_s",
            "speedup",
            "efficiency",
            "ranks_base",
            "baseline",
            "compute_s",
            "prepost_s",
            "exposed_allreduce_s",
            "exposed_alltoall_s",
        ]
        print_json(df[df["ranks"].isin(counts)][cols].to_dict(orient="records"))
        return
    print_scaling_table(df, f"{workload} {scaling} scaling on {topology} ({cfg.backend})")
    if html is not None:
        console.print(f"report written to {html}")


def study_cmd(
    name: str = typer.Argument(..., help="built-in study (cpu-cluster-paper) or a study YAML"),
    html: Path | None = typer.Option(None, "--html", help="write the report (one figure per experiment, offline) here"),
    csv: Path | None = typer.Option(None, "--csv", help="write every point's row here"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON document: the study and every row"),
    workers: int | None = typer.Option(
        None, "--workers", min=1, help="simulation processes (1: in this process; default: one per core)"
    ),
    experiments: str | None = typer.Option(None, "--experiments", help="comma-separated experiment names to run (default: all)"),
    list_only: bool = typer.Option(False, "--list", help="list the study's experiments and their point counts, run nothing"),
    baseline_ranks: list[str] = typer.Option(
        [],
        "--baseline-ranks",
        help="WORKLOAD=RANKS: the scaling baseline for a workload "
        "(default: the study's, else the fewest ranks that fit); repeatable",
    ),
) -> None:
    """Run a built-in study's experiment grid, e.g. the CPU-cluster paper's: tables, CSV/JSON and an HTML report."""
    from dlrmsim.host import usable_cores
    from dlrmsim.studies.paper import console_table, json_rows, load_study, parse_baselines, plan, run_study, simulate_point
    from dlrmsim.studies.pool import WorkerPool

    only = [e.strip() for e in experiments.split(",") if e.strip()] if experiments else None
    bases = parse_baselines(baseline_ranks)
    if list_only:
        study, source = load_study(name)
        exps, points, _ = plan(study, source, only, bases)
        rows = [(e.name, e.figure, e.topology, sum(p.experiment == e.name for p in points), e.title) for e in exps]
        if json_out:
            print_json([dict(zip(("name", "figure", "topology", "points", "title"), r, strict=True)) for r in rows])
        else:
            print_table(f"Study {study.name}", ["experiment", "figure", "topology", "points", "title"], rows)
        return
    if csv is not None and csv.parent and not csv.parent.exists():
        raise DlrmsimError(f"folder {csv.parent} does not exist", field="--csv", fix="create it or give another path")
    # the workers first, then the progress bar (its refresh thread must not be running when they fork)
    with (
        WorkerPool(simulate_point, workers or usable_cores()) as pool,
        Progress(console=err_console, transient=True, disable=json_out) as bar,
    ):
        task = bar.add_task(escape(f"study {name}"), total=None)  # user text, not markup
        result = run_study(name, workers=pool, only=only, on_done=lambda: bar.advance(task), baseline_ranks=bases)
    if csv is not None:
        result.rows.to_csv(csv, index=False)
    if html is not None:
        from dlrmsim.studies.paper_report import build_study_report  # plotly: loaded only for a report

        build_study_report(result, html)
    if json_out:
        print_json(
            {
                "study": result.study.name,
                "title": result.study.title,
                "wall_s": result.wall_s,
                "simulations": result.simulations,
                "rows": json_rows(result.rows),
            }
        )
        return
    by_name = {e.name: e for e in result.study.experiments}
    for exp_name, part in result.rows.groupby("experiment", sort=False):
        exp = by_name[str(exp_name)]
        table = console_table(part, exp.figure, list(exp.vary))
        print_table(exp.title, list(table.columns), [tuple(r) for r in table.itertuples(index=False)])
        for (e, series), base in result.baselines.items():
            if e == exp.name:
                console.print(f"  {series}: baseline {base.ranks} ranks ({base.reason})")
        for msg in dict.fromkeys(part.loc[~part["status"].eq("ok"), "error"].astype(str)):
            console.print(f"  not simulated: {msg}")
    console.print(f"{len(result.rows)} points, {result.simulations} simulations, {result.wall_s:.1f} s")
    for path in (csv, html):
        if path is not None:
            console.print(f"written: {path}")


def register(app: typer.Typer) -> None:
    """Add `sweep`, `report`, `scaling` and `study` to the root CLI."""
    app.command("sweep")(sweep_cmd)
    app.command("report")(report_cmd)
    app.command("scaling")(scaling_cmd)
    app.command("study")(study_cmd)
