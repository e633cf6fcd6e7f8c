"""How the ranks of a training iteration walk their programs on the engine and meet at collectives.

:class:`CollectiveCoordinator` starts a collective once every rank has posted it (and the backend's progress engines
are free); :class:`RankPrograms` walks every rank's program (``taskgraph.RankProgram``): it starts each rank's next
compute task when its previous one ends, posts and waits on collectives, and keeps each rank's times by category.

The ranks are walked together, not as one SimPy process each: the ranks whose tasks end at one instant start their
next tasks in one batch (``Simulation.compute_batch``), and each task's static overheads (everything but the GEMM's
idle-time pricing, which depends on when it starts) are computed once per program step, rank spec and core count,
not once per rank. At 1024 ranks the ~72,000 tasks of an MLPerf iteration start at 112 instants.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import simpy

from dlrmsim.engine.backends import Backend
from dlrmsim.engine.costs import (
    MATRIX_KINDS,
    arrival_excess_s,
    cold_gemm_time_s,
    cold_output_time_s,
    elementwise_cached_split,
    evicted_operand_time_s,
    fixed_time_s,
    fork_join_time_s,
    gemm_idle_time_s,
    op_class_extra_s,
    sequence_time_s,
    task_flop_rate,
)
from dlrmsim.engine.records import Record
from dlrmsim.engine.simulation import Simulation, TaskCall
from dlrmsim.topologies.topology import ComputeSpec
from dlrmsim.training.implementations import task_cores
from dlrmsim.training.taskgraph import Collective, IterationGraph, Post, Task, Wait


class CollectiveCoordinator:
    """Starts a collective once every rank has posted it and its ranks' progress engines are free; each rank's
    wait ends when its own part is done.

    A backend with ``progress_engines = k`` progresses at most k collectives per rank at a time, in the
    order they were posted (MPI's single progress thread: one at a time); a collective waits in a FIFO until
    every rank has a free engine, and none overtakes an earlier one. ``None``: no limit. In-order
    *completion* (MPI) is the engine's job: it holds back a rank's completion events until its earlier
    communication has completed.

    Arrival skew: identical simulated ranks post a collective at the same instant, real ones do not. Where the
    ranks' compute spec measures it (``ComputeSpec.arrival_excess``, a host calibration), a fully posted collective
    starts :func:`~dlrmsim.engine.costs.arrival_excess_s` later: the expected lateness of the last of the ranks
    after the compute since they were last together (``aligned``: the latest end of a wait that held a rank, or
    the iteration's start). The delays keep the posting order. ``arrival_wait_s`` holds each delay by collective.
    """

    def __init__(self, sim: Any, graph: IterationGraph, backend: Backend, ranks: int) -> None:
        self.sim = sim
        self.env: simpy.Environment = sim.env
        self.graph = graph
        self.backend = backend
        self.ranks = list(range(ranks))
        self.posted: dict[str, int] = {}
        self.rank_done: dict[str, dict[int, simpy.Event]] = {}
        self.ready: dict[str, simpy.Event] = {cid: self.env.event() for cid in graph.collectives}
        self.engines = getattr(backend, "progress_engines", None)  # None: no backend (single-rank test graphs)
        self.active = [0] * ranks  # collectives each rank's engines are progressing now
        self.queue: list[str] = []  # fully posted, waiting for free engines (posting order)
        # The ranks' distinct compute specs (a host's ranks share one): the latest arrival is the largest excess.
        specs = {id(sp): sp for sp in (sim.rank_resources[r].spec for r in self.ranks)}
        self.skew_specs = [sp for sp in specs.values() if any(f > 0 for _, f in sp.arrival_excess.points)] if ranks > 1 else []
        self.aligned = 0.0  # when the ranks were last together (s)
        self.released = 0.0  # the latest start a delayed collective was given (s): delays keep the posting order
        self.arrival_wait_s: dict[str, float] = {}

    def arrival_excess(self, segment_s: float) -> float:
        """Expected lateness (s) of the last rank after ``segment_s`` of compute since the ranks were together."""
        return max((arrival_excess_s(sp, segment_s, len(self.ranks)) for sp in self.skew_specs), default=0.0)

    def waited(self, t0: float) -> None:
        """A rank's wait that began at ``t0`` ended now; if it held the rank, the ranks are together again."""
        if self.env.now > t0:
            self.aligned = max(self.aligned, self.env.now)

    def post(self, cid: str) -> None:
        self.posted[cid] = self.posted.get(cid, 0) + 1
        if self.posted[cid] == len(self.ranks):
            skew = self.arrival_excess(self.env.now - self.aligned)
            if skew > 0.0:
                self.env.process(self._late_arrival(cid, skew))
                return
            self.queue.append(cid)
            self._start_queued()

    def _late_arrival(self, cid: str, skew: float) -> Any:
        start = max(self.env.now + skew, self.released)
        self.released = start
        self._record_late(cid, self.env.now, start)
        yield self.env.timeout(start - self.env.now)
        self.queue.append(cid)
        self._start_queued()

    def late_end(self, end: float) -> float:
        """How late (s) the last rank ends an iteration whose ranks are done at ``end``: the compute since they were
        last together meets the next iteration's first synchronisation (``arrival_wait_s["iteration_end"]``)."""
        tail = self.arrival_excess(end - self.aligned)
        if tail > 0.0:
            self._record_late("iteration_end", end, end + tail)
        return tail

    def _record_late(self, what: str, start: float, end: float) -> None:
        self.arrival_wait_s[what] = end - start
        for r in self.ranks:
            self.sim.records.append(Record(r, "arrival", f"{what}.arrival", "arrival_wait", start, end))

    def _start_queued(self) -> None:
        while self.queue and (self.engines is None or max(self.active) < self.engines):
            self._launch(self.graph.collectives[self.queue.pop(0)])

    def _release(self, rank: int) -> None:
        self.active[rank] -= 1
        self._start_queued()

    def _launch(self, c: Collective) -> None:
        algorithms = self.backend.algorithms
        if c.matrix is not None:
            algo = algorithms.alltoall if c.op == "alltoallv" else algorithms.scatter
            ev = self.sim.alltoallv(self.ranks, c.matrix, name=c.cid, category=c.category, algorithm=algo)
        else:
            algo = getattr(algorithms, c.op, None)
            ev = self.sim.collective(c.op, self.ranks, c.nbytes, algorithm=algo, name=c.cid, category=c.category)
        self.rank_done[c.cid] = ev.rank_events
        if self.engines is not None:
            for r, done in ev.rank_events.items():
                self.active[r] += 1
                done.callbacks.append(lambda _e, r=r: self._release(r))
        self.ready[c.cid].succeed()

    def when_done(self, cid: str, rank: int, then: Callable[[], None]) -> None:
        """``then()`` once ``rank``'s part of collective ``cid`` is complete (the collective launched, then that part
        done): at once if it already is, as a SimPy process waiting on both would go on."""
        _after(self.ready[cid], lambda: _after(self.rank_done[cid][rank], then))


# Static overheads of one task (costs the program fixes, not the clock): fixed software time, the evicted-operand
# and sequence time (a GEMM adds its idle-time pricing to this at its start), and the bytes its activity streams.
_Static = tuple[float, float, float]


def static_task_costs(
    spec: ComputeSpec, step: Task, cores: float, precision: str, prev_bytes: float, iteration_bytes: float
) -> _Static:
    """(overhead s, evicted s, streamed bytes) of ``step`` on ``cores`` cores of a rank with ``spec``, after a task
    of ``prev_bytes`` (costs.first_op_s); ``iteration_bytes``: the rank's traffic in one iteration, where ``spec``
    charges cold outputs (else 0). A GEMM's start time adds :func:`~dlrmsim.engine.costs.gemm_idle_time_s` to the
    evicted part (:meth:`RankPrograms._call`); every other task costs overhead + evicted."""
    kind = step.kind
    overhead = fixed_time_s(
        spec,
        kind,
        step.ops,
        step.rows,
        step.tables_bytes,
        step.reuse_bytes,
        step.run_start,
        step.visit,
        prev_bytes,
        step.kernel_traffic,
    ) + fork_join_time_s(spec, step.op_elements, cores)
    if step.scalar_ops or step.reduce_ops:
        overhead += op_class_extra_s(spec, step.scalar_ops, step.reduce_ops)
    if iteration_bytes and step.out_bytes > 0.0:
        out_kind = "gemm" if kind == "gemm" else "elementwise"
        overhead += cold_output_time_s(spec, out_kind, step.out_bytes, iteration_bytes)
    nbytes = step.bytes
    evicted = 0.0  # what the traffic since its operands' last use costs the task (a GEMM: its warm state)
    if kind == "elementwise":
        # what of its inputs is still cached streams at the cache rate, beside (not through) the memory domain
        nbytes, cached_s = elementwise_cached_split(spec, step.bytes, step.operands)
        overhead += cached_s
    elif step.operands:
        # The arithmetic time at the warm efficiency, only where the spec charges a share of it.
        arithmetic = 0.0
        if step.flops > 0 and spec.gemm_evicted_compute_factor > 0:
            rate = task_flop_rate(spec, step.flops, cores, precision, kind=kind, nbytes=step.bytes, columns=step.columns)
            arithmetic = step.flops / rate
        evicted = evicted_operand_time_s(spec, step.bytes, cores, step.operands, step.kernel_traffic, arithmetic)
    if kind == "gemm":
        evicted += sequence_time_s(spec, step.bytes, cores)
    return overhead, evicted, nbytes


# The Task fields static_task_costs does not read: tasks that differ only in them cost the same.
NOT_COSTED = ("name", "category", "serial_s")


def cost_key(step: Task) -> tuple:
    """What of ``step`` :func:`static_task_costs` reads (every field but :data:`NOT_COSTED`): the ranks' programs
    repeat a hundred distinct tasks under 70,000 names at 1024 ranks."""
    return (
        step.kind,
        step.flops,
        step.bytes,
        step.ops,
        step.scalar_ops,
        step.reduce_ops,
        step.rows,
        step.tables_bytes,
        step.reuse_bytes,
        step.run_start,
        step.visit,
        step.op_elements,
        step.operands,
        step.kernel_traffic,
        step.columns,
        step.out_bytes,
    )


class RankPrograms:
    """Every rank of ``graph`` walking its program on ``sim``, from :meth:`start` until ``done`` fires.

    A rank runs its tasks one after another on its compute cores (a kind the implementation runs on fewer threads,
    ``op_threads``, holds only that many), posts collectives to ``coord`` and waits for its part of them. Per rank,
    ``accs[r]`` collects the time by task category and by exposed collective kind (``wait_allreduce``,
    ``wait_alltoall``), the end of its program (``end``) and of its last GEMM (``last_gemm_end``); ``waits[r]`` the
    time it waited on each collective. ``gemm_tails_s[r]``: how long before the iteration's end the rank's last GEMM
    ended in the previous iteration (its first GEMM's gap starts there; only a spec that prices GEMMs by that gap
    reads it).

    Ranks whose tasks end at one instant start their next tasks in one ``Simulation.compute_batch``; ranks that
    resume at one instant from waits start theirs together when the instant's other events are done. Times are
    those of one SimPy process per rank: each step happens at the instant that process would have reached it.
    """

    def __init__(
        self,
        sim: Simulation,
        graph: IterationGraph,
        coord: CollectiveCoordinator,
        precision: str,
        op_threads: dict[str, int] | None = None,
        gemm_tails_s: list[float] | None = None,
    ) -> None:
        self.sim, self.env, self.graph, self.coord, self.precision = sim, sim.env, graph, coord, precision
        p = len(graph.programs)
        self.programs = [graph.programs[r] for r in range(p)]
        self.accs: list[dict[str, float]] = [
            {"compute": 0.0, "prepost": 0.0, "wait_allreduce": 0.0, "wait_alltoall": 0.0, "end": 0.0} for _ in range(p)
        ]
        self.waits: list[dict[str, float]] = [{} for _ in range(p)]
        op_threads = op_threads or {}
        self.specs = [sim.rank_resources[r].spec for r in range(p)]
        rank_cores = [float(sim.rank_resources[r].pool("compute").capacity) for r in range(p)]
        # per rank and step: the cores a task holds, and the bytes of the previous task (costs.first_op_s; the first
        # task follows the previous iteration's last one; a task without framework ops is no op the next first op
        # follows, so the traffic since the previous op goes on accumulating)
        self.cores: list[list[float]] = []
        self.prev_bytes: list[list[float]] = []
        self.iteration_bytes: list[float] = []
        for r, program in enumerate(self.programs):
            tasks = [s for s in program if isinstance(s, Task)]
            prev = tasks[-1].bytes if tasks else 0.0
            cores_r, prev_r = [], []
            for s in program:
                if isinstance(s, Task):
                    cores_r.append(task_cores(op_threads, s.kind, rank_cores[r]))
                    prev_r.append(prev)
                    prev = s.bytes if s.ops > 0 else prev + s.bytes
                else:
                    cores_r.append(0.0)
                    prev_r.append(0.0)
            self.cores.append(cores_r)
            self.prev_bytes.append(prev_r)
            # A new output's memory was last used one iteration of this rank's traffic ago (ComputeSpec.cold_output_*);
            # only a calibrated spec charges it.
            cold = bool(self.specs[r].cold_output_s_per_byte_by_kind)
            self.iteration_bytes.append(sum(s.bytes for s in tasks) if cold else 0.0)
        self.last_gemm_end = [-t for t in (gemm_tails_s or [0.0] * p)]
        self.pc = [0] * p  # each rank's current step
        self.t0 = [0.0] * p  # when its current task or wait began
        self._static: dict[tuple[tuple, int, float, float, float], _Static] = {}
        self._starting: list[TaskCall] = []  # tasks to start together at this instant
        self._flush_scheduled = False  # a flush of _starting is due at this instant
        self._left = p
        self.done = self.env.event()

    def start(self) -> None:
        """Every rank begins its program now."""
        for r in range(len(self.programs)):
            self._walk(r, 0)
        self._flush()

    # ---- walking ----------------------------------------------------------------------------------------------
    def _walk(self, r: int, i: int) -> None:
        """Rank ``r`` goes on from step ``i`` until it starts a task, waits or ends."""
        program = self.programs[r]
        coord = self.coord
        while i < len(program):
            step = program[i]
            if isinstance(step, Task):
                self.pc[r] = i
                self._starting.append(self._call(r, i, step))
                return
            if isinstance(step, Post):
                coord.post(step.collective)
                i += 1
                continue
            if isinstance(step, Wait):
                self.pc[r] = i
                self.t0[r] = self.env.now
                coord.when_done(step.collective, r, lambda: self._waited(r))
                return
            i += 1
        acc = self.accs[r]
        acc["end"] = self.env.now
        acc["last_gemm_end"] = self.last_gemm_end[r]
        self._left -= 1
        if not self._left:
            self.done.succeed()

    def _call(self, r: int, i: int, step: Task) -> TaskCall:
        """The engine call of rank ``r``'s task ``step`` (its step ``i``) starting now."""
        now = self.env.now
        self.t0[r] = now
        spec = self.specs[r]
        cores = self.cores[r][i]
        kind = step.kind
        prec = self.precision if kind in MATRIX_KINDS else "fp32"
        key = (cost_key(step), id(spec), cores, self.prev_bytes[r][i], self.iteration_bytes[r])
        got = self._static.get(key)
        if got is None:
            got = self._static[key] = static_task_costs(spec, step, cores, prec, self.prev_bytes[r][i], self.iteration_bytes[r])
        overhead, evicted, nbytes = got
        if kind == "gemm":
            # The time since the rank's previous GEMM and the traffic since price one loss: it pays the larger.
            idle = gemm_idle_time_s(spec, now - self.last_gemm_end[r]) if spec.gemm_idle_extra_s else 0.0
            evicted = cold_gemm_time_s(idle, evicted)
        return TaskCall(
            r, step.name, step.flops, nbytes, kind, prec, cores, step.category, "compute", overhead + evicted, step.columns
        )

    def _flush(self) -> None:
        """Start the tasks gathered at this instant, as one batch."""
        self._flush_scheduled = False
        calls, self._starting = self._starting, []
        if calls:
            self.sim.compute_batch(calls, lambda idx, now: self._tasks_done(calls, idx, now))

    def _flush_later(self) -> None:
        """Start the gathered tasks once this instant's other events are done (ranks resuming from their waits at
        one instant start together)."""
        if self._starting and not self._flush_scheduled:
            self._flush_scheduled = True
            self.env.timeout(0).callbacks.append(lambda _e: self._flush())

    # ---- what the engine tells --------------------------------------------------------------------------------
    def _tasks_done(self, calls: list[TaskCall], idx: list[int], now: float) -> None:
        for j in idx:
            r = calls[j].rank
            step = self.programs[r][self.pc[r]]
            assert isinstance(step, Task)
            if step.kind == "gemm":
                self.last_gemm_end[r] = now
            t0 = self.t0[r]
            if step.serial_s > now - t0:
                # Conflicting row updates serialise on cache-line transfers; cores cannot shorten the chain.
                self.env.timeout(step.serial_s - (now - t0)).callbacks.append(lambda _e, r=r, t1=now: self._serial_done(r, t1))
                continue
            self.accs[r][step.category] += now - t0
            self._walk(r, self.pc[r] + 1)
        self._flush()

    def _serial_done(self, r: int, t1: float) -> None:
        step = self.programs[r][self.pc[r]]
        assert isinstance(step, Task)
        now = self.env.now
        self.sim.records.append(Record(r, "conflicts", f"{step.name}.conflicts", step.category, t1, now))
        self.accs[r][step.category] += now - self.t0[r]
        self._walk(r, self.pc[r] + 1)
        self._flush_later()

    def _waited(self, r: int) -> None:
        """Rank ``r``'s part of the collective it waits on is done."""
        t0, now = self.t0[r], self.env.now
        self.coord.waited(t0)
        step = self.programs[r][self.pc[r]]
        assert isinstance(step, Wait)
        c = self.graph.collectives[step.collective]
        self.accs[r][f"wait_{c.category}"] += now - t0
        waits = self.waits[r]
        waits[step.collective] = waits.get(step.collective, 0.0) + (now - t0)
        self._walk(r, self.pc[r] + 1)
        self._flush_later()


def _after(ev: simpy.Event, then: Callable[[], None]) -> None:
    """``then()`` once ``ev`` is processed: at once if it has been, as a SimPy process's ``yield ev`` goes on."""
    if ev.callbacks is None:
        then()
    else:
        ev.callbacks.append(lambda _e: then())
