"""`--sockets N` scales a topology's fabric on every command that takes one, and descriptions stay true."""

from __future__ import annotations

import json

import pytest

from dlrmsim.cli import main
from dlrmsim.topologies import load_topology


def test_scaled_description_counts_the_built_graph() -> None:
    topo = load_topology("clx-64s-opa", sockets=128)
    # Because the preset's text says "32 dual-socket nodes", a 128-socket build must say what it has and mark the
    # preset's words as the unscaled form.
    head, _, unscaled = topo.description.partition("unscaled preset:")
    assert "128 sockets" in head and "32 dual-socket" not in head and "32 dual-socket" in unscaled
    assert load_topology("clx-64s-opa").description.startswith("32 dual-socket")


def test_topology_show_sockets(capsys: pytest.CaptureFixture[str]) -> None:
    main(["topology", "show", "clx-64s-opa", "--sockets", "256", "--json"])
    # Because the fat-tree generator's endpoint count is the socket count, 256 sockets means 256 ranks.
    assert json.loads(capsys.readouterr().out)["ranks"] == 256


def test_simulate_sockets_allows_more_ranks(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "-w", "small", "-r", "16", "--placement", "column_wise"]
    main([*args, "--sockets", "16", "--json"])
    out = json.loads(capsys.readouterr().out)
    # Because --sockets rebuilds the fabric, a 16-socket cluster runs 16 ranks, and the config records the size.
    assert out["config"]["sockets"] == 16 and len(out["per_rank"]) == 16
    with pytest.raises(SystemExit) as exc:
        main([*args, "--sockets", "8"])
    # Because 16 ranks do not fit on 8 sockets, the same run on a smaller build is a one-line error.
    assert exc.value.code == 2 and "16 ranks" in capsys.readouterr().err
