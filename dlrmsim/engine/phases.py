"""A collective's phase machine, compiled: which flows start when ranks enter phases, which ranks a finished flow
frees, and :func:`run_ahead`, which drives collectives (any number at once, a typed list of :class:`Ahead`) and the
fluid state together without SimPy.

Why run ahead: a ring allreduce of p ranks has 2(p-1) phases, and once the ranks fall out of lockstep (a slow
link delays its neighbours a little more each phase) almost every flow ends at its own instant, so one collective
makes thousands of instants. Handled one by one in Python (SimPy wake-up, fluid step, owner callback, new batch)
each costs tens of microseconds, which was most of a 64-rank iteration's wall time. While nothing else can happen
(no other activity finishes, no SimPy event of anyone else is due) those instants depend only on the collective
and the fluid state, so :func:`run_ahead` replays exactly what the Python path would do, instant by instant: drain
at the current rates, start the due delayed flows, finish what is done, advance the ranks, start their flows and
reductions, re-solve. It stops, leaving everything as the Python path would find it, before an instant that
something else could change: the next foreign SimPy event, another owner's activity finishing, or a rank of the
collective possibly finishing (which fires a SimPy event others wait on). Nothing is approximated.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba.typed import List

from dlrmsim.engine.fluid import (
    _OWNER,
    _REM,
    _TAG,
    DONE_ULPS,
    TRIG_COMM,
    TRIG_NONE,
    _compact,
    _done_indices,
    _integrate,
    _solve_rates,
    grow_columns,
    grow_tables,
    write_activity,
)
from dlrmsim.engine.jit import njit
from dlrmsim.engine.network import PairTables

# run_ahead's outcomes
RAN_TO_WAKE = 0  # stopped before the next instant (due at the returned time): nothing of it was done
STOPPED_AT = 1  # stopped inside the instant at the returned time: drained and delayed flows started, finishing not


@njit(cache=True)
def sends_to_start(
    ks: np.ndarray,
    grp: np.ndarray,
    p: int,
    s_ptr: np.ndarray,
    s_order: np.ndarray,
    d_ptr: np.ndarray,
    d_order: np.ndarray,
    fsrc: np.ndarray,
    fdst: np.ndarray,
    fk: np.ndarray,
    cur: np.ndarray,
    rendezvous: bool,
) -> np.ndarray:
    """Flow indices that start when ranks ``grp`` enter phases ``ks`` (in that order): their sends and, with
    rendezvous, only those whose receiver has entered the phase too, and the sends already waiting on ``grp``;
    with rendezvous a flow can be both, so that list comes back sorted with each flow once."""
    size = 0
    for j in range(ks.shape[0]):
        key = ks[j] * p + grp[j]
        size += s_ptr[key + 1] - s_ptr[key] + (d_ptr[key + 1] - d_ptr[key] if rendezvous else 0)
    out = np.empty(size, dtype=np.int64)
    n = 0
    for j in range(ks.shape[0]):
        key = ks[j] * p + grp[j]
        for i in range(s_ptr[key], s_ptr[key + 1]):
            f = s_order[i]
            if not rendezvous or cur[fdst[f]] >= fk[f]:
                out[n] = f
                n += 1
    if rendezvous:
        for j in range(ks.shape[0]):
            key = ks[j] * p + grp[j]
            for i in range(d_ptr[key], d_ptr[key + 1]):
                f = d_order[i]
                if cur[fsrc[f]] >= fk[f]:
                    out[n] = f
                    n += 1
        if n > 1:
            if 8 * n >= fsrc.shape[0]:
                # many of the collective's flows (an alltoall's million when every rank enters its one phase):
                # marking them is linear, where sorting 2n listings took 0.1 s at 1024 ranks
                listed = np.zeros(fsrc.shape[0], dtype=np.bool_)
                for j in range(n):
                    listed[out[j]] = True
                return np.flatnonzero(listed)
            return np.unique(out[:n])
    return out[:n]


@njit(cache=True)
def ranks_with_flows_done(
    ft: np.ndarray,
    fsrc: np.ndarray,
    fdst: np.ndarray,
    fk: np.ndarray,
    p: int,
    n_phases: int,
    remaining: np.ndarray,
    cur: np.ndarray,
    in_reduction: np.ndarray,
) -> np.ndarray:
    """Count finished flows ``ft`` off both ends' (phase, rank) tallies in ``remaining``; return the ranks
    (ascending) those flows touched whose current phase now has no flow left and that are not reducing."""
    touched = np.zeros(p, dtype=np.bool_)
    for f in ft:
        kp = fk[f] * p
        remaining[kp + fsrc[f]] -= 1
        remaining[kp + fdst[f]] -= 1
        touched[fsrc[f]] = True
        touched[fdst[f]] = True
    out = np.empty(p, dtype=np.int64)
    n = 0
    for r in range(p):
        if touched[r]:
            k = cur[r]
            if k < n_phases and not in_reduction[r] and remaining[k * p + r] == 0:
                out[n] = r
                n += 1
    return out[:n]


def last_busy_phase(
    p: int, n_phases: int, s_ptr: np.ndarray, red: np.ndarray, reduce_on: bool, lockstep: bool = False
) -> np.ndarray:
    """Per local rank, the last phase in which it sends or reduces (-1: none). Past it a rank can run to the end of
    the collective without waiting for any activity of its own, so :func:`run_ahead` stops before finishing an
    activity of a rank that has reached it. In lockstep every rank waits for all the others, so each gets the
    collective's last busy phase."""
    if not n_phases:
        return np.full(p, -1, dtype=np.int64)
    busy = np.diff(s_ptr).reshape(n_phases, p) > 0
    if reduce_on:
        busy |= red.reshape(n_phases, p) > 0
    k = np.arange(n_phases)[:, None]
    last = np.where(busy, k, -1).max(axis=0)
    return np.full(p, last.max(), dtype=np.int64) if lockstep else last


@njit(cache=True)
def lockstep_barrier(rs: np.ndarray, held: np.ndarray, n_held: np.ndarray) -> np.ndarray:
    """A collective's per-step barrier (``Simulation(lockstep_collectives=True)``): ranks ``rs`` finished the
    current phase and wait (``held``, ``n_held[0]`` of them); when the last one arrives, all ranks (ascending) go
    on together and the barrier resets."""
    for r in rs:
        held[r] = True
    n_held[0] += rs.size
    p = held.shape[0]
    if n_held[0] < p:
        return np.empty(0, dtype=np.int64)
    held[:] = False
    n_held[0] = 0
    return np.arange(p)


# rows of the delayed-flow queue: floats (start time, issue time), ints (heap sequence number, collective, flow)
Q_T, Q_ISSUE = 0, 1
Q_SEQ, Q_COLL, Q_FLOW = 0, 1, 2


class Ahead(NamedTuple):
    """One collective as :func:`run_ahead` sees it: the scheduler owner ``oid``, ``p`` local ranks (global rank
    ``g[r]``), ``n_phases`` phases. Flow ``f`` goes from local rank ``fsrc[f]`` to ``fdst[f]`` in phase ``fk[f]``
    with ``fnb[f]`` bytes over the network's stored node pair ``fpid[f]``; the CSR lists, ``cur``, ``remaining``
    and ``in_reduction`` are ``_CollectiveRun``'s own arrays (updated in place); ``last_busy`` from
    :func:`last_busy_phase`; per (phase, rank) key ``k * p + r`` the reduction's work (bytes, 0: none), cap (B/s)
    and memory resource, reduced with ``red_share`` cores; with ``lockstep``, ``held``/``n_held`` are the collective's
    per-step barrier (:func:`lockstep_barrier`). When all ranks enter a phase together (always, in lockstep),
    repeated steps are skipped as ``_CollectiveRun._try_skip`` skips them (:func:`_skip_cycles`): ``own[k]``
    activities phase k starts, ``run[k]`` phases from k on equal to it, and the last all-ranks entry's snapshot
    (``snap_i``: phase or -1, activities started and finished by then, running activities; ``snap_f``: its time;
    ``snap_rem``: their remaining work)."""

    oid: int
    p: int
    n_phases: int
    reduce_on: bool
    red_share: float
    fsrc: np.ndarray
    fdst: np.ndarray
    fk: np.ndarray
    fpid: np.ndarray
    fnb: np.ndarray
    s_ptr: np.ndarray
    s_order: np.ndarray
    d_ptr: np.ndarray
    d_order: np.ndarray
    cur: np.ndarray
    remaining: np.ndarray
    in_reduction: np.ndarray
    last_busy: np.ndarray
    red_work: np.ndarray
    red_cap: np.ndarray
    red_res: np.ndarray
    g: np.ndarray
    lockstep: bool
    held: np.ndarray
    n_held: np.ndarray
    own: np.ndarray
    run: np.ndarray
    snap_i: np.ndarray
    snap_f: np.ndarray
    snap_rem: np.ndarray


_E0 = np.zeros(0, dtype=np.int64)
_F0 = np.zeros(0)
# The type of every collective :func:`run_ahead` drives (the typed list's item type); no activity has its owner id
# (ids are >= 0; -1 is a Batch's default).
NO_COLLECTIVE = Ahead(-(1 << 62), 0, 0, False, 1.0, _E0, _E0, _E0, _E0, _F0, _E0, _E0, _E0, _E0, _E0, _E0,
                      np.zeros(0, dtype=np.bool_), _E0, _F0, _F0, _E0, _E0, False, np.zeros(0, dtype=np.bool_),
                      np.zeros(1, dtype=np.int64), _E0, _E0, np.full(4, -1, dtype=np.int64), np.zeros(1), _F0)  # fmt: skip


class RunnerListPacking:
    """How ``fluid.FluidScheduler`` keeps the kernel's collectives (``fluid.RunnerPacking``): as numba's typed list
    of :class:`Ahead`, so that :func:`run_ahead` takes any number of them with one argument to unbox (a tuple of them
    cost one branch of compiled code per slot, and unboxing every collective's arrays at each call) and ``colls[ci]``
    fetches one. The list holds the collectives' own arrays, so what the kernel updates in place (``cur``,
    ``remaining``, ...) is theirs. It is packed once, then a collective appended or dropped at a time: appending
    costs 20-140 us (numba types the 30 fields of an :class:`Ahead` in Python), so repacking at every start and end
    of a collective would grow as the square of the collectives in flight."""

    def pack(self, views: list[Ahead]) -> List:
        """``views`` in the given order."""
        out = _empty_runner_list(NO_COLLECTIVE)
        for c in views:
            _append_runner(out, c)
        return out

    def append(self, packed: List, view: Ahead) -> None:
        _append_runner(packed, view)

    def drop(self, packed: List, i: int) -> None:
        _drop_runner(packed, i)


@njit(cache=True)
def _empty_runner_list(proto: Ahead) -> List:
    # built in compiled code from a prototype, so its type is known here and the list's own functions are compiled
    # into these cached kernels (a list typed from Python compiles them at each process start)
    out = List()
    out.append(proto)
    out.pop()
    return out


@njit(cache=True)
def _append_runner(out: List, c: Ahead) -> None:
    out.append(c)


@njit(cache=True)
def _drop_runner(out: List, i: int) -> None:
    out.pop(i)


@njit(cache=True)
def run_ahead(
    F: np.ndarray,
    I: np.ndarray,  # noqa: E741
    E: np.ndarray,
    EW: np.ndarray,
    n: int,
    m: int,
    res_cap: np.ndarray,
    n_ranks: int,
    t: float,
    t_next: float,
    t_ext: float,
    QF: np.ndarray,
    QI: np.ndarray,
    nq: int,
    seq: int,
    colls: List,  # of Ahead, ascending oid (RunnerListPacking)
    oids: np.ndarray,  # their owner ids
    pt: PairTables,
    rendezvous: bool,
    comm_slow: float,
    counts: np.ndarray,
    fin: np.ndarray,
):
    """Advance collectives ``colls`` and the fluid state from time ``t`` (s), where rates were just solved and the
    first activity ends in ``t_next`` s, through every instant before ``t_ext`` (the first event of anyone else)
    that only these collectives shape; see the module docstring for what stops it. The scheduler's tables (``F``,
    ``I``, ``E``, ``EW``; ``n`` activities, ``m`` entries) are its own (``fluid.FluidScheduler``).

    ``QF``/``QI`` (rows ``Q_*``): the collectives' flows waiting out their start delay, ``nq`` of them; ``seq``:
    the scheduler's last heap sequence number. ``counts`` (int64, 4) gets what was done added (activities started,
    finished, solves, instants), ``fin`` the activities finished per collective.

    Returns (F, I, E, EW, n, m, t, t_next, outcome, time, QF, QI, nq, seq): the tables (new arrays when they grew),
    the time the state is at and the time until its next completion, :data:`RAN_TO_WAKE` or :data:`STOPPED_AT` with
    the instant's time, the queue and the last sequence number.
    """
    while True:
        # the next instant, as FluidScheduler._solve schedules it
        tw = np.inf
        if t_next < np.inf:
            tw = t + max(t_next, 0.0)
            if not tw > t:
                tw = np.nextafter(t, np.inf)
        td = np.inf
        for j in range(nq):
            if QF[Q_T, j] < td:
                td = QF[Q_T, j]
        tn = min(tw, td)
        if tn >= t_ext or tn == np.inf:
            return F, I, E, EW, n, m, t, t_next, RAN_TO_WAKE, tn, QF, QI, nq, seq
        counts[3] += 1
        _integrate(F, n, tn - t)
        t = tn
        # The helpers below get one collective (colls[ci]) or the arrays of it they read, never all of them: when the
        # collectives came as a tuple, a call that took it paid a reference count on each of their arrays, in and
        # out (some 200), about 2 us a call, a seventh of a 64-rank iteration at two calls an instant.
        if nq:
            due_by = t * (1 + 1e-15) + 1e-18  # a queued flow starts now up to this time, as FluidScheduler._step pops
            due = _due(QF, QI, nq, due_by)
            a = 0
            while a < due.size:  # runs of one collective's flows, in the heap's order
                ci = QI[Q_COLL, due[a]]
                b = a + 1
                while b < due.size and QI[Q_COLL, due[b]] == ci:
                    b += 1
                c = colls[ci]
                F, I, E, EW, n, m = _start_due_flows(  # noqa: E741
                    F, I, E, EW, n, m, QF, QI, due[a:b], c.oid, c.fpid, c.fnb, c.fsrc, c.fdst, c.g, pt, comm_slow
                )
                a = b
            if due.size:
                counts[0] += due.size
                nq = _drop_due(QF, QI, nq, due_by)
        t_eps = DONE_ULPS * (np.nextafter(t, np.inf) - t)  # math.ulp(t), as FluidScheduler._step
        for _ in range(1000):
            done = _done_indices(F, n, t_eps)
            if not done.size:
                break
            # Finishing these belongs to the collectives alone and cannot finish any of their ranks (a collective is
            # fetched only when one of its activities is done)?
            safe = _all_owned(I, done, oids)
            for ci in range(oids.shape[0]):
                if safe and _owns_any(I, done, oids[ci]):
                    c = colls[ci]
                    safe = _no_rank_ends(I, done, c.oid, c.fsrc, c.fdst, c.cur, c.last_busy)
            if not safe:
                return F, I, E, EW, n, m, t, t_next, STOPPED_AT, t, QF, QI, nq, seq
            tags = np.empty(done.size, dtype=np.int64)
            owners = np.empty(done.size, dtype=np.int64)
            for j in range(done.size):
                tags[j] = I[_TAG, done[j]]
                owners[j] = I[_OWNER, done[j]]
            m = _compact(F, I, E, EW, n, m, done)
            n -= done.size
            counts[1] += done.size
            # owners hear in ascending id order (FluidScheduler._finish), each its tags in table order
            for ci in range(oids.shape[0]):
                k = 0
                for j in range(done.size):
                    if owners[j] == oids[ci]:
                        k += 1
                if not k:
                    continue
                c = colls[ci]
                fin[ci] += k
                mine = np.empty(k, dtype=np.int64)
                k = 0
                for j in range(done.size):
                    if owners[j] == c.oid:
                        mine[k] = tags[j]
                        k += 1
                F, I, E, EW, n, m, QF, QI, nq, seq, t = _on_done(  # noqa: E741
                    F, I, E, EW, n, m, t, t_ext, mine, ci, c, QF, QI, nq, seq, pt, rendezvous, comm_slow, counts, fin
                )
        # re-solve, as FluidScheduler._solve
        t_next = np.inf
        if n:
            counts[2] += 1
            t_next = _solve_rates(F, I, E, EW, n, m, res_cap, n_ranks)


@njit(cache=True)
def _all_owned(I: np.ndarray, done: np.ndarray, oids: np.ndarray) -> bool:  # noqa: E741
    """Whether every activity ``done`` belongs to one of the collectives ``oids``."""
    for a in done:
        if _slot(oids, I[_OWNER, a]) < 0:
            return False
    return True


@njit(cache=True)
def _owns_any(I: np.ndarray, done: np.ndarray, oid: int) -> bool:  # noqa: E741
    for a in done:
        if I[_OWNER, a] == oid:
            return True
    return False


@njit(cache=True)
def _no_rank_ends(
    I: np.ndarray,  # noqa: E741
    done: np.ndarray,
    oid: int,
    fsrc: np.ndarray,
    fdst: np.ndarray,
    cur: np.ndarray,
    last_busy: np.ndarray,
) -> bool:
    """Whether finishing collective ``oid``'s activities among ``done`` leaves each of their ranks before its last busy
    phase (finishing a rank fires a SimPy event others wait on)."""
    for a in done:
        if I[_OWNER, a] != oid:
            continue
        tag = I[_TAG, a]
        if tag >= 0:
            r1, r2 = fsrc[tag], fdst[tag]
            if cur[r1] >= last_busy[r1] or cur[r2] >= last_busy[r2]:
                return False
        elif cur[-tag - 1] >= last_busy[-tag - 1]:
            return False
    return True


@njit(cache=True)
def _slot(oids: np.ndarray, owner: int) -> int:
    for ci in range(oids.shape[0]):
        if oids[ci] == owner:
            return ci
    return -1


@njit(cache=True)
def _due(QF: np.ndarray, QI: np.ndarray, nq: int, thr: float) -> np.ndarray:
    """Indices of the queued flows due by ``thr`` (s), in the heap's order (start time, then sequence number, then
    batch order), as ``FluidScheduler._step`` pops them."""
    n_due = 0
    for j in range(nq):
        if QF[Q_T, j] <= thr:
            n_due += 1
    due = np.empty(n_due, dtype=np.int64)
    k = 0
    for j in range(nq):
        if QF[Q_T, j] <= thr:
            due[k] = j
            k += 1
    for a in range(1, n_due):  # insertion sort by (time, seq), stable
        x = due[a]
        b = a - 1
        while b >= 0 and (QF[Q_T, due[b]] > QF[Q_T, x] or (QF[Q_T, due[b]] == QF[Q_T, x] and QI[Q_SEQ, due[b]] > QI[Q_SEQ, x])):
            due[b + 1] = due[b]
            b -= 1
        due[b + 1] = x
    return due


@njit(cache=True)
def _start_due_flows(F, I, E, EW, n, m, QF, QI, due, oid, fpid, fnb, fsrc, fdst, g, pt, comm_slow):  # noqa: E741
    """Move the queued flows ``due`` (all of collective ``oid``, whose arrays these are) into the tables, in order."""
    m_add = 0
    for j in due:
        pid = fpid[QI[Q_FLOW, j]]
        m_add += pt.ptr[pid + 1] - pt.ptr[pid]
    F, I, E, EW = grow_tables(F, I, E, EW, n, m, n + due.size, m + m_add)  # noqa: E741
    for j in due:
        n, m = _add_flow(F, I, E, EW, n, m, QI[Q_FLOW, j], QF[Q_ISSUE, j], oid, fpid, fnb, fsrc, fdst, g, pt, comm_slow)
    return F, I, E, EW, n, m


@njit(cache=True)
def _drop_due(QF: np.ndarray, QI: np.ndarray, nq: int, thr: float) -> int:
    """Squeeze the flows due by ``thr`` (s) out of the queue, keeping the others' order; return how many are left."""
    k = 0
    for j in range(nq):
        if not QF[Q_T, j] <= thr:
            if k != j:
                # element by element: a column slice per kept entry cost 8 of the kernel's 31 us an instant at 1024
                # ranks, where some 800 flows wait out their start delay at any instant
                for r in range(QF.shape[0]):
                    QF[r, k] = QF[r, j]
                for r in range(QI.shape[0]):
                    QI[r, k] = QI[r, j]
            k += 1
    return k


@njit(cache=True)
def _on_done(F, I, E, EW, n, m, t, t_ext, tags, ci, c, QF, QI, nq, seq, pt, rendezvous, comm_slow, counts, fin):  # noqa: E741
    """``_CollectiveRun.on_done`` and ``_advance`` for collective ``c`` (index ``ci``): reductions done free their
    ranks, flows done may complete ranks' phases; ranks advance, start their next flows and reductions. When all
    ranks enter a phase together that repeats the last one (with or without lockstep, as on the Python path), the
    repeats are skipped (:func:`_skip_cycles`): the time returned is then later than ``t``."""
    n_red = 0
    for tg in tags:
        if tg < 0:
            n_red += 1
    adv = np.empty(n_red, dtype=np.int64)
    ft = np.empty(tags.size - n_red, dtype=np.int64)
    i_r = 0
    i_f = 0
    for tg in tags:
        if tg < 0:
            adv[i_r] = -tg - 1
            c.in_reduction[-tg - 1] = False
            i_r += 1
        else:
            ft[i_f] = tg
            i_f += 1
    p = c.p
    if ft.size:
        cand = ranks_with_flows_done(ft, c.fsrc, c.fdst, c.fk, p, c.n_phases, c.remaining, c.cur, c.in_reduction)
        F, I, E, EW, n, m, ready = _flows_complete(  # noqa: E741
            F, I, E, EW, n, m, t, cand, c.oid, p, c.reduce_on, c.red_share, c.cur, c.red_work, c.red_cap, c.red_res,
            c.in_reduction, c.g, counts,
        )  # fmt: skip
        adv = np.concatenate((adv, ready))
    rs = adv
    if c.lockstep:
        rs = lockstep_barrier(rs, c.held, c.n_held)
    while rs.size:
        ks = np.empty(rs.size, dtype=np.int64)
        same = True
        for j in range(rs.size):
            c.cur[rs[j]] += 1
            ks[j] = c.cur[rs[j]]
            if ks[j] >= c.n_phases:
                raise RuntimeError("run_ahead would finish a rank: last_busy is wrong")
            if ks[j] != ks[0]:
                same = False
        if same and rs.size == p:
            t, skipped = _skip_cycles(F, n, t, t_ext, c, ks[0], nq, counts)
            if skipped:
                fin[ci] += skipped * c.own[ks[0]]  # activities of the skipped phases: never started, expected no more
                for j in range(rs.size):
                    c.cur[rs[j]] += skipped
                    ks[j] += skipped
        ks_s, rs_s = ks, rs
        if not same:
            o = np.argsort(ks, kind="mergesort")
            ks_s, rs_s = ks[o], rs[o]
        fidx = sends_to_start(ks_s, rs_s, p, c.s_ptr, c.s_order, c.d_ptr, c.d_order, c.fsrc, c.fdst, c.fk, c.cur, rendezvous)
        if fidx.size:
            F, I, E, EW, n, m, QF, QI, nq, seq = _start_flows(  # noqa: E741
                F, I, E, EW, n, m, t, fidx, ci, c.oid, c.fpid, c.fnb, c.fsrc, c.fdst, c.g, QF, QI, nq, seq, pt, comm_slow,
                counts,
            )  # fmt: skip
        n_ready = 0
        for j in range(rs.size):
            if c.remaining[ks[j] * p + rs[j]] == 0:
                n_ready += 1
        ready = np.empty(n_ready, dtype=np.int64)
        k = 0
        for j in range(rs.size):
            if c.remaining[ks[j] * p + rs[j]] == 0:
                ready[k] = rs[j]
                k += 1
        F, I, E, EW, n, m, rs = _flows_complete(  # noqa: E741
            F, I, E, EW, n, m, t, ready, c.oid, p, c.reduce_on, c.red_share, c.cur, c.red_work, c.red_cap, c.red_res,
            c.in_reduction, c.g, counts,
        )  # fmt: skip
        if c.lockstep:
            rs = lockstep_barrier(rs, c.held, c.n_held)
    return F, I, E, EW, n, m, QF, QI, nq, seq, t


@njit(cache=True)
def cycles_to_skip(rem0: np.ndarray, rem: np.ndarray, repeats: int, period: float, room_s: float) -> int:
    """How many repeats of a cycle of ``period`` s can be jumped over at once, on the Python path
    (``_CollectiveRun._try_skip``) and the compiled one (:func:`_skip_cycles`) alike: at most ``repeats``, fewer
    than any running activity (remaining work ``rem0`` at the cycle's start, ``rem`` at its end) needs to finish,
    and all within ``room_s`` s, the time before anyone else's next event (inf: none)."""
    n_skip = repeats
    for a in range(rem.shape[0]):
        dec = rem0[a] - rem[a]
        if dec > 0:
            n_skip = min(n_skip, int(np.floor(rem[a] / dec)) - 1)
    if room_s < np.inf:
        n_skip = min(n_skip, int(room_s / period) - 1)
    return n_skip


@njit(cache=True)
def _skip_cycles(F, n, t, t_ext, c, k, nq, counts):  # noqa: ANN001, ANN202
    """All ranks of collective ``c`` enter phase ``k`` at ``t``: skip the phases that would only repeat the
    last cycle, as ``_CollectiveRun._try_skip`` does on the Python path, and return (time after them, phases
    skipped); otherwise record this entry as the next cycle's start and return (``t``, 0).

    Phase k-1 ran as one undisturbed cycle when, from its all-ranks entry to this one, exactly its own activities
    started and finished (``counts``: this kernel call's), none of the collectives' flows waits out a start delay
    (``nq``) and the running activities are the same. Then phases k, k+1, ... with its flows and reductions
    (``run``) repeat it exactly: the clock jumps N periods and every running activity loses N times its work of one
    period, for the N that fit before any of them could finish, before ``t_ext`` (anyone else's next event) and
    without any rank passing its last busy phase."""
    sn = c.snap_i
    skipped = 0
    if k >= 1 and sn[0] == k - 1 and nq == 0 and c.run[k - 1] >= 2 and n == sn[3]:
        own = c.own[k - 1]
        period = t - c.snap_f[0]
        if counts[0] - sn[1] == own and counts[1] - sn[2] == own and period > 0:
            # entering at most the last busy phase: run_ahead never finishes a rank
            n_skip = cycles_to_skip(c.snap_rem[:n], F[_REM, :n], min(c.run[k], c.last_busy.min() - k), period, t_ext - t)
            if n_skip >= 2:
                for a in range(n):
                    F[_REM, a] -= n_skip * (c.snap_rem[a] - F[_REM, a])
                t = t + n_skip * period
                skipped = n_skip
    if skipped or nq != 0 or n > c.snap_rem.shape[0]:
        sn[0] = -1  # the next entry starts a new cycle's observation (Python: _try_skip's snapshot after a skip)
        return t, skipped
    sn[0] = k
    sn[1] = counts[0]
    sn[2] = counts[1]
    sn[3] = n
    c.snap_f[0] = t
    for a in range(n):
        c.snap_rem[a] = F[_REM, a]
    return t, 0


@njit(cache=True)
def _add_flow(F, I, E, EW, n, m, f, issue, oid, fpid, fnb, fsrc, fdst, g, pt, comm_slow):  # noqa: E741
    """Append flow ``f`` of collective ``oid`` as an activity, as ``Simulation.flow_batch`` and
    ``FluidScheduler.pack`` build it (the tables must have room); return the new activity and entry counts. Takes
    the collective's arrays, not its :class:`Ahead`: passing that tuple per flow costs a reference count per array."""
    pid = fpid[f]
    work = 0.0 if pt.same[pid] else fnb[f]  # a node sending to itself moves nothing
    cap = pt.cap[pid]
    write_activity(F, I, n, work, cap, cap / comm_slow, 1.0, issue, TRIG_COMM, g[fsrc[f]], g[fdst[f]], f, oid)
    for j in range(pt.ptr[pid], pt.ptr[pid + 1]):
        E[0, m] = n
        E[1, m] = pt.res[j]
        EW[m] = pt.w[j]
        m += 1
    return n + 1, m


@njit(cache=True)
def _start_flows(F, I, E, EW, n, m, t, fidx, ci, oid, fpid, fnb, fsrc, fdst, g, QF, QI, nq, seq, pt, comm_slow, counts):  # noqa: E741
    """Start flows ``fidx`` of collective ``ci`` (owner ``oid``; its :class:`Ahead` fields ``fpid`` ... ``g``, not the
    tuple, as :func:`_flows_complete`) at ``t`` as ``FluidScheduler.add`` does with their start delays: those
    without a delay join the tables now, the others wait in the queue, one heap push (sequence number) per distinct
    delay in ascending order."""
    k = fidx.size
    d = np.empty(k)
    for j in range(k):
        d[j] = pt.delay[fpid[fidx[j]]]
    d_min, d_max = d.min(), d.max()
    if not d_max > 0:
        d[:] = 0.0  # FluidScheduler.add starts the whole batch now
        uniq = np.zeros(1)
    elif d_min == d_max:
        uniq = np.full(1, d_max)
    else:
        uniq = np.unique(d)
    for dv in uniq:
        if dv <= 0:
            n_add = 0
            m_add = 0
            for j in range(k):
                if d[j] == dv:
                    n_add += 1
                    pid = fpid[fidx[j]]
                    m_add += pt.ptr[pid + 1] - pt.ptr[pid]
            F, I, E, EW = grow_tables(F, I, E, EW, n, m, n + n_add, m + m_add)  # noqa: E741
            for j in range(k):
                if d[j] == dv:
                    n, m = _add_flow(F, I, E, EW, n, m, fidx[j], t, oid, fpid, fnb, fsrc, fdst, g, pt, comm_slow)
            counts[0] += n_add
        else:
            seq += 1
            QF, QI = grow_columns(QF, QI, nq, nq + k)
            for j in range(k):
                if d[j] == dv:
                    QF[Q_T, nq] = t + dv
                    QF[Q_ISSUE, nq] = t
                    QI[Q_SEQ, nq] = seq
                    QI[Q_COLL, nq] = ci
                    QI[Q_FLOW, nq] = fidx[j]
                    nq += 1
    return F, I, E, EW, n, m, QF, QI, nq, seq


@njit(cache=True)
def _flows_complete(F, I, E, EW, n, m, t, ready, oid, p, reduce_on, share, cur, work, caps, res, in_red, g, counts):  # noqa: E741
    """Ranks ``ready`` finished their current phase's flows: start the reductions of those that reduce in it (as
    ``_CollectiveRun._start_reductions``); return the tables and the ranks free to advance. Takes the fields of the
    collective's :class:`Ahead` it reads, not the tuple: a call that takes the tuple pays a reference count on each
    of its 24 arrays, in and out, and this runs twice per collective at every instant one of its flows ends."""
    if not ready.size or not reduce_on:
        return F, I, E, EW, n, m, ready
    n_need = 0
    for r in ready:
        if work[cur[r] * p + r] > 0:
            n_need += 1
    if not n_need:
        return F, I, E, EW, n, m, ready
    F, I, E, EW = grow_tables(F, I, E, EW, n, m, n + n_need, m + n_need)  # noqa: E741
    free = np.empty(ready.size - n_need, dtype=np.int64)
    k = 0
    for r in ready:
        key = cur[r] * p + r
        if work[key] > 0:
            in_red[r] = True
            cap = caps[key]
            write_activity(F, I, n, work[key], cap, cap, share, t, TRIG_NONE, g[r], -1, -(r + 1), oid)
            E[0, m] = n
            E[1, m] = res[key]
            EW[m] = 1.0
            n += 1
            m += 1
        else:
            free[k] = r
            k += 1
    counts[0] += n_need
    return F, I, E, EW, n, m, free
