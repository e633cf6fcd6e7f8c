"""One fluid max-min solver for everything contended: link directions, NIC ports and memory domains.

An *activity* is an amount of work (bytes, or flops for a task that touches no memory) drained at a rate.
It draws ``weight * rate`` from each resource it uses (a directed link half, a NIC port, a memory domain)
and its rate never exceeds its own cap. Rates are the max-min fair allocation (progressive filling) and
are recomputed only when an activity starts or finishes; completion events are then rescheduled.

:func:`maxmin_rates` is the pure, vectorized allocation; :class:`FluidScheduler` drives it from SimPy.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import simpy

# Activities whose remaining work is within this fraction of their total are finished together, so that
# symmetric collectives (whose flows end together up to rounding) cost one rate recomputation, not many.
DONE_REL_EPS = 1e-9
# Levels within this relative distance of the current fill level saturate together.
LEVEL_REL_EPS = 1e-9

TRIG_NONE = 0  # rate cap never changes
TRIG_COMPUTE = 1  # a compute task: slowed while communication is in flight on its rank
TRIG_COMM = 2  # a flow: slowed while compute runs on either end rank


def maxmin_rates(
    n_act: int,
    e_act: np.ndarray,
    e_res: np.ndarray,
    e_w: np.ndarray,
    res_cap: np.ndarray,
    act_cap: np.ndarray,
) -> np.ndarray:
    """Max-min fair rates by progressive filling, with per-activity caps.

    Entry ``i`` says activity ``e_act[i]`` draws ``e_w[i] * rate`` from resource ``e_res[i]`` (capacity
    ``res_cap`` in units/s). All unfrozen activities rise together; an activity freezes when it reaches its
    cap (``act_cap``, may be ``inf``) or when a resource it uses saturates. Each loop iteration is O(entries
    left) numpy work and freezes at least one bottleneck level. Returns rates (units/s); an activity with
    neither a finite cap nor a resource gets ``inf``.
    """
    rate = np.zeros(n_act)
    if n_act == 0:
        return rate
    n_res = len(res_cap)
    used = np.zeros(n_res)
    ids = np.arange(n_act)
    ea, er, ew = e_act, e_res, e_w
    mark = np.zeros(n_act, dtype=bool)
    while ids.size:
        if ea.size:
            wsum = np.bincount(er, weights=ew, minlength=n_res)
            has = wsum > 0
            t_res = np.full(n_res, np.inf)
            t_res[has] = np.maximum(res_cap[has] - used[has], 0.0) / wsum[has]
            t_r = t_res.min()
        else:
            t_res = None
            t_r = np.inf
        caps = act_cap[ids]
        t_c = caps.min()
        level = min(t_r, t_c)
        if not np.isfinite(level):
            rate[ids] = np.inf
            break
        thresh = level * (1.0 + LEVEL_REL_EPS) + 1e-300
        mark[:] = False
        mark[ids[caps <= thresh]] = True
        if t_res is not None and t_r <= thresh:
            sat = t_res <= thresh
            mark[ea[sat[er]]] = True
        newly = ids[mark[ids]]
        rate[newly] = np.minimum(act_cap[newly], level)
        if ea.size:
            sel = mark[ea]
            used += np.bincount(er[sel], weights=ew[sel] * rate[ea[sel]], minlength=n_res)
            keep = ~sel
            ea, er, ew = ea[keep], er[keep], ew[keep]
        ids = ids[~mark[ids]]
    return rate


class Owner(Protocol):
    """Whoever started activities; told in batches when they finish."""

    def on_done(self, tags: np.ndarray, t_issue: np.ndarray, now: float) -> None:
        """``tags`` are the owner's own labels of the finished activities, ``t_issue`` when each was added (s)."""


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

    @property
    def n(self) -> int:
        return len(self.work)


class FluidScheduler:
    """Keeps the set of running activities, their rates and the SimPy wake-up at the next completion."""

    def __init__(self, env: simpy.Environment, res_cap: np.ndarray, n_ranks: int) -> None:
        self.env = env
        self.res_cap = np.asarray(res_cap, dtype=float)
        self.n_ranks = n_ranks
        self._owners: dict[int, Owner] = {}
        self._owner_left: dict[int, int] = {}
        self._next_owner = 0
        self._t = 0.0
        z = np.zeros(0)
        zi = np.zeros(0, dtype=np.int64)
        self.work, self.rem, self.rate, self.t_issue = z, z, z, z
        self.cap, self.cap_slow = z, z
        self.trig, self.rank_a, self.rank_b, self.tag, self.owner = zi, zi, zi, zi, zi
        self.e_act, self.e_res, self.e_w = zi, zi, z
        self._pending: list[Batch] = []
        self._delayed: list[tuple[float, int, Batch]] = []
        self._seq = 0
        self._wake: simpy.Event | None = None
        self._wake_at = np.inf
        self._flush_scheduled = False
        self.stats = {"activities": 0, "finished": 0, "solves": 0, "wakeups": 0}
        self.resource_load: np.ndarray | None = None

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
        if batch.n == 0:
            return
        batch.t_issue = self.env.now
        delay = np.broadcast_to(np.asarray(delay, dtype=float), (batch.n,))
        if not np.any(delay > 0):
            self._pending.append(batch)
            self._request_flush()
            return
        uniq = np.unique(delay)
        for d in uniq:
            sub = batch if len(uniq) == 1 else _subset(batch, delay == d)
            if d <= 0:
                self._pending.append(sub)
                self._request_flush()
            else:
                self._seq += 1
                heapq.heappush(self._delayed, (self.env.now + float(d), self._seq, sub))
                self._schedule_wake(self.env.now + float(d))

    @property
    def n_active(self) -> int:
        return len(self.work)

    # ---- internals ----------------------------------------------------------------------------
    def _request_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            ev = self.env.timeout(0)
            ev.callbacks.append(self._on_flush)

    def _on_flush(self, _ev: simpy.Event) -> None:
        self._flush_scheduled = False
        if self._pending:
            self._step()

    def _schedule_wake(self, t: float) -> None:
        if t < self._wake_at:
            self._wake_at = t
            ev = self.env.timeout(max(t - self.env.now, 0.0))
            self._wake = ev
            ev.callbacks.append(self._on_wake)

    def _on_wake(self, ev: simpy.Event) -> None:
        if ev is not self._wake:
            return
        self._wake = None
        self._wake_at = np.inf
        self.stats["wakeups"] += 1
        self._step()

    def _advance(self) -> None:
        now = self.env.now
        dt = now - self._t
        if self.rem.size:
            fin = np.isfinite(self.rate)
            if dt > 0:
                with np.errstate(invalid="ignore"):
                    self.rem = np.where(fin, self.rem - self.rate * dt, 0.0)
            elif not fin.all():
                self.rem = np.where(fin, self.rem, 0.0)
        self._t = now

    def _step(self) -> None:
        """Advance to now, start due activities, finish completed ones, re-solve and reschedule."""
        self._advance()
        now = self.env.now
        while self._delayed and self._delayed[0][0] <= now * (1 + 1e-15) + 1e-18:
            self._pending.append(heapq.heappop(self._delayed)[2])
        # Owners' callbacks may add activities at this same instant; loop until nothing new finishes.
        for _ in range(1000):
            if self._pending:
                self._merge_pending()
            done = self.rem <= DONE_REL_EPS * self.work
            if not done.any():
                break
            self._finish(done)
        self._solve()

    def _merge_pending(self) -> None:
        batches, self._pending = self._pending, []
        n0 = len(self.work)
        offs = np.cumsum([n0] + [b.n for b in batches])
        cat = np.concatenate
        self.work = cat([self.work] + [b.work for b in batches])
        self.rem = cat([self.rem] + [b.work.astype(float) for b in batches])
        self.rate = cat([self.rate] + [np.zeros(b.n) for b in batches])
        self.t_issue = cat([self.t_issue] + [np.full(b.n, b.t_issue) for b in batches])
        self.cap = cat([self.cap] + [b.cap for b in batches])
        self.cap_slow = cat([self.cap_slow] + [b.cap_slow for b in batches])
        self.trig = cat([self.trig] + [b.trig for b in batches])
        self.rank_a = cat([self.rank_a] + [b.rank_a for b in batches])
        self.rank_b = cat([self.rank_b] + [b.rank_b for b in batches])
        self.tag = cat([self.tag] + [b.tag for b in batches])
        self.owner = cat([self.owner] + [np.full(b.n, b.owner, dtype=np.int64) for b in batches])
        self.e_act = cat([self.e_act] + [b.e_act + o for b, o in zip(batches, offs[:-1], strict=True)])
        self.e_res = cat([self.e_res] + [b.e_res for b in batches])
        self.e_w = cat([self.e_w] + [b.e_w for b in batches])
        self.stats["activities"] += int(offs[-1] - n0)

    def _finish(self, done: np.ndarray) -> None:
        now = self.env.now
        idx = np.flatnonzero(done)
        owners, tags, issued = self.owner[idx], self.tag[idx], self.t_issue[idx]
        keep = ~done
        newpos = np.cumsum(keep) - 1
        ekeep = keep[self.e_act]
        self.e_act = newpos[self.e_act[ekeep]]
        self.e_res = self.e_res[ekeep]
        self.e_w = self.e_w[ekeep]
        for name in ("work", "rem", "rate", "t_issue", "cap", "cap_slow", "trig", "rank_a", "rank_b", "tag", "owner"):
            setattr(self, name, getattr(self, name)[keep])
        self.stats["finished"] += len(idx)
        order = np.argsort(owners, kind="stable")
        owners, tags, issued = owners[order], tags[order], issued[order]
        uniq, starts = np.unique(owners, return_index=True)
        bounds = list(starts) + [len(owners)]
        for k, oid in enumerate(uniq):
            sl = slice(bounds[k], bounds[k + 1])
            oid = int(oid)
            owner = self._owners[oid]
            self._owner_left[oid] -= bounds[k + 1] - bounds[k]
            if self._owner_left[oid] <= 0:
                del self._owners[oid]
                del self._owner_left[oid]
            owner.on_done(tags[sl], issued[sl], now)

    def effective_caps(self) -> np.ndarray:
        """Per-activity caps now: the slowed cap where interference applies (see :data:`TRIG_COMPUTE`)."""
        cap = self.cap
        if not np.any(self.trig):
            return cap
        nr = self.n_ranks + 1  # slot nr-1 collects rank -1
        is_comm = self.trig == TRIG_COMM
        is_comp = self.trig == TRIG_COMPUTE
        comm_on = np.bincount(np.where(is_comm, self.rank_a, nr - 1), minlength=nr)
        comm_on += np.bincount(np.where(is_comm, self.rank_b, nr - 1), minlength=nr)
        comp_on = np.bincount(np.where(is_comp, self.rank_a, nr - 1), minlength=nr)
        comm_on[-1] = 0
        comp_on[-1] = 0
        slow = (is_comp & (comm_on[self.rank_a] > 0)) | (is_comm & ((comp_on[self.rank_a] > 0) | (comp_on[self.rank_b] > 0)))
        return np.where(slow, self.cap_slow, cap)

    def _solve(self) -> None:
        n = len(self.work)
        if n:
            self.stats["solves"] += 1
            self.rate = maxmin_rates(n, self.e_act, self.e_res, self.e_w, self.res_cap, self.effective_caps())
            with np.errstate(divide="ignore", invalid="ignore"):
                t_left = np.where(self.rate > 0, self.rem / self.rate, np.inf)
            t_next = float(t_left.min())
            if np.isfinite(t_next):
                self._schedule_wake(self.env.now + max(t_next, 0.0))
        if self._delayed:
            self._schedule_wake(self._delayed[0][0])

    def load(self) -> np.ndarray:
        """Current load of every resource (units/s): what the latest rates draw."""
        return np.bincount(self.e_res, weights=self.e_w * self.rate[self.e_act], minlength=len(self.res_cap))


def _subset(b: Batch, mask: np.ndarray) -> Batch:
    idx = np.flatnonzero(mask)
    newpos = np.full(b.n, -1, dtype=np.int64)
    newpos[idx] = np.arange(len(idx))
    em = mask[b.e_act]
    return Batch(
        work=b.work[idx], cap=b.cap[idx], cap_slow=b.cap_slow[idx], trig=b.trig[idx], rank_a=b.rank_a[idx],
        rank_b=b.rank_b[idx], tag=b.tag[idx], e_act=newpos[b.e_act[em]], e_res=b.e_res[em], e_w=b.e_w[em],
        owner=b.owner, t_issue=b.t_issue,
    )
