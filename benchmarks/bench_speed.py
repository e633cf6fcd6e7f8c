"""Simulator speed: the rows of the speed goals, and wall time against ranks, as JSON for the next change to compare.

Each row runs one CLI command in a fresh interpreter (so peak resident memory is that command's own) and reports
wall time (the median of ``--repeat`` runs, imports excluded) and the process's CPU time beside it (less
sensitive to other load on a shared machine), the time of the same command run again in that process (``again_s``:
what each further point of a sweep or notebook costs once modules and compiled kernels are loaded; not for the
demo), the engine's counters summed over the command's
simulations (``dlrmsim.engine.simulation.RUN_TOTALS``: fluid activities started and finished, rate solves,
solver wake-ups, SimPy events scheduled) and the peak RSS. Counters are deterministic, so they compare across
machines and loads; wall times only on one machine.

    .venv/bin/python -m benchmarks.bench_speed [--out out/bench_speed.json] [--repeat 3] [--curve] [--rows NAME ...]
        [--compile]

``--compile`` also times what an install pays once: ``python -m dlrmsim.warmup`` compiling every engine kernel
into an empty numba cache (``NUMBA_CACHE_DIR`` pointed at a temporary directory, so the project's own cache is
neither used nor touched).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIG = ("--placement", "column_wise", "--replicate-below-rows", "2048", "-w", "mlperf")

# name -> (CLI arguments, goal in seconds or None to keep)
ROWS: dict[str, tuple[tuple[str, ...], float | None]] = {
    "large-64-weak": (("simulate", "-t", "clx-64s-opa", "-w", "large", "-r", "64", "--scaling", "weak", "--json"), 0.5),
    # the same run under the opt-in lockstep approximation (engine.Simulation lockstep_collectives; its error
    # against the exact row is in docs/architecture.md)
    "large-64-weak-lockstep": (
        ("simulate", "-t", "clx-64s-opa", "-w", "large", "-r", "64", "--scaling", "weak", "--lockstep-collectives", "--json"),
        0.5,
    ),
    "mlperf-26": (("simulate", "-t", "clx-64s-opa", "-w", "mlperf", "-r", "26", "--json"), None),
    "mlperf-1024-column-wise": (
        ("simulate", "-t", "clx-64s-opa", "-r", "1024", "--topology-set", "fabric.endpoints=1024", *BIG, "--json"),
        10.0,
    ),
    "instances": (("instances", "-t", "clx-2s-56c", "-w", "mlp-like", "--instances", "1,2,4,7,14,28", "--json"), 2.0),
    "demo": (("demo", "--out", "{tmp}/demo"), 15.0),
}
CURVE_RANKS = (8, 16, 32, 64, 128, 256, 512, 1024)

_CHILD = """
import json, resource, sys, time, contextlib, io
t0 = time.perf_counter()
from dlrmsim.cli import main
from dlrmsim.engine.simulation import RUN_TOTALS
imported = time.perf_counter()


def timed_command():
    t = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(sys.argv[1:])
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
    return time.perf_counter() - t


use0 = resource.getrusage(resource.RUSAGE_SELF)
kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu0 = time.process_time()
wall = timed_command()
cpu = time.process_time() - cpu0
use = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
# worker processes the command simulated in (dlrmsim demo): their CPU time, and the largest one's peak RSS
workers_cpu = kids.ru_utime + kids.ru_stime - kids0.ru_utime - kids0.ru_stime
rss = use.ru_maxrss * 1024
# the kernel's share of the first run (mostly first touches of fresh memory) and the page faults behind it
sys_s, faults = use.ru_stime - use0.ru_stime, use.ru_minflt - use0.ru_minflt
totals = dict(RUN_TOTALS)
again = timed_command() if sys.argv[1] != "demo" else None  # the same command again here: a sweep's further points
out = {"wall_s": wall, "again_s": again, "cpu_s": cpu, "sys_s": sys_s, "minor_faults": faults, "import_s": imported - t0}
out |= {"workers_cpu_s": workers_cpu, "workers_peak_rss_B": kids.ru_maxrss * 1024}
print(json.dumps({**out, "peak_rss_B": rss, **totals}))
"""


def run_once(args: tuple[str, ...], timeout_s: float) -> dict:
    """One command in a fresh interpreter: its wall time (imports excluded), counters and peak RSS."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = [a.format(tmp=tmp) for a in args]
        try:
            proc = subprocess.run(
                [sys.executable, "-c", _CHILD, *argv], capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            return {"wall_s": None, "timed_out_after_s": timeout_s}
    if proc.returncode != 0:
        return {"wall_s": None, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def time_compile(timeout_s: float) -> dict:
    """Wall time (s) of ``python -m dlrmsim.warmup`` with an empty kernel cache: the compilation an install pays."""
    with tempfile.TemporaryDirectory() as cache:
        env = os.environ | {"NUMBA_CACHE_DIR": cache}
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "dlrmsim.warmup"], env=env, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            return {"row": "compile", "wall_s": None, "timed_out_after_s": timeout_s}
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"row": "compile", "wall_s": None, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return {"row": "compile", "command": "python -m dlrmsim.warmup (empty numba cache)", "wall_s": wall}


def measure(name: str, args: tuple[str, ...], goal: float | None, repeat: int, timeout_s: float) -> dict:
    runs = [run_once(args, timeout_s) for _ in range(max(1, repeat))]
    ok = [r for r in runs if r.get("wall_s") is not None]
    row = {"row": name, "command": "dlrmsim " + " ".join(args), "goal_s": goal, "runs": len(runs)}
    if not ok:
        return row | runs[0]
    walls = [r["wall_s"] for r in ok]
    row |= ok[0] | {
        "wall_s": statistics.median(walls),
        "wall_min_s": min(walls),
        "wall_max_s": max(walls),
        "cpu_s": statistics.median(r["cpu_s"] for r in ok),
        "sys_s": statistics.median(r["sys_s"] for r in ok),
        "minor_faults": statistics.median(r["minor_faults"] for r in ok),
        "workers_cpu_s": statistics.median(r.get("workers_cpu_s", 0.0) for r in ok),
        "again_s": statistics.median(r["again_s"] for r in ok) if ok[0].get("again_s") is not None else None,
    }
    row["peak_rss_MB"] = row.pop("peak_rss_B") / 2**20
    row["workers_peak_rss_MB"] = row.pop("workers_peak_rss_B", 0) / 2**20
    row["meets_goal"] = None if goal is None else row["wall_s"] < goal
    return row


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/bench_speed.json"))
    ap.add_argument("--repeat", type=int, default=3, help="runs per row; the median wall time is kept")
    ap.add_argument(
        "--rows",
        nargs="*",
        default=list(ROWS),
        choices=list(ROWS),
        metavar="ROW",
        help=f"rows to run (default all: {', '.join(ROWS)})",
    )
    ap.add_argument(
        "--curve", action="store_true", help="also wall time against ranks, MLPerf column-wise on the scaled fat-tree"
    )
    ap.add_argument("--compile", action="store_true", help="also the kernels' compilation into an empty cache (install)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds before a run counts as too slow")
    args = ap.parse_args(argv)
    report: dict = {"python": sys.version.split()[0], "rows": [], "curve": []}
    if args.compile:
        report["compile"] = time_compile(args.timeout)
        print(f"{'compile':<26} {_seconds(report['compile']['wall_s'])}  {report['compile'].get('error', '')}", flush=True)
    for name in args.rows:
        cmd, goal = ROWS[name]
        report["rows"].append(measure(name, cmd, goal, args.repeat, args.timeout))
        _print(report["rows"][-1])
    if args.curve:
        for n in CURVE_RANKS:
            cmd = (
                "simulate",
                "-t",
                "clx-64s-opa",
                "-r",
                str(n),
                "--topology-set",
                f"fabric.endpoints={max(n, 64)}",
                *BIG,
                "--json",
            )
            report["curve"].append(measure(f"curve-{n}", cmd, None, 1 if n >= 512 else args.repeat, args.timeout) | {"ranks": n})
            _print(report["curve"][-1])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")
    return report


def _print(r: dict) -> None:
    if r.get("wall_s") is None:
        print(f"{r['row']:<26} {r.get('error') or 'timed out after ' + str(r.get('timed_out_after_s')) + ' s'}", flush=True)
        return
    goal = "" if r["goal_s"] is None else f"goal < {r['goal_s']:g} s: {'ok' if r['meets_goal'] else 'MISSED'}"
    print(
        f"{r['row']:<26} {r['wall_s']:8.2f} s (cpu {r['cpu_s']:.2f} s{_workers(r)}, sys {r['sys_s']:.2f} s, "
        f"again {_seconds(r.get('again_s'))})  "
        f"{r['peak_rss_MB']:7.0f} MB  activities "
        f"{r.get('activities', 0):>9}  "
        f"solves {r.get('solves', 0):>7}  wakeups {r.get('wakeups', 0):>7}  simpy events {r.get('simpy_events', 0):>9}  {goal}",
        flush=True,
    )


def _workers(r: dict) -> str:
    """The worker processes' CPU time and peak memory, where the command had any (dlrmsim demo)."""
    if r.get("workers_cpu_s", 0.0) < 0.05:  # (a helper subprocess of the command is not a worker)
        return ""
    return f" + workers {r['workers_cpu_s']:.2f} s, {r.get('workers_peak_rss_MB', 0):.0f} MB"


def _seconds(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} s"


if __name__ == "__main__":
    main()
