"""`instances --sockets N` (the other commands' --sockets is TrainingConfig.sockets) and its one-line errors (issue 28)."""

from __future__ import annotations

import json

import pytest

from dlrmsim.topologies import sockets_override
from tests.conftest import assert_one_line_error


def test_sockets_is_the_fabric_endpoint_override() -> None:
    # Because --sockets N must build exactly what the documented --topology-set fabric.endpoints=N builds.
    assert sockets_override("clx-64s-opa", 1024) == {"fabric.endpoints": 1024}
    assert sockets_override("clx-64s-opa", None) == {}


def test_instances_sockets_scales_the_fabric(cli) -> None:
    result = cli("instances", "-t", "clx-64s-opa", "--sockets", "4", "-w", "mlp-like", "-k", "1", "--sync", "none", "--json")
    assert result.code == 0, result.err
    # Because the fat tree's endpoint count is the socket count, instances run on 4 sockets, not the preset's 64.
    assert json.loads(result.out)["sockets"] == 4


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("-t", "skx-8s-upi", "--sockets", "16"), "twisted_hypercube fabric has no socket count"),
        (("-t", "yosemite-v2-sled", "--sockets", "16"), "fabric.sleds"),
        (("-t", "clx-64s-opa", "--sockets", "0"), "not a socket count"),
    ],
)
def test_instances_sockets_bad_input_is_one_line(cli, args: tuple[str, ...], needle: str) -> None:
    assert_one_line_error(cli("instances", *args, "-w", "mlp-like", "-k", "1", "--sync", "none"), needle)


def test_simulate_past_the_preset_size_names_sockets(cli) -> None:
    # Because a user asking for more ranks than the preset has must be told the option that scales it.
    assert_one_line_error(cli("simulate", "-t", "clx-64s-opa", "-w", "small", "-r", "128"), "--sockets 128")
