"""Serving benchmarks: wall time of a serve run, and the lookup-core fraction sweep of the preset.

.venv/bin/python benchmarks/bench_serving.py [--qps 3500] [--find-max]
"""

from __future__ import annotations

import argparse
import time

from dlrmsim.serving.simulate import ServeOptions, find_max_qps, simulate_serving
from dlrmsim.topologies import load_topology
from dlrmsim.workloads.serving import load_serving_workload

SLED = "yosemite-v2-sled"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="recsys-inference")
    ap.add_argument("--qps", type=float, default=3500.0, help="offered load of the sweep, one node")
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--find-max", action="store_true", help="also bisect for the max QPS at each fraction")
    args = ap.parse_args()

    w = load_serving_workload(args.workload)
    t = time.perf_counter()
    r = simulate_serving(load_topology(SLED), w, ServeOptions(qps=300, duration_s=3.0))
    print(f"serve 300 QPS x 3 s on the sled: {time.perf_counter() - t:.2f} s wall, {r.sim_stats}")

    print(f"\nlookup-core fraction sweep, 1 node, {args.qps:g} QPS offered, {args.duration:g} s")
    print("fraction  lookup/dense cores  achieved  p50_ms  p99_ms  lookup_util  dense_util  max_qps  wall_s")
    for k in range(1, 6):
        f = k / 6
        wf = load_serving_workload(args.workload, {"partitioning.lookup_core_fraction": f})
        t = time.perf_counter()
        r = simulate_serving(load_topology(SLED), wf, ServeOptions(qps=args.qps, duration_s=args.duration, warmup_s=0.2, nodes=1))
        lk = sum(c.lookup for c in r.cards) / len(r.cards)
        de = sum(c.dense for c in r.cards) / len(r.cards)
        mx = ""
        if args.find_max:
            found = find_max_qps(
                lambda: load_topology(SLED),
                wf,
                ServeOptions(qps=1, duration_s=args.duration, warmup_s=0.2, nodes=1),
                wf.latency_budget_ms,
            )
            mx = f"{found.qps:8.0f}"
        print(
            f"{k}/6       {r.lookup_cores:>2d}/{r.dense_cores:<2d}              {r.achieved_qps:8.0f}  {r.p50_ms:6.2f}  "
            f"{r.p99_ms:7.2f}"
            f"  {lk:11.3f}  {de:10.3f}  {mx:>7}  {time.perf_counter() - t:6.1f}"
        )


if __name__ == "__main__":
    main()
