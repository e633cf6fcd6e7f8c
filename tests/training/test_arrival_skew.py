"""Arrival skew: the last of a host's rank processes reaches each synchronisation late, by a measured fraction of
the compute since the ranks were last together (ComputeSpec.arrival_excess, CollectiveCoordinator)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from dlrmsim.engine.costs import arrival_excess_s, expected_max_normal
from dlrmsim.topologies import load_topology
from dlrmsim.topologies.topology import EfficiencyTable, Topology
from dlrmsim.training.simulate import TrainingConfig, TrainingResult, load_inputs, run_iteration
from tests.engine.handmade import simple_spec


def test_expected_maximum_of_normals_matches_its_closed_forms() -> None:
    # Because E[max] of two standard normals is 1/sqrt(pi) and of three 3/(2 sqrt(pi)), and one rank waits for no one.
    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-6)
    assert expected_max_normal(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), rel=1e-6)
    # and the more ranks, the later the last: the maximum grows with the count.
    values = [expected_max_normal(r) for r in (2, 4, 8, 64, 1024)]
    assert values == sorted(values) and values[-1] < 4


def test_excess_is_the_measured_fraction_scaled_to_the_rank_count() -> None:
    spec = dataclasses.replace(simple_spec(), arrival_excess=EfficiencyTable.constant(0.1), arrival_excess_ranks=2)
    # Because the fraction was measured at 2 ranks, 2 ranks pay it as measured; 4 ranks the expected maximum of 4
    # deviations against that of 2; one rank and no compute nothing.
    assert arrival_excess_s(spec, 0.02, 2) == pytest.approx(0.002)
    assert arrival_excess_s(spec, 0.02, 4) == pytest.approx(0.002 * expected_max_normal(4) / expected_max_normal(2))
    assert arrival_excess_s(spec, 0.02, 1) == 0.0 and arrival_excess_s(spec, 0.0, 2) == 0.0
    # A spec that measured nothing (the built-in presets) charges nothing.
    assert arrival_excess_s(simple_spec(), 0.02, 8) == 0.0


def _host(fraction: float | None, ranks: int) -> Topology:
    topo = load_topology("host", {"compute.host-cpu.cores": 2 * ranks}, ranks=ranks)
    if fraction is None:
        return topo
    return topo.with_specs(
        compute=lambda spec: dataclasses.replace(spec, arrival_excess=EfficiencyTable.constant(fraction), arrival_excess_ranks=2)
    )


def _run(fraction: float | None, ranks: int = 2) -> TrainingResult:
    cfg = TrainingConfig(topology="host", workload="small", ranks=ranks, scaling="strong", backend="shm", blocking=True)
    return run_iteration(load_inputs(cfg, topology=_host(fraction, ranks)), cfg)


def test_no_measured_skew_changes_nothing() -> None:
    base, zero = _run(None), _run(0.0)
    # Because a fraction of 0 is the default, the iteration is the same to the last bit and nothing waits for arrivals.
    assert zero.iteration_s == base.iteration_s and zero.arrival_wait_s == {}
    assert not any(r.kind == "arrival" for r in zero.records)


def test_each_stretch_of_compute_delays_the_iteration_by_its_fraction() -> None:
    base, late = _run(0.0), _run(0.1)
    busy = base.breakdown.compute_s + base.breakdown.prepost_s
    # Because the ranks wait on every collective (blocking), every stretch of compute runs from one synchronisation
    # (or the start) to the next (or the next iteration's first): each collective starts 10 % of the stretch before
    # it later, the last stretch ends 10 % of it late, and nothing else moves. So the iteration grows by 10 % of all
    # the compute, and that is what the arrival waits add up to.
    assert late.iteration_s - base.iteration_s == pytest.approx(0.1 * busy, rel=1e-9)
    assert sum(late.arrival_wait_s.values()) == pytest.approx(0.1 * busy, rel=1e-9)
    assert "iteration_end" in late.arrival_wait_s
    # Every rank's record of each delay is in the trace, one per collective and rank plus the iteration's end.
    arrivals = [r for r in late.records if r.kind == "arrival"]
    assert len(arrivals) == 2 * len(late.arrival_wait_s)


def test_one_rank_never_waits_for_arrivals() -> None:
    # Because a single process has no one to wait for, a measured skew costs it nothing.
    assert _run(0.1, ranks=1).iteration_s == _run(0.0, ranks=1).iteration_s
