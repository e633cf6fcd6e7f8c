"""Name the engine's compiled kernels for Linux ``perf``: where does a simulation's time go inside numba code?

numba emits machine code at run time (or loads it from its cache) without symbols that ``perf`` can read, so a
profile shows its samples as bare addresses, about half of a 64-rank Large iteration's. ``NUMBA_ENABLE_PROFILING``
did not help on this project's machines: it wrote no map, with the cache or without. This module runs a CLI command
once (which loads every kernel it needs), then writes ``/tmp/perf-<pid>.map``, the per-process symbol map that
``perf report`` reads for code without symbols: every function of every loaded kernel of ``dlrmsim.engine``, the
callees numba linked into each kernel's library included (a callee LLVM did not inline keeps its own address).
Then it runs the command ``--repeat`` more times, timed, for ``perf`` to sample:

    perf record -F 999 -o perf.data .venv/bin/python -m benchmarks.perf_map --repeat 2 -- \\
        simulate -t clx-64s-opa -w large -r 64 --scaling weak --json
    perf report -i perf.data --no-children --sort sym

A function's size in the map runs to the next known address (numba does not keep sizes), at most ``MAX_SIZE``
bytes: good enough to attribute samples, not to disassemble. It reads numba internals (a kernel library's LLVM
module and execution engine), so it is a tool for profiling, not part of the product.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import sys
import time
from pathlib import Path

from numba.core.registry import CPUDispatcher

from dlrmsim.cli import main as cli_main
from dlrmsim.engine import jit

# the engine's kernel modules, as the kernel cache keys them (jit.py itself defines none)
KERNEL_MODULES = tuple(importlib.import_module(f"dlrmsim.engine.{Path(f).stem}") for f in jit.KERNEL_MODULES if f != "jit.py")
MAX_SIZE = 1 << 16  # bytes


def demangle(name: str) -> str:
    """numba's mangled name (``_ZN7dlrmsim6engine6maxmin19progressive_fillingB3v22B44...E5Array...``) as a dotted
    path (``dlrmsim.engine.maxmin.progressive_filling``); any other name as it is."""
    if not name.startswith("_ZN"):
        return name
    parts, i = [], 3
    while i < len(name) and name[i].isdigit():
        j = i
        while name[j].isdigit():
            j += 1
        length = int(name[i:j])
        parts.append(name[j : j + length])
        i = j + length
    return ".".join(parts) or name


def kernel_symbols(modules: tuple = KERNEL_MODULES) -> dict[int, str]:
    """Start address -> demangled name of every function defined in the loaded kernels of ``modules``."""
    found: dict[int, str] = {}
    for mod in modules:
        for obj in vars(mod).values():
            if not isinstance(obj, CPUDispatcher):
                continue
            for cres in obj.overloads.values():
                lib = cres.library
                # a kernel loaded from the cache keeps the module it links into others; one compiled now, its final one
                llmod = getattr(lib, "_shared_module", None) or getattr(lib, "_final_module", None)
                if llmod is None:
                    continue
                engine = lib._codegen._engine._ee
                for fn in llmod.functions:
                    if fn.is_declaration:
                        continue
                    addr = engine.get_function_address(fn.name)
                    if addr:
                        found.setdefault(addr, demangle(fn.name))
    return found


def write_perf_map(symbols: dict[int, str], path: Path) -> int:
    """Write ``perf``'s map format (``START SIZE name``, hex) for ``symbols``; return how many lines."""
    items = sorted(symbols.items())
    lines = []
    for k, (addr, name) in enumerate(items):
        nxt = items[k + 1][0] if k + 1 < len(items) else addr + MAX_SIZE
        lines.append(f"{addr:x} {min(nxt - addr, MAX_SIZE):x} {name}\n")
    path.write_text("".join(lines))
    return len(lines)


def run_command(argv: list[str]) -> float:
    """One CLI command in this process, its output discarded; its wall time (s)."""
    t = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            cli_main(argv)
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2, help="timed runs after the first (the ones to profile)")
    ap.add_argument("--map", type=Path, default=None, help="where to write the map (default /tmp/perf-<pid>.map)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="a dlrmsim command and its arguments, after --")
    args = ap.parse_args(argv)
    command = [a for a in args.command if a != "--"] or ["simulate", "-t", "clx-64s-opa", "-w", "small", "-r", "8"]
    first = run_command(command)
    out = args.map or Path(f"/tmp/perf-{os.getpid()}.map")
    n = write_perf_map(kernel_symbols(), out)
    print(f"first run {first:.2f} s; {n} kernel functions named in {out}", file=sys.stderr)
    for _ in range(args.repeat):
        print(f"run {run_command(command):.2f} s", file=sys.stderr)
    return out


if __name__ == "__main__":
    main()
