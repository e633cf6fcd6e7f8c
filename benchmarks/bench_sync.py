"""Ranks that meet at a barrier after equal work: how much later than a typical rank does the last one arrive, and
does a rank compute slower while the others compute beside it?

Every synchronising collective of a multi-rank step waits for its last rank. The simulator's ranks run identical
programs at identical rates, so they arrive together; real ranks on a shared host do not. This measures both
effects bulk-synchronous style, in one set of ``--ranks`` fresh processes (1 thread each), blocks interleaved so
that the host's slow drift cancels: each rank repeats a fixed amount of single-threaded GEMM work (a *segment*,
about ``--seg-ms`` long) and the ranks meet at a barrier before each segment. In a ``together`` block every rank
computes its segment; in an ``alone`` block one rank does (the next one each block) while the others wait at the
barrier, their cores idle, as a one-process calibration runs. Per segment length:

- ``together_ms`` / ``alone_ms``: mean segment over ranks and blocks; ``corun_ratio``: their quotient (a rank's
  compute with every core busy against the same with idle cores beside it);
- ``excess_ms``: in together blocks, the mean over segments of the slowest rank's time less the ranks' mean:
  what a barrier after this much work costs beyond the work (``arrival_wait`` in a 2-rank validation, per
  synchronisation point); ``excess_fraction`` = excess / together;
- ``rank_gap_ms``: half the difference between the ranks' means in together blocks: the part of the excess that
  one rank being slower throughout gives, not segment-to-segment jitter.

With ``--work update`` a segment is instead the sparse SGD update of the rank's embedding tables, as the project
runner's 2-rank step runs it (``EmbeddingBag`` gradients, ``weight.add_``; by default the ranks-2-wide case's share:
2 tables of 200,000 x 32, 2,048 samples of 16 lookups), ``--seg-ms`` ignored: does one rank's update slow the other's?

    .venv/bin/python -m benchmarks.bench_sync [--ranks 2] [--seg-ms 2 10 40] [--seconds 6] [--work gemm|update]
        [--blocks interleaved|together]
        [--out validation/results]

Needs torch.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_skew_runs import parts
from benchmarks.evidence import write_evidence

SHAPE = (128, 256, 256)  # one GEMM of 16.8 MFLOP: tens of microseconds, so a segment's length is set finely
BLOCK = 4  # segments per block


def _reps_for(seg_ms: float) -> int:
    """GEMMs per segment so that one segment takes about ``seg_ms`` on one thread (measured here, in the parent)."""
    import torch

    torch.set_num_threads(1)
    a, w = torch.randn(SHAPE[0], SHAPE[1]), torch.randn(SHAPE[1], SHAPE[2])
    for _ in range(50):
        a @ w
    t = time.perf_counter()
    for _ in range(500):
        a @ w
    per = (time.perf_counter() - t) / 500
    return max(1, round(seg_ms * 1e-3 / per))


UPDATE_TABLES, UPDATE_ROWS, UPDATE_DIM, UPDATE_BATCH, UPDATE_LOOKUPS = 2, 200_000, 32, 2048, 16


def _segment(work: str, reps: int) -> Any:
    """The segment's work as a function: ``reps`` GEMMs, or one sparse update of the rank's tables."""
    import torch

    torch.set_num_threads(1)
    if work == "gemm":
        a, w = torch.randn(SHAPE[0], SHAPE[1]), torch.randn(SHAPE[1], SHAPE[2])

        def gemms() -> None:
            for _ in range(reps):
                a @ w

        return gemms
    grads = []
    tables = []
    for _ in range(UPDATE_TABLES):
        table = torch.nn.EmbeddingBag.from_pretrained(
            torch.empty(UPDATE_ROWS, UPDATE_DIM).uniform_(-0.01, 0.01), freeze=False, mode="sum", sparse=True
        )
        idx = torch.randint(0, UPDATE_ROWS, (UPDATE_BATCH * UPDATE_LOOKUPS,))
        offsets = torch.arange(0, UPDATE_BATCH * UPDATE_LOOKUPS, UPDATE_LOOKUPS)
        table(idx, offsets).sum().backward()
        tables.append(table)
        grads.append(table.weight.grad)

    def update() -> None:
        with torch.no_grad():
            for table, grad in zip(tables, grads, strict=True):
                table.weight.add_(grad, alpha=-0.01)

    return update


def _rank(
    queue: Any, barrier: Any, rank: int, ranks: int, reps: int, blocks: int, work_kind: str = "gemm", alone: bool = True
) -> None:
    work = _segment(work_kind, reps)
    work()
    rows: list[tuple[int, int, float]] = []  # (block, who computes: -1 all, else that rank, segment s)
    for b in range(blocks):
        who = -1 if b % 2 == 0 or not alone else (b // 2) % ranks
        for _ in range(BLOCK):
            barrier.wait()
            if who in (-1, rank):
                t = time.perf_counter()
                work()
                rows.append((b, who, time.perf_counter() - t))
    queue.put((rank, rows))


def _run(ranks: int, reps: int, blocks: int, work: str = "gemm", alone: bool = True) -> list[list[tuple[int, int, float]]]:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    barrier = ctx.Barrier(ranks)
    procs = [ctx.Process(target=_rank, args=(queue, barrier, r, ranks, reps, blocks, work, alone)) for r in range(ranks)]
    for p in procs:
        p.start()
    got = dict(queue.get() for _ in procs)
    for p in procs:
        p.join()
    return [got[r] for r in range(ranks)]


def summarise(per_rank: list[list[tuple[int, int, float]]]) -> dict[str, Any]:
    """The statistics the module docstring names, in ms, from each rank's (block, who, segment s) rows."""
    together = [[s for _, who, s in rows if who == -1] for rows in per_rank]
    alone = [s for rows in per_rank for _, who, s in rows if who >= 0]
    n = min(len(t) for t in together)
    means = [statistics.fmean(t[:n]) for t in together]
    p = parts(together)  # the calibration's statistic (benchmarks/skew.py) and the ranks' gap
    avg = p["segment_ms"] * 1e-3
    alone_mean = statistics.fmean(alone) if alone else float("nan")
    return {
        "segments_together": n,
        "segments_alone": len(alone),
        "together_ms": avg * 1e3,
        "alone_ms": alone_mean * 1e3,
        "corun_ratio": avg / alone_mean,
        "rank_means_ms": [m * 1e3 for m in means],
        "rank_sd_ms": [statistics.pstdev(t[:n]) * 1e3 for t in together],
        "excess_ms": p["mean_excess"] * p["segment_ms"],
        "excess_fraction": p["mean_excess"],
        "rank_gap_ms": p["rank_gap"] * p["segment_ms"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--seg-ms", type=float, nargs="+", default=[2.0, 10.0, 40.0])
    ap.add_argument("--seconds", type=float, default=6.0, help="about this long per segment length")
    ap.add_argument("--work", choices=("gemm", "update"), default="gemm")
    ap.add_argument(
        "--blocks",
        choices=("interleaved", "together"),
        default="interleaved",
        help="together: every block has all ranks computing (no core ever idles for a block), as the calibration's "
        "skew benchmark runs; interleaved: together and alone blocks alternate",
    )
    ap.add_argument("--out", type=Path, default=Path("validation/results"))
    args = ap.parse_args()
    if args.work == "update":
        args.seg_ms = [10.0]  # one update of the tables: its own length (blocks are sized as if 10 ms)
    rows: list[dict[str, Any]] = []
    for seg in args.seg_ms:
        reps = _reps_for(seg) if args.work == "gemm" else 0
        # a together block and an alone block take about 2 * BLOCK segments
        blocks = 2 * max(2, round(args.seconds / (2 * BLOCK * seg * 1e-3)))
        s = summarise(_run(args.ranks, reps, blocks, args.work, alone=args.blocks == "interleaved"))
        rows.append({"seg_ms": seg, "reps": reps, "blocks": blocks, **s})
        print(
            f"seg {seg:5.1f} ms: together {s['together_ms']:.3f} alone {s['alone_ms']:.3f} (x{s['corun_ratio']:.3f}); "
            f"excess {s['excess_ms']:.3f} ms ({100 * s['excess_fraction']:.1f} %), rank gap {s['rank_gap_ms']:.3f} ms; "
            f"{s['segments_together']} + {s['segments_alone']} segments",
            flush=True,
        )
    work = {"gemm": SHAPE, "update": [UPDATE_TABLES, UPDATE_ROWS, UPDATE_DIM, UPDATE_BATCH, UPDATE_LOOKUPS]}[args.work]
    kind = ("sync" if args.work == "gemm" else f"sync-{args.work}") + ("-together" if args.blocks == "together" else "")
    write_evidence(
        args.out,
        kind,
        {"ranks": args.ranks, "work": args.work, "blocks": args.blocks, "shape": work, "block": BLOCK, "rows": rows},
    )


if __name__ == "__main__":
    main()
