"""Is a change faster? One CLI command timed in two checkouts, in pairs close in time, on a host whose speed drifts.

A shared 2-vCPU VM changes speed by 1.3-1.5x over minutes (docs/calibration.md, "Repeats, passes and drift"), so
two separate ``bench_speed`` runs of a base and a changed tree, a minute apart, cannot resolve a 10 % change. Here
each checkout gets one long-lived worker process (its own ``dlrmsim`` imported from its own directory, kernels
loaded once), and the driver asks them to run the command alternately: pair i runs base then head, pair i+1 head
then base, each run a few seconds after the other. The statistic is each pair's ratio head / base of CPU time (the
process's, less sensitive than wall time to other load), summarised by its median and quartiles; the engine's
counters (``RUN_TOTALS``) must agree run for run, or the two trees did different work and the ratio means nothing.

    git worktree add /tmp/base <rev> --detach
    (cd /tmp/base && "$OLDPWD/.venv/bin/python" -m dlrmsim.warmup)  # the base's own kernel cache, once
    .venv/bin/python -m benchmarks.bench_ab --base /tmp/base --pairs 12 --rows instances large-64-weak
    .venv/bin/python -m benchmarks.bench_ab --base /tmp/base -- simulate -t clx-64s-opa -w mlperf -r 26 --json

(A worker imports the ``dlrmsim`` of its checkout because ``python -c`` puts its working directory first on the
module path; each checkout keeps its own numba cache next to its sources, so compile the base's once first.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import bench_speed

ROOT = Path(__file__).resolve().parents[1]
ROWS = bench_speed.ROWS  # by name: --rows

_WORKER = """
import contextlib, io, json, sys, time
from dlrmsim.cli import main
from dlrmsim.engine.simulation import RUN_TOTALS
import dlrmsim
print(json.dumps({"ready": dlrmsim.__file__}), flush=True)
for line in sys.stdin:
    args = json.loads(line)
    if not args:
        break
    RUN_TOTALS.clear()
    c0, w0 = time.process_time(), time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(args)
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
    out = {"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - w0, "totals": dict(RUN_TOTALS)}
    print(json.dumps(out), flush=True)
"""


@dataclass
class Worker:
    """One checkout's long-lived process running the command on request."""

    name: str
    checkout: Path
    proc: subprocess.Popen = field(init=False)
    module: str = ""

    def __post_init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER],
            cwd=self.checkout,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.module = json.loads(self._line())["ready"]

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} worker ({self.checkout}) exited: see its error above")
        return line

    def run(self, args: list[str]) -> dict:
        """Run the CLI command ``args`` once (``{tmp}`` in an argument: a fresh temporary directory, as bench_speed's
        demo row writes its report there); its CPU and wall time (s) and the engine's counters."""
        assert self.proc.stdin is not None
        with tempfile.TemporaryDirectory() as tmp:
            self.proc.stdin.write(json.dumps([a.format(tmp=tmp) for a in args]) + "\n")
            self.proc.stdin.flush()
            return json.loads(self._line())

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    """(p25, median, p75) of ``xs`` (statistics.quantiles' exclusive method; the value itself for one sample)."""
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4)
    return q[0], statistics.median(xs), q[2]


def compare(base: Worker, head: Worker, args: list[str], pairs: int, warm: int = 1) -> dict:
    """Run the command ``args`` ``warm`` untimed times in each worker, then ``pairs`` pairs in alternating order; the
    summary as a dict."""
    for _ in range(warm):
        base.run(args)
        head.run(args)
    runs: dict[str, list[dict]] = {"base": [], "head": []}
    for i in range(pairs):
        order = (("base", base), ("head", head)) if i % 2 == 0 else (("head", head), ("base", base))
        for side, w in order:
            runs[side].append(w.run(args))
    same = all(b["totals"] == h["totals"] for b, h in zip(runs["base"], runs["head"], strict=True))
    out: dict = {"command": "dlrmsim " + " ".join(args), "pairs": pairs, "counters_equal": same}
    for side in ("base", "head"):
        cpu = [r["cpu_s"] for r in runs[side]]
        wall = [r["wall_s"] for r in runs[side]]
        out[side] = {"cpu_min_s": min(cpu), "cpu_median_s": statistics.median(cpu), "wall_min_s": min(wall),
                     "wall_median_s": statistics.median(wall), "totals": runs[side][0]["totals"]}  # fmt: skip
    for stat in ("cpu_s", "wall_s"):
        ratios = [h[stat] / b[stat] for b, h in zip(runs["base"], runs["head"], strict=True)]
        p25, med, p75 = quartiles(ratios)
        out[f"ratio_{stat}"] = {"p25": p25, "median": med, "p75": p75, "all": ratios}
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="checkout of the base revision (e.g. a git worktree)")
    ap.add_argument("--head", type=Path, default=ROOT, help="checkout of the changed tree (default: this one)")
    ap.add_argument("--pairs", type=int, default=10, help="timed pairs per command (alternating order)")
    ap.add_argument("--warm", type=int, default=1, help="untimed runs per side first (kernel loading, caches)")
    ap.add_argument(
        "--rows", nargs="*", default=[], choices=list(ROWS), metavar="ROW",
        help=f"bench_speed rows to compare instead of a command ({', '.join(ROWS)})",
    )  # fmt: skip
    ap.add_argument("--out", type=Path, default=None, help="also write the summaries as JSON here")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the dlrmsim CLI arguments")
    ns = ap.parse_args(argv)
    cmd = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    commands = [list(ROWS[r][0]) for r in ns.rows] + ([cmd] if cmd else [])
    if not commands:
        ap.error("give --rows or a dlrmsim command after --")
    base, head = Worker("base", ns.base.resolve()), Worker("head", ns.head.resolve())
    results = []
    try:
        for args in commands:
            results.append(compare(base, head, args, ns.pairs, ns.warm))
            _print(results[-1])
    finally:
        base.close()
        head.close()
    report = {"base_module": base.module, "head_module": head.module, "results": results}
    print(f"base {base.module}, head {head.module}")
    if ns.out is not None:
        ns.out.parent.mkdir(parents=True, exist_ok=True)
        ns.out.write_text(json.dumps(report, indent=1) + "\n")
    return report


def _print(res: dict) -> None:
    r = res["ratio_cpu_s"]
    print(
        f"{res['command']}\n  base cpu {res['base']['cpu_median_s']:.3f} s (min {res['base']['cpu_min_s']:.3f}), head cpu "
        f"{res['head']['cpu_median_s']:.3f} s (min {res['head']['cpu_min_s']:.3f}); head/base per pair: median "
        f"{r['median']:.3f}, p25-p75 {r['p25']:.3f}-{r['p75']:.3f} over {res['pairs']} pairs; counters "
        f"{'equal' if res['counters_equal'] else 'DIFFER: the trees did different work'}",
        flush=True,
    )


if __name__ == "__main__":
    main()
