"""Per-rank resources: compute and communication core pools, memory domains, and backend parameters.

:class:`CommSettings` holds what a communication backend means to the engine (pinned cores, an unpinned
progress thread and its interference, per-message overhead, completion order, collective algorithms).
Backend YAML presets are validated into it. :class:`RankResources` is the SimPy side of one rank.
"""

from __future__ import annotations

import math
from typing import Literal

import simpy
from pydantic import Field

from dlrmsim.config import StrictModel
from dlrmsim.engine.costs import progress_thread_interference
from dlrmsim.errors import DlrmsimError
from dlrmsim.topologies.topology import ComputeSpec


class CommSettings(StrictModel):
    """Communication backend parameters the engine needs (one backend for the whole run).

    Interference model: while any flow to or from rank r is in flight and ``progress_thread_unpinned`` is
    set, r's compute-pool tasks get only ``1 - stolen_cores / compute_cores`` of each core (``1 - stolen_cores``
    with ``barrier_synchronized``) (their flop rate
    and their core-limited bandwidth shrink by that factor); while any compute-pool task runs on either end
    rank of a flow, that flow's rate cap is divided by ``comm_slowdown``. Rates are recomputed whenever
    communication or compute starts or stops, so both stretch exactly while they overlap.
    """

    pinned_cores: int = Field(0, ge=0, description="cores per rank reserved for communication; removed from the compute pool")
    progress_thread_unpinned: bool = Field(False, description="an unpinned progress thread competes with compute threads")
    stolen_cores: float = Field(1.0, ge=0, description="cores' worth of CPU time the unpinned thread takes while comm is active")
    barrier_synchronized: bool = Field(
        False,
        description="compute kernels end in a barrier, so all threads wait for the one sharing its core with the progress "
        "thread: compute runs at 1 - min(stolen_cores, 1) instead of 1 - stolen_cores / compute_cores",
    )
    comm_slowdown: float = Field(1.0, ge=1.0, description="flow rate-cap divisor while compute runs beside the unpinned thread")
    message_overhead_s: float = Field(0.0, ge=0, description="backend software overhead per message (s), added to link overheads")
    in_order_completion: bool = Field(False, description="a rank's communication ops complete in issue order (MPI-like)")
    copy_traffic_factor: float = Field(
        2.0, ge=0, description="memory bytes per network byte at each end when the path crosses a NIC stack (a copy: read+write)"
    )
    reduce_traffic_factor: float = Field(3.0, ge=0, description="memory bytes per reduced byte (read two operands, write one)")
    intra_node_copy_cores: float | None = Field(
        None,
        gt=0,
        description="cores per rank copying its intra-node messages (paths over one-sided links only) through shared "
        "buffers: the sender's copy-in and the receiver's copy-out each run at these cores' streaming rate and draw "
        "copy_traffic_factor x the rate from their memory domain; None: intra-node transfers run at link speed",
    )
    reduction_cores: float | None = Field(
        None, gt=0, description="cores doing reduction arithmetic; default max(pinned_cores, 1)"
    )
    rendezvous: bool = Field(
        True,
        description="a collective step's flow starts when both ends have reached that step (large-message rendezvous); "
        "False: eager, it starts when the sender reaches the step",
    )
    ecmp: Literal["hash", "split"] = Field(
        "hash",
        description="hash: each rank-to-rank flow takes Topology.route(src, dst), one path of its ECMP set; "
        "split: every flow spreads evenly over all shortest paths (ideal spraying; more solver work)",
    )
    algorithms: dict[str, str | None] = Field(
        default_factory=dict, description="collective op -> algorithm name overrides (None: the op's default)"
    )

    def reduce_cores(self) -> float:
        return self.reduction_cores if self.reduction_cores is not None else float(max(self.pinned_cores, 1))


CORE_UNIT = 2.0**-20  # cores: the grain in which core pools count


class CorePool(simpy.Container):
    """A simpy.Container of cores that counts in whole units of :data:`CORE_UNIT` internally.

    With float levels, uneven shares (27/7 cores) drift: after a few gets and puts in varying order the level
    is a few ulps off, so a returning task's put exceeds the capacity (and blocks for ever, silently ending the
    run) or the last share no longer fits. Here a get and its put move the same integer number of units (the
    amount rounded down), so the level comes back exactly and ``k`` shares of ``capacity / k`` always fit
    together. ``level`` reads in cores; the rounding (under 1e-6 cores per task) does not affect task speed,
    which the engine takes from the task's own ``cores``.
    """

    def __init__(self, env: simpy.Environment, cores: float) -> None:
        super().__init__(env, capacity=cores, init=cores)
        self._cap_units = self._units(cores)
        self._level_units = self._cap_units

    @staticmethod
    def _units(amount: float) -> int:
        # floor, except that a share within 1e-6 units above or below a whole unit (a dyadic share such as 13.5,
        # or one a rounding step away from it) counts as that unit
        x = amount / CORE_UNIT
        r = round(x)
        return int(r) if abs(x - r) <= 1e-6 else math.floor(x)

    @property
    def level(self) -> float:
        return self._level_units * CORE_UNIT

    def take_now(self, amount: float) -> bool:
        """Take ``amount`` cores at once, without an event, when :meth:`get` would grant them this instant (no
        earlier request waits, and they are free); else take nothing and return False (then use :meth:`get`).
        A get that is granted at once is otherwise an event scheduled for nobody: a task costs two fewer."""
        return not self.get_queue and self._take(self._units(amount))

    def give_back(self, amount: float) -> None:
        """Return ``amount`` cores taken earlier. With requests waiting this is :meth:`put`, whose processing grants
        them; with none, the level rises at once, as a put's does, and there is nothing to grant."""
        if self.get_queue:
            self.put(amount)
        else:
            self._add(self._units(amount))  # always fits: it returns what was taken

    def _take(self, u: int) -> bool:
        """Take ``u`` units if the level holds them."""
        if self._level_units < u:
            return False
        self._level_units -= u
        self._level = self._level_units * CORE_UNIT
        return True

    def _add(self, u: int) -> bool:
        """Add ``u`` units if they fit under the capacity."""
        if self._level_units + u > self._cap_units:
            return False
        self._level_units += u
        self._level = self._level_units * CORE_UNIT
        return True

    def _do_put(self, event: simpy.resources.container.ContainerPut) -> bool | None:
        if self._add(self._units(event.amount)):
            event.succeed()
            return True
        return None

    def _do_get(self, event: simpy.resources.container.ContainerGet) -> bool | None:
        if self._take(self._units(event.amount)):
            event.succeed()
            return True
        return None


class RankResources:
    """Core pools of one rank: ``compute`` (cores - pinned) and ``comm`` (pinned, or 1 helper thread)."""

    def __init__(self, env: simpy.Environment, rank: int, spec: ComputeSpec, comm: CommSettings) -> None:
        self.rank = rank
        self.spec = spec
        n_compute = spec.cores - comm.pinned_cores
        if n_compute <= 0:
            raise DlrmsimError(
                f"backend pins {comm.pinned_cores} cores but rank {rank} ({spec.name}) has only {spec.cores}",
                field="comm_cores",
                fix=f"pin fewer cores (--comm-cores {max(spec.cores - 1, 0)} or 0) or use --backend mpi or shm",
            )
        self.compute_cores = float(n_compute)
        self.comm_cores = float(max(comm.pinned_cores, 1))
        self.pools = {
            "compute": CorePool(env, self.compute_cores),
            "comm": CorePool(env, self.comm_cores),
        }
        # Share of each compute core left to compute threads while the unpinned progress thread is busy.
        if comm.progress_thread_unpinned:
            self.interfered_share = progress_thread_interference(
                comm.stolen_cores, self.compute_cores, comm.barrier_synchronized
            ).compute_share
        else:
            self.interfered_share = 1.0

    def pool(self, name: str) -> simpy.Container:
        if name not in self.pools:
            raise DlrmsimError(f"unknown core pool '{name}'", field="pool", fix="use 'compute' or 'comm'")
        return self.pools[name]
