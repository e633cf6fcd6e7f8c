"""`dlrmsim calibrate`: measure this host and write its calibration YAML."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import Progress

from dlrmsim.calibration.backends import check_backend
from dlrmsim.errors import DlrmsimError, parse_counts
from dlrmsim.output import console, err_console, print_json, print_table

if TYPE_CHECKING:
    from dlrmsim.calibration.drift import DriftSample
    from dlrmsim.calibration.validate import ValidationReport


def calibrate(
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help="short run: fewer sizes and repeats (3-7 min on a 2-core VM, 12-13 min on 16 cores with the torchrec extra); "
            "validate after a full run (docs/accuracy.md)",
        ),
    ] = False,
    backend: Annotated[str | None, typer.Option("--backend", help="numpy or torch (default: torch when installed)")] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="calibration YAML to write (default calibration/host-<name>.yaml)")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print a JSON summary instead of tables")] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="no progress bars")] = False,
    refit: Annotated[
        Path | None,
        typer.Option(
            "--refit",
            help="measure nothing: fit this calibration's stored measurements again with this version's fits "
            "(--out default: <name>.refit.yaml beside it)",
        ),
    ] = None,
    finish: Annotated[
        bool,
        typer.Option(
            "--finish",
            help="measure nothing more: fit what an interrupted run of the same command kept in <out>.partial.jsonl "
            "(its whole first pass; benchmarks lacking a later pass keep one)",
        ),
    ] = False,
    max_minutes: Annotated[
        float | None,
        typer.Option(
            "--max-minutes",
            min=0.0,
            help="past this many minutes, skip the measurements of later passes still to take; the first pass always "
            "completes, so the run ends soon after (a lent machine's lease, a job's limit)",
        ),
    ] = None,
    cores: Annotated[
        str | None,
        typer.Option(
            "--cores",
            help="measure the per-core-count benchmarks at these counts only (e.g. 1,8), all cores always added: "
            "a shorter run for a lent machine (give it again with --finish); predictions take the nearest count "
            "measured",
        ),
    ] = None,
) -> None:
    """Run the micro-benchmarks (GEMM, embedding bags, memory streams, collectives), fit the cost model and
    write the calibration YAML. An interrupted run resumes from <out>.partial.jsonl."""
    from dlrmsim.calibration.calibrate import default_out, refit_calibration, run_calibration
    from dlrmsim.calibration.compare import error_summary

    if backend is not None:
        check_backend(backend)
    if out is not None and out.exists() and out.is_dir():
        raise DlrmsimError("--out is a directory", source=out, fix="give a file path such as calibration/host.yaml")
    t0 = time.perf_counter()
    if refit is not None:
        if finish or max_minutes is not None or cores is not None:
            flag = "--finish" if finish else "--max-minutes" if max_minutes is not None else "--cores"
            raise DlrmsimError(f"--refit measures nothing, so {flag} does not apply", field=flag, fix="drop it")
        if quick or backend is not None:
            raise DlrmsimError(
                "--refit measures nothing, so --quick and --backend do not apply", field="--refit", fix="drop them"
            )
        out = out or refit.with_name(f"{refit.stem}.refit.yaml")
        cal = refit_calibration(refit, out)
    else:
        out = out or default_out()
        cal = run_calibration(
            quick=quick,
            backend=backend,
            out=out,
            progress=not (no_progress or json_out),
            finish=finish,
            max_s=None if max_minutes is None else 60.0 * max_minutes,
            only_cores=parse_counts(cores, "--cores"),
        )
    elapsed = time.perf_counter() - t0
    summary = error_summary(cal.fit_quality, cal.measurements)
    if json_out:
        print_json(
            {
                "out": str(out),
                "elapsed_s": round(elapsed, 1),
                "host": cal.host.model_dump(),
                "gemm_peak_efficiency": cal.gemm.peak_efficiency,
                "memory": cal.memory.model_dump(),
                "embedding": [e.model_dump() for e in cal.embedding],
                "collectives": [c.model_dump() for c in cal.collectives],
                "fit_error_pct": {
                    k: {"count": v.runs, "median_abs": v.median_abs_pct, "max_abs": v.max_abs_pct, "host_moved": v.host_moved}
                    for k, v in summary.items()
                },
                "eq_check": [r.model_dump() for r in cal.eq_check],
            }
        )
        return
    h = cal.host
    console.print(
        f"[bold]{h.cpu_model}[/], {h.cores} cores, {h.isa}, fp32 peak {h.peak_fp32_GFLOPs:.4g} GFLOP/s "
        f"(clock {h.clock_GHz:.4g} GHz from {h.clock_source}; reported {h.reported_clock_GHz or h.clock_GHz:g} GHz), "
        f"{h.memory_GB:g} GB, backend {h.backend}",
        highlight=False,
    )
    print_table(
        "Fitted parameters",
        ["parameter", "value"],
        [
            (
                "last-level cache the model uses, MiB (reported)",
                f"{h.model_llc_bytes / 2**20:.3g} ({h.llc_bytes / 2**20:.3g})",
            ),
            ("GEMM peak efficiency (all cores)", cal.gemm.peak_efficiency),
            *[(f"GEMM best GFLOP/s at {c} cores", v) for c, v in cal.gemm.achieved_GFLOPs_by_cores],
            *[
                (
                    f"GEMM aspect factor at {t.cores} cores (aspect: factor)",
                    ", ".join(f"{a:.2g}: {e:.2f}" for a, e in t.aspect_points),
                )
                for t in cal.gemm.tables
                if t.aspect_points
            ],
            *[
                (
                    f"GEMM in training-step order at {t.cores} cores: traffic overlap (1 = roofline), us/call cold",
                    f"{t.memory_overlap:g} / {t.cold_call_us:g}",
                )
                for t in cal.gemm.tables
            ],
            *[
                (
                    f"GEMM with evicted operands at {t.cores} cores: us/call, x traffic time, x arithmetic time "
                    "(charged by evicted share); among other ops (every step's GEMM): us/call, x traffic time of its "
                    "bytes up to its cores' L2",
                    f"{t.evicted_call_us:g} / {t.evicted_traffic_factor or 0.0:g} / {t.evicted_compute_factor or 0.0:g}; "
                    f"{t.sequence_call_us or 0.0:g} / {t.sequence_l2_factor or 0.0:g}",
                )
                for t in cal.gemm.tables
                if t.evicted_call_us is not None
            ],
            *[
                (
                    f"GEMM after its rank went without one at {t.cores} cores: us by gap (charged in place of the "
                    "evicted us/call)",
                    ", ".join(f"{g:g} ms +{us:g}" for g, us in t.idle_extra_us),
                )
                for t in cal.gemm.tables
                if t.idle_extra_us
            ],
            *(
                [("GEMM micro-kernel width (output columns), remainder", f"{cal.gemm.vector_block} / {cal.gemm.remainder}")]
                if cal.gemm.vector_block
                else []
            ),
            *[
                (
                    f"result written into evicted memory at {c.cores} cores: ns/KiB GEMM, element-wise",
                    f"{c.gemm_ns_per_KiB:g} / {c.elementwise_ns_per_KiB:g}",
                )
                for c in cal.cold_output
            ],
            *[
                (f"element-wise op on tensors in the last-level cache at {c.cores} cores: GB/s", c.elementwise_cached_GBps)
                for c in cal.cold_output
                if c.elementwise_cached_GBps is not None
            ],
            ("memory bandwidth GB/s (triad, saturated)", cal.memory.bandwidth_GBps),
            ("memory GB/s per core", cal.memory.per_core_GBps),
            ("memory saturation cores", cal.memory.saturation_cores),
            *[
                (
                    f"embedding {e.op} {e.distribution} ({e.cores} cores): GB/s, ns/row, ns/walk miss, ns/reload, us/op, us/run",
                    f"{e.bandwidth_GBps:g} / {e.row_time_ns:g} / {e.walk_time_ns:g} / {e.reload_time_ns:g} / "
                    f"{e.fixed_us:g} / {e.run_start_us:g}",
                )
                for e in cal.embedding
            ],
            *[
                (f"{c.op} alpha us / beta GB/s ({c.implementation})", f"{c.alpha_us:g} / {c.beta_GBps:g}")
                for c in cal.collectives
            ],
            *(
                [
                    (
                        f"last of {s.ranks} ranks at a barrier, % late after (ms of compute)",
                        ", ".join(f"{ms:.3g}: {100 * f:.1f}" for ms, f in s.points),
                    )
                ]
                if (s := cal.arrival_skew) is not None
                else []
            ),
        ],
    )
    print_table(
        "Fit quality: |predicted - measured| / measured",
        ["benchmark", "runs", "median %", "max %", "host moved"],
        [(k, v.runs, v.median_abs_pct, v.max_abs_pct, v.host_moved) for k, v in summary.items()],
    )
    print_table(
        "Eq. 1 / Eq. 2 check at 2 ranks",
        ["workload", "op", "Eq. MiB", "moved MiB", "meas. ms", "model ms", "err %", "scaled"],
        [
            (
                r.workload,
                r.collective,
                r.equation_bytes / 2**20,
                r.moved_bytes / 2**20,
                r.measured_s * 1e3,
                r.model_s * 1e3,
                r.error_pct,
                r.scale,
            )
            for r in cal.eq_check
        ],
    )
    console.print(f"wrote {out} in {elapsed:.0f} s")


def validate(
    calibration: Path | None = typer.Option(None, "--calibration", "-c", help="calibration YAML from `dlrmsim calibrate`"),
    backend: str | None = typer.Option(None, help="numpy | torch (default: the backend the calibration measured)"),
    case: list[str] = typer.Option([], "--case", help="run only these cases (repeatable)"),
    iterations: int = typer.Option(5, min=1, help="timed iterations per case (median kept)"),
    warmup: int = typer.Option(2, min=0, help="untimed iterations first"),
    rounds: int = typer.Option(3, min=1, help="rounds over all cases; each case keeps its fastest round"),
    phases: bool = typer.Option(False, "--phases", help="also print measured vs predicted time per phase"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
    against: str = typer.Option(
        "project",
        "--against",
        help="what runs the cases: project (dlrmsim's own runner), torchrec, reference; several, comma-separated "
        "(e.g. project,torchrec), run in turn case by case in every round, one report each",
    ),
    reference: Path | None = typer.Option(None, "--reference", help="with --against reference: a facebookresearch/dlrm checkout"),
    results_dir: Path | None = typer.Option(
        Path("validation/results"), "--results-dir", help="keep this run's evidence as a CSV here (--no-results: keep nothing)"
    ),
    no_results: bool = typer.Option(False, "--no-results", help="do not write the results CSV"),
    list_cases: bool = typer.Option(False, "--list-cases", help="list the validation cases and exit"),
    threads: str | None = typer.Option(
        None, "--threads", help="run each case at these thread counts per rank (e.g. 1,2,4,8,16), named <case>@t<n>"
    ),
    repredict_csv: Path | None = typer.Option(
        None, "--repredict", help="run nothing: predict the cases of a kept results CSV again with this calibration"
    ),
    html: Path | None = typer.Option(
        None, "--html", help="also write measured against predicted time (per thread count when swept) as a plotly page"
    ),
) -> None:
    """Run small DLRM training iterations for real and compare them with the calibrated simulator."""
    from dlrmsim.calibration.validate import (
        case_names,
        check_case_names,
        check_fits_host,
        load_cases,
        parse_thread_counts,
        repredict,
        run_validations,
        write_results_csv,
    )

    if list_cases:
        if json_out:
            print_json({"cases": case_names()})
        else:
            for name in case_names():
                console.print(name, highlight=False)
        return
    check_case_names(case)  # before the calibration is read: a misspelt case fails at once
    thread_counts = parse_thread_counts(threads)
    if thread_counts:  # an oversubscribed count fails before the calibration is read, like a misspelt case
        check_fits_host(load_cases(only=case or None, threads=thread_counts))
    if calibration is None:
        raise DlrmsimError(
            "validate needs a calibration",
            field="--calibration",
            fix="pass --calibration calibration/host-<name>.yaml (from `dlrmsim calibrate`)",
        )
    if repredict_csv is not None:
        # Kept evidence against this calibration: the measured columns as they were, nothing run or written.
        report = repredict(repredict_csv, calibration)
        _print_target(report, calibration, json_out, title=f"Kept measurements ({repredict_csv.name}) predicted again")
        if phases and not json_out:
            _print_phases(report)
        _write_plot(report, html, f"{repredict_csv.name} predicted again with {calibration.name}", json_out)
        return
    targets = [t.strip() for t in against.split(",") if t.strip()]
    if len(targets) > 1 and html is not None:
        raise DlrmsimError("--html plots one target's validation", field="--html", fix="give one --against target with it")
    reports = run_validations(
        calibration,
        targets,
        backend=backend,
        only=case or None,
        iterations=iterations,
        warmup=warmup,
        progress=not json_out,
        rounds=rounds,
        reference=reference,
        threads=thread_counts,
    )
    out: list[dict[str, Any]] = []
    for target, report in zip(targets, reports, strict=True):
        if results_dir is not None and not no_results:
            saved = write_results_csv(report, results_dir)
            if not json_out:
                console.print(f"results kept in {saved}")
        _write_plot(report, html, f"validation against {target}, calibration {calibration.name}", json_out)
        if json_out:
            out.append(_validation_json(report, target, phases))
        else:
            _print_validation(report, target, calibration, phases)
    if json_out:
        print_json(out[0] if len(out) == 1 else {"reports": out})


def _report_json(report: ValidationReport) -> dict[str, Any]:
    """:meth:`ValidationReport.to_json` with the cases that ran one configuration (replicates.py) and their floor."""
    from dlrmsim.calibration.replicates import of_report

    return report.to_json() | {
        "replicates": [{"cases": list(r.cases), "measured_s": list(r.measured_s), "floor": r.floor} for r in of_report(report)]
    }


def _validation_json(report: ValidationReport, target: str, phases: bool) -> dict[str, Any]:
    """One report's JSON object: every field for another implementation (with the planner's error), the main
    fields (and the phases with --phases) for the project's runner."""
    data = _report_json(report)
    if target != "project":
        for c, r in zip(data["cases"], report.cases, strict=True):
            c["planner_error"] = r.planner_error
        return data
    keys = (
        "name",
        "measured_s",
        "predicted_s",
        "error",
        "ranks",
        "threads",
        "batch",
        "measured_rounds_s",
        "kept_round",
        "drift_ratio",
        "drift_by_kind",
    )
    data["cases"] = [
        {k: c[k] for k in keys}
        | ({"measured_phases_s": c["measured_phases_s"], "predicted_phases_s": c["predicted_phases_s"]} if phases else {})
        for c in data["cases"]
    ]
    return data


def _print_validation(report: ValidationReport, target: str, calibration: Path, phases: bool) -> None:
    """One report's tables: another implementation's (_print_target) or the project runner's."""
    if target != "project":
        _print_target(report, calibration, False)
        if phases:
            _print_phases(report)  # TorchRec's measured phases beside the predicted ones
        return
    print_table(
        f"Validation on this host ({report.backend}), calibration {calibration}",
        ["case", "ranks", "threads", "batch", "measured ms", "round spread %", "host drift x", "predicted ms", "error %"],
        [
            (
                c.name,
                c.ranks,
                c.threads,
                c.batch,
                c.measured_s * 1e3,
                100 * c.spread,
                c.drift_ratio if c.drift_ratio is not None else "-",
                c.predicted_s * 1e3,
                100 * c.error,
            )
            for c in report.cases
        ],
    )
    if phases:
        _print_phases(report)
    _print_drift(report.drift_rounds)
    console.print(f"median |error| {100 * report.median_abs_error:.1f}%, max |error| {100 * report.max_abs_error:.1f}%")
    _print_replicates(report)


def _print_replicates(report: ValidationReport) -> None:
    """A line per pair of cases that ran one configuration on this host (replicates.py): the host's floor under
    the run's max |error|."""
    from dlrmsim.calibration.replicates import describe, of_report

    for r in of_report(report):
        console.print(describe(r), highlight=False, soft_wrap=True)


def _write_plot(report: ValidationReport, html: Path | None, title: str, quiet: bool) -> None:
    """``--html``: the report's plot (calibration/plot.py); an unwritable path is a one-line error."""
    if html is None:
        return
    from dlrmsim.calibration.plot import write_html

    try:
        write_html(report, html, title)
    except OSError as exc:
        raise DlrmsimError(
            f"cannot write the plot ({exc.strerror})", field="--html", fix="check the folder exists and is writable"
        ) from None
    if not quiet:
        console.print(f"wrote {html}")


def _print_phases(report: ValidationReport) -> None:
    """Each case's measured and predicted time per phase, and the prediction's error where a time was measured
    ("-" where the run timed no such phase: TorchRec's multi-rank DMP step has no phase hooks, for one)."""
    for c in report.cases:
        names = sorted(set(c.measured_phases_s) | set(c.predicted_phases_s))
        rows = []
        for n in names:
            measured, predicted = c.measured_phases_s.get(n), c.predicted_phases_s.get(n, 0.0)
            timed = measured is not None and measured > 0
            error = f"{(predicted - measured) / measured * 100:+.1f}" if timed else "-"
            rows.append((n, measured * 1e3 if timed else "-", predicted * 1e3, error))
        timed_any = any(v > 0 for v in c.measured_phases_s.values())
        title = f"{c.name}: per phase" + ("" if timed_any else " (not timed: predicted only)")
        print_table(title, ["phase", "measured ms", "predicted ms", "error %"], rows)


def _print_target(report: ValidationReport, calibration: Path, json_out: bool, title: str | None = None) -> None:
    """Another implementation's measured steps beside dlrmsim's prediction (and TorchRec's planner estimate)."""
    if json_out:
        data = _report_json(report)
        for c, r in zip(data["cases"], report.cases, strict=True):
            c["planner_error"] = r.planner_error
        print_json(data)
        return
    planner = report.backend == "torchrec"
    print_table(
        f"{title or f'Validation against {report.backend} on this host'}, calibration {calibration}",
        [
            "case",
            "threads",
            "batch",
            "measured ms",
            "spread %",
            "dlrmsim ms",
            "dlrmsim error %",
            *(["planner ms", "planner error %"] if planner else []),
            "host drift x",
        ],
        [
            (
                c.name,
                c.threads,
                c.batch,
                c.measured_s * 1e3,
                100 * c.spread,
                c.predicted_s * 1e3,
                100 * c.error,
                *(
                    [c.planner_s * 1e3 if c.planner_s else "-", 100 * c.planner_error if c.planner_error is not None else "-"]
                    if planner
                    else []
                ),
                c.drift_ratio if c.drift_ratio is not None else "-",
            )
            for c in report.cases
        ],
    )
    _print_drift(report.drift_rounds)
    line = f"dlrmsim: median |error| {100 * report.median_abs_error:.1f}%, max |error| {100 * report.max_abs_error:.1f}%"
    if planner:
        errs = sorted(abs(c.planner_error) for c in report.cases if c.planner_error is not None)
        if errs:
            line += f"; TorchRec planner: median |error| {100 * errs[len(errs) // 2]:.1f}%, max {100 * errs[-1]:.1f}%"
    console.print(line)
    _print_replicates(report)


def _print_drift(rounds: list[list[DriftSample]]) -> None:
    """The probe table, and a warning when the host drifted far enough to count in the errors."""
    from dlrmsim.calibration.drift import DRIFT_WARN, by_kind, worst

    if not rounds:
        return
    names = [d.name for d in rounds[0]]
    print_table(
        "Host drift: probe time now / at calibration",
        ["benchmark", *[f"round {i + 1}" for i in range(len(rounds))]],
        [(n, *[next((d.ratio for d in r if d.name == n), float("nan")) for r in rounds]) for n in names],
    )
    everything = [d for r in rounds for d in r]
    kinds = ", ".join(f"{k} {v:.2f}x" for k, v in by_kind(everything).items())
    console.print(f"host drift by probe family (median over rounds): {kinds}", highlight=False)
    w = worst(everything)
    if w is not None and abs(w.ratio - 1) > DRIFT_WARN:
        err_console.print(
            f"[bold yellow]warning:[/] the host drifted since calibration ({w.name} ran at {w.ratio:.2f}x its "
            "calibrated time): part of each error above is the host's, not the model's (fix: calibrate and "
            "validate back to back on an idle host)",
            highlight=False,
            soft_wrap=True,
        )


def agreement(
    first: Annotated[Path, typer.Argument(help="a calibration YAML")],
    second: Annotated[Path, typer.Argument(help="another calibration of the same host")],
    case: Annotated[list[str] | None, typer.Option("--case", help="predict only these validation cases (repeatable)")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """How far two calibrations of one host agree: every fitted parameter, and the validation cases' predicted
    iteration times under each (relative differences |a - b| / max(|a|, |b|))."""
    from dlrmsim.calibration.agreement import compare
    from dlrmsim.calibration.schema import load_calibration
    from dlrmsim.calibration.validate import check_case_names, load_cases

    check_case_names(case)
    a, b = load_calibration(first), load_calibration(second)
    ag = compare(a, b, load_cases(only=case or None))
    pm, px = ag.parameter_median_max
    qm, qx = ag.prediction_median_max
    if json_out:
        print_json(
            {
                "parameters": {"median": pm, "max": px, "count": len(ag.parameters)},
                "predictions": {"median": qm, "max": qx, "cases": {r.name: [r.a, r.b] for r in ag.predictions}},
                "worst_parameters": {r.name: [r.a, r.b] for r in ag.worst_parameters()},
                "only_in_one": list(ag.only_in_one),
            }
        )
        return
    print_table(
        f"Predicted iteration (ms): {first.name} vs {second.name}",
        ["case", "first", "second", "difference %"],
        [(r.name, r.a * 1e3, r.b * 1e3, 100 * r.difference) for r in ag.predictions],
    )
    print_table(
        "Parameters that differ most",
        ["parameter", "first", "second", "difference %"],
        [(r.name, r.a, r.b, 100 * r.difference) for r in ag.worst_parameters()],
    )
    console.print(
        f"{len(ag.parameters)} fitted parameters: median difference {100 * pm:.1f}%, max {100 * px:.1f}%; "
        f"{len(ag.predictions)} predictions: median {100 * qm:.1f}%, max {100 * qx:.1f}%",
        highlight=False,
    )


def evidence(
    files: Annotated[list[Path], typer.Argument(help="validation results CSVs, or folders of them (validation/results)")],
    target: Annotated[str | None, typer.Option("--target", help="only this target: project, torchrec or reference")] = None,
    host: Annotated[
        str | None,
        typer.Option("--host", help="only runs on this host: a name (every machine so named) or a machine as the tables name it"),
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="only runs from this ISO date or time on, e.g. 2026-11-26T08")
    ] = None,
    case: Annotated[list[str] | None, typer.Option("--case", help="only these cases (repeatable)")] = None,
    repredict: Annotated[
        bool,
        typer.Option(
            "--repredict",
            help="predict every run again with this checkout's model and the calibration the run names, instead of "
            "pooling the predictions its CSV kept (the model changes between runs)",
        ),
    ] = False,
    refit: Annotated[
        bool,
        typer.Option(
            "--refit",
            help="with --repredict: fit each run's calibration again from its kept measurements with this checkout's "
            "fit first (a calibration file holds the fit of the code that wrote it)",
        ),
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    progress: Annotated[bool, typer.Option(help="show progress on stderr (with --repredict)")] = True,
) -> None:
    """Pool kept validation runs: each case's error over the runs (a bias repeats, the host's noise moves), each
    run against the goal (median |error| <= 8 %, max <= 20 %), the goal on the per-case medians, and each phase's
    median of measured minus predicted."""
    from dlrmsim.calibration.evidence import GOAL_MAX, GOAL_MEDIAN, pool, read_rows, repredicted, select
    from dlrmsim.calibration.validate import TARGETS

    if target is not None and target not in TARGETS:
        raise DlrmsimError(f"unknown target '{target}'", field="--target", fix="use project, torchrec or reference")
    if refit and not repredict:
        raise DlrmsimError("--refit refits the calibrations to predict again", field="--refit", fix="add --repredict")
    rows = select(read_rows(files), target, host, since, case or ())
    if not rows:
        raise DlrmsimError(
            "no validation rows match", field="files", fix="check the paths and the --target/--host/--since/--case filters"
        )
    left_out: list[str] = []
    if repredict:
        with Progress(console=err_console, transient=True, disable=not progress) as bar:
            task = bar.add_task("predicting the kept runs again", total=len({r.source for r in rows}))
            rows, left_out = repredicted(
                rows, lambda name: bar.update(task, advance=1, description=f"predicted {name} again"), refit=refit
            )
        if not rows:
            raise DlrmsimError(
                f"no kept run could be predicted again ({len(left_out)} left out; {left_out[0]})",
                field="--repredict",
                fix="keep each run's calibration beside its CSV (validation/results), or drop --repredict",
            )
        for line in left_out:
            err_console.print(f"[bold yellow]left out:[/] {line}", highlight=False, soft_wrap=True)
    pooled = pool(rows)
    groups = {(h, t): pooled.of(h, t) for h, t in pooled.groups()}
    if json_out:
        print_json(
            {
                "goal": {"median": GOAL_MEDIAN, "max": GOAL_MAX},
                "repredicted": repredict,
                "refit": refit,
                "left_out": left_out,
                "groups": [
                    {
                        "host": h,
                        "target": t,
                        "pooled": dict(zip(("median_abs", "max_abs"), g.verdict(), strict=True)),
                        "replicates": dataclasses.asdict(rep) if (rep := g.replicates()) is not None else None,
                        "runs": [vars(r) | {"meets_goal": r.meets_goal} for r in g.runs],
                        "cases": {
                            c.case: {"errors": list(c.errors), "median": c.median, "same_sign": c.same_sign} for c in g.cases
                        },
                        "phases": {
                            p.phase: {"rows": p.rows, "median_diff_s": p.median_diff_s, "median_error": p.median_error}
                            for p in g.phases
                        },
                    }
                    for (h, t), g in groups.items()
                ],
            }
        )
        return
    for (h, t), g in groups.items():
        print_table(
            f"{t} on {h}: {len(g.runs)} runs",
            ["run", "cases", "median |error| %", "max |error| %", "host's floor under max %", "worst host drift (ratio)", "goal"],
            [
                (
                    r.run,
                    r.cases,
                    100 * r.median_abs,
                    100 * r.max_abs,
                    "-" if r.floor is None else 100 * r.floor,
                    "-" if r.host_drift is None else r.host_drift,
                    "met" if r.meets_goal else "missed",
                )  # fmt: skip
                for r in g.runs
            ],
        )
        print_table(
            f"{t} on {h}: each case over the runs (error = (predicted - measured) / measured)",
            ["case", "runs", "median %", "min %", "max %", "one sign"],
            [
                (c.case, len(c.errors), 100 * c.median, 100 * min(c.errors), 100 * max(c.errors), "yes" if c.same_sign else "no")
                for c in g.cases
            ],
        )
        if g.phases:
            print_table(
                f"{t} on {h}: each phase of the one-rank cases",
                ["phase", "rows", "median measured - predicted (ms)", "median error %"],
                [(p.phase, p.rows, 1e3 * p.median_diff_s, 100 * p.median_error) for p in g.phases],
            )
        med, worst = g.verdict()
        met = sum(r.meets_goal for r in g.runs)
        ok = med <= GOAL_MEDIAN and worst <= GOAL_MAX
        console.print(
            f"{t} on {h}: per-case medians over the runs: median |error| {100 * med:.1f} %, max {100 * worst:.1f} % "
            f"(goal {100 * GOAL_MEDIAN:.0f} % / {100 * GOAL_MAX:.0f} %: {'met' if ok else 'missed'}); "
            f"{met} of {len(g.runs)} runs met it alone",
            highlight=False,
            soft_wrap=True,
        )
        rep = g.replicates()
        if rep is not None:
            best = rep.perfect
            console.print(
                f"{t} on {h}: {rep.runs} runs measured one configuration twice; the floor the host put under their max "
                f"|error| was a median {100 * rep.floor_median:.1f} %, at most {100 * rep.floor_max:.1f} %, above "
                f"{50 * GOAL_MAX:.0f} % in {rep.above_half_goal} (no prediction within that of both). "
                f"A model with no error, its errors drawn from those pairs, would score a median {100 * best.median_abs:.1f} % "
                f"/ max {100 * best.max_abs:.1f} % on a run of {best.cases} cases and meet the goal in "
                f"{100 * best.meets_goal:.0f} % of runs",
                highlight=False,
                soft_wrap=True,
            )


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
    app.command("validate")(validate)
    app.command("agreement")(agreement)
    app.command("evidence")(evidence)
