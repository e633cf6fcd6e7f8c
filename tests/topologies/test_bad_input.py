"""Bad topology input: one line naming the file, the field and the fix; exit code 2; no traceback."""

from __future__ import annotations

from pathlib import Path

import yaml

from dlrmsim.topologies import PRESET_DIR
from tests.conftest import assert_one_line_error


def _preset(name: str) -> dict:
    return yaml.safe_load((PRESET_DIR / f"{name}.yaml").read_text())


def _write(tmp_path: Path, data: dict, name: str = "bad.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def _explicit(nodes: list[dict], edges: list[dict]) -> dict:
    data = _preset("skx-8s-upi")
    data["switches"] = {"sw4": {"ports": 4, "latency_us": 0.1}}
    data["fabric"] = {"generator": "explicit", "nodes": nodes, "edges": edges}
    return data


SOCKETS = [{"name": f"s{i}", "kind": "socket", "compute": "xeon-8180"} for i in range(3)]


def test_link_to_unknown_node(cli, tmp_path: Path) -> None:
    data = _explicit(SOCKETS, [{"u": "s0", "v": "s1", "link": "upi"}, {"u": "s1", "v": "s9", "link": "upi"}])
    result = cli("topology", "show", _write(tmp_path, data))
    assert_one_line_error(result, "bad.yaml", "fabric.edges.1", "unknown node 's9'", "fix:")


def test_disconnected_fabric(cli, tmp_path: Path) -> None:
    data = _explicit(SOCKETS, [{"u": "s0", "v": "s1", "link": "upi"}])
    result = cli("topology", "show", _write(tmp_path, data))
    assert_one_line_error(result, "bad.yaml", "fabric.edges", "disconnected", "'s2'", "fix: add a link from 's2'")


def test_zero_bandwidth(cli, tmp_path: Path) -> None:
    data = _preset("clx-64s-opa")
    data["links"]["opa"]["bandwidth_GBps"] = 0
    result = cli("topology", "show", _write(tmp_path, data))
    assert_one_line_error(result, "bad.yaml", "links.opa.bandwidth_GBps", "greater than 0", "fix: give a positive value")


def test_negative_bandwidth_in_other_units_names_the_users_field(cli, tmp_path: Path) -> None:
    data = _preset("skx-8s-upi")
    del data["links"]["upi"]["bandwidth_GBps"]
    data["links"]["upi"]["bandwidth_Gbps"] = -176
    result = cli("topology", "show", _write(tmp_path, data))
    assert_one_line_error(result, "bad.yaml", "links.upi.bandwidth_Gbps", "greater than 0", "fix:")


def test_negative_bandwidth_override(cli) -> None:
    result = cli("topology", "show", "clx-64s-opa", "--set", "links.opa.bandwidth_GBps=-1")
    assert_one_line_error(result, "clx-64s-opa.yaml", "links.opa.bandwidth_GBps", "fix:")


def test_more_endpoints_than_switch_ports(cli, tmp_path: Path) -> None:
    nodes = [*SOCKETS, *({"name": f"t{i}", "kind": "socket", "compute": "xeon-8180"} for i in range(2))]
    nodes.append({"name": "sw", "kind": "switch", "switch": "sw4"})
    edges = [{"u": n["name"], "v": "sw", "link": "upi"} for n in nodes[:-1]]
    result = cli("topology", "show", _write(tmp_path, _explicit(nodes, edges)))
    assert_one_line_error(result, "bad.yaml", "switches.sw4.ports", "needs 5 ports", "has 4", "fix:")


def test_fat_tree_leaf_over_its_ports(cli) -> None:
    # 40 endpoints per leaf at 2:1 need 40 + 20 ports on a 48-port leaf
    result = cli("topology", "show", "clx-64s-opa", "--set", "fabric.endpoints_per_leaf=40")
    assert_one_line_error(result, "clx-64s-opa.yaml", "switches.opa-48.ports", "needs 60 ports", "fix:")


def test_unknown_unit_in_field_name(cli, tmp_path: Path) -> None:
    data = _preset("skx-8s-upi")
    data["links"]["upi"]["bandwidth_Gbits"] = data["links"]["upi"].pop("bandwidth_GBps")
    result = cli("topology", "show", _write(tmp_path, data))
    assert_one_line_error(
        result, "bad.yaml", "links.upi.bandwidth_Gbits", "unknown unit 'Gbits'", "fix: write it as bandwidth_GBps"
    )


def test_unknown_unit_in_value(cli, tmp_path: Path) -> None:
    data = _preset("skx-8s-upi")
    data["links"]["upi"]["latency_us"] = "100 fortnights"
    result = cli("topology", "show", _write(tmp_path, data))
    assert_one_line_error(
        result, "bad.yaml", "links.upi.latency_us", "unknown unit 'fortnights'", "fix: use one of: s, ms, us, ns"
    )


def test_unknown_link_type_and_field_typos(cli, tmp_path: Path) -> None:
    data = _preset("skx-8s-upi")
    data["fabric"]["link"] = "upl"
    assert_one_line_error(
        cli("topology", "show", _write(tmp_path, data)), "fabric.link", "unknown link type 'upl'", "did you mean 'upi'"
    )
    data = _preset("skx-8s-upi")
    data["links"]["upi"]["latency"] = 1
    assert_one_line_error(cli("topology", "show", _write(tmp_path, data)), "links.upi.latency", "unknown field", "fix:")


def test_unknown_preset_and_parameter(cli) -> None:
    assert_one_line_error(cli("topology", "show", "skx-8s-up"), "unknown topology 'skx-8s-up'", "did you mean 'skx-8s-upi'")
    result = cli("topology", "show", "clx-64s-opa", "--param", "sledz=4")
    assert_one_line_error(result, "clx-64s-opa.yaml", "fabric.sledz", "unknown parameter", "fix: use one of")
    assert_one_line_error(cli("topology", "show", "clx-64s-opa", "--param", "oops"), "--param", "KEY=VALUE")


def test_fat_tree_shape_errors(cli) -> None:
    result = cli("topology", "show", "clx-64s-opa", "--set", "fabric.pruning=3")
    assert_one_line_error(result, "clx-64s-opa.yaml", "fabric", "whole number of uplinks")


# --- issue 28: non-finite numbers and duplicate keys --------------------------------------------------------------


def test_infinite_bandwidth_is_refused(cli, tmp_path: Path) -> None:
    # Because `.inf` is valid YAML for a float, it used to give a run with free links; no hardware rate is infinite.
    data = _preset("skx-8s-upi")
    link = next(iter(data["links"]))
    data["links"][link]["bandwidth_GBps"] = float("inf")
    path = _write(tmp_path, data, "inf.yaml")
    assert_one_line_error(cli("topology", "show", path), "inf.yaml", f"links.{link}.bandwidth_GBps", "not a finite number")
    assert_one_line_error(
        cli("simulate", "-w", "small", "-r", "2", "--topology-set", "links.opa.bandwidth_GBps=.inf"),
        "--topology-set links.opa.bandwidth_GBps",
        "not a finite number",
    )
    assert_one_line_error(
        cli("simulate", "-w", "small", "-r", "2", "--topology-set", "links.opa.bandwidth_GBps=.nan"), "not a finite number"
    )


def test_duplicate_topology_keys(cli, tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("name: a\nname: b\n")
    assert_one_line_error(cli("topology", "show", str(path)), "dup.yaml", "duplicate key 'name'", "line 2")
