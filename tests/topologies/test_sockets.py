"""`--sockets N` scales a topology's fabric, and descriptions stay true after scaling (issue 28)."""

from __future__ import annotations

import json

import pytest

from dlrmsim.topologies import load_topology, topology_names
from dlrmsim.topologies.builder import sockets_override
from dlrmsim.training.cli import make_config
from tests.conftest import assert_one_line_error


def test_sockets_is_the_fabric_endpoint_override() -> None:
    # Because --sockets N must build exactly what the documented --topology-set fabric.endpoints=N builds.
    assert sockets_override("clx-64s-opa", 1024) == {"fabric.endpoints": 1024}
    assert sockets_override("clx-64s-opa", None) == {}


@pytest.mark.parametrize(("sockets", "nodes", "leaves"), [(1024, 512, 32), (128, 64, 4), (8, 4, 1)])
def test_scaled_description_counts_the_built_fabric(sockets: int, nodes: int, leaves: int) -> None:
    topo = load_topology("clx-64s-opa", sockets_override("clx-64s-opa", sockets))
    # Because the description is filled from the built graph, it must name the scaled node, socket and leaf
    # counts (32 endpoints per leaf) and never the preset's own 32 nodes.
    assert topo.num_ranks == sockets
    assert f"{nodes} dual-socket" in topo.description, topo.description
    assert f"({sockets} sockets)" in topo.description, topo.description
    assert f"({leaves} leaf," in topo.description, topo.description


def test_every_preset_description_is_filled() -> None:
    # Because a placeholder the builder does not know would reach the user as "{name}".
    for name in topology_names():
        description = load_topology(name).description
        assert "{" not in description and "}" not in description, (name, description)
    assert load_topology("clx-64s-opa").description.startswith("32 dual-socket Xeon 8280 nodes (64 sockets)")


def test_fixed_description_says_the_fabric_was_edited() -> None:
    # skx-8s-upi's description is fixed text for 8 sockets: after a fabric edit it must say what changed.
    topo = load_topology("skx-8s-upi", {"fabric.dimension": 4})
    assert topo.num_ranks == 16
    assert topo.description.endswith("[fabric edited: dimension=4]"), topo.description
    assert "[fabric edited" not in load_topology("skx-8s-upi", {"links.upi.bandwidth_GBps": 30}).description


def test_make_config_merges_sockets_into_the_topology_overrides() -> None:
    # Because simulate and scaling both build their config here, --sockets must reach the topology overrides.
    cfg = make_config(topology="clx-64s-opa", workload="small", ranks=8, placement="table_wise", replicate_below_rows=None,
                      topo_set=["links.opa.bandwidth_GBps=25"], wl_set=[], sockets=256)  # fmt: skip
    assert cfg.topology_overrides == {"links.opa.bandwidth_GBps": 25, "fabric.endpoints": 256}


def test_topology_show_sockets(cli) -> None:
    result = cli("topology", "show", "clx-64s-opa", "--sockets", "1024", "--json")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    # 1024 sockets on 32-port leaves pruned 2:1: 32 leaves of 16 uplinks, 48-port switches above them.
    assert data["ranks"] == 1024
    assert "512 dual-socket" in data["description"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("topology", "show", "skx-8s-upi", "--sockets", "16"), "twisted_hypercube fabric has no socket count"),
        (("topology", "show", "yosemite-v2-sled", "--sockets", "16"), "fabric.sleds"),
        (("simulate", "-t", "skx-8s-upi", "-w", "small", "-r", "4", "--sockets", "16"), "no socket count"),
        (("topology", "show", "clx-64s-opa", "--sockets", "0"), "not a socket count"),
        (("topology", "show", "clx-64s-opa", "--sockets", "7"), "multiple of endpoints_per_node"),
    ],
)
def test_sockets_bad_input_is_one_line(cli, args: tuple[str, ...], needle: str) -> None:
    assert_one_line_error(cli(*args), needle)


def test_simulate_past_the_preset_size_names_sockets(cli) -> None:
    # Because a user asking for more ranks than the preset has must be told the option that scales it.
    assert_one_line_error(cli("simulate", "-t", "clx-64s-opa", "-w", "small", "-r", "128"), "--sockets 128")
