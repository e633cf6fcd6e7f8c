"""Simulation.compute_batch: tasks started together, as Simulation.compute would start them one by one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dlrmsim.engine import Simulation, TaskCall
from dlrmsim.errors import DlrmsimError
from dlrmsim.topologies.topology import EfficiencyTable
from tests.engine.handmade import GB, ring, simple_spec, two_node

SPEC = simple_spec(cores=28, peak_flops=4.3e12, memory_bandwidth_Bps=100 * GB, saturation_cores=7)


def _batch_run(calls: list[TaskCall], topo_ranks: int = 2) -> tuple[Simulation, list[tuple[list[int], float]]]:
    sim = Simulation(ring(topo_ranks, spec=SPEC) if topo_ranks > 2 else two_node(spec=SPEC))
    heard: list[tuple[list[int], float]] = []
    sim.compute_batch(calls, lambda idx, now: heard.append((idx, now)))
    sim.run()
    return sim, heard


def test_two_streams_on_one_domain_share_it_as_one_by_one() -> None:
    # Because two 1 GB streams on one 100 GB/s memory domain share it max-min fairly, each takes 20 ms beside the
    # other, where alone it would take 10 ms; a third task on the other rank's domain is not slowed.
    calls = [
        TaskCall(0, "a", 0.0, 1e9, "copy", "fp32", 14.0),
        TaskCall(0, "b", 0.0, 1e9, "copy", "fp32", 14.0),
        TaskCall(1, "c", 0.0, 1e9, "copy", "fp32", 28.0),
    ]
    sim, heard = _batch_run(calls)
    ends = {r.name: r.end for r in sim.records}
    assert ends["a"] == pytest.approx(0.02, rel=1e-12) and ends["b"] == pytest.approx(0.02, rel=1e-12)
    assert ends["c"] == pytest.approx(0.01, rel=1e-12)
    # the caller hears each instant's finished calls once, by their index in the batch
    assert heard == [([2], pytest.approx(0.01)), ([0, 1], pytest.approx(0.02))]
    one_by_one = Simulation(two_node(spec=SPEC))
    for c in calls:
        one_by_one.compute(c.rank, c.name, bytes=c.nbytes, kind=c.kind, cores=c.cores)
    one_by_one.run()
    assert sorted((r.name, r.start, r.end) for r in sim.records) == sorted((r.name, r.start, r.end) for r in one_by_one.records)


def test_overhead_delays_the_activity_not_the_record_start() -> None:
    # Because a task holds its cores through its fixed software time before its roofline part, it ends at
    # overhead + bytes / bandwidth and its record starts at the call.
    sim, _ = _batch_run(
        [TaskCall(0, "a", 0.0, 1e9, "copy", "fp32", 28.0, overhead_s=1e-3), TaskCall(1, "b", 0.0, 1e9, "copy", "fp32", 28.0)]
    )
    rec = {r.name: r for r in sim.records}
    assert rec["a"].start == 0.0 and rec["a"].end == pytest.approx(1e-3 + 0.01, rel=1e-12)
    assert rec["b"].end == pytest.approx(0.01, rel=1e-12)
    assert all(pool.level == pool.capacity for rr in sim.rank_resources for pool in rr.pools.values())  # cores given back


def test_busy_cores_and_bad_calls_are_usage_errors() -> None:
    # Because a batch starts every task at once, a rank whose compute cores another task holds cannot join one.
    sim = Simulation(two_node(spec=SPEC))
    sim.compute(0, "holder", bytes=1e9, kind="copy")
    with pytest.raises(DlrmsimError, match="busy"):
        sim.compute_batch([TaskCall(0, "late", 0.0, 1e6, "copy", "fp32", 28.0)], lambda idx, now: None)
    with pytest.raises(DlrmsimError, match="negative"):
        sim.compute_batch([TaskCall(1, "bad", -1.0, 1e6, "copy", "fp32", 28.0)], lambda idx, now: None)
    with pytest.raises(DlrmsimError, match="cores"):
        sim.compute_batch([TaskCall(1, "wide", 0.0, 1e6, "copy", "fp32", 29.0)], lambda idx, now: None)
    # and a bad call on a rank, pool and core count a good call has already used (whose checks are remembered)
    sim.compute_batch([TaskCall(1, "good", 0.0, 1e6, "copy", "fp32", 28.0)], lambda idx, now: None)
    sim.run()
    with pytest.raises(DlrmsimError, match="negative"):
        sim.compute_batch([TaskCall(1, "bad again", 0.0, -1e6, "copy", "fp32", 28.0)], lambda idx, now: None)
    with pytest.raises(DlrmsimError, match="negative"):
        sim.compute_batch([TaskCall(1, "bad overhead", 0.0, 1e6, "copy", "fp32", 28.0, overhead_s=-1.0)], lambda idx, now: None)


def test_a_chain_of_one_call_batches_runs_as_a_process_of_compute_calls() -> None:
    # Because a one-call batch is the same activity as compute's (written straight into the scheduler's tables),
    # a chain that starts each next task from the previous one's on_done, inside the scheduler's step, must give
    # the records a process yielding compute calls gives, to the bit: a task without work (no flops, no bytes) ends
    # at the instant it starts, not a clock tick later, and the task after it starts there too.
    steps = [("a", 1e9, 0.0), ("empty", 0.0, 0.0), ("b", 1e9, 2e8), ("c", 0.0, 5e8)]

    def chained() -> list[tuple[str, float, float]]:
        sim = Simulation(two_node(spec=SPEC))
        sim.compute(1, "beside", flops=3e10, bytes=3e8, kind="gemm")

        def start(i: int) -> None:
            if i < len(steps):
                name, flops, nbytes = steps[i]
                call = TaskCall(0, name, flops, nbytes, "gemm", "fp32", 28.0)
                sim.compute_batch([call], lambda idx, now: start(i + 1))

        start(0)
        sim.run()
        return sorted((r.name, r.start, r.end) for r in sim.records)

    def process() -> list[tuple[str, float, float]]:
        sim = Simulation(two_node(spec=SPEC))
        sim.compute(1, "beside", flops=3e10, bytes=3e8, kind="gemm")

        def program():
            for name, flops, nbytes in steps:
                yield sim.compute(0, name, flops=flops, bytes=nbytes, kind="gemm", cores=28.0)

        sim.env.process(program())
        sim.run()
        return sorted((r.name, r.start, r.end) for r in sim.records)

    got = chained()
    assert got == process()
    ends = {name: end for name, _, end in got}
    assert ends["empty"] == ends["a"] > 0


def test_a_work_factor_stretches_the_time_alone_by_itself_at_the_nominal_sizes_rates() -> None:
    # Because the factor multiplies the work at the rates of the nominal flops and bytes (TaskCall.work_factor), a
    # task alone takes exactly the factor times its nominal time; a task with its flops and bytes scaled instead
    # looks its efficiency up at another size (a GEMM on this spec runs more efficiently the larger it is). Both
    # paths: a one-call batch (written straight into the tables) and a two-call one (packed).
    gemm = (8e9, 2e8)  # flops, bytes: compute-bound at 28 cores
    rising = replace(SPEC, gemm_efficiency=EfficiencyTable(((1e8, 0.3), (1e11, 0.9))))

    def ends(calls: list[TaskCall]) -> dict[str, float]:
        sim = Simulation(two_node(spec=rising))
        sim.compute_batch(calls, lambda idx, now: None)
        sim.run()
        return {r.name: r.end for r in sim.records}

    def call(rank: int, name: str, scale: float = 1.0, factor: float = 1.0) -> TaskCall:
        return TaskCall(rank, name, gemm[0] * scale, gemm[1] * scale, "gemm", "fp32", 28.0, work_factor=factor)

    nominal = ends([call(0, "n")])["n"]
    assert ends([call(0, "f", factor=1.5)])["f"] == pytest.approx(1.5 * nominal, rel=1e-12)
    pair = ends([call(0, "f", factor=1.5), call(1, "g", factor=0.5)])
    assert pair["f"] == pytest.approx(1.5 * nominal, rel=1e-12) and pair["g"] == pytest.approx(0.5 * nominal, rel=1e-12)
    # and the scaled task's efficiency moved, which is what the factor avoids
    assert ends([call(0, "s", scale=0.5)])["s"] != pytest.approx(0.5 * nominal, rel=1e-6)
    # the record holds the work done
    sim, _ = _batch_run([call(0, "f", factor=1.5)])
    assert (sim.records[0].flops, sim.records[0].bytes) == (1.5 * gemm[0], 1.5 * gemm[1])


def test_compute_chain_gives_the_records_of_one_call_batches_started_from_each_others_callbacks() -> None:
    # Because compute_chain writes each next activity from the scheduler's step where a one-call batch started from
    # the previous task's callback would be written, beside a task on another rank the records are the same to the
    # bit (an empty task included), the caller hears the last task's end, and the cores are back afterwards.
    steps = [("a", 1e9, 0.0, 1.0), ("empty", 0.0, 0.0, 1.0), ("b", 1e9, 2e8, 1.3), ("c", 0.0, 5e8, 0.7)]

    def calls() -> list[TaskCall]:
        return [TaskCall(0, name, fl, nb, "gemm", "fp32", 28.0, work_factor=f) for name, fl, nb, f in steps]

    def run(chain: bool) -> tuple[list[tuple[str, float, float, float, float]], list[float], Simulation]:
        sim = Simulation(two_node(spec=SPEC))
        sim.compute(1, "beside", flops=3e10, bytes=3e8, kind="gemm")
        heard: list[float] = []
        if chain:
            sim.compute_chain(calls(), heard.append)
        else:

            def start(i: int) -> None:
                if i < len(steps):
                    sim.compute_batch([calls()[i]], lambda idx, now: start(i + 1))
                else:
                    heard.append(sim.env.now)

            start(0)
        sim.run()
        return sorted((r.name, r.start, r.end, r.flops, r.bytes) for r in sim.records), heard, sim

    got, heard, sim = run(chain=True)
    want, heard_want, _ = run(chain=False)
    assert got == want and heard == heard_want == [max(end for name, _, end, _, _ in got if name != "beside")]
    assert all(pool.level == pool.capacity for rr in sim.rank_resources for pool in rr.pools.values())


def test_a_chain_on_two_ranks_or_with_an_overhead_is_a_usage_error() -> None:
    # Because a chain is one rank's compute stream: its tasks hold one pool's cores from the first to the last.
    sim = Simulation(two_node(spec=SPEC))
    a = TaskCall(0, "a", 0.0, 1e6, "copy", "fp32", 28.0)
    with pytest.raises(DlrmsimError, match="one rank's cores"):
        sim.compute_chain([a, TaskCall(1, "b", 0.0, 1e6, "copy", "fp32", 28.0)], print)
    with pytest.raises(DlrmsimError, match="one rank's cores"):
        sim.compute_chain([a._replace(overhead_s=1e-6)], print)
    with pytest.raises(DlrmsimError, match="negative"):
        sim.compute_chain([a, a._replace(name="b", flops=-1.0)], print)
    # and nothing was started: the cores are free for a good chain
    sim.compute_chain([a, a._replace(name="b")], print)
    sim.run()
    assert [r.name for r in sim.records] == ["a", "b"]


def test_chains_driven_by_the_schedulers_kernel_give_the_python_paths_records_and_counters() -> None:
    # Because the chain kernel (fluid._chains_ahead) runs the scheduler's own instants and arithmetic, its wake-ups
    # included (one asked for before a later task started still fires), the records, solves and wake-ups must be
    # those of the Python path to the bit: four chains on one memory domain started at different times, with zero-
    # work and jittered tasks, beside a foreign task that starts mid-way (a SimPy event the kernel must stop for).
    def run(kernel: bool) -> tuple[list[tuple[str, float, float]], dict[str, int]]:
        sim = Simulation(two_node(spec=SPEC))
        if not kernel:
            sim.fluid._run_chains = lambda t_next: False  # type: ignore[method-assign]

        def chain(c: int) -> list[TaskCall]:
            out = []
            for j in range(12):
                flops, nbytes = (0.0, 0.0) if j == 5 else (2e8 * (1 + j % 3), 1e8 * (1 + (j + c) % 4))
                out.append(
                    TaskCall(0, f"c{c}.t{j}", flops, nbytes, "gemm", "fp32", 7.0, work_factor=1 + 0.01 * ((c * 7 + j) % 5))
                )
            return out

        def starter(c: int):  # noqa: ANN202
            yield sim.env.timeout(1e-4 * c)
            sim.compute_chain(chain(c), lambda now: None)

        def foreign():  # noqa: ANN202
            yield sim.env.timeout(2.5e-3)
            yield sim.compute(1, "foreign", flops=1e9, bytes=5e8, kind="gemm")
            yield sim.compute(0, "late", bytes=2e8, kind="copy", cores=0.5)

        for c in range(4):
            sim.env.process(starter(c))
        sim.env.process(foreign())
        sim.run()
        return [(r.name, r.start, r.end) for r in sim.records], {**sim.fluid.stats, "events": next(sim.env._eid)}

    with_kernel, stats_kernel = run(kernel=True)
    python, stats_python = run(kernel=False)
    assert len(python) == 4 * 12 + 2
    assert with_kernel == python
    # the same instants, solves and wake-ups; the kernel's took no SimPy event (so it did run)
    events_kernel, events_python = stats_kernel.pop("events"), stats_python.pop("events")
    assert stats_kernel == stats_python
    assert events_kernel < events_python - 20, (events_kernel, events_python)
