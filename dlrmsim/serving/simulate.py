"""Request-level inference serving on accelerator nodes (or CPU sockets) on top of the simulation engine.

A serving *unit* is one node: its host CPU and its cards (accelerator mode, ranks of kind "card"), or one socket
(CPU mode: ranks of kind "socket", or ``cpu_baseline`` on a topology's hosts). Requests arrive (Poisson at a QPS, or
replayed timestamps), go to the units round-robin, are pre-processed on host threads and batched (up to
``batching.max_requests`` or ``batching.timeout_ms``). A batch then runs as:

1. host -> every card: the indices (and lengths) of its tables; the dense features go to the card chosen for
   the batch's dense part (the one with the fewest pending dense batches);
2. every card: SparseLengthsSum over its tables on its *lookup cores* (``lookup_core_fraction`` of its cores);
3. every card -> dense card: the pooled vectors, peer-to-peer through the PCIe switch or staged through the host;
4. dense card: FC layers and interaction on its *dense cores*; scores go back to the host.

Lookup cores and dense cores of a card are separate FIFO servers, so one batch's lookups run while another's
dense part runs; both draw on the card's one memory bandwidth (the engine shares it). Per-table transfers
(``command_batching: false``) pay the per-command cost of every message in sequence (one DMA queue).

Times are seconds, sizes bytes. Entry point: :func:`simulate_serving`; :func:`find_max_qps` bisects on QPS.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import simpy

from dlrmsim.engine import costs
from dlrmsim.engine.records import Record
from dlrmsim.engine.resources import CommSettings
from dlrmsim.engine.simulation import Simulation
from dlrmsim.errors import DlrmsimError
from dlrmsim.serving.model import (
    NodePlacement,
    dense_bytes,
    dense_flops,
    dense_input_bytes,
    index_bytes,
    lookup_bytes,
    place_tables,
    pooled_bytes,
    serving_spec,
    split_cores,
    tables,
)
from dlrmsim.topologies.topology import Topology
from dlrmsim.workloads.serving.schema import ServingWorkload

SCORE_BYTES = 4.0  # one fp32 score per item back to the host
# Requests one run may simulate. Each request is a few SimPy processes and engine tasks (~1 ms of wall time and
# ~1 kB of memory each), so this bounds a run to minutes and a few GB; a larger --qps x --duration is refused
# up front instead of failing to allocate (or running for days).
MAX_REQUESTS = 2_000_000


# --- options and results ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServeOptions:
    """One serving run. ``qps`` drives a Poisson stream over ``duration_s``; ``arrival_times`` (s) replays a trace
    instead. Requests arriving before ``warmup_s`` are left out of the statistics. ``nodes`` limits the run to the
    first units; ``cpu_baseline`` serves on the topology's host CPUs instead of its cards."""

    qps: float | None = None
    duration_s: float = 2.0
    warmup_s: float = 0.25
    seed: int = 0
    arrival_times: tuple[float, ...] | None = None
    nodes: int | None = None
    cpu_baseline: bool = False
    # Stop as soon as more than 1% of the requests expected in the window have exceeded this latency (s): the
    # run can no longer meet a p99 budget (used by find_max_qps to cut overloaded probes short).
    stop_when_late_s: float | None = None

    def check(self) -> None:
        if self.arrival_times is None:
            if self.qps is None or not self.qps > 0 or not math.isfinite(self.qps):
                raise DlrmsimError(f"QPS must be a positive number, got {self.qps}", field="--qps", fix="e.g. --qps 200")
        if not self.duration_s > 0 or not math.isfinite(self.duration_s):
            raise DlrmsimError(f"duration must be a positive number of seconds, got {self.duration_s}", field="--duration")
        if self.arrival_times is None:
            assert self.qps is not None
            expected = self.qps * self.duration_s
            if expected > MAX_REQUESTS:
                raise DlrmsimError(
                    f"--qps {self.qps:g} for {self.duration_s:g} s is {expected:.3g} requests, more than the {MAX_REQUESTS:,} "
                    "one run simulates", field="--qps", fix=f"lower --qps or --duration so that QPS x duration <= {MAX_REQUESTS:,}")
        elif len(self.arrival_times) > MAX_REQUESTS:
            raise DlrmsimError(f"{len(self.arrival_times):,} arrivals, more than the {MAX_REQUESTS:,} one run simulates",
                               field="--arrivals", fix="replay a shorter slice of the trace")
        if not 0 <= self.warmup_s < self.duration_s:
            raise DlrmsimError(f"warm-up {self.warmup_s} s must be in [0, duration {self.duration_s} s)", field="--warmup")
        if self.nodes is not None and self.nodes < 1:
            raise DlrmsimError(f"nodes must be at least 1, got {self.nodes}", field="--nodes")


@dataclass(frozen=True)
class CardUtilization:
    """Busy fraction of one rank's lookup cores and dense cores over the measurement window."""

    rank: int
    node: str
    lookup: float
    dense: float


@dataclass(frozen=True)
class LinkUtilization:
    """Bytes over one link in each direction during the window, and bytes / (bandwidth x window)."""

    u: str
    v: str
    kind: str
    bytes_uv: float
    bytes_vu: float
    util_uv: float
    util_vu: float

    @property
    def util(self) -> float:
        return max(self.util_uv, self.util_vu)


@dataclass
class ServeResult:
    """Outcome of one serving run (latencies in seconds)."""

    workload: str
    topology: str
    mode: str  # "accelerator" | "cpu"
    offered_qps: float
    achieved_qps: float
    latencies_s: np.ndarray
    window_s: tuple[float, float]
    cards: list[CardUtilization]
    links: list[LinkUtilization]
    placements: list[NodePlacement]
    lookup_cores: int
    dense_cores: int
    requests: int
    batches: int
    records: list[Record] = field(repr=False, default_factory=list)
    sim_stats: dict[str, int] = field(default_factory=dict)
    stopped_early: bool = False  # stop_when_late_s fired: p99 is beyond it, latencies_s holds only finished requests
    arrived: int = 0  # requests that arrived in the window (the offered load actually drawn)
    arrivals_s: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))  # arrival time of each latencies_s entry

    @property
    def arrived_qps(self) -> float:
        """Requests that arrived in the window per second: the offered rate this run's draw actually produced."""
        return self.arrived / (self.window_s[1] - self.window_s[0])

    @property
    def throughput_ratio(self) -> float:
        """Requests completed in the window / requests that arrived in it: below 1 when a queue builds up."""
        return self.achieved_qps / self.arrived_qps if self.arrived else float("nan")

    def late_p99_ms(self) -> float:
        """p99 latency (ms) of the requests that arrived in the second half of the window. A queue still
        building up makes it exceed the whole window's p99; in steady state both estimate the same number."""
        mid = 0.5 * (self.window_s[0] + self.window_s[1])
        late = self.latencies_s[self.arrivals_s >= mid] if len(self.arrivals_s) == len(self.latencies_s) else self.latencies_s
        return float(np.percentile(late, 99) * 1e3) if len(late) else float("nan")

    def percentile_ms(self, q: float) -> float:
        if not len(self.latencies_s):
            return float("nan")
        return float(np.percentile(self.latencies_s, q) * 1e3)

    @property
    def p50_ms(self) -> float:
        return self.percentile_ms(50)

    @property
    def p95_ms(self) -> float:
        return self.percentile_ms(95)

    @property
    def p99_ms(self) -> float:
        return self.percentile_ms(99)

    @property
    def mean_ms(self) -> float:
        return float(np.mean(self.latencies_s) * 1e3) if len(self.latencies_s) else float("nan")

    def host_link_bytes(self) -> float:
        """Bytes that crossed host <-> PCIe-switch links (both directions) in the window."""
        return sum(lk.bytes_uv + lk.bytes_vu for lk in self.links if lk.kind == "pcie" and (lk.u.endswith(".host") or lk.v.endswith(".host")))

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "topology": self.topology,
            "mode": self.mode,
            "offered_qps": self.offered_qps,
            "arrived_qps": self.arrived_qps,
            "qps": self.achieved_qps,
            "p50_ms": self.p50_ms,
            "p95_ms": self.p95_ms,
            "p99_ms": self.p99_ms,
            "mean_ms": self.mean_ms,
            "requests_measured": int(len(self.latencies_s)),
            "requests": self.requests,
            "batches": self.batches,
            "window_s": list(self.window_s),
            "lookup_cores": self.lookup_cores,
            "dense_cores": self.dense_cores,
            "utilization": {
                "cards": [{"rank": c.rank, "node": c.node, "lookup": c.lookup, "dense": c.dense} for c in self.cards],
                "links": [
                    {"link": f"{lk.u}<->{lk.v}", "kind": lk.kind, "util": lk.util, "util_fwd": lk.util_uv, "util_rev": lk.util_vu,
                     "bytes_fwd": lk.bytes_uv, "bytes_rev": lk.bytes_vu}
                    for lk in self.links
                ],
            },
            "host_link_bytes": self.host_link_bytes(),
            "memory": [
                {"card_table_GB": [b / 1e9 for b in p.table_bytes], "dense_GB": p.dense_bytes / 1e9, "capacity_GB": p.capacity_bytes / 1e9}
                for p in self.placements[:1]
            ],
        }


# --- topology preparation -----------------------------------------------------------------------------------


def host_topology(topo: Topology) -> Topology:
    """The topology's host CPUs as stand-alone socket ranks (for the CPU-only baseline on an accelerator node)."""
    if not topo.hosts:
        raise DlrmsimError(f"topology '{topo.name}' has no host CPUs for a CPU baseline", field="--cpu-baseline",
                           fix="use a topology whose ranks are sockets (e.g. skx-8s-upi) instead")
    g = nx.Graph()
    for h in topo.hosts:
        attrs = dict(topo.graph.nodes[h])
        attrs["kind"] = "socket"
        attrs["compute"] = replace(attrs["compute"], kind="socket")
        g.add_node(h, **attrs)
    return Topology(f"{topo.name} hosts", g, list(topo.hosts), source=topo.source)


@dataclass
class _Unit:
    """One serving node (host + cards) or one socket."""

    index: int
    host: str | None
    ranks: list[int]
    nodes: list[str]
    placement: NodePlacement
    tables_on: list[np.ndarray]
    lookup_server: list[simpy.Resource]
    dense_server: list[simpy.Resource]
    pending_dense: list[int]
    preprocess: simpy.Resource
    queue: simpy.Store
    last_dense: int = -1


def _pick_dense_card(u: _Unit) -> int:
    """Data-parallel dense part: the card with the fewest pending dense batches, round-robin among ties."""
    n = len(u.ranks)
    low = min(u.pending_dense)
    for k in range(1, n + 1):
        c = (u.last_dense + k) % n
        if u.pending_dense[c] == low:
            u.last_dense = c
            return c
    raise AssertionError("unreachable")


def _units(topo: Topology, w: ServingWorkload, env: simpy.Environment, nodes: int | None) -> tuple[list[_Unit], str]:
    kinds = {topo.compute(r).kind for r in range(topo.num_ranks)}
    a = w.assumptions
    groups: list[tuple[str | None, list[int]]] = []
    if kinds == {"card"}:
        mode = "accelerator"
        by_host: dict[str | None, list[int]] = {}
        for r, n in enumerate(topo.ranks):
            by_host.setdefault(topo.graph.nodes[n].get("host"), []).append(r)
        groups = list(by_host.items())
        if any(h is None for h, _ in groups):
            raise DlrmsimError(f"topology '{topo.name}': cards without a host", source=topo.source, field="fabric")
    elif "card" not in kinds:
        mode = "cpu"
        groups = [(None, [r]) for r in range(topo.num_ranks)]
    else:
        raise DlrmsimError(f"topology '{topo.name}' mixes cards and sockets as ranks", source=topo.source)
    if nodes is not None:
        if nodes > len(groups):
            raise DlrmsimError(f"{nodes} nodes asked but topology '{topo.name}' has {len(groups)}", field="--nodes",
                               fix=f"use at most {len(groups)}")
        groups = groups[:nodes]
    units: list[_Unit] = []
    for i, (host, ranks) in enumerate(groups):
        spec = topo.compute(ranks[0])
        placement = place_tables(w, len(ranks), spec.memory_capacity_B, "card" if mode == "accelerator" else "socket")
        units.append(
            _Unit(
                index=i, host=host, ranks=ranks, nodes=[topo.ranks[r] for r in ranks], placement=placement,
                tables_on=[np.array(placement.tables_on(c), dtype=np.int64) for c in range(len(ranks))],
                lookup_server=[simpy.Resource(env, 1) for _ in ranks], dense_server=[simpy.Resource(env, 1) for _ in ranks],
                pending_dense=[0] * len(ranks), preprocess=simpy.Resource(env, a.host_threads), queue=simpy.Store(env),
            )
        )
    return units, mode


def prepare_topology(topo: Topology, w: ServingWorkload, cpu_baseline: bool = False) -> Topology:
    """Apply the workload's assumptions (GEMM efficiency, gather saturation) to the topology's compute specs.

    Mutates ``topo``'s graph; pass a topology loaded for this run.
    """
    if cpu_baseline:
        topo = host_topology(topo)
    for n in list(topo.ranks) + list(topo.hosts):
        spec = topo.graph.nodes[n]["compute"]
        topo.graph.nodes[n]["compute"] = serving_spec(spec, w.assumptions)
    return topo


# --- request stream -----------------------------------------------------------------------------------------


def poisson_arrivals(qps: float, duration_s: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times (s) of a Poisson process of rate ``qps`` on [0, duration_s)."""
    n = int(qps * duration_s + 10 * math.sqrt(qps * duration_s) + 10)
    t = np.cumsum(rng.exponential(1.0 / qps, n))
    while t[-1] < duration_s:
        t = np.concatenate([t, t[-1] + np.cumsum(rng.exponential(1.0 / qps, n))])
    return t[t < duration_s]


def read_arrivals_csv(path: Path) -> tuple[float, ...]:
    """Request timestamps (s) from a CSV: the first column, an optional header line, increasing or not (sorted)."""
    if path.is_dir():
        raise DlrmsimError("is a directory, not a CSV file", source=path, field="--arrivals", fix="give the path of a CSV file")
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise DlrmsimError(f"cannot read arrivals ({exc.strerror})", source=path, fix="check the path") from None
    except UnicodeDecodeError as exc:
        raise DlrmsimError(f"not a text file (byte {exc.start} is not UTF-8)", source=path, field="--arrivals",
                           fix="one time in seconds per line") from None
    times: list[float] = []
    for i, line in enumerate(lines):
        cell = line.split(",")[0].strip()
        if not cell:
            continue
        try:
            times.append(float(cell))
        except ValueError:
            if i == 0:
                continue  # header
            raise DlrmsimError(f"line {i + 1}: '{cell}' is not a time in seconds", source=path) from None
        if not math.isfinite(times[-1]):
            raise DlrmsimError(f"line {i + 1}: '{cell}' is not a finite time", source=path, fix="one time in seconds per line")
    if not times:
        raise DlrmsimError("no timestamps found", source=path, fix="one time in seconds per line")
    if min(times) < 0:
        raise DlrmsimError("negative timestamp", source=path)
    return tuple(sorted(times))


def draw_requests(w: ServingWorkload, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(items per request (n,), lookups per request and table (n, T)): pooling drawn per request and table."""
    r = w.requests
    items = rng.integers(r.items_low, r.items_high + 1, size=n)
    cols: list[np.ndarray] = []
    for g in w.model.tables:
        p = g.pooling
        shape = (n, g.count)
        if p.kind == "fixed":
            cols.append(np.full(shape, p.value))
        elif p.kind == "poisson":
            cols.append(np.minimum(rng.poisson(p.mean, size=shape), p.max))
        else:
            cols.append(rng.integers(p.low, p.high + 1, size=shape))
    pooling = np.concatenate(cols, axis=1)
    return items, items[:, None] * pooling


# --- the simulation ----------------------------------------------------------------------------------------------


class _Server:
    """SimPy processes of one serving run."""

    def __init__(self, topo: Topology, w: ServingWorkload, opts: ServeOptions) -> None:
        self.topo, self.w, self.opts = topo, w, opts
        self.sim = Simulation(topo, seed=opts.seed, comm=CommSettings(), record_flows=False)
        self.env = self.sim.env
        self.units, self.mode = _units(topo, w, self.env, opts.nodes)
        cores = topo.compute(self.units[0].ranks[0]).cores
        self.k_lookup, self.k_dense = split_cores(cores, w.partitioning.lookup_core_fraction)
        m = w.model
        self.tables = tables(m)
        self.max_pooling = np.array([t.max_pooling for t in self.tables], dtype=float)
        self.lookup_B = lookup_bytes(m, w.assumptions.access_bytes)
        self.pooled_B = pooled_bytes(m)
        self.done: dict[int, float] = {}
        self.batches = 0
        # Arrivals.
        rng = self.sim.rng
        if opts.arrival_times is not None:
            self.arrivals = np.asarray(opts.arrival_times, dtype=float)
        else:
            assert opts.qps is not None
            self.arrivals = poisson_arrivals(opts.qps, opts.duration_s, rng)
        self.items, self.lookups = draw_requests(w, len(self.arrivals), rng)
        self.exponential = w.assumptions.service_time == "exponential"
        self.stop = self.env.event()
        self.late = 0
        in_window = int(np.count_nonzero(self.arrivals >= opts.warmup_s))
        self.late_limit = max(int(0.01 * in_window), 1)

    # messages: the per-command cost of every message after the first, paid in sequence on one DMA queue
    def _command_delay(self, src: str, dst: str, messages: int) -> float:
        if messages <= 1:
            return 0.0
        path = self.topo.node_routes(src, dst)[0]
        links = self.topo.path_links(path)
        per = max((lk.overhead_s for lk in links), default=0.0) + self.sim.comm.message_overhead_s + self.topo.path_latency_s(path)
        return (messages - 1) * per

    def _send(self, src: str, dst: str, nbytes: float, messages: int, name: str) -> simpy.Process:
        def proc():  # noqa: ANN202
            delay = self._command_delay(src, dst, messages) if not self.w.partitioning.command_batching else 0.0
            if delay > 0:
                yield self.env.timeout(delay)
            net = self.sim.network
            rs, rd = int(net.node_rank[net.node_id[src]]), int(net.node_rank[net.node_id[dst]])
            if rs >= 0 and rd >= 0:
                yield self.sim.transfer(rs, rd, nbytes, name=name, kind=name, category="serving")
            else:
                yield self.sim.transfer_nodes(src, dst, nbytes, name=name, kind=name, category="serving")

        return self.env.process(proc())

    def _compute(self, rank: int, name: str, flops: float, nbytes: float, precision: str, cores: int) -> simpy.Process:
        """An engine task of ``flops`` and ``nbytes`` on ``cores`` cores of ``rank`` (recorded by the engine)."""
        return self.sim.compute(rank, name, flops=flops, bytes=nbytes, kind=name, precision=precision, cores=cores, category="serving")

    def run(self) -> None:
        self.env.process(self._arrivals())
        for u in self.units:
            self.env.process(self._batcher(u))
        self.sim.run(until=self.stop)
        self.stopped_early = len(self.done) < len(self.arrivals)

    def _arrivals(self):  # noqa: ANN202
        n_units = len(self.units)
        a = self.w.assumptions
        for i, t in enumerate(self.arrivals):
            if t > self.env.now:
                yield self.env.timeout(t - self.env.now)
            self.env.process(self._preprocess(self.units[i % n_units], i, a.preprocess_us_per_request * 1e-6 + a.preprocess_us_per_item * 1e-6 * self.items[i]))

    def _preprocess(self, u: _Unit, i: int, t: float):  # noqa: ANN202
        if t > 0:
            with u.preprocess.request() as req:
                yield req
                yield self.env.timeout(t)
        yield u.queue.put(i)

    def _batcher(self, u: _Unit):  # noqa: ANN202
        b = self.w.batching
        timeout = b.timeout_ms * 1e-3
        while True:
            first = yield u.queue.get()
            batch = [first]
            deadline = self.env.now + timeout
            while len(batch) < b.max_requests:
                if u.queue.items:
                    batch.append((yield u.queue.get()))
                    continue
                left = deadline - self.env.now
                if left <= 0:
                    break
                get = u.queue.get()
                to = self.env.timeout(left)
                got = yield get | to
                if get in got:
                    batch.append(got[get])
                else:
                    get.cancel()
                    break
            self.batches += 1
            self.env.process(self._exponential_batch(u, batch) if self.exponential else self._batch(u, batch))

    def _finish(self, batch: Sequence[int], rank: int) -> None:
        now = self.env.now
        for i in batch:
            self.done[i] = now
            self.sim.records.append(Record(rank, "request", f"req{i}", "serving", float(self.arrivals[i]), now, flops=float(self.items[i])))
            lim = self.opts.stop_when_late_s
            if lim is not None and now - self.arrivals[i] > lim and self.arrivals[i] >= self.opts.warmup_s:
                self.late += 1
        if not self.stop.triggered and (len(self.done) == len(self.arrivals) or self.late > self.late_limit):
            self.stop.succeed()

    def _exponential_batch(self, u: _Unit, batch: list[int]):  # noqa: ANN202
        """Testing hook: the whole batch is one task of Exp(service_mean_ms) on the unit's first card."""
        rank = u.ranks[0]
        t = float(self.sim.rng.exponential(self.w.assumptions.service_mean_ms * 1e-3))
        spec = self.sim.rank_resources[rank].spec
        prec = self.w.model.dense_precision
        with u.dense_server[0].request() as req:
            yield req
            rate = costs.task_flop_rate(spec, 1.0, self.k_dense, prec)
            yield self._compute(rank, "dense", t * rate, 0.0, prec, self.k_dense)
        self._finish(batch, rank)

    def _batch(self, u: _Unit, batch: list[int]):  # noqa: ANN202
        w, m, part = self.w, self.w.model, self.w.partitioning
        items = int(self.items[batch].sum())
        lookups = self.lookups[batch].sum(axis=0)
        d = _pick_dense_card(u)
        u.pending_dense[d] += 1
        fixed = part.transfer_size == "fixed_max"
        cap_items = w.batching.max_requests * w.requests.items_high  # the fixed tensors hold the largest batch
        staged: list[float] = []
        parts = [self.env.process(self._card_part(u, c, d, items, lookups, fixed, cap_items, staged)) for c in range(len(u.ranks))]
        yield self.env.all_of(parts)
        if self.mode == "accelerator" and part.transfer == "host_staged" and staged:
            assert u.host is not None
            yield self._send(u.host, u.nodes[d], sum(staged), sum(int(s > 0) for s in staged) if part.command_batching else
                             sum(len(u.tables_on[c]) for c in range(len(u.ranks)) if c != d), "stage_in")
        rank = u.ranks[d]
        prec = m.dense_precision
        with u.dense_server[d].request() as req:
            yield req
            yield self._compute(rank, "dense", dense_flops(m, items), dense_bytes(m, items, w.batching.dense_batch_items), prec, self.k_dense)
        u.pending_dense[d] -= 1
        if self.mode == "accelerator":
            assert u.host is not None
            yield self._send(u.nodes[d], u.host, items * SCORE_BYTES, 1, "scores")
        self._finish(batch, rank)

    def _card_part(self, u: _Unit, c: int, d: int, items: int, lookups: np.ndarray, fixed: bool, cap_items: int, staged: list[float]):  # noqa: ANN202
        m = self.w.model
        tabs = u.tables_on[c]
        n_t = len(tabs)
        accel = self.mode == "accelerator"
        n_lookups = float(lookups[tabs].sum()) if n_t else 0.0
        if accel:
            assert u.host is not None
            if fixed:
                idx = index_bytes(m, cap_items * float(self.max_pooling[tabs].sum()), cap_items, n_t)
                feats = dense_input_bytes(m, cap_items) if c == d else 0.0
            else:
                idx = index_bytes(m, n_lookups, items, n_t)
                feats = dense_input_bytes(m, items) if c == d else 0.0
            if idx + feats > 0:
                yield self._send(u.host, u.nodes[c], idx + feats, n_t + int(feats > 0), "indices")
        if n_t:
            rank = u.ranks[c]
            with u.lookup_server[c].request() as req:
                yield req
                yield self._compute(rank, "lookup", n_lookups * m.embedding_dim, n_lookups * self.lookup_B, "fp16", self.k_lookup)
            if accel and c != d:
                out = (cap_items if fixed else items) * n_t * self.pooled_B
                if self.w.partitioning.transfer == "p2p":
                    yield self._send(u.nodes[c], u.nodes[d], out, n_t, "pooled")
                else:
                    assert u.host is not None
                    yield self._send(u.nodes[c], u.host, out, n_t, "stage_out")
                    staged.append(out)

    # --- statistics ---------------------------------------------------------------------------------------------

    def result(self) -> ServeResult:
        opts = self.opts
        t0 = opts.warmup_s
        t1 = opts.duration_s if opts.arrival_times is None else max(float(self.arrivals.max()), t0 + 1e-9)
        window = t1 - t0
        arr = self.arrivals
        measured = [i for i in range(len(arr)) if t0 <= arr[i] < t1 and i in self.done]
        lat = np.array([self.done[i] - arr[i] for i in measured])
        # A replayed trace's window ends at its last arrival, which counts as inside it.
        arrived = int(np.count_nonzero((arr >= t0) & ((arr < t1) | (arr == t1))))
        completed = sum(1 for t in self.done.values() if t0 <= t < t1)
        busy: dict[tuple[int, str], float] = {}
        for r in self.sim.records:
            if r.kind in ("lookup", "dense"):
                ov = min(r.end, t1) - max(r.start, t0)
                if ov > 0:
                    busy[(r.rank, r.kind)] = busy.get((r.rank, r.kind), 0.0) + ov
        link_bytes = serving_link_bytes(self.sim.records, self.topo, t0, t1)
        cards = [
            CardUtilization(rank, node, busy.get((rank, "lookup"), 0.0) / window, busy.get((rank, "dense"), 0.0) / window)
            for u in self.units for rank, node in zip(u.ranks, u.nodes, strict=True)
        ]
        links: list[LinkUtilization] = []
        unit_nodes = {n for u in self.units for n in u.nodes} | {u.host for u in self.units if u.host}
        for a, b, data in self.topo.graph.edges(data=True):
            lk = data["link"]
            if lk.kind != "pcie" or not {a, b} & unit_nodes:
                continue
            bab, bba = link_bytes.get((a, b), 0.0), link_bytes.get((b, a), 0.0)
            cap = lk.bandwidth_Bps * window
            links.append(LinkUtilization(a, b, lk.kind, bab, bba, bab / cap, bba / cap))
        return ServeResult(
            workload=self.w.name, topology=self.topo.name, mode=self.mode,
            offered_qps=float(opts.qps) if opts.qps is not None else len(arr) / max(float(arr.max()), 1e-9),
            achieved_qps=completed / window, latencies_s=lat, window_s=(t0, t1), cards=cards, links=links,
            placements=[u.placement for u in self.units], lookup_cores=self.k_lookup, dense_cores=self.k_dense,
            requests=len(arr), batches=self.batches, records=self.sim.records, sim_stats=self.sim.stats,
            stopped_early=self.stopped_early, arrived=arrived, arrivals_s=np.asarray(arr[measured], dtype=float),
        )


def serving_link_bytes(records: Sequence[Record], topo: Topology, t0: float = 0.0, t1: float = math.inf) -> dict[tuple[str, str], float]:
    """Bytes each directed link (u, v) carried during [t0, t1) from the serving transfers in ``records``.

    A transfer's bytes are spread evenly over its [start, end] span and counted on every hop of its route
    (``Topology.route`` for rank pairs, as the engine's hashed ECMP does; the first shortest path otherwise).
    """
    out: dict[tuple[str, str], float] = {}
    cache: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for r in records:
        if r.category != "serving" or r.kind in ("request", "lookup", "dense") or r.bytes <= 0:
            continue
        dur = r.end - r.start
        if dur > 0:
            frac = max(min(r.end, t1) - max(r.start, t0), 0.0) / dur
        else:
            frac = 1.0 if t0 <= r.end < t1 else 0.0
        if frac <= 0:
            continue
        if r.resource is None:
            key = (topo.ranks[r.rank], topo.ranks[r.peer])
        else:
            s, _, d = r.resource.partition("->")
            key = (s, d)
        if key not in cache:
            path = topo.route(r.rank, r.peer) if r.resource is None else topo.node_routes(*key)[0]
            cache[key] = list(zip(path, path[1:], strict=False))
        for hop in cache[key]:
            out[hop] = out.get(hop, 0.0) + r.bytes * frac
    return out


def simulate_serving(topology: Topology, workload: ServingWorkload, options: ServeOptions) -> ServeResult:
    """Simulate serving ``workload`` on ``topology`` (modified in place by :func:`prepare_topology`; pass a fresh one)."""
    options.check()
    topo = prepare_topology(topology, workload, options.cpu_baseline)
    server = _Server(topo, workload, options)
    server.run()
    return server.result()


@dataclass(frozen=True)
class Probe:
    """One simulation of the max-QPS search: rate, seed, what it measured, and whether it was sustained."""

    qps: float
    seed: int
    p99_ms: float
    late_p99_ms: float
    throughput_ratio: float
    ok: bool
    reason: str  # why it was not sustained ("" when it was)


@dataclass(frozen=True)
class MaxQpsResult:
    """Outcome of :func:`find_max_qps`.

    ``qps`` is the highest rate that every seed sustained; ``per_seed`` holds each seed's bracket (highest rate
    sustained, lowest rate not sustained; inf when none failed); ``ci_qps`` is a 95 % confidence interval of
    the sustainable rate (Student t over the seeds' bracket midpoints, never narrower than the bracket
    resolution); ``result`` is the run at ``qps``."""

    qps: float
    result: ServeResult | None
    budget_ms: float
    probes: list[Probe]
    per_seed: list[tuple[int, float, float]]
    ci_qps: tuple[float, float]
    bound_qps: float
    criteria: str
    warnings: list[str]


# Two-sided 95 % Student t quantiles by degrees of freedom (scipy.stats.t.ppf(0.975, df)).
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def capacity_bound_qps(topology: Topology, workload: ServingWorkload, options: ServeOptions) -> float:
    """Upper bound on QPS from memory bandwidth alone: units x ranks x bandwidth / mean memory bytes per request
    (mean lookups, and the FC passes of a full batch shared by its requests)."""
    w, m = workload, workload.model
    topo = prepare_topology(topology, w, options.cpu_baseline)
    env = simpy.Environment()
    units, _ = _units(topo, w, env, options.nodes)
    items = 0.5 * (w.requests.items_low + w.requests.items_high)
    look = items * sum(t.mean_pooling for t in tables(m)) * lookup_bytes(m, w.assumptions.access_bytes)
    k = w.batching.max_requests
    dense = dense_bytes(m, round(items * k), w.batching.dense_batch_items) / k
    bw = sum(costs.domain_bandwidth(topo.compute(r)) for u in units for r in u.ranks)
    return bw / (look + dense)


def sustained(res: ServeResult, budget_ms: float, throughput_tol: float) -> str:
    """Why ``res`` does not show a sustainable rate ("" when it does). Sustainable means, over the measured
    window (warm-up left out): the run was not cut short by late requests, completions kept up with arrivals
    (completed / arrived >= 1 - ``throughput_tol``), and the p99 latency both of the whole window and of its
    second half (a queue still growing shows there first) is within ``budget_ms``."""
    if res.stopped_early:
        return "stopped: over 1 % of requests late"
    if not len(res.latencies_s):
        return "no request measured"
    if res.throughput_ratio < 1 - throughput_tol:
        return f"achieved {res.throughput_ratio:.1%} of arrivals"
    if res.p99_ms > budget_ms:
        return f"p99 {res.p99_ms:.4g} ms over budget"
    late = res.late_p99_ms()
    if late > budget_ms:
        return f"second-half p99 {late:.4g} ms over budget"
    return ""


def find_max_qps(
    make_topology: Callable[[], Topology],
    workload: ServingWorkload,
    options: ServeOptions,
    budget_ms: float,
    start_qps: float | None = None,
    rel_tol: float = 0.02,
    seeds: int = 3,
    throughput_tol: float = 0.01,
    max_probes: int = 60,
) -> MaxQpsResult:
    """The largest sustainable QPS (see :func:`sustained`) under ``budget_ms``, over ``seeds`` seeds
    (``options.seed``, ``options.seed + 1``, ...), each probe a full simulation of ``options.duration_s``.

    The first seed brackets the rate by doubling from ``start_qps`` (default 1/8 of :func:`capacity_bound_qps`,
    never above that bound), then bisects until the bracket is within ``rel_tol``; every other seed starts from
    that bracket, widens it until its low end is sustained and its high end is not, and bisects it too. The
    answer is the lowest of the seeds' sustained rates, so every seed sustained it."""
    if not budget_ms > 0 or not math.isfinite(budget_ms):
        raise DlrmsimError(f"latency budget must be a positive number, got {budget_ms}", field="--latency-budget-ms")
    if seeds < 1:
        raise DlrmsimError(f"need at least one seed, got {seeds}", field="--seeds")
    if not 0 <= throughput_tol < 1:
        raise DlrmsimError(f"throughput tolerance must be in [0, 1), got {throughput_tol}", field="--throughput-tolerance")
    if start_qps is not None and (not start_qps > 0 or not math.isfinite(start_qps)):
        raise DlrmsimError(f"start QPS must be a positive number, got {start_qps}", field="--qps")
    bound = capacity_bound_qps(make_topology(), workload, options)
    replace(options, qps=bound).check()  # refuse a search whose top probe would be too big to simulate
    probes: list[Probe] = []
    results: dict[int, ServeResult] = {}
    warnings: list[str] = []
    min_qps = 1.0 / options.duration_s  # below one request per run there is nothing to measure

    def probe(q: float, seed: int) -> bool:
        res = simulate_serving(make_topology(), workload,
                               replace(options, qps=q, seed=seed, arrival_times=None, stop_when_late_s=budget_ms * 1e-3))
        why = sustained(res, budget_ms, throughput_tol)
        probes.append(Probe(q, seed, res.p99_ms, res.late_p99_ms(), res.throughput_ratio, not why, why))
        if not why and (seed not in results or q > results[seed].offered_qps):
            res.records = []  # keep the answer's numbers, not its event log
            results[seed] = res
        return not why

    def search(seed: int, low_guess: float, high_guess: float) -> tuple[float, float]:
        lo, hi = 0.0, math.inf
        q = min(low_guess, bound)
        while len(probes) < max_probes and q >= min_qps:  # down until a rate is sustained
            if probe(q, seed):
                lo = q
                break
            hi, q = q, q / 2
        q = min(high_guess if high_guess > lo else 2 * lo, bound)
        while len(probes) < max_probes and lo > 0 and math.isinf(hi):  # up until one is not
            if q <= lo:
                break
            if probe(q, seed):
                lo = q
                q = min(2 * q, bound)
            else:
                hi = q
        while len(probes) < max_probes and lo > 0 and math.isfinite(hi) and hi - lo > rel_tol * lo:
            mid = 0.5 * (lo + hi)
            if probe(mid, seed):
                lo = mid
            else:
                hi = mid
        return lo, hi

    start = bound / 8 if start_qps is None else start_qps
    if start > bound:
        warnings.append(f"start QPS {start:,.0f} is above the capacity bound {bound:,.0f} QPS; starting at the bound")
    per_seed: list[tuple[int, float, float]] = []
    lo0, hi0 = search(options.seed, start, 2 * start)
    per_seed.append((options.seed, lo0, hi0))
    for seed in range(options.seed + 1, options.seed + seeds):
        lo, hi = search(seed, lo0 if lo0 > 0 else start, hi0 if math.isfinite(hi0) else bound)
        per_seed.append((seed, lo, hi))
    answer = min(lo for _, lo, _ in per_seed)
    worst = min(per_seed, key=lambda p: p[1])[0]
    # 95 % interval of the sustainable rate: t over the seeds' bracket midpoints, at least the bracket itself.
    mids = np.array([0.5 * (lo + (hi if math.isfinite(hi) else lo)) for _, lo, hi in per_seed])
    half_res = max(0.5 * ((hi if math.isfinite(hi) else lo) - lo) for _, lo, hi in per_seed)
    spread = _T975.get(len(mids) - 1, 1.96) * float(np.std(mids, ddof=1)) / math.sqrt(len(mids)) if len(mids) > 1 else 0.0
    half = max(spread, half_res)
    ci = (max(float(mids.mean()) - half, 0.0), min(float(mids.mean()) + half, bound))
    at_bound = [seed for seed, lo, _ in per_seed if lo >= bound]
    if at_bound and answer >= bound:
        warnings.append(f"stopped at the memory-bandwidth capacity bound {bound:,.0f} QPS: every seed sustained the bound itself, "
                        "so the answer is the bound, not a measured limit")
    elif at_bound:
        warnings.append(f"seed {', '.join(map(str, at_bound))} stopped at the capacity bound {bound:,.0f} QPS (sustained it in a "
                        f"{options.duration_s:g} s run; no rate above the bound is sustainable in a long one)")
    if answer <= 0:
        warnings.append(f"no rate down to {min_qps:g} QPS was sustained within {budget_ms:g} ms")
    if len(probes) >= max_probes and any(math.isinf(hi) or hi - lo > rel_tol * lo for _, lo, hi in per_seed):
        warnings.append(f"stopped after {max_probes} probes before the bracket narrowed to {rel_tol:.0%}")
    criteria = (f"sustained = p99 <= {budget_ms:g} ms over the window and over its second half, completed >= "
                f"{1 - throughput_tol:.0%} of arrivals, not cut short; {options.duration_s:g} s runs, first "
                f"{options.warmup_s:g} s left out; {seeds} seed{'s' if seeds > 1 else ''}, bisected to {rel_tol:.0%}; "
                "answer = lowest rate every seed sustained")
    return MaxQpsResult(answer, results.get(worst), budget_ms, probes, per_seed, ci, bound, criteria, warnings)
