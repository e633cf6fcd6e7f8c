"""The simulation engine the applications (training, serving, instances) run on.

SimPy ranks with compute and communication core pools, one fluid max-min solver for everything contended
(link directions, NIC ports, memory domains), collectives as phases of point-to-point flows, and the
records every run produces. Units: seconds, bytes, B/s, flop/s. ``API.md`` beside this file is the
reference, with an example.

Documented API (what applications may import):

- from ``dlrmsim.engine``: :class:`Simulation` (``compute``, ``compute_batch`` with :class:`TaskCall`, ``transfer``,
  ``transfer_nodes``, ``collective``, ``alltoallv``, ``run``), :func:`gc_paused`, :data:`RUN_TOTALS`, :class:`CommSettings`,
  :class:`Record`, :func:`records_frame`, :func:`write_chrome_trace`, and the collective registry
  (:data:`ALGORITHMS`, :func:`algorithm`, :class:`Phase`, :class:`FlowSpec`, :class:`CollectiveContext`);
- :mod:`dlrmsim.engine.costs`: the cost formulas as small pure functions (roofline task time, GEMM
  efficiency, dispatch and cache-miss costs, closed forms of the collectives);
- :mod:`dlrmsim.engine.backends`: communication backend presets (``presets/backends/*.yaml``) validated
  into :class:`CommSettings` (``load_backend``, ``Backend``).

Modules: ``simulation`` (the :class:`Simulation` SimPy plumbing), ``fluid`` (max-min solver), ``network``
(links, NIC ports, memory domains as solver resources), ``resources`` (core pools, :class:`CommSettings`),
``collectives`` (algorithms), ``records``, ``trace`` (Chrome/Perfetto JSON), ``costs``, ``backends``,
``maxmin`` and ``arrays`` (compiled kernels), ``jit`` (their disk cache, keyed by all their sources).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlrmsim.lazy import lazy_exports

if TYPE_CHECKING:
    from dlrmsim.collector import gc_paused
    from dlrmsim.engine.collectives import ALGORITHMS, CollectiveContext, FlowSpec, Phase, algorithm
    from dlrmsim.engine.frames import records_frame
    from dlrmsim.engine.records import Record
    from dlrmsim.engine.resources import CommSettings
    from dlrmsim.engine.simulation import RUN_TOTALS, Simulation, TaskCall
    from dlrmsim.engine.trace import write_chrome_trace

# Exports load on first use (PEP 562), so that importing a submodule (e.g. a CLI module) does not import the
# whole package.
_EXPORTS: dict[str, str] = {
    "ALGORITHMS": "dlrmsim.engine.collectives",
    "CollectiveContext": "dlrmsim.engine.collectives",
    "FlowSpec": "dlrmsim.engine.collectives",
    "Phase": "dlrmsim.engine.collectives",
    "algorithm": "dlrmsim.engine.collectives",
    "RUN_TOTALS": "dlrmsim.engine.simulation",
    "Simulation": "dlrmsim.engine.simulation",
    "gc_paused": "dlrmsim.collector",
    "TaskCall": "dlrmsim.engine.simulation",
    "Record": "dlrmsim.engine.records",
    "records_frame": "dlrmsim.engine.frames",
    "CommSettings": "dlrmsim.engine.resources",
    "write_chrome_trace": "dlrmsim.engine.trace",
}

__all__ = [
    "ALGORITHMS",
    "CollectiveContext",
    "CommSettings",
    "FlowSpec",
    "Phase",
    "RUN_TOTALS",
    "Record",
    "Simulation",
    "TaskCall",
    "algorithm",
    "gc_paused",
    "records_frame",
    "write_chrome_trace",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
