"""Simulation engine: SimPy ranks, contended network flows, collectives, compute and memory resources.

Public entry points: :class:`Simulation`, :class:`CommSettings`, :class:`Record`, :func:`records_frame`,
:func:`write_chrome_trace`, and the collective registry (:data:`ALGORITHMS`, :func:`algorithm`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlrmsim.lazy import lazy_exports

if TYPE_CHECKING:
    from dlrmsim.simulator.collectives import ALGORITHMS, CollectiveContext, FlowSpec, Phase, algorithm
    from dlrmsim.simulator.engine import Simulation
    from dlrmsim.simulator.records import Record, records_frame
    from dlrmsim.simulator.resources import CommSettings
    from dlrmsim.simulator.trace import write_chrome_trace

# Exports load on first use (PEP 562), so that importing a submodule (e.g. a CLI module) does not import the
# whole package.
_EXPORTS: dict[str, str] = {
    "ALGORITHMS": "dlrmsim.simulator.collectives",
    "CollectiveContext": "dlrmsim.simulator.collectives",
    "FlowSpec": "dlrmsim.simulator.collectives",
    "Phase": "dlrmsim.simulator.collectives",
    "algorithm": "dlrmsim.simulator.collectives",
    "Simulation": "dlrmsim.simulator.engine",
    "Record": "dlrmsim.simulator.records",
    "records_frame": "dlrmsim.simulator.records",
    "CommSettings": "dlrmsim.simulator.resources",
    "write_chrome_trace": "dlrmsim.simulator.trace",
}

__all__ = [
    "ALGORITHMS",
    "CollectiveContext",
    "CommSettings",
    "FlowSpec",
    "Phase",
    "Record",
    "Simulation",
    "algorithm",
    "records_frame",
    "write_chrome_trace",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
