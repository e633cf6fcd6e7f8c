"""`python -m dlrmsim.warmup` (run by make after installing) compiles every numba kernel of the engine."""

from __future__ import annotations

import json
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
