"""Exact event logs of tiny scenarios, records, Chrome traces and determinism."""

from __future__ import annotations

import json

import pytest

from dlrmsim.engine import CommSettings, Simulation, records_frame, write_chrome_trace
from tests.engine.handmade import GB, star, two_node


def test_two_allreduces_sharing_one_link_exact_event_log() -> None:
    # Two ranks, one 1 GB/s link with 0.1 ms latency; two 2 MB ring allreduces (two 1 MB steps each).
    # A is issued at 0, B at 0.5 ms. Worked by hand (rates change at every flow start and end):
    #   A step 0: alone 0.1-0.6 ms (0.5 MB), shared 0.6-1.6 ms (0.5 MB)            -> ends 1.6 ms
    #   B step 0: shared 0.6-1.6 (0.5 MB), alone 1.6-1.7 (0.1 MB), shared 1.7-2.5    -> ends 2.5 ms
    #   A step 1: starts 1.7, shared to 2.5 (0.4 MB), alone 2.5-2.6, shared 2.6-3.6  -> ends 3.6 ms
    #   B step 1: starts 2.6, shared to 3.6 (0.5 MB), alone 3.6-4.1                   -> ends 4.1 ms
    sim = Simulation(two_node(bw=1 * GB, lat=1e-4), comm=CommSettings(reduce_traffic_factor=0.0))

    def later():
        yield sim.env.timeout(0.5e-3)
        yield sim.collective("allreduce", [0, 1], 2e6, name="B")

    sim.collective("allreduce", [0, 1], 2e6, name="A")
    sim.env.process(later())
    sim.run()
    log = sorted(((r.end, r.name, r.kind, r.rank, r.peer) for r in sim.records), key=lambda e: (round(e[0], 12), e[1:]))
    expected = [
        (1.6e-3, "A", "flow", 0, 1),
        (1.6e-3, "A", "flow", 1, 0),
        (2.5e-3, "B", "flow", 0, 1),
        (2.5e-3, "B", "flow", 1, 0),
        (3.6e-3, "A", "allreduce", 0, -1),
        (3.6e-3, "A", "allreduce", 1, -1),
        (3.6e-3, "A", "flow", 0, 1),
        (3.6e-3, "A", "flow", 1, 0),
        (4.1e-3, "B", "allreduce", 0, -1),
        (4.1e-3, "B", "allreduce", 1, -1),
        (4.1e-3, "B", "flow", 0, 1),
        (4.1e-3, "B", "flow", 1, 0),
    ]
    assert [e[1:] for e in log] == [e[1:] for e in expected]
    assert [e[0] for e in log] == pytest.approx([e[0] for e in expected], rel=1e-9)
    starts = sorted({round(r.start, 12) for r in sim.records if r.kind == "flow"})
    assert starts == pytest.approx([0.0, 0.5e-3, 1.6e-3, 2.5e-3], rel=1e-9)


def test_staggered_flows_exact_times() -> None:
    # 10 GB/s, 1 us: f0 (1 MB) at 0; f1 (1 MB) issued at 50 us starts at 51 us; f0 has 0.5 MB left then.
    sim = Simulation(two_node(bw=10 * GB, lat=1e-6))
    ends: dict[str, float] = {}

    def go(name: str, t: float):
        yield sim.env.timeout(t)
        yield sim.transfer(0, 1, 1e6, name=name)
        ends[name] = sim.now

    sim.env.process(go("f0", 0.0))
    sim.env.process(go("f1", 50e-6))
    sim.run()
    assert ends["f0"] == pytest.approx(51e-6 + 0.5e6 / 5e9, rel=1e-12)  # 151 us
    assert ends["f1"] == pytest.approx(151e-6 + 0.5e6 / 10e9, rel=1e-12)  # 201 us
    assert list(ends) == ["f0", "f1"]


def scenario(seed: int) -> list:
    sim = Simulation(star(4, bw=10 * GB, lat=1e-6, one_sided=False), seed=seed)

    def rank(r: int):
        yield sim.compute(r, "fwd", flops=1e9 * (1 + sim.rng.random()), bytes=5e6)
        yield sim.collective("alltoall", [0, 1, 2, 3], 3e6, name="a2a") if r == 0 else sim.env.timeout(0)

    for r in range(4):
        sim.env.process(rank(r))
    sim.collective("allreduce", [0, 1, 2, 3], 4e6, name="ar", algorithm="rhd")
    sim.run()
    return sim.records


def test_runs_are_deterministic_for_a_seed() -> None:
    assert scenario(1) == scenario(1)
    assert scenario(1) != scenario(2)


def test_records_frame_and_chrome_trace(tmp_path) -> None:  # noqa: ANN001
    topo = star(4, bw=10 * GB, lat=1e-6)
    sim = Simulation(topo)
    sim.compute(1, "gemm", flops=1e9)
    sim.collective("allreduce", [0, 1, 2, 3], 4e6, name="ar")
    sim.run()
    df = records_frame(sim.records)
    assert {"rank", "kind", "name", "category", "start", "end", "bytes", "flops", "duration"} <= set(df.columns)
    assert len(df) == len(sim.records)
    assert df.loc[df.kind == "flow", "bytes"].sum() == pytest.approx(2 * 3 * 4 * 1e6)  # 2(p-1) steps x p flows x S/p
    path = write_chrome_trace(sim.records, tmp_path / "t.json", topo)
    events = json.loads(path.read_text())["traceEvents"]
    names = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert any(n.startswith("rank 1") for _, n in names)
    assert any(n == "r0>sw" for _, n in names)
    link_events = [e for e in events if e["ph"] == "X" and e["pid"] == 2]
    assert len(link_events) == 2 * 24  # every flow on its two links
    assert records_frame([]).empty


def test_run_pauses_the_cyclic_collector_and_restores_it() -> None:
    # Because a run allocates objects by the hundred thousand and the cyclic collector found next to nothing to
    # free, Simulation.run pauses it (gc_paused); a caller's collector must come back as it was, also when the
    # run raises, and a caller that had it off must find it still off.
    import gc

    from dlrmsim.engine import gc_paused

    seen: list[bool] = []
    sim = Simulation(two_node(bw=1 * GB, lat=1e-4))

    def probe():
        seen.append(gc.isenabled())
        yield sim.env.timeout(1e-3)
        raise RuntimeError("boom")

    sim.env.process(probe())
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="boom"):
        sim.run()
    assert seen == [False]
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            with gc_paused():
                pass
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
