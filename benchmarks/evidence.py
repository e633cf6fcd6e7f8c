"""What the evidence-writing benchmarks share: running one function in several fresh processes, and writing a
result as ``validation/results/<UTC time>-<host>-<kind>.json`` with the host facts every result carries."""

from __future__ import annotations

import datetime
import json
import multiprocessing as mp
import os
import platform
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def in_processes(target: Callable[..., None], args: Sequence[tuple]) -> list[Any]:
    """Run ``target(queue, *a)`` for each ``a`` in ``args`` at once, each in a fresh (spawned) process, and return
    what each put on the queue, in the order they put it. ``target`` must be a module-level function."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(queue, *a)) for a in args]
    for p in procs:
        p.start()
    got = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    return got


def write_evidence(out_dir: Path, kind: str, doc: dict[str, Any]) -> Path:
    """Write ``doc`` with date, host and load average in front; return the file's path."""
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    host = platform.node() or "host"
    full = {"date": now.isoformat(), "host": host, "load_average": os.getloadavg()[0], **doc}
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{now:%Y%m%dT%H%M%S}-{host}-{kind}.json"
    path.write_text(json.dumps(full, indent=1) + "\n")
    print(f"wrote {path}")
    return path
