"""The sweep spec YAML, its grid of ``SweepPoint``s, and the checks that refuse a bad spec before any work starts.

Layout (every grid entry takes one value or a list of values; the grid is their Cartesian product)::

    name: opa-bandwidth                 # optional, names the report
    description: ...                    # optional
    evaluator: module:function          # optional; default dlrmsim.studies.evaluate:evaluate_point
    lockstep_collectives: false         # optional; true: every point under the lockstep approximation
    grid:
      topology: [cluster64]             # preset names or YAML paths (relative to this file)
      workload: [small, large]          # preset names or YAML paths (relative to this file)
      ranks: [2, 4, 8]
      scaling: [strong, weak]           # default strong
      backend: [ccl, mpi]               # default ccl
      placement: [table_wise]           # table_wise | column_wise | row_wise (default table_wise)
      replicate_below_rows: [null]      # default null (nothing replicated)
      comm: [alltoall]                  # alltoall | fused-scatter | scatter-list (default alltoall)
      precision: [fp32, bf16]           # fp32 | bf16 (default null: the workload's own)
      blocking: [false, true]           # default false (overlapping)
      topology_overrides:               # dotted path into the topology YAML -> values
        links.opa.bandwidth_GBps: [12.5, 25, 50]
      workload_overrides:               # dotted path into the workload YAML -> values
        lookups_per_sample: [25, 50]

A list-valued field is swept as a list of lists (``bottom_mlp: [[512, 256, 64]]``).
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, NonNegativeInt, PositiveInt, field_validator

from dlrmsim import config
from dlrmsim.config import StrictModel
from dlrmsim.errors import DlrmsimError
from dlrmsim.topologies.builder import load_topology
from dlrmsim.workloads import load_workload
from dlrmsim.workloads.placement import STRATEGIES, PlacementSpec, Strategy, max_ranks
from dlrmsim.workloads.schema import Precision, Workload

Scaling = Literal["strong", "weak"]
Comm = Literal["alltoall", "fused-scatter", "scatter-list"]

DEFAULT_EVALUATOR = "dlrmsim.studies.evaluate:evaluate_point"

# Result columns of the point's own fields, in file order; overrides follow as "topology.<path>" / "workload.<path>".
POINT_FIELDS: tuple[str, ...] = (
    "topology",
    "workload",
    "ranks",
    "scaling",
    "backend",
    "placement",
    "replicate_below_rows",
    "comm",
    "precision",
    "blocking",
)
OVERRIDE_PREFIXES: tuple[str, ...] = ("topology.", "workload.")


class SweepPoint(StrictModel):
    """One simulation to run: what to simulate and every knob, with what-if overrides as dotted path -> value."""

    topology: str
    workload: str
    ranks: PositiveInt
    scaling: Scaling = "strong"
    backend: str = "ccl"
    placement: Strategy = "table_wise"
    replicate_below_rows: NonNegativeInt | None = None
    comm: Comm = "alltoall"
    precision: Precision | None = None  # None: the workload's own precision
    blocking: bool = False
    topology_overrides: dict[str, Any] = {}
    workload_overrides: dict[str, Any] = {}
    # the opt-in approximation (TrainingConfig.lockstep_collectives); left out of the id and columns when off, so
    # the points of sweeps written before it existed keep their ids
    lockstep_collectives: bool = False

    def canonical_json(self) -> str:
        """Key-sorted compact JSON of every field (the lockstep approximation only when on): equal points give
        equal text."""
        exclude = set() if self.lockstep_collectives else {"lockstep_collectives"}
        return json.dumps(self.model_dump(mode="json", exclude=exclude), sort_keys=True, separators=(",", ":"))

    @property
    def point_id(self) -> str:
        """Stable resume key: the first 16 hex digits of the SHA-256 of the canonical JSON."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]

    @property
    def placement_spec(self) -> PlacementSpec:
        return PlacementSpec(strategy=self.placement, replicate_below_rows=self.replicate_below_rows)

    def columns(self) -> dict[str, Any]:
        """The point as flat result columns: its fields, then one column per override path."""
        row: dict[str, Any] = {name: getattr(self, name) for name in POINT_FIELDS}
        row.update({f"topology.{k}": v for k, v in self.topology_overrides.items()})
        row.update({f"workload.{k}": v for k, v in self.workload_overrides.items()})
        if self.lockstep_collectives:
            row["lockstep_collectives"] = True
        return row


def _listify(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _unique(values: Iterable[Any]) -> list[Any]:
    seen: list[Any] = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


def _one_or_many(value: Any) -> list[Any]:
    """A sweep axis: a scalar is a one-value list; repeated values count once."""
    return _unique(_listify(value))


# A sweep axis of T: a list of T, or one T (the JSON Schema says both, as the validator accepts both).
Axis = {
    t: Annotated[list[t], BeforeValidator(_one_or_many, json_schema_input_type=t | list[t])]  # type: ignore[valid-type]
    for t in (str, PositiveInt, Scaling, Strategy, NonNegativeInt | None, Comm, Precision | None, bool, Any)
}


class Grid(StrictModel):
    """The values to sweep per field; a scalar means a one-value list."""

    topology: Axis[str]
    workload: Axis[str]
    ranks: Axis[PositiveInt]
    scaling: Axis[Scaling] = ["strong"]
    backend: Axis[str] = ["ccl"]
    placement: Axis[Strategy] = ["table_wise"]
    replicate_below_rows: Axis[NonNegativeInt | None] = [None]
    comm: Axis[Comm] = ["alltoall"]
    precision: Axis[Precision | None] = [None]
    blocking: Axis[bool] = [False]
    topology_overrides: dict[str, Axis[Any]] = {}
    workload_overrides: dict[str, Axis[Any]] = {}

    @field_validator("topology_overrides", "workload_overrides", mode="before")
    @classmethod
    def _keys_as_paths(cls, value: Any) -> Any:
        return {str(k): v for k, v in value.items()} if isinstance(value, dict) else value


class SweepSpec(StrictModel):
    """A sweep: a grid of points and the evaluator (``module:function``) that runs each one."""

    name: str = "sweep"
    description: str = ""
    evaluator: str = DEFAULT_EVALUATOR
    lockstep_collectives: bool = Field(
        False,
        description="approximation for every point: a collective's ranks enter each step together (see "
        "docs/architecture.md, 'Lockstep collectives'); faster at many ranks, results differ slightly",
    )
    grid: Grid

    @field_validator("evaluator")
    @classmethod
    def _module_colon_function(cls, value: str) -> str:
        module, sep, func = value.partition(":")
        if not sep or not module or not func:
            raise ValueError(f"evaluator '{value}' must be written module:function")
        return value


@dataclass(frozen=True)
class SweepPlan:
    """A validated sweep: the spec, where it came from, the points to run and how many grid points no placement held."""

    spec: SweepSpec
    source: Path
    points: tuple[SweepPoint, ...]
    infeasible: int

    def evaluator(self) -> Callable[[SweepPoint], dict[str, Any]]:
        return resolve_evaluator(self.spec.evaluator, self.source)


def expand(spec: SweepSpec) -> list[SweepPoint]:
    """Every point of the grid (Cartesian product, fixed order, no duplicates); no feasibility check."""
    g = spec.grid
    topo_paths = list(g.topology_overrides)
    work_paths = list(g.workload_overrides)
    topo_combos = list(itertools.product(*(g.topology_overrides[p] for p in topo_paths)))
    work_combos = list(itertools.product(*(g.workload_overrides[p] for p in work_paths)))
    points: dict[str, SweepPoint] = {}
    for topology, workload, wvals, tvals, ranks, scaling, backend, placement, rbr, comm, precision, blocking in itertools.product(
        g.topology,
        g.workload,
        work_combos,
        topo_combos,
        g.ranks,
        g.scaling,
        g.backend,
        g.placement,
        g.replicate_below_rows,
        g.comm,
        g.precision,
        g.blocking,
    ):
        point = SweepPoint(
            topology=topology,
            workload=workload,
            ranks=ranks,
            scaling=scaling,
            backend=backend,
            placement=placement,
            replicate_below_rows=rbr,
            comm=comm,
            precision=precision,
            blocking=blocking,
            topology_overrides=dict(zip(topo_paths, tvals, strict=True)),
            workload_overrides=dict(zip(work_paths, wvals, strict=True)),
            lockstep_collectives=spec.lockstep_collectives,
        )
        points.setdefault(point.point_id, point)
    return list(points.values())


# --- loading and validation ---------------------------------------------------------------------------------


def load_spec(path: str | Path) -> SweepSpec:
    """Read and schema-check a sweep spec; empty lists are refused, file paths made relative to the spec's folder."""
    path = Path(path)
    data = config.read_yaml(path)
    if isinstance(data, dict) and isinstance(data.get("grid"), dict):
        _refuse_empty(data["grid"], path)
    spec = config.validate(SweepSpec, data, path)
    grid = spec.grid.model_copy(
        update={
            "topology": [_resolve_file(t, path) for t in spec.grid.topology],
            "workload": [_resolve_file(w, path) for w in spec.grid.workload],
        }
    )
    return spec.model_copy(update={"grid": grid})


def plan_sweep(path: str | Path) -> SweepPlan:
    """Load a spec and check everything a point needs before any work starts.

    Refused with a one-line ``DlrmsimError`` naming the spec field of every problem found (not only the first):
    an empty grid list, an unknown preset, an override path that does not exist (or a value the schema refuses),
    a rank count that no placement in the grid allows, or an evaluator that cannot be imported. Grid points whose own
    placement cannot hold their rank
    count (while another placement in the grid can) are left out and counted in ``infeasible``.
    """
    path = Path(path)
    spec = load_spec(path)
    errors = _check_topologies(spec, path)
    allowed, workload_errors = _allowed_rank_placements(spec, path)
    errors += workload_errors
    try:
        resolve_evaluator(spec.evaluator, path)
    except DlrmsimError as err:
        errors.append(err)
    raise_all(errors, path)
    points = expand(spec)
    feasible = [
        p for p in points if (p.workload, _key(p.workload_overrides), p.ranks, p.placement, p.replicate_below_rows) in allowed
    ]
    return SweepPlan(spec=spec, source=path, points=tuple(feasible), infeasible=len(points) - len(feasible))


def raise_all(errors: list[DlrmsimError], source: Path) -> None:
    """Raise nothing, the one error, or one error listing every problem (in order, duplicates once): a user
    fixes a spec in one edit rather than one re-run per mistake."""
    unique = list({e.one_line(): e for e in errors}.values())
    if not unique:
        return
    if len(unique) == 1:
        raise unique[0]
    parts = [
        DlrmsimError(e.message, field=e.field, fix=e.fix).one_line() if e.source == str(source) else e.one_line() for e in unique
    ]
    raise DlrmsimError(f"{len(unique)} problems: " + "; ".join(f"({i}) {p}" for i, p in enumerate(parts, 1)), source=source)


def _refuse_empty(grid: dict[str, Any], source: Path) -> None:
    errors: list[DlrmsimError] = []
    for name, value in grid.items():
        if isinstance(value, list) and not value:
            errors.append(
                DlrmsimError(
                    "empty list: a sweep needs at least one value",
                    source=source,
                    field=f"grid.{name}",
                    fix="give a value or remove the entry",
                )
            )
        if name.endswith("_overrides") and isinstance(value, dict):
            for dotted, values in value.items():
                if isinstance(values, list) and not values:
                    errors.append(
                        DlrmsimError(
                            "empty list: a sweep needs at least one value",
                            source=source,
                            field=f"grid.{name}.{dotted}",
                            fix="give a value or remove the override",
                        )
                    )
    raise_all(errors, source)


def _resolve_file(name_or_path: str, spec_path: Path) -> str:
    """Preset names stay names; a YAML path is made absolute, relative to the spec's folder."""
    p = Path(name_or_path)
    if p.suffix not in (".yaml", ".yml") and "/" not in name_or_path:
        return name_or_path
    if not p.is_absolute():
        p = spec_path.resolve().parent / p
    return str(p)


def resolve_evaluator(text: str, source: str | Path | None = None) -> Callable[[SweepPoint], dict[str, Any]]:
    """Import ``module:function``; refused with the spec's ``evaluator`` field named when it cannot be."""
    module_name, _, func_name = text.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise DlrmsimError(
            f"cannot import evaluator module '{module_name}' ({exc})",
            source=source,
            field="evaluator",
            fix="put the module on PYTHONPATH",
        ) from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise DlrmsimError(
            f"module '{module_name}' has no function '{func_name}'",
            source=source,
            field="evaluator",
            fix="write the evaluator as module:function",
        )
    return func


def _key(overrides: dict[str, Any]) -> str:
    return json.dumps(overrides, sort_keys=True)


def _rewrap(err: DlrmsimError, source: Path, field: str, what: str) -> DlrmsimError:
    inner = f" at {err.field}" if err.field and not field.endswith(err.field) else ""
    return DlrmsimError(f"{what}{inner}: {err.message}", source=source, field=field, fix=err.fix)


def _load_workload(name: str, overrides: dict[str, Any], source: Path, field: str) -> Workload:
    try:
        return load_workload(name, overrides or None)
    except DlrmsimError as err:
        raise _rewrap(err, source, field, f"workload '{Path(name).name}'") from None


def _allowed_rank_placements(
    spec: SweepSpec, source: Path
) -> tuple[set[tuple[str, str, int, str, int | None]], list[DlrmsimError]]:
    """(workload, overrides key, ranks, placement, replicate_below_rows) combinations a placement can hold, and
    every problem found on the way.

    Loads every workload variant (which checks every override path and value against the workload schema)
    and refuses a rank count that none of the grid's placements allows for some variant.
    """
    g = spec.grid
    errors: list[DlrmsimError] = []
    broken: set[str] = set()  # workloads with a bad override: their variants would repeat the same error
    for w in g.workload:
        checks = [("grid.workload", {})] + [
            (f"grid.workload_overrides.{d}", {d: v}) for d, values in g.workload_overrides.items() for v in values
        ]
        for field, overrides in checks:
            try:
                _load_workload(w, overrides, source, field)
            except DlrmsimError as err:
                errors.append(err)
                broken.add(w)
                if not overrides:
                    break  # the workload itself does not load: its overrides cannot be checked
    paths = list(g.workload_overrides)
    placements = [PlacementSpec(strategy=s, replicate_below_rows=r) for s in g.placement for r in g.replicate_below_rows]
    allowed: set[tuple[str, str, int, str, int | None]] = set()
    for w in g.workload:
        if w in broken:
            continue
        for values in itertools.product(*(g.workload_overrides[p] for p in paths)):
            overrides = dict(zip(paths, values, strict=True))
            try:
                variant = _load_workload(w, overrides, source, "grid.workload_overrides")
            except DlrmsimError as err:  # each value loads alone, but not this combination of them
                errors.append(err)
                continue
            limits = [(ps, max_ranks(variant, ps)) for ps in placements]
            for ranks in g.ranks:
                fits = [ps for ps, limit in limits if ranks <= limit]
                if not fits:
                    best_spec, best = max(limits, key=lambda item: item[1])
                    which = f"workload '{Path(w).name}'" + (f" with {overrides}" if overrides else "")
                    others = [s for s in STRATEGIES if s not in g.placement]
                    fix = f"use at most {best} ranks" + (f" or add placement {'/'.join(others)}" if others else "")
                    errors.append(
                        DlrmsimError(
                            f"{ranks} ranks exceed the {best} a {best_spec.strategy} placement allows for {which}; no "
                            f"placement in the grid allows it",
                            source=source,
                            field="grid.ranks",
                            fix=fix,
                        )
                    )
                    continue
                for ps in fits:
                    allowed.add((w, _key(overrides), ranks, ps.strategy, ps.replicate_below_rows))
    return allowed, errors


# --- topologies ----------------------------------------------------------------------------------------------


def _check_topologies(spec: SweepSpec, source: Path) -> list[DlrmsimError]:
    """Every topology, alone and with each override value, built by the topology loader; the problems found."""
    g = spec.grid
    errors: list[DlrmsimError] = []
    for t in g.topology:
        checks: list[tuple[str, dict[str, Any]]] = [("grid.topology", {})]
        checks += [(f"grid.topology_overrides.{d}", {d: v}) for d, values in g.topology_overrides.items() for v in values]
        for field, overrides in checks:
            try:
                load_topology(t, overrides=overrides or None)
            except DlrmsimError as err:
                errors.append(_rewrap(err, source, field, f"topology '{Path(t).name}'"))
                if not overrides:
                    break  # the topology itself does not load: its overrides cannot be checked
    return errors
