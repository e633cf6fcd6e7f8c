"""Compiled predicates on the engine's small index and time arrays.

The scheduler and the collectives ask a handful of yes/no questions of a few-dozen-element array at every simulated
instant (are all these owners the same, is any delay positive, did any rank finish). A numpy reduction costs a few
microseconds a call at that size, most of it dispatch; these compiled loops cost a fraction of that, which adds up
over the ~10^5 instants of a large run. Each returns what the numpy expression named in its docstring returns.
"""

from __future__ import annotations

import numpy as np

from dlrmsim.engine.jit import njit


@njit(cache=True)
def min_max(a: np.ndarray) -> tuple[float, float]:
    """``(a.min(), a.max())`` of a non-empty 1-d float array (a nan compares as numpy's reductions do not: avoid)."""
    lo = a[0]
    hi = a[0]
    for i in range(1, a.shape[0]):
        v = a[i]
        if v < lo:
            lo = v
        elif v > hi:
            hi = v
    return lo, hi


@njit(cache=True)
def all_equal(a: np.ndarray) -> bool:
    """``a.min() == a.max()`` of a non-empty 1-d integer or float array (floats compare exactly)."""
    first = a[0]
    for i in range(1, a.shape[0]):
        if a[i] != first:
            return False
    return True


@njit(cache=True)
def any_negative(a: np.ndarray) -> bool:
    """``(a < 0).any()`` of a 1-d integer array."""
    for i in range(a.shape[0]):
        if a[i] < 0:
            return True
    return False


@njit(cache=True)
def any_at_least(a: np.ndarray, bound: int) -> bool:
    """``(a >= bound).any()`` of a 1-d integer array."""
    for i in range(a.shape[0]):
        if a[i] >= bound:
            return True
    return False
