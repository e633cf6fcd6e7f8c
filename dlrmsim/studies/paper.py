"""Built-in studies: a named grid of experiments (YAML data) run with one command, e.g. the CPU-cluster paper's.

``dlrmsim study cpu-cluster-paper --html out/paper.html`` reads ``cpu-cluster-paper.yaml`` next to this module
(or any study YAML path), expands every experiment into training configurations, simulates each distinct one
once (in worker processes when asked), and returns one row per point. Scaling experiments get speedup and
efficiency against their baseline (the experiment's ``baseline_ranks``, else the fewest ranks that fit).
``paper_report.py`` turns the rows into one figure per experiment and a table.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import PositiveInt

from dlrmsim import config
from dlrmsim.config import StrictModel
from dlrmsim.errors import DlrmsimError
from dlrmsim.studies.pool import WorkerPool
from dlrmsim.studies.scaling import Baseline, choose_baseline, scaling_frame
from dlrmsim.topologies.mapping import format_sockets
from dlrmsim.training.simulate import TrainingConfig, TrainingResult, load_inputs, run_iteration

STUDY_DIR = Path(__file__).parent
BUILTIN = {"cpu-cluster-paper": STUDY_DIR / "cpu-cluster-paper.yaml"}
Figure = Literal["scaling", "breakdown", "communication", "single_socket"]
OVERRIDE_PREFIXES = ("workload.", "topology.")

# Task kinds whose time counts as embeddings or MLPs in the single-socket split (training/taskgraph.py's kinds).
EMBEDDING_KINDS = frozenset({"embedding", "embedding_bwd", "update", "conflicts"})
MLP_KINDS = frozenset({"gemm", "elementwise"})
COLLECTIVE_CATEGORIES = ("alltoall", "allreduce")
MS = 1e3
TABLE_COLUMNS = (
    "workload",
    "ranks",
    "sockets",
    "scaling",
    "backend",
    "comm",
    "blocking",
    "update_strategy",
    "index_distribution",
    "loader",
    "iteration_s",
    "speedup",
    "efficiency",
    "ranks_base",
    "baseline",
    "compute_s",
    "prepost_s",
    "exposed_allreduce_s",
    "exposed_alltoall_s",
    "alltoall_time_s",
    "allreduce_time_s",
    "embedding_s",
    "mlp_s",
    "status",
    "error",
)


class Experiment(StrictModel):
    """One experiment: rank counts per workload on a topology, fixed settings, and the axes it crosses."""

    name: str
    title: str
    figure: Figure
    topology: str
    workloads: dict[str, list[PositiveInt]]
    fixed: dict[str, Any] = {}
    vary: dict[str, list[Any]] = {}
    baseline_ranks: dict[str, PositiveInt] = {}


class Study(StrictModel):
    """A named list of experiments."""

    name: str
    title: str
    source: str = ""
    experiments: list[Experiment]


@dataclass(frozen=True)
class Point:
    """One simulation of an experiment: its config and the labels of its varied settings (column -> text)."""

    experiment: str
    config: TrainingConfig
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def series(self) -> str:
        """The experiment's line or bar group this point belongs to: workload and varied settings, not ranks."""
        return ", ".join([self.config.workload, *self.labels.values()])


@dataclass
class StudyResult:
    """Every point's row, the baselines chosen, and how long the study took (wall seconds)."""

    study: Study
    rows: pd.DataFrame
    baselines: dict[tuple[str, str], Baseline]
    wall_s: float
    simulations: int


def load_study(name_or_path: str | Path) -> tuple[Study, str]:
    """A built-in study by name, or a study YAML; returns it and its source path."""
    path = BUILTIN.get(str(name_or_path), Path(name_or_path))
    if not path.is_file():
        raise DlrmsimError(f"no study '{name_or_path}'", field="study", fix=f"give a study YAML or one of: {', '.join(BUILTIN)}")
    data = config.read_yaml(path)
    return config.validate(Study, data, str(path)), str(path)


def label(key: str, value: Any) -> str:
    """Short text for a varied value: blocking -> blocking/overlapping, a distribution -> its kind."""
    if key == "blocking":
        return "blocking" if value else "overlapping"
    if isinstance(value, dict):
        return str(value.get("kind", json.dumps(value, sort_keys=True)))
    return str(value)


def column(key: str) -> str:
    """Result column of a varied key: ``workload.index_distribution`` -> ``index_distribution``."""
    for prefix in OVERRIDE_PREFIXES:
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def expand(exp: Experiment, source: str = "study") -> list[Point]:
    """Every (workload, varied combination, rank count) of an experiment as a checked TrainingConfig."""
    keys = list(exp.vary)
    points: list[Point] = []
    for workload, ranks in exp.workloads.items():
        for combo in itertools.product(*(exp.vary[k] for k in keys)):
            settings: dict[str, Any] = {"topology": exp.topology, "workload": workload, **exp.fixed}
            wl_over: dict[str, Any] = dict(settings.pop("workload_overrides", {}))
            topo_over: dict[str, Any] = dict(settings.pop("topology_overrides", {}))
            labels: dict[str, str] = {}
            for key, value in zip(keys, combo, strict=True):
                labels[column(key)] = label(key, value)
                if key.startswith("workload."):
                    wl_over[key.removeprefix("workload.")] = value
                elif key.startswith("topology."):
                    topo_over[key.removeprefix("topology.")] = value
                else:
                    settings[key] = value
            settings["workload_overrides"] = wl_over
            settings["topology_overrides"] = topo_over
            for r in ranks:
                cfg = config.validate(TrainingConfig, {**settings, "ranks": r}, f"{source}: experiment {exp.name}")
                points.append(Point(exp.name, cfg, labels))
    return points


def _key(cfg: TrainingConfig) -> str:
    return cfg.model_dump_json()


def busy_time(intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals (s): time with at least one of them in progress."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def summarize(res: TrainingResult, mapping_sockets: Sequence[int]) -> dict[str, Any]:
    """A simulation's row: the training row, rank 0's time by task group and in each kind of collective (s)."""
    row: dict[str, Any] = dict(res.to_row())
    row["other_s"] = res.breakdown.other_s
    row["sockets"] = format_sockets(mapping_sockets)
    emb = mlp = other = 0.0
    spans: dict[str, list[tuple[float, float]]] = {c: [] for c in COLLECTIVE_CATEGORIES}
    for rec in res.records:
        if rec.rank != 0:
            continue
        if rec.category in spans and rec.kind not in ("flow", "reduce"):
            spans[rec.category].append((rec.start, rec.end))
        elif rec.category == "compute":
            d = rec.end - rec.start
            if rec.kind in EMBEDDING_KINDS:
                emb += d
            elif rec.kind in MLP_KINDS:
                mlp += d
            else:
                other += d
    row.update(embedding_s=emb, mlp_s=mlp, other_compute_s=other)
    for cat, iv in spans.items():
        row[f"{cat}_time_s"] = busy_time(iv)
    return row


def simulate_point(cfg_json: str) -> dict[str, Any]:
    """Simulate one configuration (a worker-process entry point: JSON in, a plain row out).

    A configuration the model refuses (a rank count no mapping holds, a placement limit) comes back as a row
    with ``status`` "refused" and the one-line message, so one impossible point does not stop the study.
    """
    cfg = TrainingConfig.model_validate_json(cfg_json)
    try:
        inputs = load_inputs(cfg)
    except DlrmsimError as exc:
        return {"status": "refused", "error": str(exc)}
    res = run_iteration(inputs, cfg, record_flows=False)  # a study never writes a trace
    sockets = inputs.mapping.sockets if inputs.mapping else tuple(range(cfg.ranks))
    return {"status": "ok", "error": "", **summarize(res, sockets)}


def _cost(cfg: TrainingConfig) -> float:
    """A rough relative cost used only to start the longest simulations first (more ranks, more flows)."""
    return cfg.ranks**2 * (2.0 if cfg.backend == "mpi" else 1.0)


def run_configs(
    configs: Sequence[TrainingConfig], workers: int | WorkerPool = 1, on_done: Callable[[], None] | None = None
) -> dict[str, dict[str, Any]]:
    """Rows by config key; each distinct config simulated once, costliest first, in ``workers`` processes (1: in this
    process), or on a :class:`WorkerPool` of :func:`simulate_point` the caller made (before its progress bar)."""
    unique = {_key(c): c for c in configs}
    keys = sorted(unique, key=lambda k: -_cost(unique[k]))
    out: dict[str, dict[str, Any]] = {}
    with WorkerPool(simulate_point, min(workers, len(keys))) if isinstance(workers, int) else nullcontext(workers) as pool:
        for i, row in pool.run(keys):
            out[keys[i]] = row
            if on_done:
                on_done()
    return out


def baselines_for(exp: Experiment, points: Sequence[Point], override: Mapping[str, int] | None = None) -> dict[str, Baseline]:
    """Per series of a scaling experiment: ``override`` (workload -> ranks, from the command line), else the
    experiment's ``baseline_ranks``, else the fewest ranks that fit."""
    out: dict[str, Baseline] = {}
    for p in points:
        if p.series in out:
            continue
        wl = p.config.workload
        if override and wl in override:
            out[p.series] = Baseline(override[wl], "user-set (--baseline-ranks)")
        elif wl in exp.baseline_ranks:
            out[p.series] = Baseline(exp.baseline_ranks[wl], "the paper's baseline (set in the study)")
        else:
            out[p.series] = choose_baseline(p.config)
    return out


def parse_baselines(items: Sequence[str]) -> dict[str, int]:
    """``["large=4", "mlperf=2"]`` -> {"large": 4, "mlperf": 2} (a one-line error for anything else)."""
    out: dict[str, int] = {}
    for item in items:
        wl, sep, n = item.partition("=")
        if not sep or not wl.strip() or not n.strip().isdigit() or int(n) < 1:
            raise DlrmsimError(f"'{item}' is not WORKLOAD=RANKS", field="--baseline-ranks", fix="e.g. --baseline-ranks large=4")
        out[wl.strip()] = int(n)
    return out


def plan(
    study: Study, source: str = "study", only: Sequence[str] | None = None, baseline_ranks: Mapping[str, int] | None = None
) -> tuple[list[Experiment], list[Point], dict[tuple[str, str], Baseline]]:
    """The experiments to run, their points (baselines added to scaling series) and the baselines per series."""
    names = [e.name for e in study.experiments]
    if only:
        unknown = [n for n in only if n not in names]
        if unknown:
            raise DlrmsimError(
                f"no experiment '{unknown[0]}' in {study.name}", field="--experiments", fix=f"choose from {', '.join(names)}"
            )
    exps = [e for e in study.experiments if not only or e.name in only]
    points: list[Point] = []
    baselines: dict[tuple[str, str], Baseline] = {}
    for exp in exps:
        pts = expand(exp, source)
        if exp.figure == "scaling":
            for series, base in baselines_for(exp, pts, baseline_ranks).items():
                baselines[(exp.name, series)] = base
                have = {p.config.ranks for p in pts if p.series == series}
                if base.ranks not in have:
                    proto = next(p for p in pts if p.series == series)
                    pts.append(Point(exp.name, proto.config.model_copy(update={"ranks": base.ranks}), proto.labels))
        points.extend(pts)
    return exps, points, baselines


def run_study(
    name_or_path: str | Path,
    workers: int | WorkerPool = 1,
    only: Sequence[str] | None = None,
    on_done: Callable[[], None] | None = None,
    baseline_ranks: Mapping[str, int] | None = None,
) -> StudyResult:
    """Run a study's experiments; one row per point with its experiment, settings, outputs and scaling columns.

    ``workers``: simulation processes (1: this one), or a :class:`WorkerPool` of :func:`simulate_point` made before
    a progress bar started (see :mod:`dlrmsim.studies.pool`).
    ``baseline_ranks`` (workload -> ranks) overrides every scaling experiment's baseline for those workloads.
    """
    t0 = time.perf_counter()
    study, source = load_study(name_or_path)
    exps, points, baselines = plan(study, source, only, baseline_ranks)
    rows_by_key = run_configs([p.config for p in points], workers, on_done)
    records = []
    for p in points:
        cfg = p.config
        settings = {
            "topology": cfg.topology,
            "workload": cfg.workload,
            "ranks": cfg.ranks,
            "scaling": cfg.scaling,
            "backend": cfg.backend,
            "comm": cfg.comm,
            "blocking": cfg.blocking,
            "update_strategy": cfg.update_strategy,
        }
        records.append({"experiment": p.experiment, "series": p.series, **settings, **p.labels, **rows_by_key[_key(cfg)]})
    df = pd.DataFrame(records)
    frames = []
    figure_of = {e.name: e.figure for e in exps}
    for (exp_name, series), part in df.groupby(["experiment", "series"], sort=False):
        base = baselines.get((str(exp_name), str(series)))
        ok = part[part["status"].eq("ok")]
        if figure_of[str(exp_name)] == "scaling" and base is not None and base.ranks in set(ok["ranks"]):
            part = part.copy()
            scaled = scaling_frame(ok, base)
            for col in ("ranks_base", "baseline", "speedup", "efficiency"):
                part[col] = scaled[col]  # aligned on the index: refused points stay empty
        frames.append(part)
    out = pd.concat(frames).sort_index() if frames else df
    return StudyResult(study, out.reset_index(drop=True), baselines, time.perf_counter() - t0, len(rows_by_key))


def experiment_table(df: pd.DataFrame) -> pd.DataFrame:
    """The experiment's rows with the columns that vary or matter (constant settings dropped), times in ms."""
    cols = [c for c in TABLE_COLUMNS if c in df and not df[c].isna().all()]
    out = df[cols].copy()
    for c in cols:
        if c.endswith("_s"):
            out[c.removesuffix("_s") + "_ms"] = pd.to_numeric(out.pop(c), errors="coerce") * MS
    constant = [
        c for c in out.columns if c not in ("workload", "ranks", "status") and out[c].astype(str).nunique() <= 1 and c != "error"
    ]
    if "error" in out and not out["error"].astype(str).str.strip().any():
        constant.append("error")
    return out.drop(columns=constant)


# Console columns per figure kind (beyond the workload, ranks and the experiment's varied settings), in ms.
CONSOLE_OUTPUTS: dict[str, tuple[str, ...]] = {
    "scaling": (
        "iteration_ms",
        "speedup",
        "efficiency",
        "compute_ms",
        "prepost_ms",
        "exposed_allreduce_ms",
        "exposed_alltoall_ms",
    ),
    "breakdown": ("iteration_ms", "compute_ms", "prepost_ms", "exposed_allreduce_ms", "exposed_alltoall_ms"),
    "communication": ("iteration_ms", "alltoall_time_ms", "allreduce_time_ms", "exposed_alltoall_ms", "exposed_allreduce_ms"),
    "single_socket": ("iteration_ms", "embedding_ms", "mlp_ms"),
}


def console_table(df: pd.DataFrame, figure: str, varied: Sequence[str]) -> pd.DataFrame:
    """A narrow view of an experiment for the terminal: who (workload, ranks, sockets, varied settings) and its outputs."""
    table = experiment_table(df)
    keep = ["workload", "ranks", "sockets", *[column(v) for v in varied], *CONSOLE_OUTPUTS[figure], "status"]
    return table[[c for c in dict.fromkeys(keep) if c in table]]


def json_rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts: missing values (refused points, no baseline) become null, never NaN."""
    return df.astype(object).where(df.notna(), None).to_dict(orient="records")
