"""The simulation engine: SimPy ranks issuing compute tasks, transfers and collectives onto one fluid solver.

Usage::

    sim = Simulation(topology, seed=0, comm=CommSettings(pinned_cores=4))
    def rank_proc(r):
        yield sim.compute(r, "bottom_mlp_fwd", flops=2e9, bytes=8e6)
        yield sim.collective("allreduce", list(range(topology.num_ranks)), 9.4e6, name="grad")
    for r in range(topology.num_ranks):
        sim.env.process(rank_proc(r))
    sim.run()
    df = records_frame(sim.records)

All times are seconds of simulated time, sizes bytes, rates B/s and flop/s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import simpy

from dlrmsim.collector import gc_paused
from dlrmsim.engine import costs
from dlrmsim.engine.arrays import all_equal, any_at_least, any_negative
from dlrmsim.engine.collectives import CollectiveContext, Phase, get_algorithm
from dlrmsim.engine.fluid import TRIG_COMM, TRIG_COMPUTE, TRIG_NONE, Batch, FluidScheduler, Owner
from dlrmsim.engine.network import Network
from dlrmsim.engine.phases import (
    Ahead,
    RunnerListPacking,
    cycles_to_skip,
    last_busy_phase,
    lockstep_barrier,
    ranks_with_flows_done,
    run_ahead,
    sends_to_start,
)
from dlrmsim.engine.records import Record, RecordLog
from dlrmsim.engine.resources import CommSettings, CorePool, RankResources
from dlrmsim.errors import DlrmsimError
from dlrmsim.topologies.topology import Topology

_I0 = np.zeros(0, dtype=np.int64)

# Engine counters summed over every Simulation.run of this process (benchmarks read them around a command).
RUN_TOTALS: Counter[str] = Counter()


class Simulation:
    """One simulated run over a topology.

    ``env`` is the simpy.Environment (write rank programs as SimPy processes), ``records`` the list of
    finished :class:`Record` s, ``rng`` a numpy Generator seeded with ``seed`` for workload randomness (the
    engine itself draws no random numbers, so runs are deterministic). ``record_flows=False`` skips the
    per-flow records of collectives (per-rank collective spans are always recorded). Without per-flow records,
    collectives of several phases run ahead in compiled code between other events (:mod:`dlrmsim.engine.phases`;
    the same results, faster); ``run_ahead=False`` keeps every instant in Python, for comparison.

    ``lockstep_collectives=True`` is an approximation, off by default: every rank of a collective enters its next
    phase when *all* its ranks have finished the current one (a barrier per step), instead of when its own flows
    and reduction are done. Ranks then never drift apart, so a step's flows end at a few instants, not one each,
    and repeated steps can be skipped; see ``docs/architecture.md`` ("Lockstep collectives") for its measured error.
    """

    def __init__(
        self,
        topology: Topology,
        seed: int = 0,
        comm: CommSettings | None = None,
        record_flows: bool = True,
        run_ahead: bool = True,
        lockstep_collectives: bool = False,
    ) -> None:
        self.topology = topology
        self.comm = comm or CommSettings()
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.env = simpy.Environment()
        self._log = RecordLog()
        self.record_flows = record_flows
        self.lockstep_collectives = lockstep_collectives
        self.network = Network(topology, self.comm)
        self.fluid = FluidScheduler(self.env, self.network.capacity, topology.num_ranks)
        if run_ahead:
            self.fluid.set_ahead_kernel(self._ahead_kernel(), RunnerListPacking())
        self.rank_resources = [RankResources(self.env, r, topology.compute(r), self.comm) for r in range(topology.num_ranks)]
        self._collective_seq = 0
        self._counted: dict[str, int] = {}  # fluid.stats already added to RUN_TOTALS
        self._counted_eid = 0
        self._last_comm: dict[int, simpy.Event] = {}
        self._task_cache: dict[tuple, tuple[float, float, float, int, bool]] = {}
        # (rank, pool, cores) of tasks whose pool and core count _task_pool has accepted: their pool
        self._pools_checked: dict[tuple[int, str, float], CorePool] = {}
        self._reduce_cache: dict[tuple, float] = {}
        # Ranks sharing one ComputeSpec object share its reduction caps (see reduction_caps).
        spec_ids: dict[int, int] = {}
        self._spec_index = np.array(
            [spec_ids.setdefault(id(rr.spec), len(spec_ids)) for rr in self.rank_resources], dtype=np.int64
        )
        self._spec_of_rank: list[int] = self._spec_index.tolist()
        self._rank_mem: list[int] = self.network.mem[self.network.rank_node].tolist()  # each rank's memory domain

    # ---- basics -----------------------------------------------------------------------------------
    def _ahead_kernel(self) -> Callable:
        """:func:`phases.run_ahead` bound to this simulation's network and communication settings."""
        net, comm = self.network, self.comm
        slow = comm.comm_slowdown if comm.progress_thread_unpinned else 1.0

        def kernel(F, I, E, EW, n, m, res_cap, n_ranks, t, t_next, t_ext, QF, QI, nq, seq, colls, oids, counts, fin):  # noqa: ANN001, ANN202, E741
            return run_ahead(F, I, E, EW, n, m, res_cap, n_ranks, t, t_next, t_ext, QF, QI, nq, seq, colls, oids,
                             net.pair_tables(), comm.rendezvous, slow, counts, fin)  # fmt: skip

        return kernel

    @property
    def now(self) -> float:
        """Current simulated time (s)."""
        return self.env.now

    def run(self, until: float | simpy.Event | None = None) -> None:
        """Run until no events are left, or until a time (s) or an event (with the cyclic collector paused,
        :func:`gc_paused`)."""
        try:
            with gc_paused():
                self.env.run(until=until)
        finally:
            self._log.records  # noqa: B018 - materialise, so that lists held from before see every record
            RUN_TOTALS.update({k: v - self._counted.get(k, 0) for k, v in self.fluid.stats.items()})
            self._counted = dict(self.fluid.stats)
            # SimPy numbers every event it schedules; the id counter tells how many this run scheduled.
            eid = next(self.env._eid)
            RUN_TOTALS["simpy_events"] += eid - self._counted_eid
            self._counted_eid = eid + 1

    @property
    def records(self) -> list[Record]:
        """Finished records in the order they finished (one list object for the whole simulation)."""
        return self._log.records

    @records.setter
    def records(self, value: list[Record]) -> None:
        self._log = RecordLog(value)

    @property
    def stats(self) -> dict[str, int]:
        """Counters: activities started/finished, rate solves, solver wake-ups, SimPy-visible records."""
        return dict(self.fluid.stats, records=len(self._log))

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.topology.num_ranks:
            raise DlrmsimError(f"rank {rank} out of range 0..{self.topology.num_ranks - 1}", source=self.topology.source)

    # ---- compute --------------------------------------------------------------------------------------
    def compute(
        self,
        rank: int,
        name: str,
        *,
        flops: float = 0.0,
        bytes: float = 0.0,  # noqa: A002 - the public keyword is 'bytes'
        kind: str = "gemm",
        precision: str = "fp32",
        cores: float | None = None,
        category: str = "compute",
        pool: str = "compute",
        overhead_s: float = 0.0,
        columns: int = 0,
    ) -> simpy.Event:
        """Run a task of ``flops`` operations touching ``bytes`` of memory on ``cores`` cores of ``rank``.

        The task first takes ``cores`` from the rank's ``pool`` ("compute": cores minus pinned comm cores,
        the default amount; "comm": the pinned cores or one helper thread), waiting if they are busy. Alone it
        takes the roofline time ``costs.task_time``; beside other tasks and NIC copies on the same memory
        domain it gets a max-min share of the domain's bandwidth. Returns an event that fires when the task
        ends; the task is then recorded (start = when it got its cores). ``overhead_s`` is a fixed software
        time (op dispatch, per-row kernel calls) spent holding the cores before the roofline part starts.
        ``columns``: a matrix task's output columns (n of C[m, n] = A[m, k] B[k, n], row-major), which set its
        vector-block efficiency (costs.vector_block_efficiency); 0 = not given.
        """
        container, c = self._task_pool(rank, name, flops, bytes, cores, pool, overhead_s)
        task = _ComputeTask(self, rank, name, float(flops), float(bytes), kind, precision, c, category, pool, overhead_s, columns)
        task.begin(container)
        return task.done

    def _task_pool(
        self, rank: int, name: str, flops: float, nbytes: float, cores: float | None, pool: str, overhead_s: float
    ) -> tuple[CorePool, float]:
        """The pool a task of :meth:`compute` or :meth:`compute_batch` takes its cores from, and the cores (None: the
        whole pool); a one-line error for a rank out of range, negative flops, bytes or overhead, or more cores than
        the pool has."""
        self._check_rank(rank)
        if flops < 0 or nbytes < 0:
            raise DlrmsimError(f"task '{name}' has negative flops or bytes", field="flops/bytes")
        container = self.rank_resources[rank].pool(pool)
        c = float(container.capacity if cores is None else cores)
        if not 0 < c <= container.capacity:
            raise DlrmsimError(
                f"task '{name}' asks for {c:g} cores but rank {rank}'s {pool} pool has {container.capacity:g}",
                field="cores",
                fix="ask for fewer cores",
            )
        if overhead_s < 0:
            raise DlrmsimError(f"task '{name}' has a negative overhead", field="overhead_s")
        return container, c

    def compute_batch(self, calls: Sequence[TaskCall], on_done: Callable[[list[int], float], None]) -> None:
        """Start the compute tasks ``calls`` now, each on its own rank, as :meth:`compute` would one by one, in one
        batch: ``on_done(indices, end)`` hears which of them (indices into ``calls``) finished at ``end`` (s), once
        per instant at which some do, after their records are written.

        For an application whose ranks walk programs in step (a rank's next task starts when its previous one
        ends): at 1024 ranks some 640 tasks start at each instant, and one batch costs one fluid addition and one
        owner instead of an event, a core-pool request and an owner each. Each call's cores must be free now (a
        rank's compute stream holds them one task at a time); a call whose pool cannot grant them at once is a
        usage error. Times, records and rates are those of :meth:`compute` (the batch's activities keep the calls'
        order; the fixed overhead delays each activity's start, with the record's start at the call)."""
        if not calls:
            return
        if len(calls) == 1 and calls[0].overhead_s == 0:
            self._compute_one(calls[0], on_done)
            return
        n = len(calls)
        work = np.empty(n)
        cap = np.empty(n)
        cap_s = np.empty(n)
        trig = np.empty(n, dtype=np.int64)
        share = np.empty(n)
        e_act: list[int] = []
        e_res: list[int] = []
        delay = np.empty(n)
        containers = []
        for i, c in enumerate(calls):
            containers.append(self._take_free(c))
            w, cp, cs, tr, res = self._task_params(
                c.rank, c.flops, c.nbytes, c.precision, c.cores, c.pool == "compute", c.kind, c.columns
            )
            work[i], cap[i], cap_s[i], trig[i], share[i], delay[i] = w * c.work_factor, cp, cs, tr, c.cores, c.overhead_s
            if res >= 0:
                e_act.append(i)
                e_res.append(res)
        owner = _BatchOwner(self, calls, containers, self.env.now, on_done)
        batch = Batch(
            work=work,
            cap=cap,
            cap_slow=cap_s,
            trig=trig,
            rank_a=np.fromiter((c.rank for c in calls), dtype=np.int64, count=n),
            rank_b=np.full(n, -1, dtype=np.int64),
            tag=np.arange(n, dtype=np.int64),
            e_act=np.array(e_act, dtype=np.int64),
            e_res=np.array(e_res, dtype=np.int64),
            e_w=np.ones(len(e_act)),
            owner=self.fluid.register(owner, n),
            share=share,
        )
        self.fluid.add(batch, delay)

    def _take_free(self, c: TaskCall) -> CorePool:
        """The pool of ``c``'s task with the task's cores taken from it now; a usage error when they are busy.
        A (rank, pool, cores) already accepted skips the rank and core checks: ranks repeat them task after task."""
        key = (c.rank, c.pool, c.cores)
        container = self._pools_checked.get(key)
        if container is None or c.flops < 0 or c.nbytes < 0 or c.overhead_s < 0:
            container, _ = self._task_pool(c.rank, c.name, c.flops, c.nbytes, c.cores, c.pool, c.overhead_s)
            self._pools_checked[key] = container
        if not container.take_now(c.cores):
            raise DlrmsimError(
                f"task '{c.name}': rank {c.rank}'s {c.pool} cores are busy; a batch starts tasks on free cores only",
                field="cores",
                fix="use Simulation.compute, which waits for them",
            )
        return container

    def compute_chain(self, calls: Sequence[TaskCall], on_done: Callable[[float], None]) -> None:
        """Run the compute tasks ``calls`` one after another on one rank's cores, each starting at the instant the
        previous one ends, then call ``on_done(end)`` (s). The same activities, records and times as starting each
        next call from the previous one's :meth:`compute_batch` callback (a one-call batch each), without that
        round trip per task: the cores are taken once (they must be free now) and given back after the last task,
        and each next activity is written from the scheduler's step where the callback would have written it.
        All calls share ``rank``, ``pool`` and ``cores`` (a rank's compute stream); none has a fixed overhead."""
        if not calls:
            on_done(self.env.now)
            return
        first = calls[0]
        for c in calls:
            if (c.rank, c.pool, c.cores) != (first.rank, first.pool, first.cores) or c.overhead_s != 0:
                raise DlrmsimError(
                    f"task '{c.name}': a chain runs on one rank's cores, without fixed overheads",
                    field="calls",
                    fix="use compute_batch for tasks on other ranks, pools or core counts, or with an overhead",
                )
            if c.flops < 0 or c.nbytes < 0:
                raise DlrmsimError(f"task '{c.name}' has negative flops or bytes", field="flops/bytes")
        container = self._take_free(first)
        interferable = first.pool == "compute"
        # Each task's activity columns (work, cap, slowed cap, share; trigger, rank, resource), as _add_task writes
        # them: the owner starts a task from them, and so does the scheduler's kernel (FluidScheduler.add_chain).
        cols = []
        for c in calls:
            work, cap, cap_s, trig, res = self._task_params(
                c.rank, c.flops, c.nbytes, c.precision, c.cores, interferable, c.kind, c.columns
            )
            cols.append((work * c.work_factor, cap, cap_s, c.cores, trig, c.rank, res))
        owner = _ChainOwner(self, calls, cols, container, on_done)
        owner.oid = self.fluid.register(owner, len(calls))
        table = list(zip(*cols, strict=True))
        self.fluid.add_chain(owner.oid, np.array(table[:4], dtype=float), np.array(table[4:], dtype=np.int64))
        owner.start_next()

    def _compute_one(self, c: TaskCall, on_done: Callable[[list[int], float], None]) -> None:
        """:meth:`compute_batch` of one call without a fixed overhead, written straight into the scheduler's tables as
        :meth:`compute`'s tasks are (``FluidScheduler.add_one``: the same activity as a one-activity batch, without
        packing one): an application that walks instances one task at a time (``instances``) starts tens of
        thousands this way."""
        owner = _BatchOwner(self, (c,), [self._take_free(c)], self.env.now, on_done)
        self._add_task(owner, c.rank, c.flops, c.nbytes, c.precision, c.cores, c.pool, c.kind, c.columns, c.work_factor)

    def _add_task(
        self, owner: Owner, rank: int, flops: float, nbytes: float, precision: str, cores: float, pool: str, kind: str,
        columns: int, work_factor: float = 1.0,
    ) -> None:  # fmt: skip
        """Start one task's fluid activity now, ``owner`` hearing when it ends: :meth:`compute`'s tasks and one-call
        batches alike (``work_factor``: :attr:`TaskCall.work_factor`)."""
        oid = self.fluid.register(owner, 1)
        work, cap, cap_s, trig, res = self._task_params(rank, flops, nbytes, precision, cores, pool == "compute", kind, columns)
        # Its share of a saturated memory domain grows with the cores streaming for it (Batch.share).
        self.fluid.add_one(work * work_factor, cap, cap_s, trig, rank, -1, 0, res, oid, share=cores)

    def _task_params(
        self,
        rank: int,
        flops: float,
        nbytes: float,
        precision: str,
        cores: float,
        interferable: bool,
        kind: str = "gemm",
        columns: int = 0,
    ) -> tuple[float, float, float, int, int]:
        """(work, cap, slowed cap, trigger, memory resource or -1) of a task; cached, as ranks repeat tasks and
        ranks sharing one ComputeSpec object have the same caps (only the memory resource is the rank's own).
        A memory-bound task's work is the bytes it moves through its memory domain (costs.memory_demand)."""
        key = (self._spec_of_rank[rank], flops, nbytes, precision, cores, interferable, kind, columns)
        got = self._task_cache.get(key)
        if got is None:
            got = self._task_cache[key] = self._task_params_of_spec(
                rank, flops, nbytes, precision, cores, interferable, kind, columns
            )
        work, cap, cap_s, trig, uses_mem = got
        return work, cap, cap_s, trig, self._rank_mem[rank] if uses_mem else -1

    def _task_params_of_spec(
        self, rank: int, flops: float, nbytes: float, precision: str, cores: float, interferable: bool, kind: str, columns: int
    ) -> tuple[float, float, float, int, bool]:
        """:meth:`_task_params` for ``rank``'s spec, with whether the task draws on its memory domain."""
        rr = self.rank_resources[rank]
        spec = rr.spec
        demand = costs.memory_demand(spec, kind, nbytes)
        overlap = costs.overlap_of(spec, kind)
        if kind not in costs.STREAMING_KINDS and kind not in spec.flop_rate_by_kind:
            kind = "gemm"  # only the efficiency class matters here
        share = rr.interfered_share if interferable else 1.0
        fr = costs.task_flop_rate(spec, flops, cores, precision, kind=kind, nbytes=nbytes, columns=columns) if flops > 0 else 0.0
        fr_s = fr * share
        nbytes = demand.domain_bytes
        if nbytes > 0:
            bw = demand.rate_fraction * costs.task_bandwidth_cap(spec, nbytes, cores)
            # The bytes are the task's work: its cap is the rate that moves them in its time alone.
            cap = nbytes / costs.gemm_time_s(flops / fr, nbytes / bw, overlap) if flops > 0 else bw
            if share == 1.0:  # nothing slows it (no unpinned progress thread): the same arithmetic again
                cap_s = cap
            else:
                bw_s = demand.rate_fraction * costs.task_bandwidth_cap(spec, nbytes, cores * share)
                cap_s = nbytes / costs.gemm_time_s(flops / fr_s, nbytes / bw_s, overlap) if flops > 0 else bw_s
            work = nbytes
        else:
            cap, cap_s, work = fr, fr_s, flops
        return work, cap, cap_s, TRIG_COMPUTE if interferable else TRIG_NONE, nbytes > 0

    def task_batch(
        self, rank: int, flops: float, nbytes: float, precision: str, cores: float, interferable: bool = True
    ) -> Batch:
        """The fluid activity of one task (rate caps from the roofline; see :mod:`dlrmsim.engine.costs`)."""
        work, cap, cap_s, trig, res = self._task_params(rank, flops, nbytes, precision, cores, interferable)
        if res >= 0:
            e_act, e_res, e_w = np.zeros(1, dtype=np.int64), np.array([res], dtype=np.int64), np.ones(1)
        else:
            e_act, e_res, e_w = _I0, _I0, np.zeros(0)
        return Batch(
            work=np.array([work]),
            cap=np.array([cap]),
            cap_slow=np.array([cap_s]),
            trig=np.array([trig]),
            rank_a=np.array([rank]),
            rank_b=np.array([-1]),
            tag=np.zeros(1, dtype=np.int64),
            e_act=e_act,
            e_res=e_res,
            e_w=e_w,
            share=np.array([float(cores)]),
        )

    def reduction_cap(self, rank: int, nbytes: float, cores: float) -> float:
        """Bandwidth cap (B/s) of a reduction streaming ``nbytes`` on ``cores`` cores of ``rank``; cached."""
        key = (rank, nbytes, cores)
        got = self._reduce_cache.get(key)
        if got is None:
            spec = self.rank_resources[rank].spec
            got = self._reduce_cache[key] = costs.task_bandwidth_cap(spec, nbytes, min(cores, spec.cores))
        return got

    def reduction_caps(self, ranks: np.ndarray, nbytes: np.ndarray, cores: float) -> np.ndarray:
        """:meth:`reduction_cap` of each ``ranks[i]``, ``nbytes[i]`` (B/s): one lookup when the ranks share a spec
        and the sizes are equal (a collective's step), one per rank otherwise."""
        if len(ranks) and all_equal(self._spec_index[ranks]) and all_equal(nbytes):
            return np.full(len(ranks), self.reduction_cap(int(ranks[0]), float(nbytes[0]), cores))
        return np.array([self.reduction_cap(r, w, cores) for r, w in zip(ranks.tolist(), nbytes.tolist(), strict=True)])

    # ---- flows ----------------------------------------------------------------------------------------
    def flow_batch(
        self, src_nodes: np.ndarray, dst_nodes: np.ndarray, nbytes: np.ndarray, tags: np.ndarray
    ) -> tuple[Batch, np.ndarray]:
        """Fluid activities (and their start delays, s) for flows between node ids."""
        net = self.network
        fa = net.build_flows(src_nodes, dst_nodes, nbytes)
        ra = net.node_rank[src_nodes]
        rb = net.node_rank[dst_nodes]
        slow = self.comm.comm_slowdown if self.comm.progress_thread_unpinned else 1.0
        batch = Batch(
            work=fa.work,
            cap=fa.cap,
            cap_slow=fa.cap / slow,
            trig=np.full(len(fa.work), TRIG_COMM, dtype=np.int64),
            rank_a=ra,
            rank_b=rb,
            tag=np.asarray(tags, dtype=np.int64),
            e_act=fa.e_act,
            e_res=fa.e_res,
            e_w=fa.e_w,
        )
        return batch, fa.delay

    def transfer(
        self, src_rank: int, dst_rank: int, nbytes: float, *, name: str, kind: str = "p2p", category: str = "comm"
    ) -> simpy.Event:
        """Send ``nbytes`` from one rank to another; the event fires when the last byte has arrived.

        Time alone: path latency + per-message overheads + nbytes / bottleneck bandwidth. Recorded as one
        Record(rank=src, peer=dst, kind=kind).
        """
        self._check_rank(src_rank)
        self._check_rank(dst_rank)
        net = self.network
        ev = self._transfer(int(net.rank_node[src_rank]), int(net.rank_node[dst_rank]), nbytes, name, kind, category)
        return self._ordered(ev, [src_rank, dst_rank])

    def transfer_nodes(
        self, src_node: str, dst_node: str, nbytes: float, *, name: str, kind: str = "p2p", category: str = "comm"
    ) -> simpy.Event:
        """Like :meth:`transfer` between any two graph nodes (a host CPU, a switch-attached device, a rank)."""
        net = self.network
        for n in (src_node, dst_node):
            if n not in net.node_id:
                raise DlrmsimError(f"no node '{n}' in the topology", source=self.topology.source)
        s, d = net.node_id[src_node], net.node_id[dst_node]
        ev = self._transfer(s, d, nbytes, name, kind, category)
        ranks = [int(r) for r in (net.node_rank[s], net.node_rank[d]) if r >= 0]
        return self._ordered(ev, ranks)

    def _transfer(self, s: int, d: int, nbytes: float, name: str, kind: str, category: str) -> simpy.Event:
        if nbytes < 0:
            raise DlrmsimError(f"transfer '{name}' has negative bytes", field="nbytes")
        net = self.network
        done = self.env.event()
        src_rank, dst_rank = int(net.node_rank[s]), int(net.node_rank[d])
        res = None if (src_rank >= 0 and dst_rank >= 0) else f"{net.nodes[s]}->{net.nodes[d]}"
        owner = _TransferOwner(
            self, done, Record(src_rank, kind, name, category, 0.0, 0.0, float(nbytes), peer=dst_rank, resource=res)
        )
        batch, delay = self.flow_batch(np.array([s]), np.array([d]), np.array([float(nbytes)]), np.zeros(1, dtype=np.int64))
        batch.owner = self.fluid.register(owner, 1)
        self.fluid.add(batch, delay)
        return done

    # ---- collectives -----------------------------------------------------------------------------------
    def collective(
        self,
        op: str,
        ranks: Sequence[int],
        nbytes: float,
        *,
        algorithm: str | None = None,
        name: str,
        category: str | None = None,
        root: int = 0,
        matrix: np.ndarray | None = None,
    ) -> simpy.Event:
        """Run collective ``op`` among ``ranks`` (global rank numbers; order defines local indices).

        ``nbytes``: allreduce — the buffer each rank holds; alltoall — bytes each rank sends to the others in
        total (split evenly); allgather / reduce_scatter — the full buffer; scatter — bytes the root (local
        index ``root``) sends in total. ``algorithm`` None: ``comm.algorithms[op]`` or the op's default.
        Returns an event that fires when every rank is done; ``event.rank_events[global_rank]`` fire per rank.
        Recorded: one Record(kind=op) per rank spanning issue to that rank's end, plus flows and reductions.
        """
        ranks = [int(r) for r in ranks]
        for r in ranks:
            self._check_rank(r)
        if len(set(ranks)) != len(ranks):
            raise DlrmsimError(f"collective '{name}' lists a rank twice", field="ranks")
        if nbytes < 0:
            raise DlrmsimError(f"collective '{name}' has negative bytes", field="nbytes")
        if not 0 <= root < len(ranks):
            raise DlrmsimError(f"collective '{name}': root {root} is not a local index", field="root")
        algo_name, fn = get_algorithm(op, algorithm or self.comm.algorithms.get(op))
        ctx = CollectiveContext(op=op, ranks=ranks, nbytes=float(nbytes), topology=self.topology, root=root, matrix=matrix)
        phases = fn(ctx)
        self._collective_seq += 1
        run = _CollectiveRun(self, op, ranks, phases, name, category or op, self._collective_seq, float(nbytes), algo_name)
        run.start()
        return self._ordered_collective(run)

    def alltoallv(
        self, ranks: Sequence[int], matrix: np.ndarray, *, algorithm: str | None = None, name: str, category: str = "alltoall"
    ) -> simpy.Event:
        """Alltoall with a p x p matrix of bytes (``matrix[i, j]``: local rank i to local rank j)."""
        m = np.asarray(matrix, dtype=float)
        total = float(m.sum() - np.trace(m)) / max(len(ranks), 1)
        return self.collective("alltoall", ranks, total, algorithm=algorithm, name=name, category=category, matrix=m)

    # ---- completion order --------------------------------------------------------------------------------
    def _ordered(self, ev: simpy.Event, ranks: list[int]) -> simpy.Event:
        """With in-order completion, ``ev`` is reported only after earlier ops on the same ranks."""
        if not self.comm.in_order_completion:
            return ev
        prev = [self._last_comm[r] for r in dict.fromkeys(ranks) if r in self._last_comm]
        prev = [p for p in prev if not p.processed]
        out = ev
        if prev:
            out = self.env.event()
            simpy.AllOf(self.env, [ev, *prev]).callbacks.append(lambda _e: out.succeed())
        for r in ranks:
            self._last_comm[r] = out
        return out

    def _ordered_collective(self, run: _CollectiveRun) -> simpy.Event:
        ev = run.done_event
        ev.rank_events = dict(zip(run.global_ranks, run.rank_events, strict=True))  # type: ignore[attr-defined]
        if not self.comm.in_order_completion:
            return ev
        per_rank = {r: self._ordered(e, [r]) for r, e in ev.rank_events.items()}  # type: ignore[attr-defined]
        out = simpy.AllOf(self.env, list(per_rank.values()))
        out.rank_events = per_rank  # type: ignore[attr-defined]
        return out


class _ComputeTask:
    """One compute task as a chain of callbacks (take cores, optional fixed overhead, fluid activity, give the
    cores back), not a SimPy process: a process would cost four more scheduled events per task (its start, the
    resumes after the core grant and the activity, its end), and ranks run hundreds of thousands of tasks. Times
    are the same: every step happens at the instant the process would have reached it."""

    __slots__ = ("sim", "rank", "name", "flops", "nbytes", "kind", "precision", "cores", "category", "pool", "overhead_s",
                 "columns", "container", "start", "done")  # fmt: skip

    def __init__(self, sim: Simulation, rank: int, name: str, flops: float, nbytes: float, kind: str, precision: str,
                 cores: float, category: str, pool: str, overhead_s: float, columns: int = 0) -> None:  # fmt: skip
        self.sim, self.rank, self.name, self.flops, self.nbytes = sim, rank, name, flops, nbytes
        self.kind, self.precision, self.cores, self.category, self.pool = kind, precision, cores, category, pool
        self.overhead_s, self.columns = overhead_s, columns
        self.start = 0.0
        self.done = sim.env.event()

    def begin(self, container: CorePool) -> None:
        self.container = container
        if container.take_now(self.cores):
            self._granted(None)  # the cores were free: granted this instant, as get() would
            return
        got = container.get(self.cores)
        if got.triggered:
            self._granted(got)  # the cores were free: the grant is this instant's, as the process would see it
        else:
            got.callbacks.append(self._granted)

    def _granted(self, _ev: simpy.Event | None) -> None:
        env = self.sim.env
        self.start = env.now
        if self.overhead_s > 0:
            env.timeout(self.overhead_s).callbacks.append(self._run)
        else:
            self._run(None)

    def _run(self, _ev: simpy.Event | None) -> None:
        self.sim._add_task(
            self, self.rank, self.flops, self.nbytes, self.precision, self.cores, self.pool, self.kind, self.columns
        )

    def on_done(self, tags: np.ndarray, t_issue: np.ndarray, now: float) -> None:
        self.container.give_back(self.cores)
        self.sim._log.add(
            (self.rank, self.kind, self.name, self.category, self.start, now, self.nbytes, self.flops, -1, self.pool, None)
        )
        self.done.succeed(now)


class TaskCall(NamedTuple):
    """One task of :meth:`Simulation.compute_batch`: :meth:`Simulation.compute`'s arguments (``cores`` given)."""

    rank: int
    name: str
    flops: float
    nbytes: float
    kind: str
    precision: str
    cores: float
    category: str = "compute"
    pool: str = "compute"
    overhead_s: float = 0.0
    columns: int = 0
    # A factor on the task's work (its flops and bytes) at the rates of its nominal size: its time alone is that
    # factor times the nominal one, as run-to-run variation stretches a kernel (instances' jitter). Scaling the
    # flops and bytes themselves would also move the efficiency tables' lookup by size, so a 2 % longer layer would
    # run a little more efficiently than the nominal one, and its time would grow by less than the factor.
    work_factor: float = 1.0


class _BatchOwner:
    """The fluid owner of one :meth:`Simulation.compute_batch`: records each task as it ends, gives its cores back
    and tells the caller which ended."""

    __slots__ = ("sim", "calls", "containers", "start", "notify")

    def __init__(self, sim: Simulation, calls: Sequence[TaskCall], containers: list[CorePool], start: float,
                 notify: Callable[[list[int], float], None]) -> None:  # fmt: skip
        self.sim, self.calls, self.containers, self.start, self.notify = sim, calls, containers, start, notify

    def on_done(self, tags: np.ndarray, t_issue: np.ndarray, now: float) -> None:
        idx = tags.tolist()
        add, start = self.sim._log.add, self.start
        for i in idx:
            c = self.calls[i]
            self.containers[i].give_back(c.cores)
            f = c.work_factor  # the record holds the work done: the nominal flops and bytes times the factor
            add((c.rank, c.kind, c.name, c.category, start, now, c.nbytes * f, c.flops * f, -1, c.pool, None))
        self.notify(idx, now)


class _ChainOwner:
    """The fluid owner of one :meth:`Simulation.compute_chain`: records each task as it ends and starts the next
    (``FluidScheduler.add_one``, from inside the scheduler's step); after the last, gives the cores back and calls
    the caller."""

    __slots__ = ("sim", "calls", "cols", "container", "notify", "oid", "i", "start")

    def __init__(self, sim: Simulation, calls: Sequence[TaskCall], cols: list[tuple[float, float, float, float, int, int, int]],
                 container: CorePool, notify: Callable[[float], None]) -> None:  # fmt: skip
        self.sim, self.calls, self.cols, self.container, self.notify = sim, calls, cols, container, notify
        self.oid = -1
        self.i = 0
        self.start = 0.0

    def start_next(self) -> None:
        work, cap, cap_s, share, trig, rank, res = self.cols[self.i]
        self.start = self.sim.env.now
        self.sim.fluid.add_one(work, cap, cap_s, trig, rank, -1, 0, res, self.oid, share=share)
        self.sim.fluid.chain_started(self.oid, self.i)

    def _record(self, end: float) -> None:
        c = self.calls[self.i]
        f = c.work_factor  # the record holds the work done, as _BatchOwner's
        self.sim._log.add((c.rank, c.kind, c.name, c.category, self.start, end, c.nbytes * f, c.flops * f, -1, c.pool, None))
        self.i += 1

    def ran_ahead(self, end: float) -> None:
        """The scheduler's kernel finished the running task at ``end`` (s) and started the next one there."""
        self._record(end)
        self.start = end

    def on_done(self, tags: np.ndarray, t_issue: np.ndarray, now: float) -> None:
        self._record(now)
        if self.i < len(self.calls):
            self.start_next()
            return
        self.sim.fluid.drop_chain(self.oid)
        self.container.give_back(self.calls[-1].cores)
        self.notify(now)


class _TransferOwner:
    def __init__(self, sim: Simulation, event: simpy.Event, record: Record) -> None:
        self.sim, self.event, self.record = sim, event, record

    def on_done(self, tags: np.ndarray, t_issue: np.ndarray, now: float) -> None:
        self.record.start = float(t_issue[0])
        self.record.end = now
        self.sim.records.append(self.record)
        self.event.succeed(now)


class _CollectiveRun:
    """Drives one collective's phases per rank (see :mod:`dlrmsim.engine.collectives` for semantics).

    All phases' flows sit in one flat table (a flow's tag is its index there, phase by phase); per
    (phase, rank) keys ``k * p + r`` index CSR lists of the flows a rank sends and receives in a phase, the
    flows it still waits for and the bytes it then reduces, so every step is a few vectorized gathers.
    """

    def __init__(
        self,
        sim: Simulation,
        op: str,
        ranks: list[int],
        phases: list[Phase],
        name: str,
        category: str,
        cid: int,
        nbytes: float,
        algo: str,
    ) -> None:
        self.sim = sim
        self.env = sim.env
        self.op, self.name, self.category, self.cid, self.nbytes, self.algo = op, name, category, cid, nbytes, algo
        self.global_ranks = ranks
        self.g = np.asarray(ranks, dtype=np.int64)
        self.nodes = sim.network.rank_node[self.g]
        p = len(ranks)
        self.p = p
        self.phases = phases
        self.K = len(phases)
        K = self.K
        self.rendezvous = sim.comm.rendezvous
        counts = [len(ph.src) for ph in phases]
        n_flows = sum(counts)
        if K:
            self.fsrc = np.concatenate([np.asarray(ph.src, dtype=np.int64) for ph in phases])
            self.fdst = np.concatenate([np.asarray(ph.dst, dtype=np.int64) for ph in phases])
            self.fnb = np.concatenate([np.asarray(ph.nbytes, dtype=float) for ph in phases])
        else:
            self.fsrc, self.fdst, self.fnb = _I0, _I0, np.zeros(0)
        self.fk = np.repeat(np.arange(K, dtype=np.int64), counts)
        key_s = self.fk * p + self.fsrc
        key_d = self.fk * p + self.fdst
        cnt_s = np.bincount(key_s, minlength=K * p)
        cnt_d = np.bincount(key_d, minlength=K * p)
        self.s_order = np.argsort(key_s, kind="stable")
        self.s_ptr = np.zeros(K * p + 1, dtype=np.int64)
        np.cumsum(cnt_s, out=self.s_ptr[1:])
        self.d_order = np.argsort(key_d, kind="stable")
        self.d_ptr = np.zeros(K * p + 1, dtype=np.int64)
        np.cumsum(cnt_d, out=self.d_ptr[1:])
        self.remaining = cnt_s + cnt_d  # flows each (phase, rank) still waits for
        self.red = np.zeros(K * p)  # bytes each (phase, rank) reduces once its flows are in
        for k, ph in enumerate(phases):
            if ph.reduce_bytes is not None:
                self.red[k * p : (k + 1) * p] = ph.reduce_bytes
        self.reduce_on = sim.comm.reduce_traffic_factor > 0 and bool((self.red > 0).any())
        n_red = int((self.red > 0).sum()) if self.reduce_on else 0
        self.cur = np.full(p, -1, dtype=np.int64)
        self.in_reduction = np.zeros(p, dtype=bool)
        # lockstep (Simulation.lockstep_collectives): the ranks that finished the current phase, waiting for the rest
        self.lockstep = sim.lockstep_collectives
        self.held = np.zeros(p, dtype=bool)
        self.n_held = np.zeros(1, dtype=np.int64)
        self.n_done = 0
        self.start_t = self.env.now
        self.done_event = self.env.event()
        self.rank_events = [self.env.event() for _ in range(p)]
        self.oid = sim.fluid.register(self, n_flows + n_red) if n_flows + n_red else -1
        # Skipping repeated cycles (see _try_skip) needs no per-flow records, since it never makes those flows.
        self.skip_on = not sim.record_flows and K > 2
        if self.skip_on:
            red_k = self.red.reshape(K, p) > 0 if self.reduce_on else np.zeros((K, p), dtype=bool)
            self.own = np.asarray(counts) + red_k.sum(axis=1)  # activities each phase starts in all
            off = np.concatenate([[0], np.cumsum(counts)]).tolist()  # flows are stored phase by phase
            sig = [
                (
                    self.fsrc[off[k] : off[k + 1]].tobytes(),
                    self.fdst[off[k] : off[k + 1]].tobytes(),
                    self.fnb[off[k] : off[k + 1]].tobytes(),
                    self.red[k * p : (k + 1) * p].tobytes(),
                )
                for k in range(K)
            ]
            # run[k]: how many phases from k on have phase k's exact flows and reductions
            self.run = np.ones(K, dtype=np.int64)
            for k in range(K - 2, -1, -1):
                if sig[k] == sig[k + 1]:
                    self.run[k] = self.run[k + 1] + 1
        self._snap: tuple[int, float, int, int, int, np.ndarray] | None = None
        # Running ahead in compiled code (phases.run_ahead) replays the Python path exactly; it needs no per-flow
        # records either, and pays off only for collectives of several phases.
        self._ahead: Ahead | None = None
        if not sim.record_flows and K > 2 and self.oid >= 0:
            sim.fluid.set_runner(self.oid, self)

    def start(self) -> None:
        self._advance(np.arange(self.p, dtype=np.int64))

    # phase machinery
    def _advance(self, rs: np.ndarray) -> None:
        """Move ranks ``rs`` (which finished their current phase) into their next phase."""
        p, K, cur = self.p, self.K, self.cur
        if self.lockstep:
            rs = self._barrier(rs)
        while rs.size:
            cur[rs] += 1
            ks = cur[rs]
            if self.skip_on and rs.size == p and ks[0] < K and self._try_skip(int(ks[0])):
                return
            if any_at_least(ks, K):
                fin = ks >= K
                self._ranks_finished(rs[fin])
                keep = ~fin
                rs, ks = rs[keep], ks[keep]
                if not rs.size:
                    return
            self._start_sends(ks, rs)
            ready = rs[self.remaining[ks * p + rs] == 0]
            rs = self._flows_complete(ready)
            if self.lockstep:
                rs = self._barrier(rs)

    def _barrier(self, rs: np.ndarray) -> np.ndarray:
        """Lockstep: ranks ``rs`` finished their phase; all ranks once the last of them has, else none."""
        return lockstep_barrier(rs, self.held, self.n_held)

    def _start_sends(self, ks: np.ndarray, grp: np.ndarray) -> None:
        """Start the flows of ranks ``grp`` that just entered phases ``ks`` (one phase per rank).

        Eager: a rank's sends start when it enters the phase. Rendezvous: a flow starts when both its ends
        have entered the phase, so sends from ``grp`` to ranks still behind wait, and sends already waiting
        on ``grp`` start now.
        """
        if ks.size > 1 and not all_equal(ks):
            o = np.argsort(ks, kind="stable")  # phase by phase, ranks in the order given
            ks, grp = ks[o], grp[o]
        fidx = sends_to_start(
            ks, grp, self.p, self.s_ptr, self.s_order, self.d_ptr, self.d_order, self.fsrc, self.fdst, self.fk, self.cur,
            self.rendezvous,
        )  # fmt: skip
        if not fidx.size:
            return
        batch, delay = self.sim.flow_batch(self.nodes[self.fsrc[fidx]], self.nodes[self.fdst[fidx]], self.fnb[fidx], fidx)
        batch.owner = self.oid
        self.sim.fluid.add(batch, delay)

    def _try_skip(self, k: int) -> bool:
        """All ranks enter phase ``k`` together: skip the phases that would only repeat the last cycle.

        When phase k-1 ran as one lockstep cycle (all ranks entered it together, and in the time T until they
        all entered phase k nothing started or finished but its own flows and reductions), and phases k, k+1,
        ... have the same flows and reductions, each of them would replay that cycle exactly: same activity
        set, same max-min rates, same T, and every other running activity loses the same work D per cycle.
        So the N cycles that fit before anything else could happen (another activity finishing, any other
        scheduled event) are skipped in one step: the clock jumps N*T and the others' remaining work drops by
        N*D. A ring allreduce of 2(p-1) equal steps costs a few cycles instead of 2(p-1). Exact, not an
        approximation: it skips only what would repeat.
        """
        fl = self.sim.fluid
        now = self.env.now
        snap, self._snap = self._snap, None
        if not fl.quiet():
            return False
        acts, fins = fl.stats["activities"], fl.stats["finished"]
        rem = fl.remaining()
        self._snap = (k, now, acts, fins, fl.n_active, rem)
        if snap is None:
            return False
        k0, t0, a0, f0, n0, rem0 = snap
        own = int(self.own[k0])
        period = now - t0
        if k0 != k - 1 or self.run[k0] < 2 or acts - a0 != own or fins - f0 != own or fl.n_active != n0 or not period > 0:
            return False
        t_next = min((t for t, _, _, ev in self.env._queue if not fl.is_own_event(ev)), default=np.inf)
        n_skip = cycles_to_skip(rem0, rem, int(self.run[k]), period, t_next - now)
        if n_skip < 2:
            return False
        fl.hold(n_skip * (rem0 - rem))
        fl.expect(self.oid, -n_skip * own)  # the skipped phases' activities never start
        self.cur[:] = k + n_skip - 1  # _resume's _advance enters phase k + n_skip
        self._snap = None
        self.env.timeout(n_skip * period).callbacks.append(self._resume)
        return True

    def _resume(self, _ev: simpy.Event) -> None:
        self.sim.fluid.resume()
        self._advance(np.arange(self.p, dtype=np.int64))

    def _flows_complete(self, ready: np.ndarray) -> np.ndarray:
        """Ranks whose current phase's flows are all done: start reductions; return ranks free to advance."""
        if not ready.size or not self.reduce_on:
            return ready  # no reductions, or reduction arithmetic modelled as free
        red = self.red[self.cur[ready] * self.p + ready]
        need = red > 0
        if need.any():
            self._start_reductions(ready[need], red[need])
            return ready[~need]
        return ready

    def _start_reductions(self, rs: np.ndarray, red: np.ndarray) -> None:
        sim = self.sim
        factor = sim.comm.reduce_traffic_factor
        cores = sim.comm.reduce_cores()
        self.in_reduction[rs] = True
        n = rs.size
        work = red * factor
        g = self.g[rs]
        cap = sim.reduction_caps(g, work, cores)
        mem = sim.network.mem[self.nodes[rs]]
        batch = Batch(
            work=work,
            cap=cap,
            cap_slow=cap,
            trig=np.full(n, TRIG_NONE, dtype=np.int64),
            rank_a=g,
            rank_b=np.full(n, -1, dtype=np.int64),
            tag=-(rs + 1),
            e_act=np.arange(n, dtype=np.int64),
            e_res=mem.astype(np.int64),
            e_w=np.ones(n),
            owner=self.oid,
            share=np.full(n, float(cores)),  # reduced on `cores` cores
        )
        sim.fluid.add(batch)

    def on_done(self, tags: np.ndarray, t_issue: np.ndarray, now: float) -> None:
        p = self.p
        advance: list[np.ndarray] = []
        ft, ti = tags, t_issue
        if any_negative(tags):
            is_red = tags < 0
            rs = -tags[is_red] - 1
            self.in_reduction[rs] = False
            if self.sim.record_flows:
                f = self.sim.comm.reduce_traffic_factor
                rb = self.red[self.cur[rs] * p + rs]
                self.sim._log.add_many(
                    "reduce", self.name, self.category, self.cid, self.g[rs], None, rb * f, t_issue[is_red], now
                )
            advance.append(rs)
            keep = ~is_red
            ft, ti = tags[keep], t_issue[keep]
        if ft.size:
            if self.sim.record_flows:
                self._record_flows(self.fsrc[ft], self.fdst[ft], self.fnb[ft], ti, now)
            cand = ranks_with_flows_done(
                ft, self.fsrc, self.fdst, self.fk, p, self.K, self.remaining, self.cur, self.in_reduction
            )
            advance.append(self._flows_complete(cand))
        if advance:
            self._advance(advance[0] if len(advance) == 1 else np.concatenate(advance))

    # running ahead (fluid.Runner)
    def ahead(self) -> Ahead:
        """This collective as :func:`phases.run_ahead` sees it: its phase tables and live state, every flow's stored
        node pair (computed now for all phases at once), each rank's last busy phase, and each (phase, rank)'s
        reduction work, cap and memory."""
        self._snap = None  # _try_skip's cycle, if any, will not have been observed
        if self._ahead is not None:
            return self._ahead
        sim, net, p, K = self.sim, self.sim.network, self.p, self.K
        fpid = net.pair_ids(self.nodes[self.fsrc], self.nodes[self.fdst])
        cores = sim.comm.reduce_cores()
        red_work = self.red * sim.comm.reduce_traffic_factor if self.reduce_on else np.zeros(K * p)
        red_cap = np.zeros(K * p)
        red_res = np.zeros(K * p, dtype=np.int64)
        keys = np.flatnonzero(red_work > 0)
        if keys.size:
            rs = keys % p
            # caps per distinct size and rank: phases repeat a handful of sizes
            sizes, inv = np.unique(red_work[keys], return_inverse=True)
            tab = np.stack([sim.reduction_caps(self.g, np.full(p, w), cores) for w in sizes.tolist()])
            red_cap[keys] = tab[inv.ravel(), rs]
            red_res[keys] = net.mem[self.nodes[rs]]
        g = net.node_rank[self.nodes].astype(np.int64)  # as flow_batch maps flows' ends to ranks
        self._ahead = Ahead(
            self.oid, p, K, self.reduce_on, float(cores), self.fsrc, self.fdst, self.fk, fpid, self.fnb, self.s_ptr,
            self.s_order, self.d_ptr, self.d_order, self.cur, self.remaining, self.in_reduction,
            last_busy_phase(p, K, self.s_ptr, self.red, self.reduce_on, self.lockstep), red_work, red_cap, red_res, g,
            self.lockstep, self.held, self.n_held, self.own.astype(np.int64), self.run,
            # the kernel's cycle snapshot (phases._skip_cycles): room for the activities that run beside the collective
            np.full(4, -1, dtype=np.int64), np.zeros(1), np.empty(8 * p + 256),
        )  # fmt: skip
        return self._ahead

    def pack_flows(self, tags: np.ndarray, t_issue: float) -> tuple:
        batch, _ = self.sim.flow_batch(self.nodes[self.fsrc[tags]], self.nodes[self.fdst[tags]], self.fnb[tags], tags)
        batch.owner = self.oid
        return FluidScheduler.pack(batch, t_issue)

    def _record_flows(self, src: np.ndarray, dst: np.ndarray, nb: np.ndarray, t0: np.ndarray, now: float) -> None:
        g = self.g
        self.sim._log.add_many("flow", self.name, self.category, self.cid, g[src], g[dst], nb, t0, now)

    def _ranks_finished(self, rs: np.ndarray) -> None:
        now = self.env.now
        for r in rs.tolist():
            self.sim._log.add(
                (
                    self.global_ranks[r],
                    self.op,
                    self.name,
                    self.category,
                    self.start_t,
                    now,
                    self.nbytes,
                    0.0,
                    -1,
                    self.algo,
                    self.cid,
                )
            )
            self.rank_events[r].succeed(now)
        self.n_done += len(rs)
        if self.n_done == self.p:
            self.sim.fluid.set_runner(self.oid, None)
            self.done_event.succeed(now)
