"""Does a GEMM pay for the time since its last call and for the traffic since then once, or twice?

The simulator prices what a GEMM loses between calls two ways: by the time since its rank's previous GEMM (the idle
curve, ``costs.gemm_idle_time_s``) and by the traffic since (``costs.evicted_operand_time_s`` and
``costs.sequence_time_s``). The first GEMM of a training step has both: the previous step's sparse update ran for
milliseconds and streamed tables through the caches. This times the calibration's idle layer (the validation base
case's first bottom-MLP layer, ``benchmarks.idle.IDLE_LAYER``) one call at a time in five contexts, rounds
interleaved:

- ``loop``: right after the same call (warm);
- ``spin_3`` / ``spin_8``: after the main thread spins 3 / 8 ms (time, no traffic);
- ``flush``: after the calibration's flush (twice the last-level cache read and written; traffic, and the few ms the
  flush takes);
- ``flush_spin_8``: after the flush and a spin, 8 ms in all (both).

If the two costs added, ``flush_spin_8`` would cost ``spin_8``'s extra plus what ``flush`` costs beyond ``spin_3``
(a gap about the flush's own length). With ``--calibration`` each row also carries what the simulator charges the
layer in that context, both as the larger of the two terms (``costs.cold_gemm_time_s``, the model) and as their sum.

    .venv/bin/python -m benchmarks.bench_gemm_cold_contexts [--threads 1,2] [--rounds 25]
        [--calibration validation/results/<...>-calibration.yaml] [--out validation/results]

Needs torch. Writes ``<out>/<YYYYMMDDTHHMMSS>-<host>-gemm-cold-contexts.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.evidence import write_evidence
from dlrmsim.calibration.benchmarks.idle import IDLE_LAYER, spin
from dlrmsim.host import usable_cores

GAP_S = 0.008  # the long gap: about a validation step's sparse update at batch 1024 (docs/calibration.md)
SHORT_GAP_S = 0.003  # about the flush's own length on the 2-vCPU VM (64 MiB at 20-30 GB/s)


def contexts(flush: Callable[[], object], flush_s: float) -> dict[str, Callable[[], object]]:
    """What runs between the previous call and the timed one, by context name."""
    return {
        "loop": lambda: None,
        "spin_3": lambda: spin(SHORT_GAP_S),
        "spin_8": lambda: spin(GAP_S),
        "flush": flush,
        "flush_spin_8": lambda: (flush(), spin(max(GAP_S - flush_s, 0.0))),
    }


def measure(ops: Any, threads: int, rounds: int) -> dict[str, Any]:
    """Per context: the median, p25 and p75 of single calls (s) over ``rounds`` interleaved rounds, and the flush's
    own duration (s, median of the rounds)."""
    with ops.threads(threads):
        gemm = ops.make_linear(*IDLE_LAYER, "fwd")
        for _ in range(3):  # first touches: the flush buffer's pages, the kernel's code
            ops.flush()
            gemm()
        flush_times: list[float] = []

        def timed_flush() -> None:
            t0 = time.perf_counter()
            ops.flush()
            flush_times.append(time.perf_counter() - t0)

        for _ in range(3):
            timed_flush()
        ctx = contexts(timed_flush, statistics.median(flush_times))
        samples: dict[str, list[float]] = {c: [] for c in ctx}
        names = list(ctx)
        for r in range(rounds):
            for c in names[r % len(names) :] + names[: r % len(names)]:
                gemm()  # the previous call: the context runs from its end
                ctx[c]()
                t0 = time.perf_counter()
                gemm()
                samples[c].append(time.perf_counter() - t0)
    out: dict[str, Any] = {"threads": threads, "flush_s": statistics.median(flush_times), "contexts": {}}
    for c, xs in samples.items():
        q = statistics.quantiles(xs, n=4)
        out["contexts"][c] = {"median_s": statistics.median(xs), "p25_s": q[0], "p75_s": q[2], "samples": len(xs)}
    return out


def model_rows(calibration: Path, threads: int, flush_s: float) -> dict[str, dict[str, float]]:
    """What the simulator charges the layer in each context beyond its back-to-back time (s), with ``calibration``'s
    measurements fitted by this checkout (``calibrate.refitted``): the idle curve at the context's gap, the eviction
    and sequence terms (a flushed call: every operand evicted by the calibration's flush), and the two combined as
    the model does (``max_s``) and as a sum (``sum_s``)."""
    from dlrmsim.calibration.apply import apply_calibration
    from dlrmsim.calibration.calibrate import refitted
    from dlrmsim.calibration.schema import load_calibration
    from dlrmsim.engine.costs import cold_gemm_time_s, evicted_operand_time_s, gemm_idle_time_s, sequence_time_s
    from dlrmsim.topologies import load_topology
    from dlrmsim.workloads.model import Gemm

    cal = refitted(load_calibration(calibration, False))
    topo = apply_calibration(load_topology("host", {"compute.host-cpu.cores": threads}, ranks=1), cal, "uniform")
    spec = topo.compute(0)
    batch, fan_in, fan_out = IDLE_LAYER
    inputs = 4.0 * (batch * fan_in + fan_in * fan_out)  # the activation and the weights, as the task graph's operands
    nbytes = Gemm(batch, fan_out, fan_in).bytes_moved(4.0)  # the compulsory traffic a GEMM task carries (taskgraph)
    flushed = float(cal.host.flushed_bytes)
    evicted = evicted_operand_time_s(spec, nbytes, threads, ((inputs, flushed),), flushed)
    evicted += sequence_time_s(spec, nbytes, threads)
    gaps = {"loop": 0.0, "spin_3": SHORT_GAP_S, "spin_8": GAP_S, "flush": flush_s, "flush_spin_8": max(GAP_S, flush_s)}
    out = {}
    for c, gap in gaps.items():
        idle = gemm_idle_time_s(spec, gap)
        ev = evicted if c.startswith("flush") else 0.0
        out[c] = {"idle_s": idle, "evicted_s": ev, "max_s": cold_gemm_time_s(idle, ev), "sum_s": idle + ev}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default=",".join(str(t) for t in sorted({1, usable_cores()})))
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--calibration", type=Path, default=None, help="also report what this calibration's model charges")
    ap.add_argument("--out", type=Path, default=Path("validation/results"))
    args = ap.parse_args()
    from dlrmsim.calibration.ops import get_ops

    ops = get_ops("torch")
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        row = measure(ops, threads, args.rounds)
        if args.calibration is not None:
            row["model"] = model_rows(args.calibration, threads, row["flush_s"])
        loop = row["contexts"]["loop"]["median_s"]
        for c, v in row["contexts"].items():
            model = row.get("model", {}).get(c)
            charged = f"  model max {model['max_s'] * 1e6:6.1f} / sum {model['sum_s'] * 1e6:6.1f} us" if model else ""
            print(f"{threads} threads {c:13s} {v['median_s'] * 1e6:7.1f} us  extra {(v['median_s'] - loop) * 1e6:+7.1f}{charged}")
        rows.append(row)
    extra = {"layer": list(IDLE_LAYER), "calibration": str(args.calibration) if args.calibration else None, "rows": rows}
    write_evidence(args.out, "gemm-cold-contexts", extra)


if __name__ == "__main__":
    main()
