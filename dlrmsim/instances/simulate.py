"""Several model instances per many-core socket: no per-layer barrier across the socket, shared memory
bandwidth, and the gradient synchronisation between instances (the ParaX study, [Yin21] in docs/sources.md).

Model
-----
- The topology has one rank per socket (= NUMA node), each with its own memory domain. ``k`` instances per
  socket each run their layers as tasks on that rank (``sim.compute_batch``, ``cores=cores/k``): they share its
  core pool and its memory bandwidth (max-min, by the engine), and nothing else. Within an instance every
  layer is one task on all its cores, so each layer ends in a barrier of the instance's own threads only;
  one instance per socket is the usual barrier-per-layer run. Fewer instances than sockets (``--per node``)
  means an instance spans sockets: each layer runs on every socket it spans (its share of the batch,
  NUMA-local data) and ends in a barrier across them.
- Each instance gets batch/k samples (the per-socket batch split as evenly as integers allow). Bandwidth-
  bound and compute-bound layers are told apart only by the roofline of their flops and bytes.
- Training is synchronous: each iteration ends when every instance's gradients are combined and the weights
  updated; the next iteration starts then. Delayed initiation: every iteration each instance starts after a
  delay (settings ``start_delay``), and jitter scales each task's work by a lognormal factor (``jitter_sigma``) at
  the rates of its nominal size, so its time alone scales by the factor. Both come from the instance's own random
  generator (one per instance, spawned from the settings' ``seed``), an iteration's at its start: no draw depends
  on the order in which simulated events happen, so a what-if that changes a cost, or another instance, runs the
  same draws (common random numbers: the difference between two settings is the model's, not a reshuffle).
- Synchronisation (G = bytes of the dense model, m = instances on a socket; "traffic" is memory-domain bytes):
    gradient_server   one shared weight copy per NUMA node. Each instance adds its gradient into it on its own
                      cores (read gradient + read/write shared copy: 3G traffic; chunks are assumed claimed in
                      a rotating order, so there is no lock wait). Then the NUMA copies are allreduced over
                      the inter-socket link (ring: (S-1)/S of G each way per step pair, each reduction 3 bytes
                      of traffic per byte, shared by the socket's instances' cores), and the SGD step runs on
                      each shared copy (3G traffic, split over the instances). Forward reads the shared copy:
                      no weight copies.
    parameter_server  one core per NUMA node is the server (removed from compute: instances share cores-1).
                      Each instance copies its gradient out (2G traffic); the server, on its one core, adds
                      each into its sum as it arrives (3G traffic each, at one core's bandwidth), allreduces
                      with the other NUMA node's server (it does the reductions), applies SGD (3G); then every
                      instance copies the weights in (2G).
    ring_allreduce    the m instances of a socket form a ring through shared memory: m-1 reduce-scatter steps
                      (read the neighbour's chunk, read and write one's own: 3G/m traffic) and m-1 allgather
                      steps (a copy: 2G/m), each step after the neighbour's previous one plus a handshake
                      latency (settings ``ring_step_latency_us``); between the reduce-scatter and the
                      allgather, instance j's chunk is allreduced with instance j of the other sockets over the
                      link. Every instance then applies SGD to its own weight copy (3G traffic).
    none              no gradient exchange (inference, or to isolate the overlap effect).
  DLRM embedding tables are updated sparsely in place by every instance in its NUMA node's replica; the rows
  touched on one node are sent to the other replicas each iteration and applied there (read row delta, read
  and write row: 3 bytes of traffic per byte), whatever the scheme.

Units: seconds, bytes, B/s, flop/s, samples.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import simpy
from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveInt

from dlrmsim import config
from dlrmsim.config import StrictModel
from dlrmsim.engine import costs
from dlrmsim.engine.resources import CommSettings
from dlrmsim.engine.simulation import Simulation, TaskCall
from dlrmsim.errors import DlrmsimError, unknown_name_error
from dlrmsim.topologies import load_topology
from dlrmsim.topologies.topology import ComputeSpec, EfficiencyTable, Topology
from dlrmsim.training.taskgraph import IterationSettings, UpdateCosts, build_iteration
from dlrmsim.workloads import load_workload, model, workload_names
from dlrmsim.workloads.layers import is_layer_workload_file, layer_tasks, layer_workload_names, load_layer_workload
from dlrmsim.workloads.placement import PlacementSpec, place

SETTINGS_DIR = Path(__file__).resolve().parent / "presets"

Sync = Literal["gradient_server", "parameter_server", "ring_allreduce", "none"]
SYNC_SCHEMES: tuple[str, ...] = ("gradient_server", "parameter_server", "ring_allreduce", "none")
Per = Literal["socket", "node"]


# --------------------------------------------------------------------------------------------------------
# Settings and configuration


class StartDelay(StrictModel):
    """Delayed initiation: each iteration, instance i starts after a delay in [0, fraction x its time alone]."""

    mode: Literal["random", "even", "none"] = "random"
    fraction: NonNegativeFloat = Field(0.05, description="window as a fraction of the instance's iteration time alone")


class InstanceSettings(StrictModel):
    """Run settings of the instance model (presets/*.yaml)."""

    name: str = "default"
    description: str = ""
    start_delay: StartDelay = StartDelay()
    jitter_sigma: NonNegativeFloat = Field(0.02, description="log-standard deviation of the lognormal work factor per task")
    efficiency_basis: Literal["per_core", "per_task"] = "per_core"
    ring_step_latency_us: NonNegativeFloat = Field(1.0, description="handshake latency of one ring step between instances")
    warmup_iterations: NonNegativeInt = 1
    iterations: PositiveInt = 4
    seed: int = 0


def load_settings(name_or_path: str | Path = "default", overrides: dict[str, Any] | None = None) -> InstanceSettings:
    """Load an instance-settings preset (``default``) or a user's YAML."""
    return config.load(name_or_path, InstanceSettings, SETTINGS_DIR, "instance settings", overrides)


class InstancesConfig(StrictModel):
    """One `dlrmsim instances` study: a topology, a workload, the instance counts and the sync scheme."""

    topology: str = "clx-2s-56c"
    workload: str = "small"
    instances: list[PositiveInt] = Field(default_factory=lambda: [1, 2, 4, 7, 14, 28], min_length=1)
    per: Per = Field("socket", description="instance counts are per socket (NUMA node) or per node (all sockets)")
    sync: Sync = "gradient_server"
    batch: PositiveInt | None = Field(None, description="samples per socket per iteration (default: the workload's)")
    settings: str = "default"
    settings_overrides: dict[str, Any] = Field(default_factory=dict)
    topology_overrides: dict[str, Any] = Field(default_factory=dict)
    workload_overrides: dict[str, Any] = Field(default_factory=dict)


# --------------------------------------------------------------------------------------------------------
# Workload side: one instance's task list at a batch


@dataclass(frozen=True)
class InstanceTask:
    """One layer (or DLRM step) of an instance: flops, bytes of memory traffic, serial time (s)."""

    name: str
    kind: str
    flops: float
    bytes: float
    serial_s: float = 0.0
    columns: int = 0  # a GEMM's output columns (taskgraph.Task.columns); 0 = not a GEMM or not known


@dataclass
class InstanceWorkload:
    """What the instance model needs from a workload, DLRM or layer list.

    ``model_bytes``: dense weights (= gradient) bytes every instance synchronises (DLRM: Eq. 1, the MLPs;
    layer list: parameters x parameter_bytes). ``sparse_bytes(batch)``: embedding row deltas one NUMA
    replica sends to the others per iteration at that per-socket batch (0 for layer lists).
    """

    name: str
    kind: Literal["dlrm", "layers"]
    batch: int
    model_bytes: float
    precision: str
    source: Any = field(repr=False)

    _cache: dict[tuple[int, int], list[InstanceTask]] = field(default_factory=dict, repr=False)

    def tasks(self, batch: int, cores: float, spec: ComputeSpec) -> list[InstanceTask]:
        """One instance's task sequence for one iteration at ``batch`` samples on ``cores`` cores."""
        key = (batch, max(1, int(cores)))
        if key not in self._cache:
            if self.kind == "layers":
                self._cache[key] = _layer_tasks(self.source, batch)
            else:
                self._cache[key] = _dlrm_tasks(
                    self.source, batch, key[1], spec.memory_bandwidth_Bps / (spec.saturation_cores or spec.cores)
                )
        return self._cache[key]

    def sparse_bytes(self, batch: int) -> float:
        if self.kind == "layers":
            return 0.0
        w = self.source
        rows = sum(model.update_rows(w, r, batch) for r in w.table_rows)
        return rows * (w.embedding_dim * 4.0 + w.index_bytes)


def _layer_tasks(w: Any, batch: int) -> list[InstanceTask]:
    return [InstanceTask(t.name, t.kind, t.flops, t.bytes) for t in layer_tasks(w, batch)]


def _dlrm_tasks(w: Any, batch: int, threads: int, core_bw: float) -> list[InstanceTask]:
    """One training iteration of DLRM on one rank at ``batch``, without the dense optimizer (the sync does it)."""
    placement = place(w, PlacementSpec(), 1)
    s = IterationSettings(global_batch=batch, threads=threads, update_costs=UpdateCosts(0.0, 0.0, 64, core_bw))
    graph = build_iteration(w, placement, s)
    return [
        InstanceTask(t.name, t.kind, t.flops, t.bytes, t.serial_s, t.columns) for t in graph.tasks(0) if t.kind != "optimizer"
    ]


def load_instance_workload(name_or_path: str, overrides: dict[str, Any] | None = None) -> InstanceWorkload:
    """A layer-list workload (``layer_presets`` name or a YAML with ``layers``) or a DLRM workload."""
    if is_layer_workload_file(name_or_path):
        lw = load_layer_workload(name_or_path, overrides or None)
        return InstanceWorkload(lw.name, "layers", lw.batch, lw.model_bytes, lw.precision, lw)
    p = Path(name_or_path)
    if p.suffix not in (".yaml", ".yml") and not p.exists() and name_or_path not in workload_names():
        raise unknown_name_error("workload", name_or_path, workload_names() + layer_workload_names())
    w = load_workload(name_or_path, overrides or None)
    batch = w.minibatch.single_socket or w.minibatch.weak_local
    return InstanceWorkload(w.name, "dlrm", batch, model.allreduce_bytes(w), w.precision, w)


# --------------------------------------------------------------------------------------------------------
# Layout: instances per socket, cores per instance


@dataclass(frozen=True)
class Layout:
    """How ``instances`` (per node) sit on ``sockets`` sockets; ``cores`` per instance and socket."""

    instances: int
    sockets: int
    sockets_per_instance: int
    instances_per_socket: int
    cores: float
    reserved_cores: int

    @property
    def parts(self) -> list[tuple[int, int, int]]:
        """(instance, socket rank, index of the part among its socket's parts) for every instance part."""
        out = []
        for i in range(self.instances):
            if self.sockets_per_instance > 1:
                for s in range(i * self.sockets_per_instance, (i + 1) * self.sockets_per_instance):
                    out.append((i, s, 0))
            else:
                out.append((i, i // self.instances_per_socket, i % self.instances_per_socket))
        return out


def valid_counts(per: Per, sockets: int, cores: int) -> list[int]:
    """Instance counts the layout accepts: divisors of the socket's cores (times the sockets for ``node``)."""
    divs = [d for d in range(1, cores + 1) if cores % d == 0]
    if per == "socket":
        return divs
    return sorted({d for d in range(1, sockets + 1) if sockets % d == 0} | {d * sockets for d in divs})


def make_layout(k: int, per: Per, sockets: int, cores: int, reserved: int = 0) -> Layout:
    """The layout of ``k`` instances per socket or per node; a one-line error names the valid counts."""
    ok = valid_counts(per, sockets, cores)
    if k not in ok:
        what = (
            f"{k} instances per socket do not divide its {cores} cores evenly"
            if per == "socket"
            else f"{k} instances per node cannot be spread evenly over {sockets} sockets of {cores} cores"
        )
        raise DlrmsimError(
            what,
            field="--instances",
            fix=f"use one of {', '.join(map(str, ok))}",
        )
    if per == "socket":
        ips, spi = k, 1
    elif k < sockets:
        ips, spi = 1, sockets // k
    else:
        ips, spi = k // sockets, 1
    n = k * sockets if per == "socket" else k
    # Fluid time-sharing when the cores left do not divide evenly (a parameter server takes one); the engine's
    # core pools take uneven shares such as 27/7 back exactly.
    c = (cores - reserved) / ips
    return Layout(n, sockets, spi, ips, c, reserved)


# --------------------------------------------------------------------------------------------------------
# Results


@dataclass
class InstancePoint:
    """One simulated setting. Utilizations are fractions of the measured window, averaged over sockets.

    ``mem_bw_util``: memory traffic / (window x achievable domain bandwidth, memory_bandwidth x
    efficiency(inf)). ``core_busy``: core-seconds held by tasks / (window x cores). ``flop_util``: flops /
    (window x peak). ``sync_s``: mean time from an instance's last layer to the next iteration's start
    (its synchronisation work and the wait for the others). ``sync_core_frac``: core-seconds of sync tasks
    / (window x cores). ``delay_s``: mean start delay; ``compute_s``: mean time running layers.
    """

    instances_per_socket: int
    instances_per_node: int
    sockets_per_instance: int
    cores_per_instance: float
    batch_per_instance: float
    sync: str
    samples_per_s: float
    iteration_s: float
    mem_bw_util: float
    core_busy: float
    flop_util: float
    sync_s: float
    sync_core_frac: float
    delay_s: float
    compute_s: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class InstancesResult:
    topology: str
    workload: str
    workload_kind: str
    batch_per_socket: int
    sockets: int
    per: str
    model_bytes: float
    points: list[InstancePoint]

    def to_json(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "points"}
        d["points"] = [p.to_json() for p in self.points]
        return d


# --------------------------------------------------------------------------------------------------------
# Efficiency basis


def _scaled_table(table: EfficiencyTable, scale: float) -> EfficiencyTable:
    return EfficiencyTable(tuple((s * scale, e) for s, e in table.points))


def per_core_topology(topo: Topology, cores: float) -> Topology:
    """A copy of ``topo`` whose ranks look GEMM and stream efficiencies up at size x (socket cores / ``cores``).

    A task of f flops on c cores then runs at the efficiency of an f x C/c flop task on all C cores: the
    same work per core. Domain bandwidth (efficiency at infinite size) is unchanged.
    """
    g = topo.graph.copy()
    for node in topo.ranks:
        spec: ComputeSpec = g.nodes[node]["compute"]
        scale = cores / spec.cores
        g.nodes[node]["compute"] = replace(
            spec,
            gemm_efficiency=_scaled_table(spec.gemm_efficiency, scale),
            memory_efficiency=_scaled_table(spec.memory_efficiency, scale),
        )
    return Topology(topo.name, g, topo.ranks, source=topo.source, hosts=topo.hosts, description=topo.description)


# --------------------------------------------------------------------------------------------------------
# The simulation of one setting


@dataclass
class _Part:
    pid: int
    instance: int
    rank: int
    index: int  # among the parts on its socket
    batch: int
    tasks: list[InstanceTask]


class _Run:
    """One simulated setting: instance processes, the sync scheme and the iteration barrier."""

    def __init__(self, topo: Topology, wl: InstanceWorkload, lay: Layout, sync: str, st: InstanceSettings, batch: int) -> None:
        self.wl, self.lay, self.sync, self.st, self.batch = wl, lay, sync, st, batch
        if st.efficiency_basis == "per_core":
            topo = per_core_topology(topo, lay.cores)
        self.topo = topo
        self.spec = topo.compute(0)
        self.sim = Simulation(topo, seed=st.seed, comm=CommSettings(pinned_cores=lay.reserved_cores), record_flows=False)
        self.env: simpy.Environment = self.sim.env
        self.n_iter = st.warmup_iterations + st.iterations
        self.G = wl.model_bytes
        split = _split(batch, lay.instances_per_socket)
        self.parts: list[_Part] = []
        for pid, (i, s, j) in enumerate(lay.parts):
            b = split[j] if lay.sockets_per_instance == 1 else batch
            self.parts.append(_Part(pid, i, s, j, b, wl.tasks(b, lay.cores, self.spec)))
        self.by_instance: dict[int, list[_Part]] = {}
        # one generator per instance (its delays and work factors): see the module docstring
        self.rng = [np.random.default_rng(s) for s in np.random.SeedSequence(st.seed).spawn(lay.instances)]
        self.by_socket: dict[int, list[_Part]] = {}
        for p in self.parts:
            self.by_instance.setdefault(p.instance, []).append(p)
            self.by_socket.setdefault(p.rank, []).append(p)
        self.sparse = wl.sparse_bytes(batch) if lay.sockets > 1 else 0.0
        self.start = [self.env.event() for _ in range(self.n_iter + 1)]
        self.start_time = [0.0] * (self.n_iter + 1)
        self.compute_done = [[self.env.event() for _ in self.parts] for _ in range(self.n_iter)]
        self.compute_end = [[0.0] * len(self.parts) for _ in range(self.n_iter)]
        self.delays: list[float] = []
        self.cores_of: dict[str, float] = {}
        self.alone = {
            i: sum(costs.task_time(t.flops, t.bytes, self.spec, lay.cores, self._prec(t), kind=t.kind) for t in ps[0].tasks)
            for i, ps in self.by_instance.items()
        }
        self._seq = 0

    # -- helpers -----------------------------------------------------------------------------------------
    def _prec(self, t: InstanceTask) -> str:
        return self.wl.precision if t.kind in costs.MATRIX_KINDS else "fp32"

    def _name(self, base: str) -> str:
        self._seq += 1
        return f"{base}#{self._seq}"

    def task(
        self,
        rank: int,
        base: str,
        nbytes: float,
        cores: float,
        flops: float = 0.0,
        kind: str = "copy",
        category: str = "sync",
        pool: str = "compute",
        precision: str = "fp32",
    ) -> simpy.Process:
        name = self._name(base)
        self.cores_of[name] = cores
        return self.sim.compute(
            rank, name, flops=flops, bytes=nbytes, kind=kind, precision=precision, cores=cores, category=category, pool=pool
        )

    def split_task(self, rank: int, base: str, nbytes: float, flops: float = 0.0) -> simpy.Event:
        """Work shared evenly by the instance parts on ``rank`` (each on its own cores)."""
        ps = self.by_socket[rank]
        return simpy.AllOf(self.env, [self.task(rank, base, nbytes / len(ps), self.lay.cores, flops / len(ps)) for p in ps])

    def _jitters(self, i: int) -> list[list[float]]:
        """One iteration's work factors of instance ``i``: ``[layer][part]``, lognormal of mean 1 (``jitter_sigma``),
        drawn together from the instance's generator when the iteration starts. (Drawn task by task from one shared
        generator as layers started, the draws went to whichever instance's layer came first, so any change of a
        cost reshuffled every instance's factors and delays.)"""
        parts = self.by_instance[i]
        sig = self.st.jitter_sigma
        shape = (len(parts[0].tasks), len(parts))
        if not sig > 0:
            return [[1.0] * shape[1] for _ in range(shape[0])]
        return np.exp(self.rng[i].normal(-0.5 * sig * sig, sig, size=shape)).tolist()

    def _delay(self, i: int) -> float:
        sd = self.st.start_delay
        window = sd.fraction * self.alone[i]
        if sd.mode == "none" or window <= 0 or self.lay.instances_per_socket == 1:
            # Alone on its socket an instance competes with nobody: a delay would only idle its cores.
            return 0.0
        if sd.mode == "even":
            return window * (i % self.lay.instances_per_socket) / self.lay.instances_per_socket
        return float(self.rng[i].uniform(0.0, window))

    # -- instance programs -------------------------------------------------------------------------------
    def _layers(self, parts: list[_Part], n: int, j: int, then: Callable[[], None], jitter: list[list[float]]) -> None:
        """Run layers ``j``, ``j + 1``, ... of iteration ``n`` on the instance's ``parts``, then call ``then``;
        ``jitter[j][k]``: the work factor of layer ``j`` on part ``k`` (:meth:`_jitters`).

        A chain of callbacks, not a process: each layer's tasks (one per part, on its own rank) start as one
        ``Simulation.compute_batch`` and the next layer starts at the instant the last of them ends (and its serial
        chain, if any, has run out), as a process yielding each layer would have it; a process resume and the task's
        own done event were two of the three SimPy events a layer cost."""
        tasks = parts[0].tasks
        if j == len(tasks):
            then()
            return
        if len(parts) == 1 and not tasks[j].serial_s > 0:
            # The common case, one part: the layers up to the next one with a serial chain (or the last) are one chain
            # of tasks on the part's cores (Simulation.compute_chain), the same activities and times without a
            # callback per layer.
            end = next((i for i in range(j, len(tasks)) if tasks[i].serial_s > 0), len(tasks))
            self._chain(parts[0], n, j, end, lambda: self._layers(parts, n, end, then, jitter), jitter)
            return
        calls = [self._call(p, n, p.tasks[j], f) for p, f in zip(parts, jitter[j], strict=True)]
        serial = [p.tasks[j].serial_s * f for p, f in zip(parts, jitter[j], strict=True)]
        left = [len(parts)]
        t0 = self.env.now

        def part_done() -> None:
            left[0] -= 1
            if not left[0]:
                self._layers(parts, n, j + 1, then, jitter)

        def tasks_done(idx: list[int], now: float) -> None:
            for i in idx:
                if serial[i] > now - t0:
                    # Conflicting row updates serialise; more cores cannot shorten the chain (see taskgraph).
                    self.env.timeout(serial[i] - (now - t0)).callbacks.append(lambda _e: part_done())
                else:
                    part_done()

        self.sim.compute_batch(calls, tasks_done)

    def _chain(self, p: _Part, n: int, j: int, end: int, then: Callable[[], None], jitter: list[list[float]]) -> None:
        """Layers ``j`` to ``end - 1`` of iteration ``n`` of a one-part instance (none with a serial chain), as one
        chain of tasks; then ``then``."""
        calls = [self._call(p, n, t, f) for t, (f,) in zip(p.tasks[j:end], jitter[j:end], strict=True)]
        self.sim.compute_chain(calls, lambda _now: then())

    def _call(self, p: _Part, n: int, t: InstanceTask, f: float) -> TaskCall:
        """Part ``p``'s task ``t`` of iteration ``n`` with work factor ``f``, named and its cores noted for measure()."""
        name = self._name(f"it{n}.i{p.instance}.r{p.rank}.{t.name}")
        self.cores_of[name] = self.lay.cores
        # Jitter stretches the layer's work at the rates of its nominal size (TaskCall.work_factor); a batch share
        # changes a GEMM's rows or depth, not its output columns.
        return TaskCall(p.rank, name, t.flops, t.bytes, t.kind, self._prec(t), self.lay.cores, columns=t.columns, work_factor=f)

    def instance(self, i: int) -> Any:
        parts = self.by_instance[i]
        for n in range(self.n_iter):
            yield self.start[n]
            d = self._delay(i)
            jitter = self._jitters(i)
            self.delays.append(d)
            if d > 0:
                yield self.env.timeout(d)
            layers_done = self.env.event()
            self._layers(parts, n, 0, layers_done.succeed, jitter)
            yield layers_done
            for p in parts:
                self.compute_end[n][p.pid] = self.env.now
                self.compute_done[n][p.pid].succeed()
                self.env.process(self.part_sync(n, p))

    # -- synchronisation ---------------------------------------------------------------------------------
    def part_sync(self, n: int, p: _Part) -> Any:
        """What an instance part does on its own after its last layer (before the socket-wide steps)."""
        G = self.G
        if self.sync == "gradient_server" and G > 0:
            yield self.task(p.rank, f"it{n}.i{p.instance}.gs_add", 3 * G, self.lay.cores, flops=G / 4)
        elif self.sync == "parameter_server" and G > 0:
            yield self.task(p.rank, f"it{n}.i{p.instance}.ps_push", 2 * G, self.lay.cores)
            yield self.task(p.rank, f"it{n}.server.accumulate", 3 * G, 1, flops=G / 4, pool="comm")
        self._part_synced[n][p.pid].succeed()

    def coordinator(self) -> Any:
        env = self.env
        self.start_time[0] = env.now
        self.start[0].succeed()
        for n in range(self.n_iter):
            self._part_synced[n] = [env.event() for _ in self.parts]
            if self.sync == "ring_allreduce":
                yield from self.ring(n)
            else:
                yield simpy.AllOf(env, self._part_synced[n])
                yield from self.numa_steps(n)
            self.start_time[n + 1] = env.now
            self.start[n + 1].succeed()

    def numa_steps(self, n: int) -> Any:
        """After every part has added/pushed: cross-socket allreduce, SGD, weight pulls, sparse replica sync."""
        env, G, S = self.env, self.G, self.lay.sockets
        ranks = sorted(self.by_socket)
        jobs = []
        if self.sparse > 0:
            jobs.append(env.process(self.sparse_sync(n, ranks)))
        if self.sync == "gradient_server" and G > 0:
            if S > 1:
                yield from self.cross_allreduce(n, ranks, G, lambda r, nb, fl: self.split_task(r, f"it{n}.gs_xreduce", nb, fl))
            yield simpy.AllOf(env, [self.split_task(r, f"it{n}.gs_sgd", 3 * G, 2 * G / 4) for r in ranks])
        elif self.sync == "parameter_server" and G > 0:

            def server(r: int, nb: float, fl: float) -> simpy.Process:
                return self.task(r, f"it{n}.server.xreduce", nb, 1, flops=fl, pool="comm")

            if S > 1:
                yield from self.cross_allreduce(n, ranks, G, server)
            yield simpy.AllOf(env, [self.task(r, f"it{n}.server.sgd", 3 * G, 1, flops=2 * G / 4, pool="comm") for r in ranks])
            yield simpy.AllOf(env, [self.task(p.rank, f"it{n}.i{p.instance}.ps_pull", 2 * G, self.lay.cores) for p in self.parts])
        if jobs:
            yield simpy.AllOf(env, jobs)

    def cross_allreduce(self, n: int, ranks: list[int], nbytes: float, reduce: Any) -> Any:
        """Ring allreduce of ``nbytes`` between the sockets over the link; ``reduce(rank, bytes, flops)`` sums."""
        S = len(ranks)
        chunk = nbytes / S
        for _ in range(S - 1):  # reduce-scatter
            arrivals = [
                self.sim.transfer(ranks[a], ranks[(a + 1) % S], chunk, name=f"it{n}.xnuma", kind="numa_rs", category="sync")
                for a in range(S)
            ]
            yield simpy.AllOf(self.env, arrivals)
            yield simpy.AllOf(self.env, [reduce(r, 3 * chunk, chunk / 4) for r in ranks])
        for _ in range(S - 1):  # allgather: one-sided stores into the other node
            arrivals = [
                self.sim.transfer(ranks[a], ranks[(a + 1) % S], chunk, name=f"it{n}.xnuma", kind="numa_ag", category="sync")
                for a in range(S)
            ]
            yield simpy.AllOf(self.env, arrivals)

    def sparse_sync(self, n: int, ranks: list[int]) -> Any:
        """Touched embedding rows of each NUMA replica go to every other replica and are applied there."""
        yield simpy.AllOf(self.env, [ev for row in self.compute_done[n : n + 1] for ev in row])
        sends = [
            self.sim.transfer(a, b, self.sparse, name=f"it{n}.emb_rows", kind="emb_rows", category="sync")
            for a in ranks
            for b in ranks
            if a != b
        ]
        yield simpy.AllOf(self.env, sends)
        yield simpy.AllOf(self.env, [self.split_task(r, f"it{n}.emb_apply", 3 * self.sparse * (len(ranks) - 1)) for r in ranks])

    def ring(self, n: int) -> Any:
        """Ring allreduce between the instances of each socket (shared memory), then across sockets, then SGD."""
        env, G = self.env, self.G
        ranks = sorted(self.by_socket)
        jobs = [env.process(self.sparse_sync(n, ranks))] if self.sparse > 0 else []
        m = self.lay.instances_per_socket
        lat = self.st.ring_step_latency_us * 1e-6
        socket_parts = [self.by_socket[r] for r in ranks]
        if G > 0:
            # done[s][j]: part j of socket s finished its previous ring step (starts as "finished its layers").
            done = [[self.compute_done[n][p.pid] for p in ps] for ps in socket_parts]

            def step(p: _Part, mine: simpy.Event, prev: simpy.Event, nbytes: float, flops: float, tag: str) -> Any:
                yield mine & prev
                yield env.timeout(lat)
                yield self.task(p.rank, f"it{n}.i{p.instance}.ring_{tag}", nbytes, self.lay.cores, flops=flops)

            for tag, nbytes, flops in (("rs", 3 * G / m, G / m / 4), ("ag", 2 * G / m, 0.0)):
                if tag == "ag" and self.lay.sockets > 1:
                    # Instance j's reduced chunk is allreduced with instance j of the other sockets: G per socket.
                    yield simpy.AllOf(env, [e for row in done for e in row])
                    yield from self.cross_allreduce(
                        n, ranks, G, lambda r, nb, fl: self.split_task(r, f"it{n}.ring_xreduce", nb, fl)
                    )
                    done = [[env.event().succeed() for _ in ps] for ps in socket_parts]
                for _ in range(m - 1):
                    done = [
                        [env.process(step(p, row[j], row[(j - 1) % m], nbytes, flops, tag)) for j, p in enumerate(ps)]
                        for ps, row in zip(socket_parts, done, strict=True)
                    ]
            yield simpy.AllOf(env, [e for row in done for e in row])
            yield simpy.AllOf(
                env, [self.task(p.rank, f"it{n}.i{p.instance}.sgd", 3 * G, self.lay.cores, flops=2 * G / 4) for p in self.parts]
            )
        else:
            yield simpy.AllOf(env, [e for row in self.compute_done[n : n + 1] for e in row])
        if jobs:
            yield simpy.AllOf(env, jobs)

    # -- run and measure ---------------------------------------------------------------------------------
    def run(self) -> InstancePoint:
        self._part_synced: dict[int, list[simpy.Event]] = {}
        for i in self.by_instance:
            self.env.process(self.instance(i))
        self.env.process(self.coordinator())
        self.sim.run()
        if not self.start[self.n_iter].triggered:
            raise RuntimeError("instance simulation stalled before the last iteration")  # a model bug, not user input
        return self.measure()

    def measure(self) -> InstancePoint:
        st, lay, spec = self.st, self.lay, self.spec
        w0 = st.warmup_iterations
        t0, t1 = self.start_time[w0], self.start_time[self.n_iter]
        window = t1 - t0
        mem = core = flops = sync_core = 0.0
        for r in self.sim.records:
            if r.end <= t0 or r.start >= t1 or r.name not in self.cores_of:
                continue
            dur = r.end - r.start
            frac = 1.0 if dur <= 0 else (min(r.end, t1) - max(r.start, t0)) / dur
            mem += r.bytes * frac
            flops += r.flops * frac
            cs = self.cores_of[r.name] * (min(r.end, t1) - max(r.start, t0))
            core += cs
            if r.category == "sync":
                sync_core += cs
        S = lay.sockets
        sync_s = [self.start_time[n + 1] - self.compute_end[n][p.pid] for n in range(w0, self.n_iter) for p in self.parts]
        comp_s = [self.compute_end[n][p.pid] - self.start_time[n] for n in range(w0, self.n_iter) for p in self.parts]
        per_inst = self.lay.instances
        delays = self.delays[w0 * per_inst :]
        delay = sum(delays) / len(delays) if delays else 0.0
        cores_total = S * spec.cores
        return InstancePoint(
            instances_per_socket=lay.instances_per_socket,
            instances_per_node=lay.instances,
            sockets_per_instance=lay.sockets_per_instance,
            cores_per_instance=lay.cores * lay.sockets_per_instance,
            batch_per_instance=self.batch * S / lay.instances,
            sync=self.sync,
            samples_per_s=st.iterations * self.batch * S / window,
            iteration_s=window / st.iterations,
            mem_bw_util=mem / (window * S * costs.domain_bandwidth(spec)),
            core_busy=core / (window * cores_total),
            flop_util=flops / (window * S * spec.flops_rate(self.wl.precision)),
            sync_s=sum(sync_s) / len(sync_s),
            sync_core_frac=sync_core / (window * cores_total),
            delay_s=delay,
            compute_s=sum(comp_s) / len(comp_s) - delay,
        )


def _split(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


# --------------------------------------------------------------------------------------------------------
# Entry points


@dataclass
class Inputs:
    topology: Topology
    workload: InstanceWorkload
    settings: InstanceSettings
    batch: int


def load_inputs(cfg: InstancesConfig) -> Inputs:
    """Load the topology, workload and settings; refuse what the instance model cannot run (one-line errors)."""
    topo = load_topology(cfg.topology, cfg.topology_overrides or None)
    wl = load_instance_workload(cfg.workload, cfg.workload_overrides or None)
    st = load_settings(cfg.settings, cfg.settings_overrides or None)
    specs = [topo.compute(r) for r in range(topo.num_ranks)]
    if any(s.kind != "socket" for s in specs) or len({s.cores for s in specs}) != 1:
        raise DlrmsimError(
            "the instance model needs ranks that are CPU sockets of one core count",
            source=topo.source,
            field="fabric",
            fix="use a CPU topology such as clx-2s-56c",
        )
    domains = [s.memory_domain or topo.node(r) for r, s in enumerate(specs)]
    if len(set(domains)) != len(domains):
        raise DlrmsimError(
            "the instance model needs one memory domain per socket rank",
            source=topo.source,
            field="fabric",
            fix="use a topology with one rank per socket (NUMA node)",
        )
    batch = cfg.batch or wl.batch
    if wl.kind == "dlrm":
        tables = model.tables_bytes(wl.source)
        if tables > specs[0].memory_capacity_B:
            raise DlrmsimError(
                f"{wl.name}'s tables ({tables / 2**30:.0f} GiB) do not fit one NUMA node "
                f"({specs[0].memory_capacity_B / 1e9:.0f} GB); "
                "the instance model keeps a table replica per NUMA node",
                source=cfg.workload,
                field="tables",
                fix="use a workload whose tables fit one socket's memory (e.g. small)",
            )
    return Inputs(topo, wl, st, batch)


def simulate_point(inp: Inputs, k: int, per: Per = "socket", sync: str = "gradient_server") -> InstancePoint:
    """Simulate ``k`` instances (per socket or per node) with one sync scheme; steady-state throughput and use."""
    if sync not in SYNC_SCHEMES:
        raise DlrmsimError(f"unknown sync scheme '{sync}'", field="--sync", fix=f"use one of: {', '.join(SYNC_SCHEMES)}")
    spec = inp.topology.compute(0)
    reserved = 1 if sync == "parameter_server" else 0
    lay = make_layout(k, per, inp.topology.num_ranks, spec.cores, reserved)
    if inp.batch < lay.instances_per_socket:
        raise DlrmsimError(
            f"batch {inp.batch} per socket is smaller than {lay.instances_per_socket} instances per socket",
            field="--batch",
            fix=f"use a batch of at least {lay.instances_per_socket} samples per socket",
        )
    return _Run(inp.topology, inp.workload, lay, sync, inp.settings, inp.batch).run()


def run_instances(cfg: InstancesConfig) -> InstancesResult:
    """Every instance count of ``cfg`` with its sync scheme."""
    inp = load_inputs(cfg)
    spec = inp.topology.compute(0)
    for k in cfg.instances:  # refuse a bad count before simulating anything
        make_layout(k, cfg.per, inp.topology.num_ranks, spec.cores)
    points = [simulate_point(inp, k, cfg.per, cfg.sync) for k in cfg.instances]
    return InstancesResult(
        inp.topology.name,
        inp.workload.name,
        inp.workload.kind,
        inp.batch,
        inp.topology.num_ranks,
        cfg.per,
        inp.workload.model_bytes,
        points,
    )


def bandwidth_scaling(
    topo: Topology, threads: list[int], nbytes: float = 1e9, rank: int = 0, single_core_tasks: bool = False
) -> list[float]:
    """Achieved memory bandwidth (B/s) of a stream on 1..n threads of one socket.

    ``single_core_tasks=False``: one task on ``c`` cores; True: ``c`` concurrent one-core tasks of nbytes/c
    each (c instances of one core). The roofline predicts min(c / saturation_cores, 1) x bandwidth x
    efficiency(nbytes), capped by the domain (bandwidth x efficiency(inf)).
    """
    out = []
    for c in threads:
        sim = Simulation(topo)
        if single_core_tasks:
            for i in range(c):
                sim.compute(rank, f"stream{i}", bytes=nbytes / c, kind="elementwise", cores=1)
        else:
            sim.compute(rank, "stream", bytes=nbytes, kind="elementwise", cores=c)
        sim.run()
        out.append(nbytes / sim.now)
    return out
