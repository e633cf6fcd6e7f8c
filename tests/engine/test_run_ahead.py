"""Running collectives ahead in compiled code (engine.phases.run_ahead) against the Python path, instant by instant.

The kernel replays what the scheduler and ``_CollectiveRun`` would do and stops before anything else could act,
so every record (start and end of every task and every rank's collective span) must agree to rounding, in
scenarios that exercise each of its stops: compute tasks finishing beside the collectives, rank processes'
timeouts, 18 collectives in flight at once, eager and rendezvous starts, reductions, ranks that
idle in some phases, and a run cut off by ``until``.
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from dlrmsim.engine import CommSettings, Simulation, simulation
from dlrmsim.engine.phases import RunnerListPacking
from dlrmsim.topologies.topology import Topology
from tests.engine.handmade import GB, clx_like, ring

# (op, algorithm, bytes) per concurrent collective: 18, more than the 16 a tuple of collectives once limited the
# kernel to
MIX = [
    ("allreduce", "ring", 24e6),
    ("allreduce", "rhd", 6e6),
    ("allgather", "ring", 4e6),
    ("alltoall", "pairwise", 8e6),
    ("scatter", "binomial", 3e6),
    ("reduce_scatter", "ring", 5e6),
    ("allreduce", "ring", 2e6),
    ("allgather", "ring", 1e6),
    ("allreduce", "rhd", 3e6),
    ("alltoall", "pairwise", 2e6),
    ("allreduce", "ring", 5e6),
    ("reduce_scatter", "ring", 2e6),
    ("allgather", "ring", 3e6),
    ("allreduce", "rhd", 1e6),
    ("scatter", "binomial", 1e6),
    ("alltoall", "pairwise", 4e6),
    ("allreduce", "ring", 1e6),
    ("allgather", "ring", 2e6),
]


def scenario(
    topo: Topology, comm: CommSettings, run_ahead: bool, until: float | None = None, lockstep: bool = False
) -> tuple[list, dict]:
    sim = Simulation(topo, comm=comm, record_flows=False, run_ahead=run_ahead, lockstep_collectives=lockstep)
    env, p = sim.env, topo.num_ranks
    ranks = list(range(p))
    rng = np.random.default_rng(7)
    flops = rng.uniform(1e8, 6e8, size=(3, p))

    def rank_proc(r: int, evs: list) -> simpy.events.ProcessGenerator:
        for k in range(3):
            yield sim.compute(r, f"gemm{k}", flops=float(flops[k, r]), bytes=2e6, kind="gemm")
            yield env.timeout(1e-6 * (r % 3))  # a rank's own software gap: a foreign SimPy event
        for ev in evs:
            yield ev.rank_events[r]

    def driver() -> simpy.events.ProcessGenerator:
        evs = []
        for i, (op, algo, nbytes) in enumerate(MIX):
            sub = ranks if op != "allgather" else ranks[: max(2, p // 2)]
            evs.append(sim.collective(op, sub, nbytes, algorithm=algo, name=f"{op}{i}"))
            yield env.timeout(20e-6)  # staggered starts: collectives overlap each other and the compute
        for r in ranks:
            env.process(
                rank_proc(r, [e for e, (op, _, _) in zip(evs, MIX, strict=True) if op != "allgather" or r < max(2, p // 2)])
            )

    env.process(driver())
    sim.run(until=until)
    recs = sorted((r.rank, r.kind, r.name, r.start, r.end) for r in sim.records)
    return recs, {"events": next(env._eid), **sim.stats}  # SimPy numbers every event it schedules


TOPOLOGIES = {"ring-8": lambda: ring(8, bw=10 * GB, lat=1e-6), "clx-like-16": lambda: clx_like(16, per_leaf=4, uplinks=2)}
COMMS = {
    "rendezvous-reduce": CommSettings(),
    "eager-noreduce": CommSettings(rendezvous=False, reduce_traffic_factor=0.0),
    "unpinned-thread": CommSettings(progress_thread_unpinned=True, comm_slowdown=1.5, message_overhead_s=2e-6),
}


@pytest.mark.parametrize("comm", list(COMMS), ids=str)
@pytest.mark.parametrize("topo", list(TOPOLOGIES), ids=str)
def test_running_ahead_reproduces_every_record(topo: str, comm: str) -> None:
    t = TOPOLOGIES[topo]()
    python, py_stats = scenario(t, COMMS[comm], run_ahead=False)
    ahead, ah_stats = scenario(t, COMMS[comm], run_ahead=True)
    # Because the same work starts and finishes at the same instants, every record agrees to rounding (the Python
    # path may skip repeated cycles the kernel steps through, so activity counts can differ); because the kernel
    # took instants without SimPy, fewer events were scheduled.
    assert ah_stats["events"] < py_stats["events"]
    assert len(ahead) == len(python)
    for a, b in zip(ahead, python, strict=True):
        assert a[:3] == b[:3]
        assert a[3:] == pytest.approx(b[3:], rel=1e-9, abs=1e-15)


def test_running_ahead_stops_at_until() -> None:
    # Because a run cut off at `until` must leave the same partial records, the kernel may not run past it.
    t = clx_like(16, per_leaf=4, uplinks=2)
    python, _ = scenario(t, CommSettings(), run_ahead=False, until=1.5e-3)
    ahead, _ = scenario(t, CommSettings(), run_ahead=True, until=1.5e-3)
    assert 0 < len(ahead) == len(python)
    for a, b in zip(ahead, python, strict=True):
        assert a[:3] == b[:3] and a[3:] == pytest.approx(b[3:], rel=1e-9)


def _csr(key: np.ndarray, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(key, kind="stable")
    return np.searchsorted(key[order], np.arange(n_keys + 1)), order


@pytest.mark.parametrize("entering", [1, 3, 8])
def test_sends_to_start_lists_each_startable_flow_once_in_order(entering: int) -> None:
    # Because with rendezvous a flow is listed from both its ends, sends_to_start must return each startable flow
    # once, ascending, whether it sorts a few listings (some ranks entering) or marks many (all entering at once).
    from dlrmsim.engine.phases import sends_to_start

    rng = np.random.default_rng(entering)
    p, n_phases, n_flows = 8, 3, 300
    fsrc, fdst, fk = rng.integers(0, p, n_flows), rng.integers(0, p, n_flows), rng.integers(0, n_phases, n_flows)
    s_ptr, s_order = _csr(fk * p + fsrc, n_phases * p)
    d_ptr, d_order = _csr(fk * p + fdst, n_phases * p)
    cur = rng.integers(0, n_phases, p)
    grp = np.sort(rng.choice(p, entering, replace=False))
    ks = cur[grp]
    got = sends_to_start(ks, grp, p, s_ptr, s_order, d_ptr, d_order, fsrc, fdst, fk, cur, True)
    entered = set(zip(ks.tolist(), grp.tolist(), strict=True))
    want = [
        f
        for f in range(n_flows)
        if ((fk[f], fsrc[f]) in entered and cur[fdst[f]] >= fk[f]) or ((fk[f], fdst[f]) in entered and cur[fsrc[f]] >= fk[f])
    ]
    assert got.tolist() == want


def test_every_collective_in_flight_runs_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    # Because the kernel takes the collectives as one list, not a fixed number of slots, a moment with all 18 of MIX
    # in flight (more than the 16 slots it once had) hands it every one of them, none left foreign. Because the list
    # is kept up to date a collective at a time (packed again only when a new one's id comes before a kept one's),
    # it is packed once while collectives are appended and dropped, and the records above agree all the same.
    ops: list[tuple[str, int]] = []

    class Recording(RunnerListPacking):
        def pack(self, views: list) -> object:
            ops.append(("pack", len(views)))
            return super().pack(views)

        def append(self, packed: object, view: object) -> None:
            super().append(packed, view)
            ops.append(("append", len(packed)))  # type: ignore[arg-type]

        def drop(self, packed: object, i: int) -> None:
            super().drop(packed, i)
            ops.append(("drop", len(packed)))  # type: ignore[arg-type]

    monkeypatch.setattr(simulation, "RunnerListPacking", Recording)
    scenario(ring(8, bw=10 * GB, lat=1e-6), CommSettings(), run_ahead=True)
    assert max(size for _, size in ops) == len(MIX)
    kinds = [kind for kind, _ in ops]
    assert kinds.count("pack") == 1 and kinds.count("append") >= len(MIX) - 1 and kinds.count("drop") >= len(MIX) - 1
