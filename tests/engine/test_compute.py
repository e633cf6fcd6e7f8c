"""Compute and memory: roofline times, core-limited bandwidth, shared memory domains, pinned cores, interference."""

from __future__ import annotations

import math

import pytest

from dlrmsim.engine import CommSettings, Simulation, costs
from dlrmsim.errors import DlrmsimError
from dlrmsim.training.ranks import CollectiveCoordinator, RankPrograms
from dlrmsim.training.taskgraph import IterationGraph
from tests.engine.handmade import GB, simple_spec, two_node

SPEC = simple_spec(cores=28, peak_flops=4.3e12, memory_bandwidth_Bps=100 * GB, saturation_cores=7)


def walk_rank0(sim: Simulation, graph: IterationGraph) -> dict[str, float]:
    """Rank 0's times after every rank of ``graph`` walked its program on ``sim`` (no collectives, no backend)."""
    ranks = RankPrograms(sim, graph, CollectiveCoordinator(sim, graph, None, 1), "fp32")  # type: ignore[arg-type]
    ranks.start()
    sim.run(ranks.done)
    return ranks.accs[0]


def ends_of(sim: Simulation) -> dict[str, float]:
    return {r.name: r.end for r in sim.records}


def test_compute_bound_task_takes_flops_over_peak() -> None:
    sim = Simulation(two_node(spec=SPEC))
    sim.compute(0, "gemm", flops=4.3e9, bytes=1e6)
    sim.run()
    assert sim.now == pytest.approx(1e-3, rel=1e-12)
    assert sim.now == pytest.approx(costs.task_time(4.3e9, 1e6, SPEC))


@pytest.mark.parametrize(("cores", "expected"), [(1, 7e-3), (3.5, 2e-3), (7, 1e-3), (14, 1e-3), (28, 1e-3)])
def test_bandwidth_bound_task_scales_with_cores_until_saturation(cores: float, expected: float) -> None:
    # achieved bandwidth = min(cores / saturation_cores, 1) * 100 GB/s
    sim = Simulation(two_node(spec=SPEC))
    sim.compute(0, "lookup", bytes=100e6, kind="lookup", cores=cores)
    sim.run()
    assert sim.now == pytest.approx(expected, rel=1e-12)


def test_memory_bound_task_beside_a_gemm_shares_the_socket_bandwidth() -> None:
    # GEMM on 14 cores: 2.15e9 flop at 2.15 Tflop/s over 60 MB -> wants 60 GB/s (1 ms alone).
    # Lookup on 14 cores: 100 MB at up to 100 GB/s (1 ms alone). Together they need 160 GB/s of 100:
    # max-min gives 50 GB/s each; the GEMM ends at 60e6/50e9 = 1.2 ms, the lookup then has 40 MB left
    # at 100 GB/s: 1.2 + 0.4 = 1.6 ms. Adding the two times would give 2 ms; taking the max 1 ms.
    sim = Simulation(two_node(spec=SPEC))
    sim.compute(0, "gemm", flops=2.15e9, bytes=60e6, cores=14)
    sim.compute(0, "lookup", bytes=100e6, kind="lookup", cores=14)
    sim.run()
    ends = ends_of(sim)
    assert ends["gemm"] == pytest.approx(1.2e-3, rel=1e-12)
    assert ends["lookup"] == pytest.approx(1.6e-3, rel=1e-12)
    rates = costs.shared_bandwidth_rates([60e9, 100e9], 100e9)
    assert rates == pytest.approx([50e9, 50e9])


def test_tasks_on_other_sockets_do_not_share_bandwidth() -> None:
    sim = Simulation(two_node(spec=SPEC))
    sim.compute(0, "a", bytes=100e6, kind="lookup")
    sim.compute(1, "b", bytes=100e6, kind="lookup")
    sim.run()
    assert sim.now == pytest.approx(1e-3, rel=1e-12)


def test_tasks_wanting_all_cores_run_one_after_another() -> None:
    sim = Simulation(two_node(spec=SPEC))
    sim.compute(0, "g1", flops=4.3e9)
    sim.compute(0, "g2", flops=4.3e9)
    sim.run()
    ends = ends_of(sim)
    assert (ends["g1"], ends["g2"]) == pytest.approx((1e-3, 2e-3), rel=1e-12)
    starts = {r.name: r.start for r in sim.records}
    assert starts["g2"] == pytest.approx(1e-3, rel=1e-12)


def test_a_task_that_fits_still_waits_behind_an_earlier_request() -> None:
    # Because core requests are served first come first served (a simpy.Container), a 1-core task that would fit
    # beside the running 20-core one waits behind the 14-core task queued before it: both start when the first
    # task returns its cores, the later one no earlier.
    sim = Simulation(two_node(spec=SPEC))
    sim.compute(0, "a", flops=4.3e9, cores=20)
    sim.compute(0, "b", flops=4.3e9, cores=14)
    sim.compute(0, "c", flops=4.3e8, cores=1)
    sim.run()
    starts = {r.name: r.start for r in sim.records}
    t_a = 4.3e9 / (20 / 28 * 4.3e12)
    assert starts == pytest.approx({"a": 0.0, "b": t_a, "c": t_a}, rel=1e-12)
    pool = sim.rank_resources[0].pools["compute"]
    assert pool.level == pool.capacity and not pool.get_queue  # every core came back


def test_pinned_comm_cores_leave_the_compute_pool() -> None:
    sim = Simulation(two_node(spec=SPEC), comm=CommSettings(pinned_cores=4))
    sim.compute(0, "gemm", flops=4.3e9)
    sim.run()
    assert sim.now == pytest.approx(1e-3 * 28 / 24, rel=1e-12)
    with pytest.raises(DlrmsimError, match="asks for 25 cores"):
        sim.compute(0, "too-wide", flops=1.0, cores=25)


def test_unpinned_progress_thread_stretches_compute_and_communication_while_they_overlap() -> None:
    # 1 ms GEMM on rank 0 beside a 10 MB transfer 0 -> 1 over 10 GB/s (1 us latency).
    comm = CommSettings(progress_thread_unpinned=True, stolen_cores=1.0, comm_slowdown=2.0)
    sim = Simulation(two_node(bw=10 * GB, lat=1e-6, spec=SPEC), comm=comm)
    sim.compute(0, "gemm", flops=4.3e9)
    sim.transfer(0, 1, 10e6, name="xfer")
    sim.run()
    ends = ends_of(sim)
    share = 1 - 1 / 28  # the thread takes one of 28 cores' time while the flow is in flight
    t_gemm = 1e-6 + (1e-3 - 1e-6) / share  # full speed until the flow starts at 1 us
    sent = 5e9 * (t_gemm - 1e-6)  # the flow runs at 10 GB/s / 2 while the GEMM runs
    t_flow = t_gemm + (10e6 - sent) / 10e9
    assert ends["gemm"] == pytest.approx(t_gemm, rel=1e-12)
    assert ends["xfer"] == pytest.approx(t_flow, rel=1e-12)


def test_barrier_synchronized_kernels_lose_the_stolen_share_of_every_core() -> None:
    comm = CommSettings(progress_thread_unpinned=True, stolen_cores=0.5, barrier_synchronized=True)
    sim = Simulation(two_node(bw=10 * GB, lat=0.0, spec=SPEC), comm=comm)
    sim.compute(0, "gemm", flops=4.3e9)
    sim.transfer(0, 1, 100e6, name="xfer")  # 10 ms: longer than the GEMM
    sim.run()
    assert ends_of(sim)["gemm"] == pytest.approx(1e-3 / 0.5, rel=1e-12)


def test_pinned_backend_has_no_interference() -> None:
    sim = Simulation(two_node(bw=10 * GB, lat=1e-6, spec=SPEC), comm=CommSettings(pinned_cores=4))
    sim.compute(0, "gemm", flops=4.3e9 * 24 / 28)
    sim.transfer(0, 1, 10e6, name="xfer")
    sim.run()
    ends = ends_of(sim)
    assert ends["gemm"] == pytest.approx(1e-3, rel=1e-12)
    assert ends["xfer"] == pytest.approx(1e-6 + 1e-3, rel=1e-12)


def test_in_order_completion_reports_a_later_message_after_an_earlier_one() -> None:
    for in_order, expected_small in ((False, 1e-6 + 1e3 / 10e9), (True, 1e-6 + 100e6 / 10e9)):
        sim = Simulation(two_node(bw=10 * GB, lat=1e-6, spec=SPEC), comm=CommSettings(in_order_completion=in_order))
        seen: dict[str, float] = {}

        def prog(s=sim, seen=seen):
            big = s.transfer(0, 1, 100e6, name="big")
            small = s.transfer(1, 0, 1e3, name="small")  # other direction: physically done almost at once
            yield small
            seen["small"] = s.now
            yield big

        sim.env.process(prog())
        sim.run()
        assert seen["small"] == pytest.approx(expected_small, rel=1e-9)


def test_comm_pool_tasks_use_the_comm_cores() -> None:
    sim = Simulation(two_node(spec=SPEC), comm=CommSettings(pinned_cores=4))
    sim.compute(0, "pack", bytes=100e6, kind="copy", pool="comm")  # 4 cores of 7 for saturation
    sim.run()
    assert sim.now == pytest.approx(100e6 / (4 / 7 * 100e9), rel=1e-12)


def test_overhead_is_added_to_the_roofline_time_and_recorded_in_the_task() -> None:
    spec = SPEC
    sim = Simulation(two_node(spec=spec))
    t_roof = costs.task_time(1e9, 0.0, spec)
    sim.compute(0, "t", flops=1e9, overhead_s=2e-3)
    sim.run()
    assert ends_of(sim)["t"] == pytest.approx(t_roof + 2e-3, rel=1e-9)


def test_negative_overhead_is_an_error() -> None:
    sim = Simulation(two_node(spec=SPEC))
    with pytest.raises(DlrmsimError):
        sim.compute(0, "t", flops=1e9, overhead_s=-1.0)


def test_training_charges_first_op_then_further_ops_overhead() -> None:
    import dataclasses

    from dlrmsim.topologies.topology import ComputeSpec
    from dlrmsim.training.taskgraph import IterationGraph, Task

    spec = dataclasses.replace(
        SPEC,
        task_overhead_s=1e-4,
        op_overhead_s=2e-5,
        row_time_s_by_kind={"update": 1e-8},
        fixed_time_s_by_kind={"update": 5e-5},
        walk_time_s_by_kind={"update": 4e-8},
        page_bytes=4096.0,
        l2_bytes=2.0**20,
        reload_time_s_by_kind={"update": 6e-8},
        llc_bytes=2.0**25,
    )
    assert isinstance(spec, ComputeSpec)
    sim = Simulation(two_node(spec=spec))
    # 512 MiB of tables: 1 MiB of page-table entries, as large as L2, so half the lookups' walks miss it
    # and a 96 MiB working set since the forward, three times the 32 MiB last-level cache: 3/4 of rows reloaded
    graph = IterationGraph(
        programs=[[Task("u", "update", 0.0, 0.0, ops=3.0, rows=1e4, tables_bytes=2.0**29, reuse_bytes=3 * 2.0**25)], []],
        collectives={},
    )
    acc = walk_rank0(sim, graph)
    # first op cold (1e-4), two further ops warm (2e-5 each), the kind's fixed time once, the per-row time,
    # half the rows' page walks missing L2, and 3/4 of the rows reloaded
    assert acc["end"] == pytest.approx(1e-4 + 2 * 2e-5 + 5e-5 + 1e4 * 1e-8 + 0.5 * 1e4 * 4e-8 + 0.75 * 1e4 * 6e-8, rel=1e-9)


@pytest.mark.parametrize(("tables_bytes", "share"), [(0.0, 0.0), (2.0**29, 0.5), (3 * 2.0**29, 0.75), (2.0**29 / 3, 0.25)])
def test_page_walk_miss_share_is_entries_over_entries_plus_l2(tables_bytes: float, share: float) -> None:
    # 8-byte entries per 4 KiB page: 512 MiB of tables have 1 MiB of entries, a 1 MiB L2's worth
    assert costs.page_walk_miss_share(tables_bytes, 4096.0, 2.0**20) == pytest.approx(share)
    assert costs.cache_miss_share(tables_bytes / 512, 2.0**20) == pytest.approx(share)


def test_sorted_visits_of_sparse_rows_are_one_walk_and_one_miss_each() -> None:
    # Because 10 rows of a million are almost never neighbours or on one page, an ascending pass over them walks
    # ~10 pages and misses ~10 times, as a visit in lookup order would.
    pages, jumps = costs.sorted_visits(10.0, 1e6, 128.0, 4096.0)
    assert pages == pytest.approx(10.0, rel=1e-3) and jumps == pytest.approx(10.0, rel=1e-3)


def test_sorted_visits_of_every_row_stream_the_table() -> None:
    # Because a pass over every row of a table is one sequential sweep, it walks each of the table's pages once
    # (32 rows of 128 B a 4 KiB page) and never jumps.
    assert costs.sorted_visits(2**16, 2**16, 128.0, 4096.0) == (2**16 / 32, 0.0)


def test_sorted_visits_at_density_rho_jump_with_probability_one_minus_rho() -> None:
    # Because the next touched row is the adjacent one with probability rho, (1 - rho) of the rows jump; a page
    # of 32 rows escapes with probability (1 - rho)^32.
    rho = 0.25
    pages, jumps = costs.sorted_visits(rho * 2**20, 2**20, 128.0, 4096.0)
    assert jumps == pytest.approx((1 - rho) * rho * 2**20)
    assert pages == pytest.approx(2**20 / 32 * (1 - (1 - rho) ** 32))
    # rows wider than a page: every touched row walks at least its own page
    assert costs.sorted_visits(100.0, 1e6, 8192.0, 4096.0)[0] == pytest.approx(100.0, rel=1e-3)


def test_a_sorted_visit_kind_pays_walks_per_page_and_reloads_per_jump() -> None:
    """The spec marks "update" as visiting its rows in order: its walk time is charged per page walked and its
    reload time per jumping row, the per-lookup time per lookup; without the mark, per lookup."""
    import dataclasses

    spec = dataclasses.replace(
        simple_spec(),
        task_overhead_s=0.0,
        op_overhead_s=0.0,
        row_time_s_by_kind={"update": 1e-8},
        walk_time_s_by_kind={"update": 4e-8},
        reload_time_s_by_kind={"update": 6e-8},
        page_bytes=4096.0,
        l2_bytes=2.0**20,
        llc_bytes=2.0**20,
    )
    visit = costs.RowVisit(unique_rows=2**18, table_rows=2**20, row_bytes=128.0)
    tables, reuse, lookups = 2.0**29, 3 * 2.0**20, 3e5  # walk share 1/2, reload share 3/4
    pages, jumps = costs.sorted_visits(2**18, 2**20, 128.0, 4096.0)
    in_order = costs.fixed_time_s(
        dataclasses.replace(spec, sorted_visit_kinds=("update",)), "update", 0, lookups, tables, reuse, visit=visit
    )
    assert in_order == pytest.approx(lookups * 1e-8 + 0.5 * pages * 4e-8 + 0.75 * jumps * 6e-8, rel=1e-12)
    by_lookup = costs.fixed_time_s(spec, "update", 0, lookups, tables, reuse, visit=visit)
    assert by_lookup == pytest.approx(lookups * (1e-8 + 0.5 * 4e-8 + 0.75 * 6e-8), rel=1e-12)


def test_first_task_of_a_run_pays_its_kind_s_run_start() -> None:
    import dataclasses

    from dlrmsim.training.taskgraph import IterationGraph, Task, mark_run_starts

    spec = dataclasses.replace(SPEC, fixed_time_s_by_kind={"embedding": 1e-5}, run_start_s_by_kind={"embedding": 2e-4})
    assert costs.fixed_time_s(spec, "embedding", 0.0, 0.0, run_start=True) == pytest.approx(2.1e-4)
    assert costs.fixed_time_s(spec, "gemm", 0.0, 0.0, run_start=True) == 0.0  # no run start measured for the kind
    sim = Simulation(two_node(spec=spec))
    program = mark_run_starts([Task(f"e{i}", "embedding", 0.0, 0.0, ops=0.0) for i in range(3)])
    graph = IterationGraph(programs=[program, []], collectives={})
    acc = walk_rank0(sim, graph)
    # three tables' fixed times, and the run's start once
    assert acc["end"] == pytest.approx(3 * 1e-5 + 2e-4, rel=1e-12)


def test_latency_bound_gathers_load_the_domain_with_their_own_bytes() -> None:
    """A kind reaching a quarter of stream bandwidth runs at a quarter of its cap; two of them on one socket
    move 2 x 25 GB/s through a 100 GB/s domain, so neither slows the other. Full-rate streams would share it."""
    import dataclasses

    spec = dataclasses.replace(SPEC, bandwidth_fraction_by_kind={"embedding": 0.25, "hot": 4.0})
    assert costs.memory_demand(spec, "embedding", 1e8) == costs.MemoryDemand(1e8, 0.25)
    assert costs.memory_demand(spec, "hot", 1e8) == costs.MemoryDemand(2.5e7, 1.0)  # 3/4 of the bytes hit in cache
    for kind, fraction in (("embedding", 0.25), ("hot", 4.0), ("lookup", 1.0)):
        alone = 1e8 / (fraction * 100 * GB)
        assert costs.task_time(0.0, 1e8, spec, kind=kind) == pytest.approx(alone, rel=1e-12)
        sim = Simulation(two_node(spec=spec))
        sim.compute(0, "a", bytes=1e8, kind=kind, cores=14)
        sim.compute(0, "b", bytes=1e8, kind=kind, cores=14)
        sim.run()
        # gathers: 25 GB/s each, together half the domain; cache-hitting and plain streams: 100 GB/s each, shared
        assert sim.now == pytest.approx(alone if kind == "embedding" else 2 * alone, rel=1e-12)


def test_measured_flop_rate_and_fixed_time_of_a_kind() -> None:
    """A kind with a measured flop rate runs at it (not at the GEMM table's), after its fixed time, per-item
    time and dispatch: t = dispatch + fixed + rows x row_time + max(flops / rate, bytes / bandwidth)."""
    import dataclasses

    from dlrmsim.training.taskgraph import IterationGraph, Task

    rate, fixed, per_row = 2e9, 3e-4, 1e-7
    spec = dataclasses.replace(
        SPEC,
        task_overhead_s=1e-4,
        flop_rate_by_kind={"interaction": rate},
        fixed_time_s_by_kind={"interaction": fixed},
        row_time_s_by_kind={"interaction": per_row},
    )
    sim = Simulation(two_node(spec=spec))
    flops, nbytes, rows = 4e6, 1e3, 512.0
    graph = IterationGraph(programs=[[Task("i", "interaction", flops, nbytes, rows=rows)], []], collectives={})
    acc = walk_rank0(sim, graph)
    expected = 1e-4 + fixed + rows * per_row + max(flops / rate, costs.task_time(0.0, nbytes, spec))
    assert acc["end"] == pytest.approx(expected, rel=1e-9)
    assert costs.task_flop_rate(spec, flops, spec.cores, kind="interaction") == rate
    assert costs.task_flop_rate(spec, flops, spec.cores, kind="gemm") != rate


@pytest.mark.parametrize(("ops", "expected"), [(0.0, 0.0), (0.5, 0.5e-4), (1.0, 1e-4), (4.0, 1e-4 + 3 * 2e-5)])
def test_dispatch_overhead_first_op_cold_then_warm(ops: float, expected: float) -> None:
    import dataclasses

    from dlrmsim.engine.costs import dispatch_overhead_s

    spec = dataclasses.replace(SPEC, task_overhead_s=1e-4, op_overhead_s=2e-5)
    assert dispatch_overhead_s(spec, ops) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_gemm_aspect_is_one_for_a_cube_and_its_relative_intensity_otherwise() -> None:
    from dlrmsim.workloads.model import Gemm

    cube = Gemm(512, 512, 512)
    assert costs.gemm_aspect(cube.flops, cube.bytes_moved(4.0), 4.0) == pytest.approx(1.0, rel=1e-12)
    # 1024 x 32 x 256: 16.8 Mflop over 4 (1024*256 + 256*32 + 2*1024*32) B; a cube of that flops has side 203.2
    # and intensity 203.2 / 8 flop/B.
    g = Gemm(1024, 32, 256)
    intensity = g.flops / g.bytes_moved(4.0)
    side = (g.flops / 2) ** (1 / 3)
    assert costs.gemm_aspect(g.flops, g.bytes_moved(4.0), 4.0) == pytest.approx(intensity / (side / 8), rel=1e-12)
    assert 0.3 < costs.gemm_aspect(g.flops, g.bytes_moved(4.0), 4.0) < 0.5


@pytest.mark.parametrize(("overlap", "expected"), [(1.0, 3.0), (0.0, 4.0), (0.5, 3.5)])
def test_gemm_time_hides_the_overlapped_share_of_the_shorter_part(overlap: float, expected: float) -> None:
    assert costs.gemm_time_s(3.0, 1.0, overlap) == pytest.approx(expected)
    assert costs.gemm_time_s(1.0, 3.0, overlap) == pytest.approx(expected)


def test_gemm_task_pays_its_aspect_factor_and_unoverlapped_traffic() -> None:
    """A non-cubic GEMM on a spec with an aspect table and overlap 0.25: flops at peak x table(flops) x
    factor(aspect), plus 75 % of the shorter traffic time, in the engine and in task_time alike."""
    import dataclasses

    from dlrmsim.topologies.topology import EfficiencyTable
    from dlrmsim.workloads.model import Gemm

    g = Gemm(4096, 32, 512)
    aspect = costs.gemm_aspect(g.flops, g.bytes_moved(4.0), 4.0)
    spec = dataclasses.replace(
        SPEC,
        gemm_efficiency=EfficiencyTable.constant(0.8),
        gemm_aspect_efficiency=EfficiencyTable(((aspect / 2, 0.5), (1.0, 1.0))),
        gemm_memory_overlap=0.25,
    )
    # factor at the aspect: interpolated in log(aspect) between (aspect/2, 0.5) and (1, 1)
    t = (math.log(aspect) - math.log(aspect / 2)) / (math.log(1.0) - math.log(aspect / 2))
    factor = 0.5 + t * 0.5
    t_f = g.flops / (4.3e12 * 0.8 * factor)
    t_b = g.bytes_moved(4.0) / 100e9
    expected = max(t_f, t_b) + 0.75 * min(t_f, t_b)
    assert costs.task_time(g.flops, g.bytes_moved(4.0), spec, kind="gemm") == pytest.approx(expected, rel=1e-12)
    sim = Simulation(two_node(spec=spec))
    sim.compute(0, "g", flops=g.flops, bytes=g.bytes_moved(4.0))
    sim.run()
    assert sim.now == pytest.approx(expected, rel=1e-9)
    # Streaming kinds keep the roofline: a lookup's flops never add to its bytes.
    assert costs.task_time(1e6, 1e8, spec, kind="lookup") == pytest.approx(1e8 / 100e9, rel=1e-12)


def test_first_op_pays_the_surcharge_in_proportion_to_the_cache_its_predecessor_evicted() -> None:
    """Because the calibration times a task's first op after flushing twice the LLC, a task after less traffic
    finds part of the framework's code still cached: the surcharge over a further op scales with
    cache_miss_share(prev) / cache_miss_share(flush)."""
    import dataclasses

    from dlrmsim.engine.costs import cache_miss_share, first_op_s

    llc = 32.0 * 2**20
    spec = dataclasses.replace(
        SPEC, task_overhead_s=11e-6, op_overhead_s=1.6e-6, llc_bytes=llc, task_overhead_after_bytes=2 * llc
    )
    # nothing evicted: a further op's cost; the flush's traffic or more, or no figure for it: the whole first-op cost
    assert first_op_s(spec, 0.0) == pytest.approx(1.6e-6, rel=1e-12)
    assert first_op_s(spec, 2 * llc) == first_op_s(spec, 10 * llc) == 11e-6
    assert first_op_s(dataclasses.replace(spec, task_overhead_after_bytes=math.inf), 0.0) == 11e-6
    assert first_op_s(spec) == 11e-6  # predecessor unknown: as measured
    # in between: a 16 MiB predecessor evicts 1/3 of the cache against the flush's 2/3, so half the surcharge
    half = first_op_s(spec, llc / 2)
    assert cache_miss_share(llc / 2, llc) / cache_miss_share(2 * llc, llc) == pytest.approx(0.5)
    assert half == pytest.approx(1.6e-6 + 0.5 * 9.4e-6, rel=1e-12)


def test_a_rank_task_after_a_small_task_pays_a_warm_first_op() -> None:
    """Because each task's first op follows its predecessor's traffic (the first task follows the last one, as
    in the previous iteration), a program of byte-free tasks pays op_overhead_s per task, not task_overhead_s."""
    import dataclasses

    from dlrmsim.training.taskgraph import IterationGraph, Task

    spec = dataclasses.replace(SPEC, task_overhead_s=1e-4, op_overhead_s=2e-5, task_overhead_after_bytes=2 * SPEC.llc_bytes)

    def iteration(nbytes: float) -> float:
        sim = Simulation(two_node(spec=spec))
        tasks = [Task(f"t{i}", "gemm", 0.0, nbytes) for i in range(3)]
        graph = IterationGraph(programs=[tasks, []], collectives={})
        return walk_rank0(sim, graph)["end"]

    assert iteration(0.0) == pytest.approx(3 * 2e-5, rel=1e-9)
    big = 4 * SPEC.llc_bytes  # each task streams twice the flush: its successor's first op is fully cold
    assert iteration(big) == pytest.approx(3 * 1e-4 + 3 * costs.task_time(0.0, big, spec), rel=1e-9)
