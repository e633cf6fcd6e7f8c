"""`python -m dlrmsim.warmup` (run by make after installing) compiles every numba kernel of the engine."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

# Run in a fresh interpreter: in the test process other tests may already have called the kernels.
CHECK = """
import json
import numba.core.registry
from dlrmsim.engine import fluid, maxmin, phases, routes, simulation
from dlrmsim.warmup import warm_up

warm_up()
kernels = {
    f"{mod.__name__}.{name}": obj
    for mod in (fluid, maxmin, phases, routes, simulation)
    for name, obj in vars(mod).items()
    if isinstance(obj, numba.core.registry.CPUDispatcher)
}
# A kernel only other kernels call is compiled into them (its own dispatcher stays empty): it is warm when a
# warm kernel names it, transitively.
warm = {name for name, k in kernels.items() if k.signatures}
grew = True
while grew:
    names = {n for w in warm for n in kernels[w].py_func.__code__.co_names}
    new = {name for name, k in kernels.items() if name not in warm and k.py_func.__name__ in names}
    warm |= new
    grew = bool(new)
print(json.dumps({"kernels": len(kernels), "cold": sorted(set(kernels) - warm)}))
"""


def test_warm_up_compiles_every_engine_kernel() -> None:
    # Because a kernel the warm-up does not call would compile inside the user's first run instead (seconds),
    # every compiled function of the engine must be compiled after it, in a process that ran nothing else.
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, check=True, timeout=300)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["kernels"] >= 11
    assert got["cold"] == [], f"not compiled by the warm-up: {got['cold']}"


def test_the_warm_up_writes_bytecode_even_where_python_would_not(tmp_path) -> None:
    # Because with PYTHONDONTWRITEBYTECODE set (as on this project's VMs and in many container images) Python never
    # caches a module's bytecode, so every command compiled dlrmsim's source again; the warm-up writes it once. Run
    # on a copy of one module so that the checkout's own cache is not touched.
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "mod.py").write_text("X = 1\n")
    code = (
        "import pathlib, sys; from dlrmsim import warmup; "
        f"warmup.PACKAGE = pathlib.Path({str(pkg)!r}); sys.exit(0 if warmup.write_bytecode() else 1)"
    )
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)
    assert os.path.exists(importlib.util.cache_from_source(str(pkg / "mod.py")))
