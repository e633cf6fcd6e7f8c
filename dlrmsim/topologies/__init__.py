"""Hardware topologies: YAML models of sockets, cards, links and switches, built into networkx graphs.

The package's job is to turn a topology file (a built-in preset or a user's YAML) into a checked
``Topology``: a graph with typed nodes (``kind``; ``compute`` = ``ComputeSpec`` on ranks and hosts) and
edges (``link`` = ``Link``, SI units), the ranks in order, and (ECMP) routes between them, which is
everything the simulator asks. ``summarize`` and ``figure`` describe a topology for people.

    from dlrmsim.topologies import load_topology
    topo = load_topology("clx-64s-opa", sockets=1024, overrides={"links.opa.bandwidth_GBps": 25})
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlrmsim.lazy import lazy_exports

if TYPE_CHECKING:
    from dlrmsim.topologies.builder import (
        PRESET_DIR,
        build_graph,
        build_topology,
        load_spec,
        load_topology,
        precision_note,
        rates_note,
        sockets_override,
        topology_names,
    )
    from dlrmsim.topologies.draw import figure
    from dlrmsim.topologies.routing import FatTreeTopology
    from dlrmsim.topologies.summary import TopologySummary, summarize
    from dlrmsim.topologies.topology import ComputeSpec, EfficiencyTable, Link, Topology

# Exports load on first use (PEP 562), so that importing a submodule (e.g. a CLI module) does not import the
# whole package.
_EXPORTS: dict[str, str] = {
    "PRESET_DIR": "dlrmsim.topologies.builder",
    "build_graph": "dlrmsim.topologies.builder",
    "build_topology": "dlrmsim.topologies.builder",
    "load_spec": "dlrmsim.topologies.builder",
    "load_topology": "dlrmsim.topologies.builder",
    "topology_names": "dlrmsim.topologies.builder",
    "sockets_override": "dlrmsim.topologies.builder",
    "precision_note": "dlrmsim.topologies.builder",
    "rates_note": "dlrmsim.topologies.builder",
    "figure": "dlrmsim.topologies.draw",
    "FatTreeTopology": "dlrmsim.topologies.routing",
    "TopologySummary": "dlrmsim.topologies.summary",
    "summarize": "dlrmsim.topologies.summary",
    "ComputeSpec": "dlrmsim.topologies.topology",
    "EfficiencyTable": "dlrmsim.topologies.topology",
    "Link": "dlrmsim.topologies.topology",
    "Topology": "dlrmsim.topologies.topology",
}

__all__ = [
    "PRESET_DIR",
    "ComputeSpec",
    "EfficiencyTable",
    "FatTreeTopology",
    "Link",
    "Topology",
    "TopologySummary",
    "build_graph",
    "build_topology",
    "figure",
    "load_spec",
    "load_topology",
    "precision_note",
    "rates_note",
    "sockets_override",
    "summarize",
    "topology_names",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
