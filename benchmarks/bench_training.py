"""Training benchmark: wall time of simulated DLRM iterations and of the whole scaling study.

Scenarios:
- one MLPerf iteration on clx-64s-opa at 26 ranks (table-wise) and 64 ranks (column-wise, tables under
  2048 rows replicated), each through ``simulate_training`` (loading the YAMLs included);
- the study: Small, Large and MLPerf on clx-64s-opa and skx-8s-upi, strong and weak scaling (overlapping)
  over the rank counts ``dlrmsim.studies.demo.rank_counts`` picks (fewest that fit, powers of two, the
  placement/topology limit); ``--blocking`` adds the blocking variants (what ``make demo`` runs, strong only).

"events" counts fluid activity starts plus finishes, "solves" rate recomputations. Targets (2 cores): < 1 s per
64-rank iteration, < 60 s for the study.

    .venv/bin/python -m benchmarks.bench_training [--skip-study] [--blocking] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field

from dlrmsim.engine import simulation as engine
from dlrmsim.training.simulate import TrainingConfig, load_inputs, run_iteration

TOPOLOGIES = ("clx-64s-opa", "skx-8s-upi")
WORKLOADS = ("small", "large", "mlperf")
COLUMN_WISE = {"strategy": "column_wise", "replicate_below_rows": 2048}
TARGET_ITERATION_S = 1.0
TARGET_STUDY_S = 60.0


@dataclass
class Stats:
    """Engine counters summed over the simulations of a scenario."""

    events: int = 0
    solves: int = 0
    records: int = 0

    def add(self, st: dict[str, int]) -> None:
        self.events += st["activities"] + st["finished"]
        self.solves += st["solves"]
        self.records += st["records"]


@dataclass
class Result:
    scenario: str
    points: int
    wall_s: float
    cpu_s: float
    stats: Stats = field(default_factory=Stats)
    target_s: float | None = None

    def row(self) -> str:
        ev = self.stats.events / self.wall_s if self.wall_s > 0 else float("inf")
        sv = self.stats.solves / self.wall_s if self.wall_s > 0 else float("inf")
        ok = "" if self.target_s is None else ("ok" if self.wall_s < self.target_s else f"MISSED (<{self.target_s:g} s)")
        return (
            f"{self.scenario:<52} {self.points:>6} {self.wall_s:>8.3f} {self.cpu_s:>8.3f} {self.stats.events:>9} {ev:>10.0f} "
            f"{self.stats.solves:>7} {sv:>9.0f} {ok}"
        )


HEADER = (
    f"{'scenario':<52} {'points':>6} {'wall s':>8} {'cpu s':>8} {'events':>9} {'events/s':>10} "
    f"{'solves':>7} {'solves/s':>9} target"
)


class _Counting(engine.Simulation):
    """A Simulation that adds its counters to ``_Counting.sink`` after each run."""

    sink: Stats | None = None

    def run(self, until=None) -> None:  # noqa: ANN001
        super().run(until)
        if _Counting.sink is not None:
            _Counting.sink.add(self.stats)


def _timed(scenario: str, configs: list[TrainingConfig], target: float | None) -> Result:
    stats = Stats()
    original = engine.Simulation
    engine.Simulation = _Counting  # type: ignore[misc] - run_iteration imports it at call time
    _Counting.sink = stats
    try:
        w0, c0 = time.perf_counter(), time.process_time()
        for cfg in configs:
            run_iteration(load_inputs(cfg), cfg)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    finally:
        engine.Simulation = original  # type: ignore[misc]
        _Counting.sink = None
    return Result(scenario, len(configs), wall, cpu, stats, target)


def iteration(ranks: int, repeat: int) -> Result:
    placement = COLUMN_WISE if ranks > 26 else {}
    cfg = TrainingConfig(topology="clx-64s-opa", workload="mlperf", ranks=ranks, placement=placement)
    label = f"MLPerf iteration, clx-64s-opa, {ranks} ranks" + (" (column-wise)" if placement else "")
    runs = [_timed(label, [cfg], TARGET_ITERATION_S) for _ in range(max(repeat, 1))]
    return min(runs, key=lambda r: r.wall_s)


def study_configs(blocking: bool = False) -> list[TrainingConfig]:
    """Every point of the scaling study: strong and weak, overlapping (plus blocking strong with ``blocking``)."""
    from dlrmsim.studies.demo import rank_counts
    from dlrmsim.topologies import load_topology

    out = []
    for topo in TOPOLOGIES:
        n = load_topology(topo).num_ranks
        for wl in WORKLOADS:
            for r in rank_counts(TrainingConfig(topology=topo, workload=wl, ranks=1), n):
                for scaling in ("strong", "weak"):
                    out.append(TrainingConfig(topology=topo, workload=wl, ranks=r, scaling=scaling))
                if blocking:
                    out.append(TrainingConfig(topology=topo, workload=wl, ranks=r, blocking=True))
    return out


def main(argv: list[str] | None = None) -> list[Result]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-study", action="store_true", help="only the single iterations")
    ap.add_argument("--blocking", action="store_true", help="add the blocking strong-scaling points to the study")
    ap.add_argument("--repeat", type=int, default=3, help="runs per single iteration (the fastest is shown)")
    args = ap.parse_args(argv)
    print(HEADER)
    results = []
    for ranks in (26, 64):
        results.append(iteration(ranks, args.repeat))
        print(results[-1].row(), flush=True)
    if not args.skip_study:
        cfgs = study_configs(args.blocking)
        label = "study: 3 presets x 2 CPU topologies, strong+weak" + (" (+blocking)" if args.blocking else "")
        results.append(_timed(label, cfgs, TARGET_STUDY_S))
        print(results[-1].row(), flush=True)
    return results


if __name__ == "__main__":
    main()
