"""Hand-built topologies for engine tests (every number visible in tests.engine.handmade)."""

from __future__ import annotations

import pytest

from dlrmsim.topologies import load_topology
from dlrmsim.topologies.topology import Topology
from tests.engine.handmade import GB, clx_like, pruned_tree, ring, simple_spec, star, two_node  # noqa: F401


def cluster64() -> Topology:
    """The 64-socket CLX cluster preset."""
    return load_topology("clx-64s-opa")


@pytest.fixture(scope="session")
def clx64() -> Topology:
    return cluster64()
