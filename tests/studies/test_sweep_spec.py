"""Sweep specs: grid expansion, stable point ids, and bad specs refused (one line, field named) before any work."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from dlrmsim.errors import DlrmsimError
from dlrmsim.studies.spec import SweepPoint, expand, load_spec, plan_sweep
from tests.conftest import assert_one_line_error

EXAMPLES = Path(__file__).resolve().parents[2] / "dlrmsim" / "studies" / "examples"


def test_grid_is_the_cartesian_product(write_spec) -> None:
    path = write_spec(
        scaling=["strong", "weak"], blocking=[False, True], topology_overrides={"links.net.bandwidth_GBps": [12.5, 25, 50]}
    )
    points = expand(load_spec(path))
    assert len(points) == 4 * 2 * 2 * 3
    assert len({p.point_id for p in points}) == len(points)
    assert {p.topology_overrides["links.net.bandwidth_GBps"] for p in points} == {12.5, 25, 50}


def test_scalars_are_one_value_lists_and_duplicates_collapse(write_spec) -> None:
    path = write_spec(ranks=[2, 2, 4], backend="mpi", workload_overrides={"lookups_per_sample": 25})
    points = expand(load_spec(path))
    assert [p.ranks for p in points] == [2, 4]
    assert all(p.backend == "mpi" and p.workload_overrides == {"lookups_per_sample": 25} for p in points)


def test_relative_yaml_paths_resolve_against_the_spec_folder(write_spec, toy_topology: Path) -> None:
    spec = load_spec(write_spec())
    assert spec.grid.topology == [str(toy_topology.resolve())]
    assert spec.grid.workload == ["small"]  # preset names stay names


def test_point_id_is_stable_and_ignores_override_order() -> None:
    a = SweepPoint(topology="t", workload="small", ranks=4, topology_overrides={"a.b": 1, "c": 2})
    b = SweepPoint(topology="t", workload="small", ranks=4, topology_overrides={"c": 2, "a.b": 1})
    c = SweepPoint(topology="t", workload="small", ranks=8, topology_overrides={"a.b": 1, "c": 2})
    assert a.point_id == b.point_id != c.point_id
    assert len(a.point_id) == 16
    # pinned: changing how a point is hashed would make every earlier sweep's results unrecognised on resume
    text = (
        '{"backend":"ccl","blocking":false,"comm":"alltoall","placement":"table_wise","precision":null,"ranks":1,'
        '"replicate_below_rows":null,"scaling":"strong","topology":"t","topology_overrides":{},"workload":"small",'
        '"workload_overrides":{}}'
    )
    point = SweepPoint(topology="t", workload="small", ranks=1)
    assert point.canonical_json() == text
    assert point.point_id == hashlib.sha256(text.encode()).hexdigest()[:16]


def test_lockstep_approximation_reaches_every_point_and_changes_its_id(write_spec, tmp_path: Path) -> None:
    import yaml

    exact = load_spec(write_spec())
    path = write_spec(name="lockstep.yaml")
    data = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**data, "lockstep_collectives": True}, sort_keys=False))
    approx = load_spec(path)
    # Because an approximated result must never be resumed as an exact one (or the reverse), the flag is part of
    # every point's id when on, and shows as a column; off, ids are those of sweeps written before it existed.
    e, a = expand(exact), expand(approx)
    assert all(p.lockstep_collectives for p in a) and not any(p.lockstep_collectives for p in e)
    assert {p.point_id for p in e}.isdisjoint({p.point_id for p in a})
    assert a[0].columns()["lockstep_collectives"] is True and "lockstep_collectives" not in e[0].columns()


def test_columns_flatten_overrides_with_their_prefix() -> None:
    p = SweepPoint(
        topology="t",
        workload="w",
        ranks=2,
        topology_overrides={"links.opa.bandwidth_GBps": 25},
        workload_overrides={"embedding_dim": 32},
    )
    cols = p.columns()
    assert cols["topology.links.opa.bandwidth_GBps"] == 25 and cols["workload.embedding_dim"] == 32
    assert cols["ranks"] == 2 and "topology_overrides" not in cols


def test_placement_that_cannot_hold_a_rank_count_is_left_out_when_another_can(write_spec) -> None:
    # Small has 8 tables: table_wise holds at most 8 ranks, column_wise 8 x 64.
    plan = plan_sweep(write_spec(ranks=[4, 16], placement=["table_wise", "column_wise"]))
    assert plan.infeasible == 1
    assert sorted((p.ranks, p.placement) for p in plan.points) == [(4, "column_wise"), (4, "table_wise"), (16, "column_wise")]


def test_example_spec_is_valid() -> None:
    spec = load_spec(EXAMPLES / "opa_bandwidth.yaml")
    assert len(expand(spec)) == 288


def test_example_spec_passes_the_topology_loader() -> None:
    plan = plan_sweep(EXAMPLES / "opa_bandwidth.yaml")
    assert (len(plan.points), plan.infeasible) == (216, 72)  # table_wise stops at Small's 8 tables


def test_topology_loader_refuses_unknown_link(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "grid: {topology: clx-64s-opa, workload: small, ranks: 2, topology_overrides: {links.opaa.bandwidth_GBps: 25}}"
    )
    with pytest.raises(
        DlrmsimError, match=r"s\.yaml: grid\.topology_overrides\.links\.opaa\.bandwidth_GBps: .*unknown dotted path"
    ):
        plan_sweep(spec)


# --- refused before any work --------------------------------------------------------------------------------


def _refused(cli, spec: Path, tmp_path: Path, *needles: str) -> None:
    out = tmp_path / "out"
    result = cli("sweep", str(spec), "--out", str(out), "--no-progress")
    assert_one_line_error(result, *needles)
    assert not out.exists(), "a refused spec must not start any work"


def test_unknown_workload_dotted_path(cli, write_spec, tmp_path: Path) -> None:
    spec = write_spec(workload_overrides={"tables.rowz": [10, 20]})
    _refused(
        cli,
        spec,
        tmp_path,
        "spec.yaml",
        "grid.workload_overrides.tables.rowz",
        "unknown dotted path",
        "known fields here: count, rows",
    )


def test_unknown_topology_dotted_path(cli, write_spec, tmp_path: Path) -> None:
    spec = write_spec(topology_overrides={"links.opa.bandwidth_GBps": [12.5]})
    _refused(cli, spec, tmp_path, "spec.yaml", "grid.topology_overrides.links.opa.bandwidth_GBps", "unknown dotted path", "net")


def test_override_value_the_schema_refuses(cli, write_spec, tmp_path: Path) -> None:
    spec = write_spec(workload_overrides={"embedding_dim": [64, -3]})
    _refused(cli, spec, tmp_path, "grid.workload_overrides.embedding_dim", "greater than 0")


@pytest.mark.parametrize(
    ("grid", "field"),
    [
        ({"ranks": []}, "grid.ranks"),
        ({"backend": []}, "grid.backend"),
        ({"workload_overrides": {"lookups_per_sample": []}}, "grid.workload_overrides.lookups_per_sample"),
    ],
)
def test_empty_grid_list(cli, write_spec, tmp_path: Path, grid: dict, field: str) -> None:
    _refused(cli, write_spec(**grid), tmp_path, "spec.yaml", field, "empty list")


def test_rank_count_no_placement_allows(cli, write_spec, tmp_path: Path) -> None:
    spec = write_spec(ranks=[2, 64], placement=["table_wise"])
    _refused(cli, spec, tmp_path, "spec.yaml", "grid.ranks", "64 ranks exceed the 8 a table_wise placement allows", "column_wise")


def test_rank_limit_follows_the_workload_overrides(write_spec) -> None:
    # 16 tables hold 16 ranks table-wise; the 8-table variant of the same grid cannot.
    with pytest.raises(DlrmsimError, match=r"grid\.ranks: 16 ranks exceed the 8 .*'tables.count': 8"):
        plan_sweep(write_spec(ranks=[16], workload_overrides={"tables.count": [16, 8]}))
    assert len(plan_sweep(write_spec(ranks=[16], workload_overrides={"tables.count": [16, 32]})).points) == 2


def test_unknown_grid_field_and_bad_choice(cli, write_spec, tmp_path: Path) -> None:
    _refused(cli, write_spec(rank=[2]), tmp_path, "grid.rank", "unknown field", "did you mean 'ranks'?")
    _refused(cli, write_spec(scaling=["strongg"]), tmp_path, "grid.scaling", "strong")


def test_unknown_workload_preset(cli, write_spec, tmp_path: Path) -> None:
    _refused(cli, write_spec(workload=["smal"]), tmp_path, "grid.workload", "unknown workload 'smal'", "did you mean 'small'?")


def test_evaluator_that_cannot_be_imported(cli, write_spec, tmp_path: Path) -> None:
    _refused(cli, write_spec(evaluator="no_such_function"), tmp_path, "evaluator", "has no function 'no_such_function'")


def test_a_spec_reports_every_problem_at_once(write_spec) -> None:
    # because a user should fix a spec in one edit, not one re-run per mistake: an unknown topology override, a rank
    # count no placement allows and an evaluator that does not exist are all named in the one error line.
    spec = write_spec(
        evaluator="no_such_function",
        ranks=[2, 64],
        placement=["table_wise"],
        topology_overrides={"links.opa.bandwidth_GBps": [12.5]},
    )
    with pytest.raises(DlrmsimError) as exc:
        plan_sweep(spec)
    line = str(exc.value)
    assert "3 problems" in line and "\n" not in line
    for needle in ("grid.topology_overrides.links.opa.bandwidth_GBps", "grid.ranks", "has no function 'no_such_function'"):
        assert needle in line, needle


def test_every_empty_grid_list_is_reported(write_spec) -> None:
    # because each empty list is its own mistake, both are named
    with pytest.raises(DlrmsimError, match=r"2 problems: \(1\) grid\.ranks: empty list.*\(2\) grid\.backend: empty list"):
        plan_sweep(write_spec(ranks=[], backend=[]))
