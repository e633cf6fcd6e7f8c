"""EfficiencyTable: log-linear interpolation between points, end values held."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlrmsim.topologies.topology import EfficiencyTable, interpolate_by_scan

sizes = st.floats(min_value=1e-3, max_value=1e12, allow_nan=False)
tables = st.lists(st.tuples(sizes, st.floats(min_value=0.01, max_value=1.0)), min_size=1, max_size=8).map(
    lambda pts: tuple(sorted(pts))
)


@given(tables, st.lists(sizes, min_size=1, max_size=20))
def test_the_cached_logarithms_give_the_scan_bit_for_bit(points: tuple[tuple[float, float], ...], probes: list[float]) -> None:
    # Because the table finds a size's segment by bisection and reuses its points' logarithms, every value must be the
    # scan's to the bit, at the points themselves (a size on a breakpoint belongs to the segment that ends there),
    # between them and beyond the ends, and with repeated sizes (which fall back to the scan).
    table = EfficiencyTable(points)
    for size in probes + [p[0] for p in points]:
        assert table(size) == interpolate_by_scan(points, size)


def test_interpolation_is_linear_in_log_size() -> None:
    # Because efficiency is interpolated in log(size), halfway in log between two points gives their mean.
    table = EfficiencyTable(((1e3, 0.2), (1e5, 0.6)))
    assert table(1e4) == pytest.approx(0.4, rel=1e-12)
    assert table(10.0) == 0.2 and table(1e9) == 0.6


def test_breakpoints_with_one_logarithm_give_the_segments_end_not_a_division_by_zero() -> None:
    # Because two sizes one ulp apart have the same logarithm, the segment between them has no width to interpolate
    # over; a size on it takes the value at the segment's end, as a size on a breakpoint does (found by the property
    # test above: it raised ZeroDivisionError in both the scan and the cached path).
    points = ((0.001, 0.5), (0.0010000000000000002, 0.7), (1.0, 0.9))
    assert math.log(points[0][0]) == math.log(points[1][0])
    table = EfficiencyTable(points)
    assert table(points[1][0]) == interpolate_by_scan(points, points[1][0]) == 0.7
    assert table(0.5) == interpolate_by_scan(points, 0.5)
