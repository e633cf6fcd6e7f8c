"""Parameter sweeps over topologies, workloads and what-if overrides, run on Dask, and their HTML reports.

- ``spec``: the sweep YAML (``load_spec``), its grid expansion into ``SweepPoint``s and validation.
- ``evaluate``: ``evaluate_point``, the one function that asks the training simulator about a point.
- ``runner``: ``run_sweep``, resumable, on a Dask cluster or serially, appending each result at once.
- ``results``: the append-only results file and ``load_results`` (one pandas DataFrame).
- ``derive``: ``derive_scaling``, speedup and efficiency per configuration.
- ``report``: ``build_report`` (one self-contained HTML page) and ``scaling_figures``.
"""

from __future__ import annotations

import importlib
from typing import Any

# Lazy: the root CLI imports dlrmsim.studies.cli on every command, so pandas, plotly and dask load only when used.
_EXPORTS = {
    "SweepPoint": "dlrmsim.studies.spec",
    "SweepSpec": "dlrmsim.studies.spec",
    "expand": "dlrmsim.studies.spec",
    "load_spec": "dlrmsim.studies.spec",
    "evaluate_point": "dlrmsim.studies.evaluate",
    "run_sweep": "dlrmsim.studies.runner",
    "load_results": "dlrmsim.studies.results",
    "derive_scaling": "dlrmsim.studies.derive",
    "build_report": "dlrmsim.studies.report",
    "scaling_figures": "dlrmsim.studies.report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(name)
