"""Max-min fair rates by progressive filling: the fluid solver's inner loop, compiled with numba.

The fluid scheduler (:mod:`dlrmsim.engine.fluid`) re-solves at every simulated instant where an activity
starts or finishes, tens of thousands of times per simulation, on problems of a few hundred entries. At that
size numpy's per-call overhead (a dozen array operations a filling round) costs more than the arithmetic, so
the loop is compiled: the same rounds and the same floating-point operations in the same order as the array
formulation it replaced, so results stay identical (the golden file checks them to 1e-9).

``error_model="numpy"``: a division by zero gives inf or nan as in numpy, never an exception (a resource
none of the still-rising activities uses has weight sum 0 and is never read).
"""

from __future__ import annotations

import numpy as np

from dlrmsim.engine.jit import njit

# Levels within this relative distance of the current fill level saturate together.
LEVEL_REL_EPS = 1e-9


@njit(cache=True, error_model="numpy")
def maxmin_rates(
    n_act: int,
    e_act: np.ndarray,
    e_res: np.ndarray,
    e_w: np.ndarray,
    res_cap: np.ndarray,
    act_cap: np.ndarray,
    act_share: np.ndarray | None = None,
) -> np.ndarray:
    """Max-min fair rates by progressive filling, with per-activity caps.

    Entry ``i`` says activity ``e_act[i]`` draws ``e_w[i] * rate`` from resource ``e_res[i]`` (capacity
    ``res_cap`` in units/s). All unfrozen activities rise together; an activity freezes when it reaches its
    cap (``act_cap``, may be ``inf``) or when a resource it uses saturates. Returns rates (units/s); an
    activity with neither a finite cap nor a resource gets ``inf``.

    When every activity can run at its cap together (no resource's load at the caps exceeds its capacity), the
    caps are the max-min rates: the allocation is feasible and no activity can rise. That is the common case of
    compute tasks beside idle resources, and of a transfer alone on its NIC port at its lane rate, which loads
    the port exactly to capacity. Otherwise :func:`progressive_filling` does the rounds.

    ``act_share`` (optional): a factor per activity on all its entries' weights, ``e_w[i] * act_share[e_act[i]]``,
    multiplied where the weights are first read instead of into a weighted copy of the entries (at 1024 ranks
    the copy was 8M entries per solve); the same products, so the same rates as passing that copy.
    """
    m = e_act.shape[0]
    n_res = res_cap.shape[0]
    if n_act == 0:
        return np.zeros(0)
    if 0 < m < n_res:
        # Fewer entries than resources (a large fabric, a few hundred running activities): work on the touched
        # resources only, renumbered in order of first use. Each resource's arithmetic is its own, in entry
        # order as before, so the rates are bit-identical; the loops over resources shrink to the touched ones.
        e_res, res_cap = _touched_resources(e_res, res_cap)
        n_res = res_cap.shape[0]
    # Fast path: when the caps fit every resource, progressive filling ends with each activity at its cap, up to
    # rounding: where a resource is loaded exactly to capacity, the filling reaches an activity's cap as a level,
    # (cap_r - used) / weight, which can differ from the cap in the last bits, or (levels within LEVEL_REL_EPS
    # saturating together) by at most that much. No margin below capacity: a transfer at its lane rate alone on a
    # NIC port loads it exactly, and a margin sent all of those through the rounds. (A non-finite cap on a
    # resource gives a load of inf or nan, which fails the test.)
    if m:
        if caps_fit(e_act, e_res, e_w, res_cap, act_cap, act_share):
            return act_cap.copy()
    else:
        finite = True
        for a in range(n_act):
            if not np.isfinite(act_cap[a]):
                finite = False
                break
        if finite:
            return act_cap.copy()
    return progressive_filling(n_act, e_act, e_res, e_w, res_cap, act_cap, act_share)


@njit(cache=True, error_model="numpy")
def caps_fit(
    e_act: np.ndarray,
    e_res: np.ndarray,
    e_w: np.ndarray,
    res_cap: np.ndarray,
    act_cap: np.ndarray,
    act_share: np.ndarray | None = None,
) -> bool:
    """Whether every activity can run at its cap at once: no resource's load at the caps (``e_w * act_share *
    act_cap`` summed in entry order) exceeds its capacity. A load of exactly the capacity fits."""
    load = np.zeros(res_cap.shape[0])
    for i in range(e_act.shape[0]):
        w = e_w[i] if act_share is None else e_w[i] * act_share[e_act[i]]
        load[e_res[i]] += w * act_cap[e_act[i]]
    for r in range(res_cap.shape[0]):
        if not load[r] <= res_cap[r]:
            return False
    return True


@njit(cache=True)
def _touched_resources(e_res: np.ndarray, res_cap: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(entries' resources renumbered 0.. in order of first use, those resources' capacities)."""
    local = np.full(res_cap.shape[0], -1, dtype=np.int64)
    out = np.empty(e_res.shape[0], dtype=np.int64)
    cap = np.empty(e_res.shape[0])
    k = 0
    for i in range(e_res.shape[0]):
        r = e_res[i]
        if local[r] < 0:
            local[r] = k
            cap[k] = res_cap[r]
            k += 1
        out[i] = local[r]
    return out, cap[:k]


@njit(cache=True, error_model="numpy")
def progressive_filling(
    n_act: int,
    e_act: np.ndarray,
    e_res: np.ndarray,
    e_w: np.ndarray,
    res_cap: np.ndarray,
    act_cap: np.ndarray,
    act_share: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`maxmin_rates` without its unsaturated fast path (same arguments, same result): round by round.

    A resource's saturation level ``(cap - used) / (sum of unfrozen weights)`` can only rise while other
    activities freeze at or below it, so every resource none of whose activities stops earlier (at its own cap
    or at another resource) saturates exactly at its current level: a round freezes all of them at once, not
    just the lowest (levels within ``LEVEL_REL_EPS`` count as equal), along with every activity whose cap
    comes first. Independent bottlenecks thus cost one round together instead of one each, with the same
    rates as one-level-at-a-time filling.
    """
    m = e_act.shape[0]
    n_res = res_cap.shape[0]
    grow = 1.0 + LEVEL_REL_EPS
    rate = np.zeros(n_act)
    used = np.zeros(n_res)  # what frozen activities draw from each resource
    free = np.ones(n_act, dtype=np.bool_)  # not frozen yet
    n_free = n_act
    # Entries of unfrozen activities, compacted each round (order kept): the first round reads the inputs and
    # compacts into working arrays, later rounds compact those in place (no up-front copy: on a million-flow
    # alltoall the copy was a pass of its own). Each pass over entries is a function of its arrays, so the
    # first round's and the later rounds' calls compile to the same loops.
    ea = np.empty(m, dtype=np.int64)
    er = np.empty(m, dtype=np.int64)
    ew = np.empty(m)
    k = m
    lvl = np.empty(n_act)
    wsum = np.empty(n_res)
    t_res = np.empty(n_res)
    settled = np.empty(n_res, dtype=np.bool_)
    mark = np.empty(n_act, dtype=np.bool_)
    add = np.empty(n_res)
    first = True
    while True:
        # lvl: where each unfrozen activity would stop if nothing else froze (its cap, or its first resource)
        for a in range(n_act):
            lvl[a] = act_cap[a] if free[a] else np.inf
        if k:
            for r in range(n_res):  # (plain loops: slice assignment multiplies the compile time)
                wsum[r] = 0.0
            if first:
                _weight_sums(e_act, e_res, e_w, k, wsum, act_share)
            else:
                _weight_sums(ea, er, ew, k, wsum, None)
            for r in range(n_res):
                left = res_cap[r] if first else max(res_cap[r] - used[r], 0.0)
                # A resource no unfrozen activity uses never saturates (no entry reads its level).
                t_res[r] = left / wsum[r] if wsum[r] > 0.0 else np.inf
            for r in range(n_res):
                settled[r] = True
            for a in range(n_act):
                mark[a] = free[a]
            if first:
                _levels_and_marks(e_act, e_res, k, t_res, lvl, settled, mark, act_cap, grow)
            else:
                _levels_and_marks(ea, er, k, t_res, lvl, settled, mark, act_cap, grow)
        else:
            for a in range(n_act):
                mark[a] = free[a]
        newly = 0
        for a in range(n_act):
            if mark[a] and lvl[a] < np.inf:
                rate[a] = lvl[a]
                free[a] = False
                newly += 1
            else:
                mark[a] = False
        if newly == 0:
            for a in range(n_act):
                if free[a]:
                    rate[a] = np.inf  # no finite cap and no resource
            break
        n_free -= newly
        if n_free == 0:
            break
        if k:
            for r in range(n_res):
                add[r] = 0.0
            if first:
                k = _compact_entries(e_act, e_res, e_w, k, mark, rate, add, ea, er, ew, act_share)
            else:
                k = _compact_entries(ea, er, ew, k, mark, rate, add, ea, er, ew, None)
            for r in range(n_res):
                used[r] = add[r] if first else used[r] + add[r]
        first = False
    return rate


@njit(cache=True, error_model="numpy")
def _weight_sums(ea: np.ndarray, er: np.ndarray, ew: np.ndarray, k: int, wsum: np.ndarray, share: np.ndarray | None) -> None:
    """Add each of the first ``k`` entries' weight (times its activity's ``share`` if given) to its resource's sum."""
    for i in range(k):
        wsum[er[i]] += ew[i] if share is None else ew[i] * share[ea[i]]


@njit(cache=True, error_model="numpy")
def _levels_and_marks(
    ea: np.ndarray,
    er: np.ndarray,
    k: int,
    t_res: np.ndarray,
    lvl: np.ndarray,
    settled: np.ndarray,
    mark: np.ndarray,
    act_cap: np.ndarray,
    grow: float,
) -> None:
    """One round's levels and freezes over the first ``k`` entries. In: ``lvl`` holds each activity's cap (inf if
    frozen), ``settled`` all true, ``mark`` each activity's free flag. Out: ``lvl`` lowered to the activity's
    first resource level; ``settled`` false for a resource one of whose activities stops below its level;
    ``mark`` true for a free activity capped before any resource, or on a settled resource (others stay to be
    cleared by the caller when frozen or at an infinite level)."""
    for i in range(k):
        t = t_res[er[i]]
        if t < lvl[ea[i]] or t != t:  # np.minimum: a nan wins
            lvl[ea[i]] = t
    # a resource saturates now unless one of its activities stops below its level
    for i in range(k):
        if lvl[ea[i]] * grow < t_res[er[i]]:
            settled[er[i]] = False
    for a in range(mark.shape[0]):
        mark[a] = mark[a] and act_cap[a] <= lvl[a] * grow  # capped before any resource
    for i in range(k):
        if settled[er[i]]:
            mark[ea[i]] = True


@njit(cache=True, error_model="numpy")
def _compact_entries(
    ea: np.ndarray,
    er: np.ndarray,
    ew: np.ndarray,
    k: int,
    mark: np.ndarray,
    rate: np.ndarray,
    add: np.ndarray,
    oa: np.ndarray,
    orr: np.ndarray,
    ow: np.ndarray,
    share: np.ndarray | None,
) -> int:
    """Add the load of the first ``k`` entries of activities frozen this round (``mark``) to ``add``; copy the
    others, in order, to the front of ``oa, orr, ow`` (which may be ``ea, er, ew`` themselves); return how many.
    Weights are multiplied by their activity's ``share`` if given (the copies keep the products)."""
    j = 0
    for i in range(k):
        a = ea[i]
        w = ew[i] if share is None else ew[i] * share[a]
        if mark[a]:
            add[er[i]] += w * rate[a]
        else:
            oa[j] = a
            orr[j] = er[i]
            ow[j] = w
            j += 1
    return j
