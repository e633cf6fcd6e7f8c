"""Rank-to-socket mapping: ranks go to sockets whose memory holds their shards (issue 24)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlrmsim.errors import DlrmsimError
from dlrmsim.topologies import load_topology
from dlrmsim.topologies.mapping import check_explicit, format_sockets, map_ranks, parse_socket_list, remap
from dlrmsim.training.simulate import TrainingConfig, load_inputs
from tests.conftest import assert_one_line_error

GB = 1e9
# clx-64s-opa: sockets 0-55 have 96 GB, 56-63 (nodes 28-31) 192 GB.
CLX = [96 * GB] * 56 + [192 * GB] * 8


def test_identity_whenever_the_first_sockets_fit() -> None:
    # Because every existing scenario that fits keeps rank r on socket r (the golden numbers depend on it).
    m = map_ranks([90 * GB] * 8, CLX)
    assert m is not None and m.sockets == tuple(range(8)) and m.reason == "first sockets"


def test_one_big_rank_goes_to_the_first_big_socket() -> None:
    # Because MLPerf on one rank needs more than 96 GB: the paper ran it on a 192 GB node (sockets 56-63).
    m = map_ranks([150 * GB], CLX)
    assert m is not None and m.sockets == (56,) and m.reason == "memory-aware"


def test_four_big_ranks_fill_the_big_nodes_in_order() -> None:
    # Because the paper fills nodes first: 4 Large ranks take two whole 192 GB nodes, sockets 56-59.
    m = map_ranks([150 * GB] * 4, CLX)
    assert m is not None and m.sockets == (56, 57, 58, 59)


def test_mixed_needs_in_a_window_put_the_largest_on_big_sockets() -> None:
    # Because only ranks 0 and 1 need a big socket: a 4-socket window ending on the big sockets holds all four.
    m = map_ranks([150 * GB, 150 * GB, 50 * GB, 50 * GB], CLX)
    assert m is not None
    assert all(CLX[s] >= n for s, n in zip(m.sockets, [150 * GB, 150 * GB, 50 * GB, 50 * GB], strict=True))
    assert m.sockets == (56, 57, 54, 55)


def test_no_mapping_when_too_many_big_ranks() -> None:
    # Because only 8 sockets have 192 GB, nine ranks of 150 GB cannot be placed anywhere.
    assert map_ranks([150 * GB] * 9, CLX) is None


def test_explicit_sockets_are_checked_one_line() -> None:
    # Because a user's list must be long enough, distinct, existing and big enough, each said in one line.
    assert check_explicit([150 * GB], CLX, (60, 61)).sockets == (60,)
    for sockets, words in [((56,), "lists only 1"), ((56, 56), "twice"), ((56, 99), "does not exist"), ((0, 56), "rank 0 needs")]:
        with pytest.raises(DlrmsimError, match=words):
            check_explicit([150 * GB, 150 * GB], CLX, sockets)


def test_socket_list_syntax() -> None:
    # Because ranges make long orderings writable: 56-59,0 is five sockets in that order.
    assert parse_socket_list("56-59,0") == (56, 57, 58, 59, 0)
    assert format_sockets((56, 57, 58, 59, 0)) == "56-59,0"
    for bad in ("a,b", "5-3", ""):
        with pytest.raises(DlrmsimError):
            parse_socket_list(bad)


def test_remap_puts_the_chosen_sockets_first_and_keeps_all() -> None:
    # Because the engine indexes ranks 0..p-1: after remapping, rank 0 must be socket 56's node and no endpoint is lost.
    topo = load_topology("clx-64s-opa")
    moved = remap(topo, (56, 57))
    assert moved.ranks[:2] == topo.ranks[56:58] and sorted(moved.ranks) == sorted(topo.ranks)
    assert moved.compute(0).memory_capacity_B == 192 * GB
    assert remap(topo, (0, 1)) is topo  # the identity changes nothing


def test_mlperf_on_one_rank_runs_on_a_192gb_socket() -> None:
    # Because the capacity check uses the socket the rank actually gets, not socket 0's 96 GB.
    inputs = load_inputs(TrainingConfig(topology="clx-64s-opa", workload="mlperf", ranks=1, scaling="single"))
    assert inputs.mapping is not None and inputs.mapping.sockets == (56,)
    assert inputs.topology.compute(0).memory_capacity_B == 192 * GB


def test_large_on_four_ranks_fills_nodes_28_and_29() -> None:
    inputs = load_inputs(TrainingConfig(topology="clx-64s-opa", workload="large", ranks=4))
    assert inputs.mapping is not None and inputs.mapping.sockets == (56, 57, 58, 59)


def test_unmappable_rank_count_is_one_line(cli) -> None:
    # Because 2 Large ranks need more than any socket holds, whatever the mapping.
    assert_one_line_error(cli("simulate", "-t", "clx-64s-opa", "-w", "large", "-r", "2"), "large.yaml", "at least 3 ranks")
    assert_one_line_error(cli("simulate", "-t", "clx-64s-opa", "-w", "large", "-r", "4", "--rank-sockets", "0-3"), "rank 0 needs")
    assert_one_line_error(cli("simulate", "-t", "clx-64s-opa", "-w", "small", "-r", "2", "--rank-sockets", "x"), "socket numbers")


def test_rank_sockets_in_the_config_place_the_ranks() -> None:
    # Because YAML (a study's `fixed: {rank_sockets: ...}`) sets the mapping through the config field.
    inputs = load_inputs(TrainingConfig(topology="clx-64s-opa", workload="large", ranks=4, rank_sockets=[63, 62, 61, 60]))
    assert inputs.mapping is not None and inputs.mapping.sockets == (63, 62, 61, 60) and inputs.mapping.reason == "user-set"
    assert inputs.topology.ranks[0] == load_topology("clx-64s-opa").ranks[63]


@settings(max_examples=200)
@given(
    needs=st.lists(st.integers(1, 10), min_size=1, max_size=8),
    caps=st.lists(st.integers(1, 10), min_size=1, max_size=12),
)
def test_a_mapping_is_found_exactly_when_one_exists(needs: list[int], caps: list[int]) -> None:
    # Because the default must never refuse a rank count some assignment holds (nor return one that does not fit):
    # an assignment exists iff the sorted needs fit the largest capacities element by element.
    exists = len(needs) <= len(caps) and all(
        n <= c for n, c in zip(sorted(needs, reverse=True), sorted(caps, reverse=True), strict=False)
    )
    m = map_ranks(needs, caps)
    assert (m is not None) == exists
    if m is not None:
        assert len(set(m.sockets)) == len(needs) and all(needs[r] <= caps[s] for r, s in enumerate(m.sockets))
