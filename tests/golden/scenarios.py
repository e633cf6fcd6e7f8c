"""The fixed scenario set whose `dlrmsim simulate --json` results are kept in ``simulate.json``.

The golden file pins the simulator's numbers while its code is reorganised or sped up: a change that is meant
to keep behaviour must reproduce every number to 1e-9 relative; a change meant to alter the model regenerates
the file in its own commit (``python -m tests.golden.record``) and says why.

Scenarios: every training topology preset x every workload preset x ccl/mpi x table/column-wise, at 8 ranks
(or the topology's socket count when smaller), where the combination is valid; plus large rank counts for the
speed work (marked ``slow`` until the engine is fast enough for the default suite).
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass

TOPOLOGIES = {"clx-64s-opa": 8, "skx-8s-upi": 8, "cpx-64s": 8, "clx-2s-56c": 2}
WORKLOADS = ("small", "mlperf", "large")
BACKENDS = ("ccl", "mpi")
PLACEMENTS = ("table_wise", "column_wise")


@dataclass(frozen=True)
class Scenario:
    name: str
    args: tuple[str, ...]
    slow: bool = False


def scenarios() -> list[Scenario]:
    out: list[Scenario] = []
    for topo, ranks in TOPOLOGIES.items():
        for wl in WORKLOADS:
            for be in BACKENDS:
                for pl in PLACEMENTS:
                    args = ("-t", topo, "-w", wl, "-r", str(ranks), "--backend", be, "--placement", pl)
                    out.append(Scenario(f"{topo}/{wl}/r{ranks}/{be}/{pl}", args))
    big = (
        "--topology-set",
        "fabric.endpoints={n}",
        "-w",
        "mlperf",
        "--placement",
        "column_wise",
        "--replicate-below-rows",
        "2048",
    )
    out.append(
        Scenario("clx-64s-opa/large/r64/weak", ("-t", "clx-64s-opa", "-w", "large", "-r", "64", "--scaling", "weak"), slow=True)
    )
    for n in (256, 1024):
        args = ("-t", "clx-64s-opa", "-r", str(n), *(a.format(n=n) for a in big))
        out.append(Scenario(f"clx-opa-{n}/mlperf/column_wise", args, slow=True))
    return out


def run(s: Scenario) -> dict:
    """The scenario's `simulate --json` document, or {"error": first line} for an invalid combination."""
    from dlrmsim.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(["simulate", *s.args, "--json"])
        except SystemExit as exc:
            code = int(exc.code or 0)
    if code != 0:
        return {"error": code}
    return json.loads(out.getvalue())
