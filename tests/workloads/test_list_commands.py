"""`workload list` and `topology list` show every built-in and speak JSON like every other command."""

from __future__ import annotations

import json

import pytest

from dlrmsim.cli import main
from dlrmsim.topologies import topology_names
from dlrmsim.workloads import workload_names
from dlrmsim.workloads.layers import layer_workload_names
from dlrmsim.workloads.serving import serving_workload_names


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    main(argv)
    return json.loads(capsys.readouterr().out)


def test_workload_list_names_every_kind(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(["workload", "list", "--json"], capsys)
    # Because the README sends users to serve -w recsys-inference and instances -w mlp-like, the list must show them.
    assert [w["name"] for w in data["training"]] == workload_names()
    assert {(o["kind"], o["name"]) for o in data["other"]} == {("serving", n) for n in serving_workload_names()} | {
        ("layers", n) for n in layer_workload_names()
    }
    assert {"recsys-inference", "mlp-like"} <= {o["name"] for o in data["other"]}


def test_topology_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(["topology", "list", "--json"], capsys)
    # Because every preset is listed with its rank count, a script can pick a topology without parsing a table.
    assert [t["name"] for t in data["topologies"]] == topology_names()
    assert all(t["ranks"] >= 1 for t in data["topologies"])


def test_workload_show_says_which_tables_are_split(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(["workload", "show", "small", "--ranks", "16", "--placement", "column_wise", "--json"], capsys)
    tables = data["placement"]["tables"]
    # Because Small has 8 tables of E=64 and 16 ranks, column-wise splits each table in two 32-column halves.
    assert [t["layout"] for t in tables] == ["split"] * 8
    assert [(s["columns"], s["rank"]) for s in tables[0]["shards"]] == [([0, 32], 0), ([32, 64], 1)]


def test_workload_show_names_replicated_tables(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(
        ["workload", "show", "mlperf", "--ranks", "4", "--placement", "column_wise", "--replicate-below-rows", "2048", "--json"],
        capsys,
    )
    layouts = {t["table"]: t["layout"] for t in data["placement"]["tables"]}
    # Because tables under 2048 rows are replicated, exactly the ones listed as replicated say so.
    assert {t for t, lay in layouts.items() if lay == "replicated"} == set(data["placement"]["replicated_tables"]) != set()
