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

from collections.abc import Sequence

import numpy as np
import simpy

from dlrmsim.errors import DlrmsimError
from dlrmsim.simulator import costs
from dlrmsim.simulator.collectives import CollectiveContext, Phase, get_algorithm
from dlrmsim.simulator.fluid import TRIG_COMM, TRIG_COMPUTE, TRIG_NONE, Batch, FluidScheduler
from dlrmsim.simulator.network import Network
from dlrmsim.simulator.records import Record
from dlrmsim.simulator.resources import CommSettings, RankResources
from dlrmsim.topologies.topology import Topology

_I0 = np.zeros(0, dtype=np.int64)


class Simulation:
    """One simulated run over a topology.

    ``env`` is the simpy.Environment (write rank programs as SimPy processes), ``records`` the list of
    finished :class:`Record` s, ``rng`` a numpy Generator seeded with ``seed`` for workload randomness (the
    engine itself draws no random numbers, so runs are deterministic). ``record_flows=False`` skips the
    per-flow records of collectives (per-rank collective spans are always recorded).
    """

    def __init__(self, topology: Topology, seed: int = 0, comm: CommSettings | None = None, record_flows: bool = True) -> None:
        self.topology = topology
        self.comm = comm or CommSettings()
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.env = simpy.Environment()
        self.records: list[Record] = []
        self.record_flows = record_flows
        self.network = Network(topology, self.comm)
        self.fluid = FluidScheduler(self.env, self.network.capacity, topology.num_ranks)
        self.rank_resources = [RankResources(self.env, r, topology.compute(r), self.comm) for r in range(topology.num_ranks)]
        self._collective_seq = 0
        self._last_comm: dict[int, simpy.Event] = {}

    # ---- basics -----------------------------------------------------------------------------------
    @property
    def now(self) -> float:
        """Current simulated time (s)."""
        return self.env.now

    def run(self, until: float | simpy.Event | None = None) -> None:
        """Run until no events are left, or until a time (s) or an event."""
        self.env.run(until=until)

    @property
    def stats(self) -> dict[str, int]:
        """Counters: activities started/finished, rate solves, solver wake-ups, SimPy-visible records."""
        return dict(self.fluid.stats, records=len(self.records))

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
    ) -> simpy.Process:
        """Run a task of ``flops`` operations touching ``bytes`` of memory on ``cores`` cores of ``rank``.

        The task first takes ``cores`` from the rank's ``pool`` ("compute": cores minus pinned comm cores,
        the default amount; "comm": the pinned cores or one helper thread), waiting if they are busy. Alone it
        takes the roofline time ``costs.task_time``; beside other tasks and NIC copies on the same memory
        domain it gets a max-min share of the domain's bandwidth. Returns the process event; it fires when the
        task ends and the task is recorded (start = when it got its cores).
        """
        self._check_rank(rank)
        if flops < 0 or bytes < 0:
            raise DlrmsimError(f"task '{name}' has negative flops or bytes", field="flops/bytes")
        rr = self.rank_resources[rank]
        container = rr.pool(pool)
        c = float(container.capacity if cores is None else cores)
        if not 0 < c <= container.capacity:
            raise DlrmsimError(
                f"task '{name}' asks for {c:g} cores but rank {rank}'s {pool} pool has {container.capacity:g}",
                field="cores",
                fix="ask for fewer cores",
            )
        return self.env.process(self._compute(rank, name, float(flops), float(bytes), kind, precision, c, category, pool))

    def _compute(self, rank, name, flops, nbytes, kind, precision, cores, category, pool):  # noqa: ANN001, ANN202
        container = self.rank_resources[rank].pool(pool)
        yield container.get(cores)
        start = self.env.now
        done = self.env.event()
        owner = _EventOwner(done)
        batch = self.task_batch(rank, flops, nbytes, precision, cores, interferable=pool == "compute")
        batch.owner = self.fluid.register(owner, 1)
        self.fluid.add(batch)
        yield done
        yield container.put(cores)
        self.records.append(Record(rank, kind, name, category, start, self.env.now, nbytes, flops, resource=pool))

    def task_batch(self, rank: int, flops: float, nbytes: float, precision: str, cores: float, interferable: bool = True) -> Batch:
        """The fluid activity of one task (rate caps from the roofline; see :mod:`dlrmsim.simulator.costs`)."""
        rr = self.rank_resources[rank]
        spec = rr.spec
        share = rr.interfered_share if interferable else 1.0
        fr = costs.task_flop_rate(spec, flops, cores, precision) if flops > 0 else 0.0
        fr_s = fr * share
        if nbytes > 0:
            bw = costs.task_bandwidth_cap(spec, nbytes, cores)
            bw_s = costs.task_bandwidth_cap(spec, nbytes, cores * share)
            cap = min(bw, nbytes * fr / flops) if flops > 0 else bw
            cap_s = min(bw_s, nbytes * fr_s / flops) if flops > 0 else bw_s
            work = nbytes
            mem = self.network.mem[self.network.rank_node[rank]]
            e_act, e_res, e_w = np.zeros(1, dtype=np.int64), np.array([mem], dtype=np.int64), np.ones(1)
        else:
            cap, cap_s, work = fr, fr_s, flops
            e_act, e_res, e_w = _I0, _I0, np.zeros(0)
        return Batch(
            work=np.array([work]), cap=np.array([cap]), cap_slow=np.array([cap_s]),
            trig=np.array([TRIG_COMPUTE if interferable else TRIG_NONE]), rank_a=np.array([rank]), rank_b=np.array([-1]),
            tag=np.zeros(1, dtype=np.int64), e_act=e_act, e_res=e_res, e_w=e_w,
        )

    # ---- flows ----------------------------------------------------------------------------------------
    def flow_batch(self, src_nodes: np.ndarray, dst_nodes: np.ndarray, nbytes: np.ndarray, tags: np.ndarray) -> tuple[Batch, np.ndarray]:
        """Fluid activities (and their start delays, s) for flows between node ids."""
        net = self.network
        fa = net.build_flows(src_nodes, dst_nodes, nbytes)
        ra = net.node_rank[src_nodes]
        rb = net.node_rank[dst_nodes]
        slow = self.comm.comm_slowdown if self.comm.progress_thread_unpinned else 1.0
        batch = Batch(
            work=fa.work, cap=fa.cap, cap_slow=fa.cap / slow, trig=np.full(len(fa.work), TRIG_COMM, dtype=np.int64),
            rank_a=ra, rank_b=rb, tag=np.asarray(tags, dtype=np.int64), e_act=fa.e_act, e_res=fa.e_res, e_w=fa.e_w,
        )
        return batch, fa.delay

    def transfer(self, src_rank: int, dst_rank: int, nbytes: float, *, name: str, kind: str = "p2p", category: str = "comm") -> simpy.Event:
        """Send ``nbytes`` from one rank to another; the event fires when the last byte has arrived.

        Time alone: path latency + per-message overheads + nbytes / bottleneck bandwidth. Recorded as one
        Record(rank=src, peer=dst, kind=kind).
        """
        self._check_rank(src_rank)
        self._check_rank(dst_rank)
        net = self.network
        ev = self._transfer(int(net.rank_node[src_rank]), int(net.rank_node[dst_rank]), nbytes, name, kind, category)
        return self._ordered(ev, [src_rank, dst_rank])

    def transfer_nodes(self, src_node: str, dst_node: str, nbytes: float, *, name: str, kind: str = "p2p", category: str = "comm") -> simpy.Event:
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
        owner = _TransferOwner(self, done, Record(src_rank, kind, name, category, 0.0, 0.0, float(nbytes), peer=dst_rank, resource=res))
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


def _gather(ptr: np.ndarray, order: np.ndarray, grp: np.ndarray) -> np.ndarray:
    """Indices ``order[ptr[g]:ptr[g+1]]`` for every g in ``grp``, concatenated (vectorized)."""
    lo = ptr[grp]
    ln = ptr[grp + 1] - lo
    tot = int(ln.sum())
    if not tot:
        return _I0
    return order[np.repeat(lo - (np.cumsum(ln) - ln), ln) + np.arange(tot)]


class _EventOwner:
    def __init__(self, event: simpy.Event) -> None:
        self.event = event

    def on_done(self, tags: np.ndarray, t_issue: np.ndarray, now: float) -> None:
        self.event.succeed(now)


class _TransferOwner:
    def __init__(self, sim: Simulation, event: simpy.Event, record: Record) -> None:
        self.sim, self.event, self.record = sim, event, record

    def on_done(self, tags: np.ndarray, t_issue: np.ndarray, now: float) -> None:
        self.record.start = float(t_issue[0])
        self.record.end = now
        self.sim.records.append(self.record)
        self.event.succeed(now)


class _CollectiveRun:
    """Drives one collective's phases per rank (see :mod:`dlrmsim.simulator.collectives` for semantics)."""

    def __init__(
        self, sim: Simulation, op: str, ranks: list[int], phases: list[Phase], name: str, category: str, cid: int, nbytes: float,
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
        self.order: list[np.ndarray] = []
        self.ptr: list[np.ndarray] = []
        self.dorder: list[np.ndarray] = []
        self.dptr: list[np.ndarray] = []
        self.rendezvous = sim.comm.rendezvous
        self.remaining = np.zeros((max(K, 1), p), dtype=np.int64)
        n_flows = 0
        n_red = 0
        offs = [0]
        for k, ph in enumerate(phases):
            o = np.argsort(ph.src, kind="stable")
            self.order.append(o)
            cnt = np.bincount(ph.src, minlength=p)
            ptr = np.zeros(p + 1, dtype=np.int64)
            np.cumsum(cnt, out=ptr[1:])
            self.ptr.append(ptr)
            dcnt = np.bincount(ph.dst, minlength=p)
            self.remaining[k] = cnt + dcnt
            self.dorder.append(np.argsort(ph.dst, kind="stable"))
            dptr = np.zeros(p + 1, dtype=np.int64)
            np.cumsum(dcnt, out=dptr[1:])
            self.dptr.append(dptr)
            n_flows += len(ph.src)
            offs.append(n_flows)
            if ph.reduce_bytes is not None:
                n_red += int((ph.reduce_bytes > 0).sum())
        self.offs = np.asarray(offs, dtype=np.int64)
        self.cur = np.full(p, -1, dtype=np.int64)
        self.in_reduction = np.zeros(p, dtype=bool)
        self.n_done = 0
        self.start_t = self.env.now
        self.done_event = self.env.event()
        self.rank_events = [self.env.event() for _ in range(p)]
        if sim.comm.reduce_traffic_factor <= 0:
            n_red = 0
        self.oid = sim.fluid.register(self, n_flows + n_red) if n_flows + n_red else -1

    def start(self) -> None:
        self._advance(np.arange(self.p, dtype=np.int64))

    # phase machinery
    def _advance(self, rs: np.ndarray) -> None:
        """Move ranks ``rs`` (which finished their current phase) into their next phase."""
        while rs.size:
            self.cur[rs] += 1
            fin = rs[self.cur[rs] >= self.K]
            if fin.size:
                self._ranks_finished(fin)
            rs = rs[self.cur[rs] < self.K]
            if not rs.size:
                return
            ks = self.cur[rs]
            for k in np.unique(ks):
                self._start_sends(int(k), rs[ks == k])
            ready = rs[self.remaining[ks, rs] == 0]
            rs = self._flows_complete(ready)

    def _start_sends(self, k: int, grp: np.ndarray) -> None:
        """Start phase-k flows of ranks ``grp`` that just entered phase k.

        Eager: a rank's sends start when it enters the phase. Rendezvous: a flow starts when both its ends
        have entered the phase, so sends from ``grp`` to ranks still behind wait, and sends already waiting
        on ``grp`` start now.
        """
        ph = self.phases[k]
        fidx = _gather(self.ptr[k], self.order[k], grp)
        if self.rendezvous:
            fidx = fidx[self.cur[ph.dst[fidx]] >= k]
            inc = _gather(self.dptr[k], self.dorder[k], grp)
            inc = inc[self.cur[ph.src[inc]] >= k]
            fidx = np.unique(np.concatenate([fidx, inc]))
        if not fidx.size:
            return
        batch, delay = self.sim.flow_batch(self.nodes[ph.src[fidx]], self.nodes[ph.dst[fidx]], ph.nbytes[fidx], self.offs[k] + fidx)
        batch.owner = self.oid
        self.sim.fluid.add(batch, delay)

    def _flows_complete(self, ready: np.ndarray) -> np.ndarray:
        """Ranks whose current phase's flows are all done: start reductions; return ranks free to advance."""
        if not ready.size:
            return ready
        red = np.zeros(ready.size)
        for k in np.unique(self.cur[ready]):
            rb = self.phases[int(k)].reduce_bytes
            if rb is not None:
                m = self.cur[ready] == k
                red[m] = rb[ready[m]]
        need = red > 0
        if self.sim.comm.reduce_traffic_factor <= 0:
            need[:] = False  # reduction arithmetic modelled as free
        if need.any():
            self._start_reductions(ready[need], red[need])
        return ready[~need]

    def _start_reductions(self, rs: np.ndarray, red: np.ndarray) -> None:
        sim = self.sim
        factor = sim.comm.reduce_traffic_factor
        cores = sim.comm.reduce_cores()
        self.in_reduction[rs] = True
        n = rs.size
        work = red * factor
        cap = np.empty(n)
        for i, (r, w) in enumerate(zip(self.g[rs], work, strict=True)):
            spec = sim.rank_resources[int(r)].spec
            cap[i] = costs.task_bandwidth_cap(spec, float(w), min(cores, spec.cores))
        mem = sim.network.mem[self.nodes[rs]]
        batch = Batch(
            work=work, cap=cap, cap_slow=cap, trig=np.full(n, TRIG_NONE, dtype=np.int64), rank_a=self.g[rs],
            rank_b=np.full(n, -1, dtype=np.int64), tag=-(rs + 1), e_act=np.arange(n, dtype=np.int64), e_res=mem.astype(np.int64),
            e_w=np.ones(n), owner=self.oid,
        )
        sim.fluid.add(batch)

    def on_done(self, tags: np.ndarray, t_issue: np.ndarray, now: float) -> None:
        is_red = tags < 0
        advance: list[np.ndarray] = []
        if is_red.any():
            rs = -tags[is_red] - 1
            self.in_reduction[rs] = False
            if self.sim.record_flows:
                g = self.g
                f = self.sim.comm.reduce_traffic_factor
                for r, t0 in zip(rs, t_issue[is_red], strict=True):
                    rb = self.phases[int(self.cur[r])].reduce_bytes
                    self.sim.records.append(
                        Record(int(g[r]), "reduce", self.name, self.category, float(t0), now, float(rb[r]) * f, collective_id=self.cid)
                    )
            advance.append(rs)
        ft = tags[~is_red]
        if ft.size:
            k = np.searchsorted(self.offs, ft, side="right") - 1
            i = ft - self.offs[k]
            src = np.empty(ft.size, dtype=np.int64)
            dst = np.empty(ft.size, dtype=np.int64)
            nb = np.empty(ft.size)
            for kk in np.unique(k):
                m = k == kk
                ph = self.phases[int(kk)]
                src[m], dst[m], nb[m] = ph.src[i[m]], ph.dst[i[m]], ph.nbytes[i[m]]
            np.subtract.at(self.remaining, (k, src), 1)
            np.subtract.at(self.remaining, (k, dst), 1)
            if self.sim.record_flows:
                self._record_flows(src, dst, nb, t_issue[~is_red], now)
            cand = np.unique(np.concatenate([src, dst]))
            cand = cand[(self.cur[cand] < self.K) & ~self.in_reduction[cand]]
            cand = cand[self.remaining[self.cur[cand], cand] == 0]
            advance.append(self._flows_complete(cand))
        if advance:
            self._advance(np.concatenate(advance))

    def _record_flows(self, src: np.ndarray, dst: np.ndarray, nb: np.ndarray, t0: np.ndarray, now: float) -> None:
        g = self.g
        name, cat, cid = self.name, self.category, self.cid
        self.sim.records.extend(
            Record(s, "flow", name, cat, t, now, b, 0.0, d, None, cid)
            for s, d, b, t in zip(g[src].tolist(), g[dst].tolist(), nb.tolist(), t0.tolist(), strict=True)
        )

    def _ranks_finished(self, rs: np.ndarray) -> None:
        now = self.env.now
        for r in rs.tolist():
            self.sim.records.append(
                Record(self.global_ranks[r], self.op, self.name, self.category, self.start_t, now, self.nbytes, collective_id=self.cid,
                       resource=self.algo)
            )
            self.rank_events[r].succeed(now)
        self.n_done += len(rs)
        if self.n_done == self.p:
            self.done_event.succeed(now)
