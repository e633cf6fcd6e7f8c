"""The perf symbol map of the engine's compiled kernels (benchmarks/perf_map.py)."""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks.perf_map import demangle, main


def test_demangle_gives_the_kernels_dotted_path() -> None:
    # because perf shows whatever name the map gives, and numba's mangled names bury the function in type codes
    mangled = "_ZN7dlrmsim6engine6maxmin19progressive_fillingB3v22B44c8tJTIeFIjxB2IKSgE5ArrayIxLi1E1C7mutable7alignedE"
    assert demangle(mangled) == "dlrmsim.engine.maxmin.progressive_filling"
    assert demangle("NRT_incref") == "NRT_incref"


def test_map_names_the_solver_kernels_a_simulation_loaded(tmp_path: Path) -> None:
    out = main(
        ["--repeat", "0", "--map", str(tmp_path / "perf.map"), "--", "simulate", "-t", "clx-64s-opa", "-w", "small", "-r", "4"]
    )
    lines = out.read_text().splitlines()
    # because every simulation re-solves rates, its map must name the solver, in perf's "START SIZE name" hex format
    # with ascending, non-overlapping ranges (perf attributes a sample to the range that holds it)
    assert any(line.endswith(" dlrmsim.engine.fluid._solve_rates") for line in lines)
    rows = [re.fullmatch(r"([0-9a-f]+) ([0-9a-f]+) (.+)", line) for line in lines]
    assert all(rows)
    spans = [(int(r.group(1), 16), int(r.group(2), 16)) for r in rows]
    assert all(a + size <= b for (a, size), (b, _) in zip(spans, spans[1:], strict=False))
