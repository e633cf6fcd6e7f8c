"""The derived figures of [Kalamkar20] (table sizes, Eq. 1, Eq. 2; docs/sources.md) must follow from the preset layer sizes."""

from __future__ import annotations

import json

import pytest

from dlrmsim.workloads import load_workload, model

MIB = 2**20
GIB = 2**30

# name: (tables GiB, allreduce MiB, strong alltoall MiB) from the reference table.
REFERENCE = {
    "small": (2.0, 9.5, 16.0),
    "large": (384.0, 1047.0, 1024.0),
    "mlperf": (98.0, 9.0, 208.0),
}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_cli_json_reproduces_reference_table(cli, name: str) -> None:
    res = cli("workload", "show", name, "--json")
    assert res.code == 0, res.err
    data = json.loads(res.out)
    tables, allreduce, alltoall = REFERENCE[name]
    assert data["tables_gib"] == pytest.approx(tables, rel=0.005)
    assert data["allreduce_mib"] == pytest.approx(allreduce, rel=0.005)
    assert data["alltoall_strong_mib"] == pytest.approx(alltoall, rel=0.005)
    for key in ("alltoall_weak_mib_per_rank", "max_ranks_table_wise", "flops_per_sample_forward", "flops_per_sample_backward"):
        assert key in data


def test_small_alltoall_is_exactly_16_mib_not_15_8() -> None:
    # One published table prints 15.8; Eq. 2 gives 8 * 8192 * 64 * 4 bytes = 16 MiB exactly.
    w = load_workload("small")
    assert model.alltoall_bytes(w, 8192) == 8 * 8192 * 64 * 4 == 16 * MIB


def test_exact_layer_arithmetic() -> None:
    small = load_workload("small")
    # bottom 512->512->64, top 100->1024->1024->1024->1 (interaction width (8+1)*8/2 + 64 = 100)
    assert model.interaction_width(small) == 100
    params = (512 * 512 + 512) + (512 * 64 + 64) + (100 * 1024 + 1024) + 2 * (1024 * 1024 + 1024) + (1024 + 1)
    assert model.allreduce_bytes(small) == params * 4
    mlperf = load_workload("mlperf")
    assert model.interaction_width(mlperf) == 27 * 26 // 2 + 128 == 479
    large = load_workload("large")
    assert len(model.bottom_layers(large)) == 8 and len(model.top_layers(large)) == 16
    assert model.tables_bytes(large) == 384 * GIB


def test_max_ranks_table_wise_matches_reference() -> None:
    expected = {"small": 8, "large": 64, "mlperf": 26}
    from dlrmsim.workloads.placement import PlacementSpec, max_ranks

    for name, n in expected.items():
        assert max_ranks(load_workload(name), PlacementSpec()) == n


def test_flops_per_sample_closed_form() -> None:
    w = load_workload("small")
    fwd, bwd = model.flops_per_sample(w)
    mlp = sum(2 * layer.fan_in * layer.fan_out for layer in model.mlp_layers(w))
    inter = 2 * 9 * 9 * 64
    assert fwd == mlp + inter
    first = model.bottom_layers(w)[0]
    assert bwd == 2 * mlp - 2 * first.fan_in * first.fan_out + 2 * inter


def test_list_shows_presets(cli) -> None:
    res = cli("workload", "list")
    assert res.code == 0
    for name in REFERENCE:
        assert name in res.out
