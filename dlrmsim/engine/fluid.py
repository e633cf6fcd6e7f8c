"""One fluid max-min solver for everything contended: link directions, NIC ports and memory domains.

An *activity* is an amount of work (bytes, or flops for a task that touches no memory) drained at a rate.
It draws ``weight * rate`` from each resource it uses (a directed link half, a NIC port, a memory domain)
and its rate never exceeds its own cap. Rates are the max-min fair allocation (progressive filling) and
are recomputed only when activities start or finish, once per simulated instant however many SimPy events
that instant holds; completion events are then rescheduled.

:func:`dlrmsim.engine.maxmin.maxmin_rates` is the pure allocation (compiled); :class:`FluidScheduler` drives it
from SimPy, and hands its state to a compiled kernel (:mod:`dlrmsim.engine.phases`) for the stretches of instants
that only collectives shape (:meth:`FluidScheduler.set_runner`), and to another (:func:`_chains_ahead`) for those
that only chains of tasks run back to back shape (:meth:`FluidScheduler.add_chain`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np
import simpy

from dlrmsim.engine.arrays import all_equal, min_max
from dlrmsim.engine.jit import njit
from dlrmsim.engine.maxmin import maxmin_rates

# Activities whose remaining work is within this fraction of their total are finished together, so that
# symmetric collectives (whose flows end together up to rounding) cost one rate recomputation, not many.
DONE_REL_EPS = 1e-9
# An activity whose remaining time is within this many float spacings of the simulated clock (``np.spacing(now)``,
# 2.2e-16 * now) cannot move the clock forward: it is finished at once. Completion times are rounded, so a short
# activity at a large ``now`` is left with such a residue (a relative one above ``DONE_REL_EPS`` when its whole time
# is under ~1e9 spacings, e.g. 2 us at t = 8 s), and waking for it at ``now + residue == now`` would loop forever.
DONE_ULPS = 4.0
TRIG_NONE = 0  # rate cap never changes
TRIG_COMPUTE = 1  # a compute task: slowed while communication is in flight on its rank
TRIG_COMM = 2  # a flow: slowed while compute runs on either end rank


class Owner(Protocol):
    """Whoever started activities; told in batches when they finish."""

    def on_done(self, tags: np.ndarray, t_issue: np.ndarray, now: float) -> None:
        """``tags`` are the owner's own labels of the finished activities, ``t_issue`` when each was added (s)."""


class ChainOwner(Owner, Protocol):
    """An owner of a chain (:meth:`FluidScheduler.add_chain`), told of the tasks the chain kernel finished."""

    def ran_ahead(self, end: float) -> None:
        """Its running activity finished at ``end`` (s), and the kernel started the next one there."""


class RunnerPacking(Protocol):
    """How the run-ahead kernel's one argument for all runners is built and kept (``phases.RunnerListPacking``)."""

    def pack(self, views: list) -> Any:
        """The runners' views (``Runner.ahead()``), in this order, as the kernel takes them."""

    def append(self, packed: Any, view: tuple) -> None:
        """Add a runner's view at the end of ``packed``."""

    def drop(self, packed: Any, i: int) -> None:
        """Remove the ``i``-th view of ``packed``."""


class Runner(Protocol):
    """An owner whose activities compiled code can drive without SimPy (see :meth:`FluidScheduler.set_runner`)."""

    def ahead(self) -> tuple:
        """What the run-ahead kernel needs of this owner (``phases.Ahead``)."""

    def pack_flows(self, tags: np.ndarray, t_issue: float) -> tuple:
        """The packed batch (see :meth:`FluidScheduler.pack`) of this owner's delayed activities ``tags`` issued at
        ``t_issue`` (s)."""


@dataclass
class Batch:
    """Activities to add at once (arrays of equal length ``n``; entries index into the batch, 0..n-1)."""

    work: np.ndarray  # units (bytes or flops)
    cap: np.ndarray  # units/s when unhindered
    cap_slow: np.ndarray  # units/s while interference applies
    trig: np.ndarray  # TRIG_* per activity
    rank_a: np.ndarray  # rank of a task, or source rank of a flow (-1: not a rank)
    rank_b: np.ndarray  # destination rank of a flow (-1: none)
    tag: np.ndarray  # owner's label per activity
    e_act: np.ndarray
    e_res: np.ndarray
    e_w: np.ndarray
    owner: int = -1
    t_issue: float = 0.0
    # Fair-share weight per activity (None: 1 each). A saturated resource is shared in proportion to it: a
    # memory controller serves outstanding requests, and a task streaming on 24 cores keeps 24 times as many in
    # flight as one copy stream (see FluidScheduler._solve).
    share: np.ndarray | None = None

    @property
    def n(self) -> int:
        return len(self.work)


# rows of the scheduler's float and int state tables
_WORK, _REM, _RATE, _ISSUE, _CAP, _SLOW, _SHARE = range(7)
_TRIG, _RA, _RB, _TAG, _OWNER = range(5)


class _AfterInstant(simpy.Event):
    """An event processed after every ordinary event due at the current instant, however many those schedule
    meanwhile: SimPy orders its queue by time, then priority (URGENT 0, NORMAL 1), then insertion, and this one
    has priority 2. The scheduler's flush waits behind the instant's other events this way without bouncing
    through the queue once per event."""

    def __init__(self, env: simpy.Environment, callback: Callable[[simpy.Event], None]) -> None:
        super().__init__(env)
        self._ok = True  # as simpy.Timeout does: triggered at creation, processed when its turn comes
        self._value = None
        self.callbacks.append(callback)
        env.schedule(self, priority=_LATE)


_LATE = 2  # after simpy.core.NORMAL


class FluidScheduler:
    """Keeps the set of running activities, their rates and the SimPy wake-up at the next completion.

    State lives in two column-per-activity tables (floats: work, remaining, rate, issue time, cap, slowed
    cap; ints: trigger, ranks, tag, owner) and one table of resource entries, all with spare capacity, so
    that starting and finishing activities costs a few array copies however many fields there are.
    Activities keep their start order (finished ones are squeezed out), which fixes the order owners hear.
    """

    def __init__(self, env: simpy.Environment, res_cap: np.ndarray, n_ranks: int) -> None:
        self.env = env
        self.res_cap = np.asarray(res_cap, dtype=float)
        self.n_ranks = n_ranks
        self._owners: dict[int, Owner] = {}
        self._owner_left: dict[int, int] = {}
        self._next_owner = 0
        self._t = 0.0
        self._F = np.zeros((7, 64))
        self._I = np.zeros((5, 64), dtype=np.int64)
        self._E = np.zeros((2, 256), dtype=np.int64)  # e_act, e_res
        self._EW = np.zeros(256)
        # What the activities that finished at a step leave for their owners (owner, tag, table index; issue time):
        # filled by the compiled step (_advance_and_take_done) so that finishing costs no fancy indexing.
        self._DI = np.zeros((3, 64), dtype=np.int64)
        self._DF = np.zeros(64)
        self._n = 0
        self._m = 0
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._delayed: list[tuple[float, int, tuple]] = []
        self._seq = 0
        self._wake: simpy.Event | None = None
        self._wake_at = np.inf
        self._flush_scheduled = False
        self._in_step = False  # inside _step, whose loop merges every batch added meanwhile
        self._added = False  # add_one wrote an activity straight into the tables since the last step
        self._added_done = False  # ... one without work left (see _only_new_work)
        self.stats = {"activities": 0, "finished": 0, "solves": 0, "wakeups": 0}
        self._held = False  # between hold() and resume(): simulated time passes without integration or wake-ups
        self._runners: dict[int, Runner] = {}
        self._own_callbacks = (self._on_wake, self._on_flush)  # bound once: is_own_event runs per queued event
        self._ahead_colls: Any = None  # the kernel's view of the runners (see _run_ahead)
        self._ahead_oids: list[int] = []
        self._ahead_views: list = []  # the runners' ahead() views, as packed into _ahead_colls
        self._ahead_oid_array = np.zeros(0, dtype=np.int64)
        self._ahead_kernel: Callable | None = None
        self._packing: RunnerPacking | None = None
        self._ahead_stale = False  # runners came or went since _ahead_colls was brought up to date
        self._need_solve = False
        self._wake_time = np.inf  # when the pending wake-up (_wake, asked for _wake_at) fires
        # Chains (add_chain): an owner whose activities run one after another, each next one starting at the
        # instant the previous ends. Their activities' columns are rows of _CF (work, cap, slowed cap, share) and _CI
        # (trigger, rank, resource or -1); per chain [first row, end row, next row to start].
        self._chains: dict[int, list[int]] = {}  # their owners are in _owners, as every owner's
        self._CF = np.zeros((4, 256))
        self._CI = np.zeros((3, 256), dtype=np.int64)
        self._chain_rows = 0

    # ---- views of the running activities (read-only by convention) ---------------------------
    work = property(lambda self: self._F[_WORK, : self._n])
    rem = property(lambda self: self._F[_REM, : self._n])
    rate = property(lambda self: self._F[_RATE, : self._n])
    t_issue = property(lambda self: self._F[_ISSUE, : self._n])
    cap = property(lambda self: self._F[_CAP, : self._n])
    cap_slow = property(lambda self: self._F[_SLOW, : self._n])
    trig = property(lambda self: self._I[_TRIG, : self._n])
    rank_a = property(lambda self: self._I[_RA, : self._n])
    rank_b = property(lambda self: self._I[_RB, : self._n])
    tag = property(lambda self: self._I[_TAG, : self._n])
    owner = property(lambda self: self._I[_OWNER, : self._n])
    e_act = property(lambda self: self._E[0, : self._m])
    e_res = property(lambda self: self._E[1, : self._m])
    e_w = property(lambda self: self._EW[: self._m])

    # ---- public -------------------------------------------------------------------------------
    def register(self, owner: Owner, count: int) -> int:
        """Give ``owner`` an id; it will start ``count`` activities in all (may be raised with :meth:`expect`)."""
        oid = self._next_owner
        self._next_owner += 1
        self._owners[oid] = owner
        self._owner_left[oid] = count
        return oid

    def expect(self, oid: int, more: int) -> None:
        self._owner_left[oid] += more

    def add(self, batch: Batch, delay: np.ndarray | float = 0.0) -> None:
        """Start the batch's activities after ``delay`` seconds (per activity or one value)."""
        n = batch.n
        if n == 0:
            return
        now = self.env.now
        batch.t_issue = now
        if isinstance(delay, (int, float)):
            if delay > 0:
                self._push_delayed(float(delay), self.pack(batch, now))
            else:
                self._pending.append(self.pack(batch, now))
                self._request_flush()
            return
        delay = np.asarray(delay, dtype=float)
        if delay.ndim == 0:
            self.add(batch, float(delay))
            return
        if delay.shape != (n,):
            delay = np.ascontiguousarray(np.broadcast_to(delay, (n,)))
        d_min, d_max = min_max(delay)
        if not d_max > 0:
            self._pending.append(self.pack(batch, now))
            self._request_flush()
            return
        if d_min == d_max:
            self._push_delayed(float(d_max), self.pack(batch, now))
            return
        uniq = np.sort(delay)
        uniq = uniq[np.concatenate([[True], uniq[1:] != uniq[:-1]])]
        for d, sub in zip(uniq.tolist(), _pack_split(batch, now, np.searchsorted(uniq, delay), len(uniq)), strict=True):
            if d <= 0:
                self._pending.append(sub)
                self._request_flush()
            else:
                self._push_delayed(d, sub)

    def add_one(
        self,
        work: float,
        cap: float,
        cap_slow: float,
        trig: int,
        rank_a: int,
        rank_b: int,
        tag: int,
        res: int,
        owner: int,
        share: float = 1.0,
    ) -> None:
        """Start one activity now (the common case of a compute task): ``res`` the one resource it draws
        ``1 * rate`` from, or -1 for none. Same as :meth:`add` of a one-activity :class:`Batch`."""
        now = self.env.now
        if self._pending or self._held:
            # behind batches still pending: keep the start order (it fixes the order owners hear)
            fb = np.array([[work], [work], [0.0], [now], [cap], [cap_slow], [share]])
            ib = np.array([[trig], [rank_a], [rank_b], [tag], [owner]], dtype=np.int64)
            if res >= 0:
                self._pending.append((fb, ib, _ZERO1, np.array([res], dtype=np.int64), _ONE1))
            else:
                self._pending.append((fb, ib, _I0, _I0, _F0))
            self._request_flush()
            return
        # Straight into the tables at rate 0, as a merge would put it: nothing integrates it before the re-solve
        # this instant (a rate of 0 drains nothing), and this skips building and copying two one-column arrays.
        n, m = self._n, self._m
        self._reserve(n + 1, m + 1)
        write_activity(self._F, self._I, n, work, cap, cap_slow, share, now, trig, rank_a, rank_b, tag, owner)
        if res >= 0:
            self._E[0, m] = n
            self._E[1, m] = res
            self._EW[m] = 1.0
            self._m = m + 1
        self._n = n + 1
        self.stats["activities"] += 1
        self._added = True  # the flush runs a full step (advance, finish, solve), as for a pending batch
        if not work > 0.0:
            self._added_done = True  # done as soon as it starts: only a step finishes it
        self._request_flush()

    def add_chain(self, oid: int, cols_f: np.ndarray, cols_i: np.ndarray) -> None:
        """Owner ``oid`` (registered, a :class:`ChainOwner`) runs ``L`` activities one after another, each starting
        (with :meth:`add_one`'s columns: work, cap, slowed cap, share in ``cols_f``, 4 x L; trigger, rank, resource or
        -1 in ``cols_i``, 3 x L) at the instant the previous one ends. The owner starts the first (:meth:`add_one`,
        tag 0) and each next one it hears of (:meth:`chain_started`); while nothing else happens before a chain's next
        instant, a compiled kernel starts them instead and tells the owner afterwards (``ran_ahead``). The last one
        always ends through ``on_done``."""
        first = self._chain_rows
        need = first + cols_f.shape[1]
        self._CF, self._CI = grow_columns(self._CF, self._CI, first, need)
        self._CF[:, first:need] = cols_f
        self._CI[:, first:need] = cols_i
        self._chain_rows = need
        self._chains[oid] = [first, need, first]

    def chain_started(self, oid: int, i: int) -> None:
        """Chain ``oid``'s owner started its activity ``i`` (0-based) itself."""
        rows = self._chains[oid]
        rows[2] = rows[0] + i + 1

    def drop_chain(self, oid: int) -> None:
        """Chain ``oid`` is done (its last activity finished)."""
        del self._chains[oid]
        if not self._chains:
            self._chain_rows = 0  # every chain's rows are spent: start the table afresh

    def set_runner(self, oid: int, runner: Runner | None) -> None:
        """Let owner ``oid``'s activities be driven by the run-ahead kernel (``None``: no longer). While runners are
        set and a kernel is given (:meth:`set_ahead_kernel`), each re-solve hands the kernel the state to advance
        through the instants that only the runners shape (:meth:`_run_ahead`)."""
        if runner is None:
            if self._runners.pop(oid, None) is not None:
                self._ahead_stale = True
        elif self._ahead_kernel is not None:
            self._runners[oid] = runner
            self._ahead_stale = True

    def set_ahead_kernel(self, kernel: Callable, packing: RunnerPacking) -> None:
        """The compiled function that drives runners (``phases.run_ahead`` bound to a network's pair tables), and
        how the runners' views (``Runner.ahead()``, in ascending owner id) are kept as the one argument the kernel
        takes for all of them (``phases.RunnerListPacking``)."""
        self._ahead_kernel = kernel
        self._packing = packing

    @property
    def n_active(self) -> int:
        return self._n

    # ---- skipping repeated cycles exactly (used by collectives; see simulation._CollectiveRun._try_skip) ------
    def quiet(self) -> bool:
        """Nothing waits to start: no pending batch, no delayed one, no activity added since the last step."""
        return not self._pending and not self._delayed and not self._added

    def remaining(self) -> np.ndarray:
        """A copy of the running activities' remaining work (units), in start order."""
        return self._F[_REM, : self._n].copy()

    def is_own_event(self, ev: simpy.Event) -> bool:
        """Whether ``ev`` is one of the scheduler's own wake-up or flush events (harmless while quiet)."""
        own = self._own_callbacks
        return any(cb in own for cb in ev.callbacks or ())

    def hold(self, decrement: np.ndarray) -> None:
        """Skip ahead: the running activities' remaining work drops by ``decrement`` now, and until
        :meth:`resume` nothing is integrated, finished or woken. The caller guarantees that exactly this is
        what the skipped time does (no activity finishes, none starts, rates repeat)."""
        self._F[_REM, : self._n] -= decrement
        self._held = True
        self._wake = None
        self._wake_at = np.inf
        self._wake_time = np.inf

    def resume(self) -> None:
        """End a :meth:`hold` at the current time: re-solve and reschedule from here."""
        self._held = False
        self._t = self.env.now
        self._need_solve = True
        self._request_flush()

    # ---- internals ----------------------------------------------------------------------------
    @staticmethod
    def pack(b: Batch, now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """A batch as the scheduler queues it: float and int columns laid out as its tables (issued ``now``, s),
        and its resource entries (activity, resource, weight)."""
        fb, ib = _pack_columns(*_columns(b, now), np.arange(b.n))
        return fb, ib, *_entries(b)

    def _push_delayed(self, d: float, packed: tuple) -> None:
        self._seq += 1
        t = self.env.now + d
        heapq.heappush(self._delayed, (t, self._seq, packed))
        self._schedule_wake(t)

    def _request_flush(self) -> None:
        if self._in_step:
            return  # _step merges what its owners' callbacks add before it solves
        if not self._flush_scheduled:
            self._flush_scheduled = True
            _AfterInstant(self.env, self._on_flush)

    def _on_flush(self, _ev: simpy.Event) -> None:
        queue = self.env._queue
        if queue and queue[0][0] <= self.env.now:
            # Other events are due at this same instant (another late one): they may start or finish more
            # activities, so the re-solve waits until the instant's last event (no simulated time passes meanwhile,
            # so nothing integrates the stale rates). One solve per distinct time instead of one per event.
            _AfterInstant(self.env, self._on_flush)
            return
        self._flush_scheduled = False
        if self._pending or self._added:
            if self._only_new_work():
                # The instant's step already ran (it finished what was done): since then only add_one wrote
                # activities with work left, so a step would drain nothing, finish nothing and start nothing.
                self._added = False
                self._solve()
            else:
                self._step(solve_now=True)
        elif self._need_solve:
            self._need_solve = False
            self._solve()  # a wake-up finished activities this instant and nothing started since

    def _only_new_work(self) -> bool:
        """Whether everything since the last step is add_one's activities with positive work, written at the
        instant of that step, with no batch pending, no delayed one due and no hold."""
        now = self.env.now
        if self._pending or self._added_done or self._held or self._t != now:
            return False
        delayed = self._delayed
        return not (delayed and delayed[0][0] <= _due_by(now))

    def _schedule_wake(self, t: float) -> None:
        if t < self._wake_at:
            self._wake_at = t
            delay = max(t - self.env.now, 0.0)
            self._wake_time = self.env.now + delay  # SimPy's time for it (the chain kernel follows the same rounding)
            ev = self.env.timeout(delay)
            self._wake = ev
            ev.callbacks.append(self._on_wake)

    def _on_wake(self, ev: simpy.Event) -> None:
        if ev is not self._wake:
            return
        self._wake = None
        self._wake_at = np.inf
        self._wake_time = np.inf
        self.stats["wakeups"] += 1
        self._step(solve_now=False)

    def _step(self, solve_now: bool) -> None:
        """Advance to now, start due activities, finish completed ones, re-solve and reschedule (at once, or, if
        ``solve_now`` is false, after this instant's other events, see :meth:`_on_flush`)."""
        now = self.env.now
        dt = now - self._t
        self._t = now
        integrate = not self._held  # held: the skipped time's work was taken off already (see hold)
        delayed = self._delayed
        while delayed and delayed[0][0] <= _due_by(now):
            self._pending.append(heapq.heappop(delayed)[2])
        # Owners' callbacks may add activities at this same instant; loop until nothing new finishes.
        t_eps = DONE_ULPS * math.ulp(now)  # s; rates are the ones that applied up to now (0 for new ones)
        self._in_step = True
        try:
            for _ in range(1000):
                if self._pending:
                    self._merge_pending()  # at rate 0: the integration below leaves them as they are
                n = self._n
                if self._DI.shape[1] < n:
                    self._DI = np.zeros((3, self._F.shape[1]), dtype=np.int64)
                    self._DF = np.zeros(self._F.shape[1])
                k, self._m = _advance_and_take_done(
                    self._F, self._I, self._E, self._EW, n, self._m, dt, integrate, t_eps, self._DI, self._DF
                )
                integrate = False
                if not k:
                    break
                self._n = n - k
                self._finish(k, now)
                if not self._pending and not self._held and not self._added_done:
                    # What is left was checked above, and whatever the owners started meanwhile went straight into
                    # the tables with work to do (add_one): nothing more can be finished at this instant.
                    break
        finally:
            self._in_step = False
            self._added = False  # whatever owners added meanwhile was taken in by the loop above
            self._added_done = False
        queue = self.env._queue
        if solve_now or self._held or not (queue and queue[0][0] <= now):
            self._solve()  # now, when no other event is due at this instant (returns at once while held)
            return
        self._need_solve = True  # the solve runs once this instant's other events are done (see _on_flush)
        self._request_flush()

    def _merge_pending(self) -> None:
        batches, self._pending = self._pending, []
        n0, m0 = self._n, self._m
        n1 = n0 + sum(b[0].shape[1] for b in batches)
        m1 = m0 + sum(len(b[2]) for b in batches)
        self._reserve(n1, m1)
        F, I, E, EW = self._F, self._I, self._E, self._EW  # noqa: E741
        n, m = n0, m0
        for fb, ib, ea, er, ew in batches:
            _copy_in(F, I, E, EW, n, m, fb, ib, ea, er, ew)
            n += fb.shape[1]
            m += len(ea)
        self._n, self._m = n1, m1
        self.stats["activities"] += n1 - n0

    def _reserve(self, n: int, m: int) -> None:
        """Grow the tables (capacity doubling) to hold ``n`` activities and ``m`` resource entries."""
        if n > self._F.shape[1] or m > len(self._EW):
            self._F, self._I, self._E, self._EW = grow_tables(self._F, self._I, self._E, self._EW, self._n, self._m, n, m)

    def _finish(self, k: int, now: float) -> None:
        """Tell the owners of the ``k`` activities just taken out of the tables (``_DI``, ``_DF``) that they finished."""
        self.stats["finished"] += k
        if k == 1:  # the common case of one task ending at its own instant: no grouping by owner
            self._tell(int(self._DI[0, 0]), self._DI[1, :1].copy(), self._DF[:1].copy(), now)
            return
        # copies: the buffers are overwritten at the next step, and owners may keep what they are handed
        owners, tags, issued = self._DI[0, :k].copy(), self._DI[1, :k].copy(), self._DF[:k].copy()
        if all_equal(owners):
            groups = [(int(owners[0]), tags, issued)]
        else:
            order = np.argsort(owners, kind="stable")
            owners, tags, issued = owners[order], tags[order], issued[order]
            starts = np.flatnonzero(np.concatenate(([True], owners[1:] != owners[:-1])))  # owners sorted: run starts
            bounds = starts.tolist() + [len(owners)]
            groups = [
                (oid, tags[bounds[j] : bounds[j + 1]], issued[bounds[j] : bounds[j + 1]])
                for j, oid in enumerate(owners[starts].tolist())
            ]
        for oid, tg, iss in groups:
            self._tell(oid, tg, iss, now)

    def _tell(self, oid: int, tags: np.ndarray, issued: np.ndarray, now: float) -> None:
        """Owner ``oid`` hears that its activities ``tags`` (issued at ``issued``) finished; it is forgotten once all
        it announced have."""
        owner = self._owners[oid]
        self._owner_left[oid] -= len(tags)
        if self._owner_left[oid] <= 0:
            del self._owners[oid]
            del self._owner_left[oid]
        owner.on_done(tags, issued, now)

    def _solve(self) -> None:
        self._need_solve = False
        if self._held:
            return  # resume() re-solves
        n = self._n
        t_next = np.inf
        if n:
            self.stats["solves"] += 1
            t_next = _solve_rates(self._F, self._I, self._E, self._EW, n, self._m, self.res_cap, self.n_ranks)
        if self._runners and self._run_ahead(t_next):
            return
        if self._chains and not self._runners and self._run_chains(t_next):
            return
        if n:
            if t_next < np.inf:
                now = self.env.now
                t = now + max(t_next, 0.0)
                if not t > now:
                    # below the clock's resolution: wake one spacing later, when the activity is certainly done
                    t = float(np.nextafter(now, np.inf))
                self._schedule_wake(t)
        if self._delayed:
            self._schedule_wake(self._delayed[0][0])

    def _run_ahead(self, t_next: float) -> bool:
        """Hand the state to the runners' kernel (``t_next``: s until the first activity ends at the rates just
        solved) when their next instant comes before anyone else's event; take back what it leaves and schedule the
        wake-up. Returns whether it ran. It runs up to the first foreign SimPy event (the scheduler's own wake-ups
        and flushes aside) and the first delayed batch of another owner."""
        if self._pending or self._added or self._t != self.env.now:
            return False
        runners = self._runners
        now = self.env.now
        if self._ahead_stale:
            self._update_ahead()
        oids = self._ahead_oids
        own, foreign = [], []
        for item in self._delayed:
            (own if int(item[2][1][_OWNER, 0]) in oids else foreign).append(item)
        t_first = min(now + max(t_next, 0.0), min((it[0] for it in own), default=np.inf))
        t_ext = min((it[0] for it in foreign), default=np.inf)
        if not t_first < t_ext:
            return False
        t_ext = min(t_ext, self._first_foreign_event())
        if not t_first < t_ext:
            return False
        index = {o: i for i, o in enumerate(oids)}
        nq = sum(it[2][0].shape[1] for it in own)
        QF = np.empty((2, max(nq, 16)))
        QI = np.empty((3, max(nq, 16)), dtype=np.int64)
        j = 0
        for t_d, seq, (fb, ib, *_rest) in own:
            k = fb.shape[1]
            QF[0, j : j + k] = t_d
            QF[1, j : j + k] = fb[_ISSUE]
            QI[0, j : j + k] = seq
            QI[1, j : j + k] = index[int(ib[_OWNER, 0])]
            QI[2, j : j + k] = ib[_TAG]
            j += k
        counts = np.zeros(4, dtype=np.int64)
        fin = np.zeros(len(oids), dtype=np.int64)
        # A cycle the kernel observed counted this call's activities: the next call starts observing afresh.
        for view in self._ahead_views:
            view.snap_i[0] = -1
        F, I, E, EW, n, m, t, _t_next, outcome, t_at, QF, QI, nq, seq = self._ahead_kernel(  # noqa: E741
            self._F, self._I, self._E, self._EW, self._n, self._m, self.res_cap, self.n_ranks, now, t_next, t_ext,
            QF, QI, nq, self._seq, self._ahead_colls, self._ahead_oid_array, counts, fin,
        )  # fmt: skip
        self._F, self._I, self._E, self._EW, self._n, self._m, self._t, self._seq = F, I, E, EW, n, m, t, seq
        started, finished, solves, instants = counts.tolist()
        self.stats["activities"] += started
        self.stats["finished"] += finished
        self.stats["solves"] += solves
        self.stats["wakeups"] += instants
        for o, k in zip(oids, fin.tolist(), strict=True):
            self._owner_left[o] -= k
        # the runners' flows still waiting go back on the heap, one entry per push (sequence number) as before
        if nq:
            q_seq = QI[0, :nq]
            starts = np.flatnonzero(np.concatenate(([True], q_seq[1:] != q_seq[:-1]))).tolist() + [nq]
            for a, b in zip(starts[:-1], starts[1:], strict=True):
                runner = runners[oids[int(QI[1, a])]]
                foreign.append((float(QF[0, a]), int(q_seq[a]), runner.pack_flows(QI[2, a:b].copy(), float(QF[1, a]))))
        heapq.heapify(foreign)
        self._delayed = foreign
        self._wake = None
        self._wake_at = np.inf
        self._wake_time = np.inf
        if t_at < np.inf:
            self._schedule_wake(t_at)  # outcome STOPPED_AT: the step there finishes what the kernel left
        if foreign:
            self._schedule_wake(foreign[0][0])
        return True

    def _first_foreign_event(self) -> float:
        """The time (s) of the first queued SimPy event that is not one of the scheduler's own wake-ups or flushes."""
        return min((t for t, _, _, ev in self.env._queue if not self.is_own_event(ev)), default=np.inf)

    def _run_chains(self, t_next: float) -> bool:
        """Hand the state to the chain kernel (:func:`_chains_ahead`) when the next instant comes before anyone else's
        event (as :meth:`_run_ahead` does for collectives); take back what it leaves, tell the chains' owners what it
        finished and schedule the wake-up. Returns whether it ran."""
        if self._pending or self._added or self._held or self._delayed or self._t != self.env.now:
            return False
        now = self.env.now
        t_ext = self._first_foreign_event()
        if not now + max(t_next, 0.0) < t_ext:
            return False
        oids = sorted(self._chains)
        rows = np.array([self._chains[o] for o in oids], dtype=np.int64).reshape(-1, 3)
        ch_next, ch_end = rows[:, 2].copy(), rows[:, 1].copy()
        room = int((ch_end - ch_next).sum())
        self._reserve(self._n, self._m + len(oids))  # a chain's activity has one entry at most: m grows by that
        log_c = np.empty(room, dtype=np.int64)
        log_t = np.empty(room)
        counts = np.zeros(4, dtype=np.int64)
        wake = np.array([self._wake_at, self._wake_time])
        n, m, t, stopped, nlog = _chains_ahead(
            self._F, self._I, self._E, self._EW, self._n, self._m, self.res_cap, self.n_ranks, now, t_next, t_ext,
            np.array(oids, dtype=np.int64), ch_next, ch_end, self._CF, self._CI, log_c, log_t, counts, wake,
        )  # fmt: skip
        self._n, self._m, self._t = n, m, t
        started, finished, solves, instants = counts.tolist()
        self.stats["activities"] += started
        self.stats["finished"] += finished
        self.stats["solves"] += solves
        self.stats["wakeups"] += instants
        if nlog:
            fin = np.bincount(log_c[:nlog], minlength=len(oids))
            for ci in np.flatnonzero(fin).tolist():
                o = oids[ci]
                self._owner_left[o] -= int(fin[ci])
                self._chains[o][2] = int(ch_next[ci])
            # owners hear in the order their activities finished (records keep the order of the Python path); none
            # is forgotten yet, since the kernel never finishes a chain's last activity
            owners = self._owners
            for ci, te in zip(log_c[:nlog].tolist(), log_t[:nlog].tolist(), strict=True):
                cast(ChainOwner, owners[oids[ci]]).ran_ahead(te)
        # The wake-up the Python path would have pending now (the kernel keeps its target and time as _schedule_wake
        # and _on_wake do): stopped, the one at t, whose step finishes what the kernel left; else the next one. A
        # new one is scheduled at its exact time (SimPy's rounding of the delay from the instant that asked for it),
        # not at now plus a delay, which would round again.
        wake_at, wake_time = wake.tolist()
        if stopped:
            wake_at = wake_time = t
        if wake_at != self._wake_at or wake_time != self._wake_time:
            ev = simpy.Event(self.env)
            ev._ok, ev._value = True, None  # triggered, as a Timeout is at creation
            ev.callbacks.append(self._on_wake)
            heapq.heappush(self.env._queue, (wake_time, simpy.core.NORMAL, next(self.env._eid), ev))  # as schedule()
            self._wake, self._wake_at, self._wake_time = ev, wake_at, wake_time
        return True

    def _update_ahead(self) -> None:
        """Bring the kernel's view of the runners up to date: drop the runners gone and append the new ones when
        their owner ids all come after the kept ones' (a new collective gets a new, larger id), else pack them all
        again. Every runner's ``ahead()`` is called either way (it forgets a cycle the Python path was watching)."""
        runners, packing, old = self._runners, self._packing, self._ahead_oids
        oids = sorted(runners)
        views = [runners[o].ahead() for o in oids]
        kept = [o for o in old if o in runners]
        if self._ahead_colls is None or oids[: len(kept)] != kept:
            self._ahead_colls = packing.pack(views)
        else:
            for i in reversed([i for i, o in enumerate(old) if o not in runners]):
                packing.drop(self._ahead_colls, i)
            for view in views[len(kept) :]:
                packing.append(self._ahead_colls, view)
        self._ahead_oids, self._ahead_views = oids, views
        self._ahead_oid_array = np.array(oids, dtype=np.int64)
        self._ahead_stale = False

    def load(self) -> np.ndarray:
        """Current load of every resource (units/s): what the latest rates draw."""
        m = self._m
        return np.bincount(
            self._E[1, :m], weights=self._EW[:m] * self._F[_RATE, : self._n][self._E[0, :m]], minlength=len(self.res_cap)
        )


def _due_by(now: float) -> float:
    """The latest start time (s) of a delayed batch that starts at ``now``: one a rounding step past it is due
    (phases.run_ahead's ``due_by`` is the compiled twin)."""
    return now * (1 + 1e-15) + 1e-18


def _columns(b: Batch, now: float) -> tuple:
    """Batch ``b``'s per-activity columns as :func:`_pack_columns` takes them before its index (issued ``now``, s)."""
    return (
        np.asarray(b.work, dtype=float),
        np.asarray(b.cap, dtype=float),
        np.asarray(b.cap_slow, dtype=float),
        _NO_SHARE if b.share is None else np.asarray(b.share, dtype=float),
        now,
        np.asarray(b.trig, dtype=np.int64),
        np.asarray(b.rank_a, dtype=np.int64),
        np.asarray(b.rank_b, dtype=np.int64),
        np.asarray(b.tag, dtype=np.int64),
        b.owner,
    )


def _entries(b: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batch ``b``'s resource entries (activity, resource, weight) as typed arrays."""
    return np.asarray(b.e_act, dtype=np.int64), np.asarray(b.e_res, dtype=np.int64), np.asarray(b.e_w, dtype=float)


def _pack_split(b: Batch, now: float, grp: np.ndarray, n_groups: int) -> list[tuple]:
    """Batch ``b`` packed (as :meth:`FluidScheduler.pack` at ``now``) into ``n_groups`` batches by each activity's
    group ``grp`` (0..n_groups-1), activities and entries in their order within each, renumbered: one pass over
    the entries however many groups (a million-flow alltoall has a handful of start delays). Each group's columns
    are packed straight from the batch, not copied out of one packed whole: at 1024 ranks the whole was 100 MB of
    fresh memory per alltoall, and taking columns out of it by index cost more than the packing."""
    order = np.argsort(grp, kind="stable")
    a_ptr = np.searchsorted(grp[order], np.arange(n_groups + 1))
    ea, er, ew, e_ptr = _split_entries(*_entries(b), grp, n_groups)
    cols = _columns(b, now)
    out = []
    for g in range(n_groups):
        fb, ib = _pack_columns(*cols, order[a_ptr[g] : a_ptr[g + 1]])  # the group's activities, in order
        out.append((fb, ib, ea[e_ptr[g] : e_ptr[g + 1]], er[e_ptr[g] : e_ptr[g + 1]], ew[e_ptr[g] : e_ptr[g + 1]]))
    return out


@njit(cache=True)
def _split_entries(
    ea: np.ndarray, er: np.ndarray, ew: np.ndarray, grp: np.ndarray, n_groups: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Resource entries grouped by their activity's group, in their order within a group, each activity renumbered
    to its place among its group's activities; with the entry offsets of the groups."""
    pos = np.empty(grp.shape[0], dtype=np.int64)
    cnt = np.zeros(n_groups, dtype=np.int64)
    for a in range(grp.shape[0]):
        pos[a] = cnt[grp[a]]
        cnt[grp[a]] += 1
    e_ptr = np.zeros(n_groups + 1, dtype=np.int64)
    for i in range(ea.shape[0]):
        e_ptr[grp[ea[i]] + 1] += 1
    for g in range(n_groups):
        e_ptr[g + 1] += e_ptr[g]
    fill = e_ptr[:n_groups].copy()
    out_a = np.empty(ea.shape[0], dtype=np.int64)
    out_r = np.empty(ea.shape[0], dtype=np.int64)
    out_w = np.empty(ea.shape[0])
    for i in range(ea.shape[0]):
        g = grp[ea[i]]
        k = fill[g]
        out_a[k] = pos[ea[i]]
        out_r[k] = er[i]
        out_w[k] = ew[i]
        fill[g] = k + 1
    return out_a, out_r, out_w, e_ptr


_NO_SHARE = np.zeros(0)  # a Batch without shares: 1 each


@njit(cache=True)
def grow_tables(F: np.ndarray, I: np.ndarray, E: np.ndarray, EW: np.ndarray, n: int, m: int, n_need: int, m_need: int):  # noqa: E741
    """The scheduler's tables (``n`` activities, ``m`` entries in use) with room for ``n_need`` activities and
    ``m_need`` entries: the same arrays, or larger copies (capacity doubling)."""
    if n_need > F.shape[1]:
        size = max(2 * F.shape[1], n_need)
        F2 = np.zeros((F.shape[0], size))
        I2 = np.zeros((I.shape[0], size), dtype=np.int64)
        F2[:, :n] = F[:, :n]
        I2[:, :n] = I[:, :n]
        F, I = F2, I2  # noqa: E741
    if m_need > EW.shape[0]:
        size = max(2 * EW.shape[0], m_need)
        E2 = np.zeros((2, size), dtype=np.int64)
        EW2 = np.zeros(size)
        E2[:, :m] = E[:, :m]
        EW2[:m] = EW[:m]
        E, EW = E2, EW2
    return F, I, E, EW


@njit(cache=True)
def grow_columns(CF: np.ndarray, CI: np.ndarray, used: int, need: int) -> tuple[np.ndarray, np.ndarray]:
    """A float and an int table of columns (``used`` of them in use) with room for ``need``: the same arrays, or
    larger copies (capacity doubling, 16 at least) holding the used columns."""
    if need <= CF.shape[1]:
        return CF, CI
    size = max(2 * CF.shape[1], need, 16)
    CF2 = np.empty((CF.shape[0], size))
    CI2 = np.empty((CI.shape[0], size), dtype=np.int64)
    CF2[:, :used] = CF[:, :used]
    CI2[:, :used] = CI[:, :used]
    return CF2, CI2


@njit(cache=True)
def write_activity(
    F: np.ndarray,
    I: np.ndarray,  # noqa: E741
    a: int,
    work: float,
    cap: float,
    cap_slow: float,
    share: float,
    issue: float,
    trig: int,
    rank_a: int,
    rank_b: int,
    tag: int,
    owner: int,
) -> None:
    """Write activity ``a``'s columns into float and int tables laid out as the scheduler's (remaining = work,
    rate 0, issued at ``issue`` s)."""
    F[_WORK, a] = work
    F[_REM, a] = work
    F[_RATE, a] = 0.0
    F[_ISSUE, a] = issue
    F[_CAP, a] = cap
    F[_SLOW, a] = cap_slow
    F[_SHARE, a] = share
    I[_TRIG, a] = trig
    I[_RA, a] = rank_a
    I[_RB, a] = rank_b
    I[_TAG, a] = tag
    I[_OWNER, a] = owner


@njit(cache=True)
def _pack_columns(
    work: np.ndarray,
    cap: np.ndarray,
    cap_slow: np.ndarray,
    share: np.ndarray,
    now: float,
    trig: np.ndarray,
    rank_a: np.ndarray,
    rank_b: np.ndarray,
    tag: np.ndarray,
    owner: int,
    idx: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Activities ``idx`` (in that order) of a batch's columns as the scheduler's tables hold them (remaining = work,
    rate 0, issued ``now``; ``share`` empty: 1 each)."""
    k = idx.shape[0]
    fb = np.empty((7, k))
    ib = np.empty((5, k), dtype=np.int64)
    for j in range(k):
        a = idx[j]
        write_activity(fb, ib, j, work[a], cap[a], cap_slow[a], share[a] if share.shape[0] else 1.0, now, trig[a],
                       rank_a[a], rank_b[a], tag[a], owner)  # fmt: skip
    return fb, ib


@njit(cache=True)
def _copy_in(
    F: np.ndarray,
    I: np.ndarray,  # noqa: E741
    E: np.ndarray,
    EW: np.ndarray,
    n: int,
    m: int,
    fb: np.ndarray,
    ib: np.ndarray,
    ea: np.ndarray,
    er: np.ndarray,
    ew: np.ndarray,
) -> None:
    """Write a packed batch into the tables at activity ``n`` and entry ``m`` (its entries' activities shifted by n)."""
    for a in range(fb.shape[1]):
        for r in range(fb.shape[0]):
            F[r, n + a] = fb[r, a]
        for r in range(ib.shape[0]):
            I[r, n + a] = ib[r, a]
    for i in range(ea.shape[0]):
        E[0, m + i] = ea[i] + n
        E[1, m + i] = er[i]
        EW[m + i] = ew[i]


_I0 = np.zeros(0, dtype=np.int64)
_F0 = np.zeros(0)
_ZERO1 = np.zeros(1, dtype=np.int64)
_ONE1 = np.ones(1)


@njit(cache=True)
def _effective_caps(F: np.ndarray, I: np.ndarray, n: int, n_ranks: int) -> np.ndarray:  # noqa: E741
    """Per-activity caps (units/s): the slowed cap for a compute task while a flow of its rank is in flight,
    and for a flow while compute runs on either end rank (rank -1, not a rank, never triggers)."""
    caps = F[_CAP, :n].copy()
    differs = False
    for a in range(n):
        if F[_SLOW, a] != F[_CAP, a]:
            differs = True
            break
    if not differs:
        return caps  # interference would change nothing
    comm_on = np.zeros(n_ranks, dtype=np.int64)
    comp_on = np.zeros(n_ranks, dtype=np.int64)
    for a in range(n):
        ra, rb = I[_RA, a], I[_RB, a]
        if I[_TRIG, a] == TRIG_COMM:
            if ra >= 0:
                comm_on[ra] += 1
            if rb >= 0:
                comm_on[rb] += 1
        elif I[_TRIG, a] == TRIG_COMPUTE and ra >= 0:
            comp_on[ra] += 1
    for a in range(n):
        if F[_SLOW, a] == F[_CAP, a]:
            continue
        ra, rb = I[_RA, a], I[_RB, a]
        trig = I[_TRIG, a]
        if trig == TRIG_COMPUTE:
            slow = ra >= 0 and comm_on[ra] > 0
        elif trig == TRIG_COMM:
            slow = (ra >= 0 and comp_on[ra] > 0) or (rb >= 0 and comp_on[rb] > 0)
        else:
            slow = False
        if slow:
            caps[a] = F[_SLOW, a]
    return caps


@njit(cache=True, error_model="numpy")
def _solve_rates(
    F: np.ndarray,
    I: np.ndarray,  # noqa: E741
    E: np.ndarray,
    EW: np.ndarray,
    n: int,
    m: int,
    res_cap: np.ndarray,
    n_ranks: int,
) -> float:
    """Write the max-min rates of the ``n`` running activities into ``F[_RATE]``; return the time (s) until the
    first of them finishes (inf if none has a positive rate).

    Weighted max-min: fill ``x = rate / share`` (entry weights ``e_w * share``, caps ``cap / share``), so that a
    saturated resource gives each activity a part in proportion to its share; ``rate = x * share``.
    """
    caps = _effective_caps(F, I, n, n_ranks)
    e_act = E[0, :m]
    e_w = EW[:m]
    share = F[_SHARE, :n]
    weighted = False
    for a in range(n):
        if share[a] != 1.0:
            weighted = True
            break
    if weighted:
        caps = caps / share
        rate = maxmin_rates(n, e_act, E[1, :m], e_w, res_cap, caps, share)  # entry weights times shares, inline
    else:
        rate = maxmin_rates(n, e_act, E[1, :m], e_w, res_cap, caps)
    t_next = np.inf
    for a in range(n):
        r = rate[a] * share[a] if weighted else rate[a]
        F[_RATE, a] = r
        if r > 0:
            t = F[_REM, a] / r
            if t < t_next:
                t_next = t
    return t_next


@njit(cache=True)
def _integrate(F: np.ndarray, n: int, dt: float) -> None:
    """Drain ``dt`` seconds of work at the current rates; an activity at an infinite rate is done at once."""
    for a in range(n):
        r = F[_RATE, a]
        if np.isfinite(r):
            if dt > 0:
                F[_REM, a] -= r * dt
        else:
            F[_REM, a] = 0.0


@njit(cache=True)
def _done_indices(F: np.ndarray, n: int, t_eps: float) -> np.ndarray:
    """Indices (ascending) of the activities finished now: remaining work within ``DONE_REL_EPS`` of their total,
    or within ``t_eps`` seconds at their rate."""
    out = np.empty(n, dtype=np.int64)
    k = 0
    for a in range(n):
        rem = F[_REM, a]
        if rem <= DONE_REL_EPS * F[_WORK, a] or rem <= t_eps * F[_RATE, a]:
            out[k] = a
            k += 1
    return out[:k]


@njit(cache=True)
def _advance_and_take_done(
    F: np.ndarray,
    I: np.ndarray,  # noqa: E741
    E: np.ndarray,
    EW: np.ndarray,
    n: int,
    m: int,
    dt: float,
    integrate: bool,
    t_eps: float,
    DI: np.ndarray,
    DF: np.ndarray,
) -> tuple[int, int]:
    """One scheduler step in one call: drain ``dt`` s at the current rates (:func:`_integrate`, when ``integrate``),
    then take the activities finished now (:func:`_done_indices`) out of the tables (:func:`_compact`), writing
    each one's owner, tag and former index into ``DI[0..2, :k]`` and its issue time into ``DF[:k]``, in table
    order. Returns ``k`` and the number of resource entries left. Crossing into compiled code once instead of
    five times (and without three fancy-indexing copies) is most of what a compute task's finish costs."""
    if integrate:
        _integrate(F, n, dt)
    done = _done_indices(F, n, t_eps)
    k = done.shape[0]
    if k == 0:
        return 0, m
    for j in range(k):
        a = done[j]
        DI[0, j] = I[_OWNER, a]
        DI[1, j] = I[_TAG, a]
        DI[2, j] = a
        DF[j] = F[_ISSUE, a]
    return k, _compact(F, I, E, EW, n, m, done)


@njit(cache=True)
def _compact(F: np.ndarray, I: np.ndarray, E: np.ndarray, EW: np.ndarray, n: int, m: int, idx: np.ndarray) -> int:  # noqa: E741
    """Squeeze the activities at ``idx`` (ascending) and their resource entries out of the tables, keeping the
    others' order; return the number of entries left."""
    newpos = np.empty(n, dtype=np.int64)
    j = 0
    d = 0
    for a in range(n):
        if d < idx.shape[0] and idx[d] == a:
            newpos[a] = -1
            d += 1
            continue
        newpos[a] = j
        if j != a:
            for r in range(F.shape[0]):  # row by row: plain loops compile in a fraction of slice assignment's time
                F[r, j] = F[r, a]
            for r in range(I.shape[0]):
                I[r, j] = I[r, a]
        j += 1
    k = 0
    for i in range(m):
        p = newpos[E[0, i]]
        if p >= 0:
            E[0, k] = p
            E[1, k] = E[1, i]
            EW[k] = EW[i]
            k += 1
    return k


@njit(cache=True)
def _chains_ahead(
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
    ch_oid: np.ndarray,
    ch_next: np.ndarray,
    ch_end: np.ndarray,
    CF: np.ndarray,
    CI: np.ndarray,
    log_c: np.ndarray,
    log_t: np.ndarray,
    counts: np.ndarray,
    wake: np.ndarray,
) -> tuple[int, int, float, bool, int]:
    """Advance the fluid state from time ``t`` (s; rates just solved, the first activity ending in ``t_next`` s)
    through every instant before ``t_ext`` at which only chains' activities with a next one finish: each is taken
    out and its chain's next activity written after the others, in ascending owner id (the order in which
    FluidScheduler._finish tells owners, each starting its next with add_one), then the rates are solved again.
    The scheduler's own instants and arithmetic: the same times and rates as its Python path.

    ``ch_oid`` (ascending), ``ch_next`` (updated), ``ch_end``: the chains' owner ids and the rows of ``CF``/``CI``
    of their next and end activities. ``log_c``/``log_t`` get the chain and time of each finish, in order;
    ``counts`` (activities started, finished, solves, instants) what was done. ``wake``: the pending wake-up's target
    and time (s; inf: none), kept as FluidScheduler._schedule_wake and _on_wake keep them, so that the instants are
    the Python path's, stale wake-ups included (one asked for before a later activity started still fires, and its
    instant integrates the work in two steps). Returns (n, m, t, stopped, finishes logged): ``stopped`` when, at
    instant ``t``, an activity of another owner or a chain's last one finishes (drained, not finished: the
    scheduler's step there finishes it); else ``wake`` holds the next instant, at or after ``t_ext``."""
    nlog = 0
    while True:
        if t_next < np.inf:  # FluidScheduler._solve's wake-up
            tw = t + max(t_next, 0.0)
            if not tw > t:
                tw = np.nextafter(t, np.inf)
            if tw < wake[0]:
                wake[0] = tw
                wake[1] = t + max(tw - t, 0.0)  # SimPy's time: now plus the delay
        tw = wake[1]
        if tw >= t_ext or tw == np.inf:
            return n, m, t, False, nlog
        wake[0] = np.inf  # _on_wake
        wake[1] = np.inf
        counts[3] += 1
        _integrate(F, n, tw - t)
        t = tw
        t_eps = DONE_ULPS * (np.nextafter(t, np.inf) - t)  # math.ulp(t), as FluidScheduler._step
        for _ in range(1000):
            done = _done_indices(F, n, t_eps)
            k = done.shape[0]
            if not k:
                break
            cis = np.empty(k, dtype=np.int64)
            for j in range(k):
                o = I[_OWNER, done[j]]
                ci = np.searchsorted(ch_oid, o)
                if ci >= ch_oid.shape[0] or ch_oid[ci] != o or ch_next[ci] >= ch_end[ci]:
                    counts[3] -= 1  # the scheduler's wake-up at t counts this instant
                    return n, m, t, True, nlog
                cis[j] = ci
            m = _compact(F, I, E, EW, n, m, done)
            n -= k
            counts[1] += k
            counts[0] += k
            cis.sort()  # a chain runs one activity at a time: one entry per chain
            for ci in cis:
                log_c[nlog] = ci
                log_t[nlog] = t
                nlog += 1
                r = ch_next[ci]
                ch_next[ci] = r + 1
                write_activity(F, I, n, CF[0, r], CF[1, r], CF[2, r], CF[3, r], t, CI[0, r], CI[1, r], -1, 0, ch_oid[ci])
                if CI[2, r] >= 0:
                    E[0, m] = n
                    E[1, m] = CI[2, r]
                    EW[m] = 1.0
                    m += 1
                n += 1
        t_next = np.inf
        if n:
            counts[2] += 1
            t_next = _solve_rates(F, I, E, EW, n, m, res_cap, n_ranks)
