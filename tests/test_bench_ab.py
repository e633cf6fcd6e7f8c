"""benchmarks/bench_ab.py: paired, alternating runs of one command in two checkouts, and the ratio per pair."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import bench_ab


class _Fake:
    """A worker whose runs take the CPU times it is given and report the counters it is given."""

    def __init__(self, name: str, log: list[str], cpu: list[float], solves: int = 7) -> None:
        self.name, self.log, self.cpu, self.solves, self.module = name, log, iter(cpu), solves, f"/{name}/dlrmsim"

    def run(self, args: list[str]) -> dict:
        assert args == ["simulate"]
        self.log.append(self.name)
        t = next(self.cpu)
        return {"cpu_s": t, "wall_s": 2 * t, "totals": {"solves": self.solves}}


def test_pairs_alternate_and_the_ratio_is_taken_per_pair() -> None:
    # because a drifting host slows whatever runs second in a pair as often as whatever runs first only if the order
    # alternates, and because the ratio of each pair (not of two medians) is what cancels a slow spell both runs met
    log: list[str] = []
    base = _Fake("base", log, [9.0, 2.0, 4.0, 2.0, 4.0])  # one warm-up run, then a slow pair, then two fast ones
    head = _Fake("head", log, [9.0, 1.0, 3.0, 1.0, 3.0])
    res = bench_ab.compare(base, head, ["simulate"], pairs=4, warm=1)  # type: ignore[arg-type]
    assert log == ["base", "head"] + ["base", "head", "head", "base", "base", "head", "head", "base"]
    assert res["counters_equal"]
    assert res["ratio_cpu_s"]["all"] == [0.5, 0.75, 0.5, 0.75]
    assert res["ratio_cpu_s"]["median"] == 0.625 and res["ratio_wall_s"]["median"] == 0.625
    assert res["base"]["cpu_min_s"] == 2.0 and res["head"]["cpu_median_s"] == 2.0


def test_different_counters_are_reported() -> None:
    # because a ratio between runs that did different work (a change that altered results) measures nothing
    log: list[str] = []
    base, head = _Fake("base", log, [1.0] * 3), _Fake("head", log, [1.0] * 3, solves=8)
    res = bench_ab.compare(base, head, ["simulate"], pairs=2, warm=1)  # type: ignore[arg-type]
    assert not res["counters_equal"]


def test_a_bench_speed_row_and_a_command_run_in_both_workers(tmp_path: Path) -> None:
    # because each worker must import the dlrmsim of its own checkout and run each CLI command to the end, a
    # bench_speed row by its name as well as a command given after --; and a command that writes files (the demo
    # row's {tmp}) must get a directory that exists, its own at each run, or the CLI refuses the path
    out = tmp_path / "ab.json"
    cmd = ["simulate", "-t", "clx-64s-opa", "-w", "mlperf", "-r", "8", "--trace", "{tmp}/trace.json", "--json"]
    rep = bench_ab.main(["--base", str(bench_ab.ROOT), "--pairs", "2", "--warm", "0", "--out", str(out), "--rows",
                         "mlperf-26", "--", *cmd])  # fmt: skip
    assert [r["command"] for r in rep["results"]] == ["dlrmsim " + " ".join(c) for c in (bench_ab.ROWS["mlperf-26"][0], cmd)]
    assert all(r["counters_equal"] and r["base"]["totals"]["solves"] > 0 for r in rep["results"])
    assert Path(rep["base_module"]).parent.parent == bench_ab.ROOT
    assert json.loads(out.read_text())["results"][1]["ratio_cpu_s"]["median"] > 0
