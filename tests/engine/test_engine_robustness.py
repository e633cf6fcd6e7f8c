"""Engine robustness: activities shorter than the clock's float resolution, uneven fractional core shares, host-end flows."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from dlrmsim.engine import CommSettings, Simulation
from dlrmsim.topologies.topology import Link, Topology
from tests.engine.handmade import GB, simple_spec, two_node

PEAK = 4.3e12  # flop/s of simple_spec
BW = 100 * GB  # memory bandwidth, B/s


@pytest.mark.timeout(20)
@pytest.mark.parametrize("d", [1e-12, 1e-11, 1e-9, 1.5e-6])
def test_a_tiny_task_at_eight_seconds_ends_after_its_own_time(d: float) -> None:
    # 1e-11 s is ~5600 float spacings of the clock at t = 8 s: the engine used to wake at 8 s for ever.
    sim = Simulation(two_node(spec=simple_spec(peak_flops=PEAK)))
    ends: list[float] = []

    def prog():  # noqa: ANN202
        yield sim.env.timeout(8.0)
        yield sim.compute(0, "tiny", flops=PEAK * d)
        ends.append(sim.now)

    sim.env.process(prog())
    sim.run()
    assert ends and ends[0] - 8.0 == pytest.approx(d, rel=1e-6, abs=8 * np.spacing(8.0))
    assert sim.stats["finished"] == 1
    assert sim.stats["wakeups"] <= 2


@pytest.mark.timeout(20)
def test_long_series_of_tiny_tasks_and_flows_at_large_times_finish_in_order() -> None:
    # Tasks and transfers of 1e-13..3e-6 s (below ~1e9 spacings of the clock) from t = 8 s and t = 5e4 s,
    # some alone, some two at once on one memory domain. Each must take its own closed-form time (up to a few
    # spacings of the clock) and the engine must wake a bounded number of times.
    sim = Simulation(two_node(bw=10 * GB, lat=0.0, spec=simple_spec(peak_flops=PEAK, memory_bandwidth_Bps=BW)))
    rng = np.random.default_rng(3)
    n = 400
    dur = np.exp(rng.uniform(np.log(1e-13), np.log(3e-6), size=(2, n)))
    got: list[tuple[float, float, float]] = []  # (measured, expected, clock spacing)

    def prog(t0: float, k: int):  # noqa: ANN202
        yield sim.env.timeout(t0)
        for i in range(n):
            d = float(dur[k, i])
            t = sim.now
            kind = i % 3
            if kind == 0:
                yield sim.compute(0, "gemm", flops=PEAK * d)
                want = d
            elif kind == 1:
                yield sim.transfer(0, 1, 10 * GB * d, name="msg")
                want = d
            else:  # two equal memory-bound tasks on 14 cores each share the domain: each gets half
                yield sim.compute(1, "a", bytes=BW * d, cores=14) & sim.compute(1, "b", bytes=BW * d, cores=14)
                want = 2 * d
            got.append((sim.now - t, want, float(np.spacing(sim.now))))

    sim.env.process(prog(8.0, 0))
    sim.env.process(prog(5e4, 1))
    sim.run()
    assert len(got) == 2 * n
    for measured, want, ulp in got:
        assert measured == pytest.approx(want, rel=1e-6, abs=16 * ulp)
    assert sim.stats["wakeups"] <= 2 * sim.stats["finished"]


@pytest.mark.timeout(20)
@pytest.mark.parametrize(("cores", "k"), [(27, 7), (26, 3), (55, 7), (27, 11)])
def test_uneven_core_shares_come_back_exactly(cores: int, k: int) -> None:
    # k workers each repeatedly take cores/k cores of a cores-core pool, with random gaps so that gets and puts
    # interleave in every order. A float pool drifts: a put overflows the capacity and blocks for ever (the run
    # ends silently short), or the k-th share no longer fits. Every share must fit at once and come back.
    sim = Simulation(two_node(spec=simple_spec(cores=cores, peak_flops=PEAK)))
    rng = np.random.default_rng(0)
    share = cores / k
    reps = 120
    waits: list[float] = []

    def worker(i: int):  # noqa: ANN202
        for _ in range(reps):
            yield sim.env.timeout(float(rng.uniform(0, 2e-4)))
            asked = sim.now
            yield sim.compute(0, f"w{i}", flops=float(rng.uniform(1e8, 1e9)), cores=share)
            waits.append(sim.records[-1].start - asked)

    for i in range(k):
        sim.env.process(worker(i))
    sim.run()
    assert len(waits) == k * reps
    assert max(waits) == 0.0  # a worker holds one share at most, so all k fit together
    assert sim.rank_resources[0].pools["compute"].level == cores


def test_flow_from_a_host_node_under_interference() -> None:
    # Host h -> rank r0 (one 10 GB/s one-sided link, no latency) while r0 computes, with an unpinned progress thread
    # (comm_slowdown 2, one of 28 cores stolen). The host end (rank -1) must not break the interference bookkeeping.
    # Compute: 0.05 s alone, stretched by 28/27 while the flow runs -> 0.0518519 s. Flow: 5 GB/s until then, 10 after.
    g = nx.Graph()
    g.add_node("r0", compute=simple_spec(peak_flops=PEAK))
    g.add_node("h")
    g.add_edge("h", "r0", link=Link("h", "r0", "pcie", 10 * GB, 0.0))
    topo = Topology("host-rank", g, ["r0"], hosts=["h"])
    sim = Simulation(topo, comm=CommSettings(progress_thread_unpinned=True, comm_slowdown=2.0))
    ends: dict[str, float] = {}

    def flow():  # noqa: ANN202
        yield sim.transfer_nodes("h", "r0", 1e9, name="load")
        ends["flow"] = sim.now

    def task():  # noqa: ANN202
        yield sim.compute(0, "gemm", flops=PEAK * 0.05)
        ends["task"] = sim.now

    sim.env.process(flow())
    sim.env.process(task())
    sim.run()
    t_task = 0.05 * 28 / 27
    assert ends["task"] == pytest.approx(t_task, rel=1e-9)
    assert ends["flow"] == pytest.approx(t_task + (1e9 - 5 * GB * t_task) / (10 * GB), rel=1e-9)
