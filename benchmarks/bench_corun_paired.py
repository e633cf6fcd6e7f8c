"""Does a rank's compute slow down while another rank computes beside it? Paired slots, so the host's drift cancels.

``bench_corun.py`` compares a rank's work alone with the 2-rank run in separate processes minutes apart; on this
VM the host's speed moves 1.3x between such runs (its three "alone" rounds of 2026-11-28 04:35 summed 17.0, 12.8
and 17.1 ms), which buries a co-running cost of 10 %. Here two processes stay up and share a schedule of short
slots (``--slot-s``, a quarter second): in a "both" slot both run the rank's work, in a "solo" slot one runs it
while the other sleeps (its core idle). Slots come in shuffled blocks of (both, solo 0, solo 1), so each
process's iterations in "both" and in "solo" slots are seconds apart, not minutes, and their ratio per phase is
the co-running cost on this host. An iteration that straddles a slot's end is dropped, as is each slot's first
(the process coming back from a barrier).

The work is one rank's of a 2-rank validation case as ``bench_corun`` runs it alone: the case's workload at the
local batch on ``--threads`` threads (1: two ranks fill a 2-core host), the runner's torch backend, no collectives.

    .venv/bin/python -m benchmarks.bench_corun_paired [--case ranks-2-threads-1] [--blocks 30] [--slot-s 0.25]
        [--threads 1] [--out validation/results]

Needs torch.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.evidence import write_evidence

MODES = ("both", "solo0", "solo1")


def schedule(blocks: int, seed: int = 0) -> list[str]:
    """``blocks`` shuffled blocks of every mode once: each mode's slots spread evenly over the run."""
    rng = random.Random(seed)
    out: list[str] = []
    for _ in range(blocks):
        block = list(MODES)
        rng.shuffle(block)
        out += block
    return out


def active(mode: str, proc: int) -> bool:
    return mode == "both" or mode == f"solo{proc}"


def _worker(
    proc: int, case_name: str, threads: int, slots: list[str], slot_s: float, start: Any, barrier: Any, queue: Any
) -> None:
    from dlrmsim.allocator import steady_allocator
    from dlrmsim.calibration.dlrm_runner import _Rank
    from dlrmsim.calibration.ops import get_ops
    from dlrmsim.calibration.validate import load_cases

    steady_allocator()
    case = load_cases(only=[case_name])[0]
    ops = get_ops("torch")
    rows: list[dict[str, Any]] = []
    with ops.threads(threads):
        model = _Rank(case.workload, case.batch // case.ranks, ops, None, proc, 8)
        for it in range(3):  # warm-up, as the runner's
            model.iteration(it)
        barrier.wait()  # both warm: one of them sets the common start a little ahead
        if proc == 0:
            start.value = time.time() + 0.05
        barrier.wait()
        t0 = start.value
        it = 0
        for s, mode in enumerate(slots):
            end = t0 + (s + 1) * slot_s
            if not active(mode, proc):
                time.sleep(max(end - time.time(), 0.0))
                continue
            first = True
            while True:
                phases, total = model.iteration(it)
                it += 1
                if time.time() > end:
                    break  # straddled the slot's end: the other process may have changed state meanwhile
                if not first:
                    rows.append({"slot": s, "mode": mode, "total": total, **phases})
                first = False
            time.sleep(max(end - time.time(), 0.0))
    queue.put((proc, rows))


def ratios(rows: list[dict[str, Any]], proc: int) -> dict[str, dict[str, float]]:
    """Per phase (and ``total``): median in "both" slots, median in the process's own solo slots (ms), both / solo."""
    both = [r for r in rows if r["mode"] == "both"]
    solo = [r for r in rows if r["mode"] == f"solo{proc}"]
    out: dict[str, dict[str, float]] = {}
    for ph in [k for k in rows[0] if k not in ("slot", "mode")]:
        b = statistics.median(r[ph] for r in both) * 1e3
        s = statistics.median(r[ph] for r in solo) * 1e3
        ratio = b / s if s > 0 else float("nan")
        out[ph] = {"both_ms": b, "solo_ms": s, "ratio": ratio, "n_both": len(both), "n_solo": len(solo)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="ranks-2-threads-1")
    ap.add_argument("--blocks", type=int, default=30)
    ap.add_argument("--slot-s", type=float, default=0.25)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("validation/results"))
    args = ap.parse_args()
    slots = schedule(args.blocks, args.seed)
    ctx = mp.get_context("spawn")
    barrier, queue, start = ctx.Barrier(2), ctx.Queue(), ctx.Value("d", 0.0)
    procs = [
        ctx.Process(target=_worker, args=(p, args.case, args.threads, slots, args.slot_s, start, barrier, queue)) for p in (0, 1)
    ]
    for p in procs:
        p.start()
    got = dict(queue.get() for _ in procs)
    for p in procs:
        p.join()
    result = {p: ratios(got[p], p) for p in (0, 1)}
    for p in (0, 1):
        for ph, r in result[p].items():
            print(f"proc {p} {ph:18s} both {r['both_ms']:8.3f} ms  solo {r['solo_ms']:8.3f} ms  x{r['ratio']:.3f}")
    write_evidence(
        args.out,
        "corun-paired",
        {"case": args.case, "threads": args.threads, "slot_s": args.slot_s, "slots": slots, "ratios": result, "rows": got},
    )


if __name__ == "__main__":
    main()
