"""The solver's speed-ups change no rate: the unsaturated fast path, and one solve per simulated instant."""

from __future__ import annotations

import numpy as np
import pytest

from dlrmsim.engine import Simulation
from dlrmsim.engine.fluid import (
    _ISSUE,
    _OWNER,
    _RATE,
    _REM,
    _TAG,
    _WORK,
    _advance_and_take_done,
    _compact,
    _done_indices,
    _integrate,
)
from dlrmsim.engine.maxmin import caps_fit, maxmin_rates, progressive_filling
from tests.engine.handmade import two_node


def _random_problem(rng: np.random.Generator, n_act: int, n_res: int, cap_scale: float):
    per = rng.integers(0, 4, n_act)  # some activities use no resource
    e_act = np.repeat(np.arange(n_act), per)
    e_res = rng.integers(0, n_res, len(e_act))
    e_w = rng.choice([0.5, 1.0, 2.0], len(e_act))
    res_cap = rng.uniform(1.0, 10.0, n_res)
    act_cap = rng.uniform(0.1, 1.0, n_act) * cap_scale
    return n_act, e_act, e_res, e_w, res_cap, act_cap


@pytest.mark.parametrize("cap_scale", [0.01, 0.1, 1.0, 10.0])
def test_fast_path_gives_the_rates_of_progressive_filling(cap_scale: float) -> None:
    rng = np.random.default_rng(int(cap_scale * 100))
    for _ in range(50):
        prob = _random_problem(rng, int(rng.integers(1, 30)), int(rng.integers(1, 8)), cap_scale)
        fast = maxmin_rates(*prob)
        slow = progressive_filling(*prob)  # always the general filling
        # because the fast path only returns the caps when no resource can saturate, where filling ends too
        np.testing.assert_allclose(fast, slow, rtol=1e-12)


def test_caps_that_load_resources_exactly_to_capacity_take_the_fast_path() -> None:
    # Because caps that fit every resource are already max-min fair (feasible, and no activity can rise), the
    # solver returns them as they are even where they fill a resource exactly (a transfer at its lane rate alone
    # on a NIC port); the rounds of progressive filling reach the same rates up to rounding, or up to
    # LEVEL_REL_EPS where levels that close saturate together.
    rng = np.random.default_rng(11)
    for _ in range(50):
        n_act, e_act, e_res, e_w, _, act_cap = _random_problem(rng, int(rng.integers(1, 30)), int(rng.integers(1, 8)), 1.0)
        load = np.zeros(int(e_res.max(initial=-1)) + 1)
        np.add.at(load, e_res, e_w * act_cap[e_act])  # in entry order, as the solver sums it
        exact = load.copy()
        exact[exact == 0] = 1.0  # a resource no activity uses
        prob = (n_act, e_act, e_res, e_w, exact, act_cap)
        np.testing.assert_array_equal(maxmin_rates(*prob), act_cap)
        np.testing.assert_allclose(progressive_filling(*prob), act_cap, rtol=1e-9)


def test_a_transfer_at_its_lane_rate_alone_on_a_port_fits_it() -> None:
    # Because one activity capped at exactly the port's capacity fits it, the solver takes its fast path and
    # the activity runs at its cap; one ulp less capacity and the port binds: the filling gives the port's level.
    entries = (np.array([0]), np.array([0]), np.array([1.0]))
    port, lane = np.array([12.5e9]), np.array([12.5e9])
    assert caps_fit(*entries, port, lane)
    assert maxmin_rates(1, *entries, port, lane)[0] == 12.5e9
    below = np.array([np.nextafter(12.5e9, 0.0)])
    assert not caps_fit(*entries, below, lane)
    assert maxmin_rates(1, *entries, below, lane)[0] == below[0]


@pytest.mark.parametrize("cap_scale", [0.01, 1.0, 10.0])
def test_shares_multiplied_inline_give_the_rates_of_weighted_entries(cap_scale: float) -> None:
    # because act_share multiplies each entry's weight where the solver first reads it, the same products as a
    # weighted copy of the entries: the rates must be bit-identical, on the fast path and through the rounds
    rng = np.random.default_rng(7 + int(cap_scale * 10))
    for _ in range(50):
        n_act, e_act, e_res, e_w, res_cap, act_cap = _random_problem(
            rng, int(rng.integers(1, 30)), int(rng.integers(1, 8)), cap_scale
        )
        share = rng.choice([1.0, 1.0, 3.0, 24.0, 0.7], n_act)
        weighted = (n_act, e_act, e_res, e_w * share[e_act], res_cap, act_cap)
        for solve in (maxmin_rates, progressive_filling):
            np.testing.assert_array_equal(solve(n_act, e_act, e_res, e_w, res_cap, act_cap, share), solve(*weighted))


def _textbook_maxmin(n_act, e_act, e_res, e_w, res_cap, act_cap) -> np.ndarray:  # noqa: ANN001
    """One level at a time, in plain Python: raise every unfrozen activity to the lowest of (its cap, the level at
    which one of its resources saturates), freeze those, repeat."""
    rate = [0.0] * n_act
    frozen = [False] * n_act
    used = [0.0] * len(res_cap)
    while not all(frozen):
        best = np.inf
        for r in range(len(res_cap)):
            w = sum(e_w[i] for i in range(len(e_act)) if e_res[i] == r and not frozen[e_act[i]])
            if w > 0:
                best = min(best, (res_cap[r] - used[r]) / w)
        best = min([best] + [act_cap[a] for a in range(n_act) if not frozen[a]])
        if best == np.inf:
            for a in range(n_act):
                if not frozen[a]:
                    rate[a], frozen[a] = np.inf, True
            break
        sat = set()
        for r in range(len(res_cap)):
            w = sum(e_w[i] for i in range(len(e_act)) if e_res[i] == r and not frozen[e_act[i]])
            if w > 0 and (res_cap[r] - used[r]) / w <= best * (1 + 1e-12):
                sat.add(r)
        newly = {a for a in range(n_act) if not frozen[a] and act_cap[a] <= best * (1 + 1e-12)}
        newly |= {int(e_act[i]) for i in range(len(e_act)) if e_res[i] in sat and not frozen[e_act[i]]}
        for a in newly:
            rate[a], frozen[a] = best, True
            for i in range(len(e_act)):
                if e_act[i] == a:
                    used[e_res[i]] += e_w[i] * best
    return np.array(rate)


@pytest.mark.parametrize("cap_scale", [0.1, 1.0, 10.0])
def test_compiled_filling_matches_the_textbook_algorithm(cap_scale: float) -> None:
    rng = np.random.default_rng(7 + int(cap_scale * 10))
    for _ in range(40):
        prob = _random_problem(rng, int(rng.integers(1, 20)), int(rng.integers(1, 6)), cap_scale)
        # because freezing every settled bottleneck in one round (the compiled kernel) reaches the same fixed
        # point as freezing one level at a time
        np.testing.assert_allclose(progressive_filling(*prob), _textbook_maxmin(*prob), rtol=1e-9)


def test_fast_path_is_taken_only_without_saturation() -> None:
    # one resource of capacity 10 and two activities capped at 4 and 7: 11 > 10, so the cap-sum is not the answer
    rates = maxmin_rates(2, np.array([0, 1]), np.array([0, 0]), np.ones(2), np.array([10.0]), np.array([4.0, 7.0]))
    # because max-min gives the smaller one its cap and the other the rest
    assert rates.tolist() == pytest.approx([4.0, 6.0])


def test_a_task_boundary_costs_one_solve_at_its_instant() -> None:
    # rank 0 runs one long task; rank 1 runs two short ones back to back. The first short task ends at the
    # instant the second starts: one solve there, not one for the end and one for the start.
    sim = Simulation(two_node())
    ends: list[float] = []

    def short_pair():
        yield sim.compute(1, "a", flops=1e9)
        yield sim.compute(1, "b", flops=1e9)
        ends.append(sim.now)

    sim.compute(0, "long", flops=1e11)
    sim.env.process(short_pair())
    sim.run()
    # solves at: t=0 (both start), end of a = start of b, end of b (the long task's end leaves nothing to solve)
    assert sim.stats["solves"] == 3, "because the solve after a's end waits for b's start at the same instant"
    # because the tasks alone run at their roofline rate, b ends after two task times
    assert ends[0] == pytest.approx(2 * sim.records[0].end, rel=1e-12)


def test_an_empty_task_started_at_a_task_boundary_ends_there() -> None:
    # After a task's end the scheduler's step has run at that instant; a next task with work left needs no second
    # step before the solve, but one without work (no flops, no bytes) is done as it starts: because a step
    # finishes it, it ends at the boundary itself, not a clock tick later, and the task after it starts there too.
    sim = Simulation(two_node())

    def program():
        yield sim.compute(1, "a", flops=1e9)
        yield sim.compute(1, "empty")
        yield sim.compute(1, "b", flops=1e9)

    sim.compute(0, "long", flops=1e11)
    sim.env.process(program())
    sim.run()
    ends = {r.name: r.end for r in sim.records}
    assert ends["empty"] == ends["a"] and [r.start for r in sim.records if r.name == "b"] == [ends["a"]]
    assert ends["b"] == pytest.approx(2 * ends["a"], rel=1e-12)


def test_the_fused_step_kernel_does_what_its_three_parts_did() -> None:
    # because a scheduler step now integrates, finds the finished activities and squeezes them out in one compiled
    # call (fluid._advance_and_take_done), it must leave the tables exactly as _integrate, _done_indices and
    # _compact did in turn, and report each finished activity's owner, tag and issue time in table order
    rng = np.random.default_rng(5)
    for trial in range(200):
        n = int(rng.integers(0, 40))
        F = rng.uniform(0.5, 2.0, (7, 48))
        F[_WORK, :n] = rng.uniform(1.0, 4.0, n)
        F[_RATE, :n] = rng.choice([0.0, 1.0, 3.0, np.inf], n)
        F[_REM, :n] = F[_WORK, :n] * rng.choice([0.0, 1e-12, 0.3, 1.0], n)
        I = rng.integers(0, 9, (5, 48))  # noqa: E741
        per = rng.integers(0, 3, n)
        m = int(per.sum())
        E = np.zeros((2, 96), dtype=np.int64)
        E[0, :m] = np.repeat(np.arange(n), per)
        E[1, :m] = rng.integers(0, 5, m)
        EW = rng.uniform(0.5, 2.0, 96)
        dt, integrate, t_eps = float(rng.choice([0.0, 0.1, 0.5])), bool(trial % 3), float(rng.choice([0.0, 1e-3]))
        want = [F.copy(), I.copy(), E.copy(), EW.copy()]
        if integrate:
            _integrate(want[0], n, dt)
        idx = _done_indices(want[0], n, t_eps)
        owners, tags, issued = want[1][_OWNER, idx], want[1][_TAG, idx], want[0][_ISSUE, idx]
        m_want = _compact(*want, n, m, idx) if len(idx) else m
        DI, DF = np.zeros((3, 48), dtype=np.int64), np.zeros(48)
        k, m_got = _advance_and_take_done(F, I, E, EW, n, m, dt, integrate, t_eps, DI, DF)
        assert (k, m_got) == (len(idx), m_want)
        for got, exp in zip((F, I, E, EW), want, strict=True):
            np.testing.assert_array_equal(got, exp)
        np.testing.assert_array_equal(DI[0, :k], owners)
        np.testing.assert_array_equal(DI[1, :k], tags)
        np.testing.assert_array_equal(DI[2, :k], idx)
        np.testing.assert_array_equal(DF[:k], issued)
