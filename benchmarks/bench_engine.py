"""Engine benchmark: wall time and events per second of a direct alltoall of the MLPerf strong-scaling volume.

Eq. 2: 26 tables x 16384 samples x 128 dims x 4 B = 208 MiB in all, split evenly over the p x (p-1) pairs.
Scenarios: 64 ranks on clx-64s-opa, 1024 ranks on its scaled fat-tree (``load_topology(..., sockets=1024)``).
"events" counts activity starts plus finishes (flows here); targets: < 1 s at 64
ranks, < 30 s at 1024 ranks on a 2-core machine.

    .venv/bin/python -m benchmarks.bench_engine [--ranks 64 1024] [--record-flows]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from dlrmsim.engine import CommSettings, Simulation
from dlrmsim.topologies import load_topology
from dlrmsim.topologies.topology import Topology

MLPERF_ALLTOALL_BYTES = 26 * 16384 * 128 * 4  # Eq. 2, 208 MiB
TARGET_S = {64: 1.0, 1024: 30.0}


@dataclass
class Result:
    scenario: str
    ranks: int
    flows: int
    events: int
    solves: int
    wall_s: float
    sim_time_s: float

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else float("inf")


def topology(ranks: int) -> tuple[Topology, str]:
    topo = load_topology("clx-64s-opa") if ranks == 64 else load_topology("clx-64s-opa", sockets=ranks)
    return topo, topo.name


def bench_alltoall(ranks: int, record_flows: bool = True) -> Result:
    topo, name = topology(ranks)
    t0 = time.perf_counter()
    sim = Simulation(topo, comm=CommSettings(), record_flows=record_flows)
    sim.collective("alltoall", list(range(ranks)), MLPERF_ALLTOALL_BYTES / ranks, name="a2a", algorithm="direct")
    sim.run()
    wall = time.perf_counter() - t0
    st = sim.stats
    return Result(
        f"direct alltoall 208 MiB on {name}",
        ranks,
        st["activities"],
        st["activities"] + st["finished"],
        st["solves"],
        wall,
        sim.now,
    )


def main(argv: list[str] | None = None) -> list[Result]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 1024])
    ap.add_argument("--no-record-flows", action="store_true", help="skip per-flow records")
    args = ap.parse_args(argv)
    results = [bench_alltoall(r, record_flows=not args.no_record_flows) for r in args.ranks]
    header = (
        f"{'scenario':<60} {'ranks':>6} {'flows':>9} {'events':>9} {'solves':>6} {'wall s':>8} {'events/s':>10} "
        f"{'sim ms':>8} target"
    )
    print(header)
    for r in results:
        target = TARGET_S.get(r.ranks)
        ok = "" if target is None else ("ok" if r.wall_s < target else f"MISSED (<{target:g} s)")
        print(
            f"{r.scenario:<60} {r.ranks:>6} {r.flows:>9} {r.events:>9} {r.solves:>6} {r.wall_s:>8.3f} {r.events_per_s:>10.0f} "
            f"{r.sim_time_s * 1e3:>8.4f} {ok}"
        )
    return results


if __name__ == "__main__":
    main()
