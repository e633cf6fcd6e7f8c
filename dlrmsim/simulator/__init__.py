"""Simulation engine: SimPy ranks, contended network flows, collectives, compute and memory resources.

Public entry points: :class:`Simulation`, :class:`CommSettings`, :class:`Record`, :func:`records_frame`,
:func:`write_chrome_trace`, and the collective registry (:data:`ALGORITHMS`, :func:`algorithm`).
"""

from dlrmsim.simulator.collectives import ALGORITHMS, CollectiveContext, FlowSpec, Phase, algorithm
from dlrmsim.simulator.engine import Simulation
from dlrmsim.simulator.records import Record, records_frame
from dlrmsim.simulator.resources import CommSettings
from dlrmsim.simulator.trace import write_chrome_trace

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
