"""The reference DLRM's step with and without its data generation between steps, and its operators per step.

facebookresearch/dlrm's ``dlrm_s_pytorch.py`` times forward, loss, backward and the optimizer step, but its random
data loader builds each batch in Python just before the step (about 100 ms a batch on the 2-vCPU AMD VM at the
``base`` case's shape, 2026-11-27), so every timed step starts after that long a single-threaded pause: the
intra-op thread team asleep, the caches holding the loader's data. The project runner and TorchRec's target build
their batches before timing. On a 16-core Xeon guest (machine G, docs/calibration.md) the reference's ``base`` step
at 16 threads ran 15.7 % slower than predicted in all three runs while the runner's and TorchRec's were within 5 %;
at one thread all three were. This benchmark separates the pause from the step: each round runs the unmodified
script and a copy that builds every batch before training (one line added, in a temporary directory; the checkout
is not changed and nothing of it is kept), at each thread count, interleaved, and reports each run's median and
10th-percentile ms/it. ``--profile`` also runs each version once under the script's own ``--enable-profiling`` and
keeps the operators' self CPU time per step.

    .venv/bin/python -m benchmarks.bench_reference_gap --reference /tmp/dlrm --threads 1 16 --rounds 3 \\
        [--case base] [--profile] [--out validation/results]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from dlrmsim.calibration.targets.reference import find_script, parse_step_times, reference_args
from dlrmsim.calibration.validate import load_cases

CACHED = "dlrm_cached.py"
# The line before the training loop's profiler block; the copy builds every batch there.
_ANCHOR = "    ext_dist.barrier()\n    with torch.autograd.profiler.profile("
_PREBUILT = "    train_ld = list(train_ld)  # dlrmsim: every batch built before training\n"
# A row of the profiler's key_averages table: name, then columns of which the second is the self CPU time and the
# last the number of calls.
_TIME = re.compile(r"^([0-9.]+)(us|ms|s)$")


def prebuilt_copy(source: str) -> str:
    """The reference script's text with its batches built before the training loop (one line added)."""
    if source.count(_ANCHOR) != 1:
        raise SystemExit("this dlrm_s_pytorch.py has no single training-loop anchor; the benchmark needs updating")
    return source.replace(_ANCHOR, _PREBUILT + _ANCHOR, 1)


def _seconds(text: str) -> float | None:
    m = _TIME.match(text)
    if m is None:
        return None
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]


def profile_rows(table: str) -> dict[str, tuple[float, int]]:
    """Operator name -> (self CPU seconds, calls) from a torch.profiler ``key_averages().table()`` text."""
    out: dict[str, tuple[float, int]] = {}
    for line in table.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) < 7 or not cells[-1].isdigit():
            continue
        self_s = _seconds(cells[2])
        if self_s is not None:
            out[cells[0]] = (self_s, int(cells[-1]))
    return out


def run(workdir: Path, script: str, args: list[str], threads: int, profile: bool = False) -> dict[str, object]:
    """One run of ``script`` in ``workdir`` on ``threads`` threads: its step times, and with ``profile`` its
    operators' self CPU time per step (the profiler's output files are read and removed)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    extra = ["--enable-profiling"] if profile else []
    proc = subprocess.run([sys.executable, script, *args, *extra], cwd=workdir, env=env, capture_output=True, text=True)
    times = parse_step_times(proc.stdout)
    if proc.returncode != 0 or not times:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"{script} failed (exit {proc.returncode}): {last}")
    kept = sorted(times[5:])
    row: dict[str, object] = {
        "median_ms": 1e3 * statistics.median(kept),
        "p10_ms": 1e3 * kept[len(kept) // 10],
        "iterations": len(kept),
    }
    if profile:
        tables = sorted(workdir.glob("*_total.prof"))
        ops = profile_rows(tables[-1].read_text()) if tables else {}
        steps = len(times)
        row["ops_ms_per_step"] = {
            k: round(1e3 * s / steps, 4) for k, (s, _) in sorted(ops.items(), key=lambda kv: -kv[1][0])[:25]
        }
        # the script names its trace after itself whatever file runs it (a literal "dlrm_s_pytorch")
        for f in [*workdir.glob("*.prof"), *workdir.glob("dlrm_s_pytorch*.json")]:
            f.unlink()
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", type=Path, required=True, help="a facebookresearch/dlrm checkout")
    ap.add_argument("--case", default="base", help="the validation case whose workload and batch run")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=45)
    ap.add_argument("--profile", action="store_true", help="also one profiled run of each version a thread count")
    ap.add_argument("--out", type=Path, default=Path("validation/results"))
    args = ap.parse_args(argv)
    script = find_script(args.reference)
    case = load_cases(only=[args.case])[0]
    flags = reference_args(case.workload, case.batch, args.iterations)
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "dlrm"
        shutil.copytree(script.parent, work, ignore=shutil.ignore_patterns(".git", "*.png", "input"))
        (work / CACHED).write_text(prebuilt_copy((work / script.name).read_text()))
        for r in range(args.rounds):
            for t in args.threads:
                for version, name in (("as published", script.name), ("batches prebuilt", CACHED)):
                    d = run(work, name, flags, t)
                    rows.append({"round": r, "threads": t, "version": version, **d})
                    print(f"round {r} t{t:<3d} {version:16s} median {d['median_ms']:7.2f} ms/it, p10 {d['p10_ms']:7.2f}")
        if args.profile:
            for t in args.threads:
                for version, name in (("as published", script.name), ("batches prebuilt", CACHED)):
                    rows.append({"round": "profile", "threads": t, "version": version, **run(work, name, flags, t, True)})
    out = {"date": now.isoformat(), "host": platform.node() or "host", "case": args.case, "flags": flags, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{now:%Y%m%dT%H%M%S}-{out['host']}-reference-gap.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
