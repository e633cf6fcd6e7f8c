"""The Topology object the simulator asks questions of: ranks, their compute specs, links and routes.

A topology is an undirected networkx graph whose edges are full-duplex links (each direction has the
full ``bandwidth_Bps``) and whose nodes are compute endpoints (sockets, cards, hosts) or switches.
Builders in this package produce it from YAML; tests may build one from a hand-made graph.
"""

from __future__ import annotations

import copy
import math
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx

from dlrmsim.errors import DlrmsimError


def interpolate_by_scan(points: tuple[tuple[float, float], ...], size: float) -> float:
    """:class:`EfficiencyTable`'s value at ``size``, found by scanning its segments: 1 without points, the end values
    beyond the ends, else log-linear on the first segment that holds ``size``."""
    if not points:
        return 1.0
    if size <= points[0][0]:
        return points[0][1]
    if size >= points[-1][0]:
        return points[-1][1]
    for (s0, e0), (s1, e1) in zip(points, points[1:], strict=False):
        if s0 <= size <= s1:
            width = math.log(s1) - math.log(s0)
            if width == 0.0:
                # Sizes a few ulps apart have one logarithm: no room to interpolate. A size there belongs to the end
                # of the segment, as a size on a breakpoint does.
                return e1
            return e0 + (math.log(size) - math.log(s0)) / width * (e1 - e0)
    return points[-1][1]


@dataclass(frozen=True)
class EfficiencyTable:
    """Piecewise-linear efficiency (0..1] against a size (flops or bytes), interpolated in log(size).

    Points are (size, efficiency) with sizes increasing; below the first and above the last point the
    end values hold.
    """

    points: tuple[tuple[float, float], ...]

    def __call__(self, size: float) -> float:
        grid = self._log_grid
        if grid is None:
            return interpolate_by_scan(self.points, size)
        pts = self.points
        if size <= pts[0][0]:
            return pts[0][1]
        if size >= pts[-1][0]:
            return pts[-1][1]
        # The first segment that holds ``size`` ends at the first point at or above it: the arithmetic of
        # interpolate_by_scan, with the points' logarithms computed once (instances price every jittered task anew).
        sizes, logs = grid
        i = bisect_left(sizes, size)
        if 0 < i < len(pts):
            e0, e1 = pts[i - 1][1], pts[i][1]
            width = logs[i] - logs[i - 1]
            if width == 0.0:
                return e1  # as interpolate_by_scan: one logarithm for both ends
            return e0 + (math.log(size) - logs[i - 1]) / width * (e1 - e0)
        return pts[-1][1]  # a size that compares with nothing (nan)

    @cached_property
    def _log_grid(self) -> tuple[list[float], list[float]] | None:
        """The points' sizes and their logarithms, when there are points, their sizes strictly increase and are
        positive (else None: :meth:`__call__` scans them, :func:`interpolate_by_scan`)."""
        sizes = [p[0] for p in self.points]
        if any(not a < b for a, b in zip(sizes, sizes[1:], strict=False)) or not sizes or not sizes[0] > 0:
            return None
        return sizes, [math.log(x) for x in sizes]

    @staticmethod
    def constant(value: float) -> EfficiencyTable:
        return EfficiencyTable(((1.0, value),))


@dataclass(frozen=True)
class ComputeSpec:
    """What a rank (socket or accelerator card) can do, in SI units.

    ``peak_flops`` maps a precision ("fp32", "bf16", "fp16", "int8") to the whole endpoint's peak
    operations per second with all ``cores`` busy. ``gemm_efficiency`` gives the achieved fraction of
    that peak against a GEMM's flops; ``memory_efficiency`` the achieved fraction of
    ``memory_bandwidth_Bps`` against a stream's bytes. ``saturation_cores`` is how many cores it takes
    to reach the achieved memory bandwidth (fewer cores get a proportional share).
    """

    name: str
    cores: int
    clock_hz: float
    peak_flops: dict[str, float]
    memory_bandwidth_Bps: float
    memory_capacity_B: float
    numa_nodes: int = 1
    gemm_efficiency: EfficiencyTable = field(default_factory=lambda: EfficiencyTable.constant(1.0))
    memory_efficiency: EfficiencyTable = field(default_factory=lambda: EfficiencyTable.constant(1.0))
    saturation_cores: float | None = None
    kind: str = "socket"  # "socket" | "card" | "host"
    # Achieved fraction of stream bandwidth by task kind (e.g. "embedding": random row gathers), from
    # calibration; kinds not listed stream at the full achieved bandwidth. Below 1 it limits the task's own
    # rate, above 1 the bytes that reach memory (costs.memory_demand).
    bandwidth_fraction_by_kind: dict[str, float] = field(default_factory=dict)
    # Sparse embedding update conflicts (seconds per conflicting cache-line update); 0 = not modelled.
    cache_line_bytes: int = 64
    atomic_conflict_s: float = 0.0
    rtm_conflict_s: float = 0.0
    # Ranks sharing a memory domain share one memory-bandwidth resource in the engine (e.g. the ranks a
    # host is split into). None means the rank's own graph node name.
    memory_domain: str | None = None
    # Fixed software cost of the framework operations a task stands for (dispatch, output allocation, thread-pool
    # fork/join), seconds, charged at the task's start: task_overhead_s for its first op, which finds the private
    # caches evicted by the previous task's data, op_overhead_s for each further op (costs.dispatch_overhead_s).
    # 0 = not modelled (built-in presets: no cited figure); a host calibration measures both ("dispatch" benchmark).
    task_overhead_s: float = 0.0
    op_overhead_s: float = 0.0
    # What a framework op costs beyond op_overhead_s when one operand is a Python number (x + 1e-7: the framework
    # wraps it into a tensor each call) or when it reduces (x.mean()), seconds per op; a task says how many of its
    # ops are of each class (costs.op_class_extra_s). 0 = not modelled (built-in presets); a host calibration times
    # both classes beside its multiplies ("dispatch" benchmark).
    scalar_op_extra_s: float = 0.0
    reduce_op_extra_s: float = 0.0
    # The traffic (bytes) that preceded the first op when task_overhead_s was measured (a host calibration: its
    # cache flush, twice the last-level cache). A task after less traffic finds part of the framework's code and
    # metadata still cached: it pays the first op's surcharge over op_overhead_s in the proportion
    # costs.cache_miss_share(its predecessor's bytes) / costs.cache_miss_share(this traffic), capped at 1
    # (costs.first_op_s). inf = always the whole surcharge.
    task_overhead_after_bytes: float = math.inf
    # The thread pool's fork and join, seconds per element-wise op that splits over this spec's cores: an op on
    # more than parallel_grain_elements elements runs in parallel (torch: at::internal::GRAIN_SIZE) and pays it on
    # top of its share of the work (costs.fork_join_time_s). GEMM, embedding and interaction benchmarks time their
    # own forks inside their fits; this is for the element-wise ops no benchmark times at scale (activations, the
    # dense optimizer). 0 / inf = not modelled (built-in presets: no cited figure); a host calibration measures
    # it ("fork" benchmark: a just-above-grain op at each core count against its 1-core time).
    fork_join_s: float = 0.0
    parallel_grain_elements: float = math.inf
    # Fixed time per looked-up row of an embedding op, by task kind (seconds per row on this spec's cores): the
    # per-row kernel work that does not scale with the row's bytes (one axpy call per gradient row in a sparse
    # update, one row copy per lookup). Empty = not modelled; a host calibration fits it beside the bandwidth.
    row_time_s_by_kind: dict[str, float] = field(default_factory=dict)
    # Kinds whose arithmetic is many tiny matrix products (the dot interaction's batched X X^T) run far below
    # the GEMM table's rate at the same total flops. A host calibration measures them: flop/s on all of this
    # spec's cores by kind (overrides the GEMM table). Empty = GEMM table.
    flop_rate_by_kind: dict[str, float] = field(default_factory=dict)
    # Fixed time per task by kind (seconds, beyond dispatch): what an op costs whatever its size, such as the
    # interaction's pair-index set-up or an embedding bag's offsets and sparse-gradient set-up. Empty = none;
    # a host calibration fits it beside the per-row and per-byte terms.
    fixed_time_s_by_kind: dict[str, float] = field(default_factory=dict)
    # Time per random lookup whose page-table walk misses L2, by kind (seconds), charged for the share of
    # lookups costs.page_walk_miss_share gives the rank's tables, with this spec's page and L2 sizes (bytes).
    # Empty = not modelled; a host calibration fits it from tables of two sizes.
    walk_time_s_by_kind: dict[str, float] = field(default_factory=dict)
    page_bytes: float = 4096.0
    l2_bytes: float = float(1 << 20)
    # Time per row whose data a working set has pushed out of the last-level cache since it was last touched
    # (the sparse update re-reading the forward's rows and the backward's gradient rows), by kind (seconds),
    # charged for the share costs.cache_miss_share gives the rank's embedding working set in llc_bytes (this
    # spec's share of the last-level cache, bytes). Empty = not modelled; a host calibration fits it.
    reload_time_s_by_kind: dict[str, float] = field(default_factory=dict)
    llc_bytes: float = float(32 << 20)
    # Kinds whose kernel visits the rows it touches in ascending row order (fbgemm's fused update sorts its lookups
    # by row first): their walk and reload times are charged per page walked and per row not adjacent to the
    # previous one (costs.sorted_visits), not per lookup. Empty = every kind visits in lookup order; a host
    # calibration marks the kinds whose fit was made that way (EmbeddingFit.sorted_rows).
    sorted_visit_kinds: tuple[str, ...] = ()
    # Time the first task of a run of same-kind tasks pays beyond the later ones, by kind (seconds): the op's code
    # and framework state gone cold while the rank did other work (taskgraph marks the task: Task.run_start).
    # Empty = not modelled; a host calibration measures it from the first call of its benchmark cycles.
    run_start_s_by_kind: dict[str, float] = field(default_factory=dict)
    # What a warm call of a kind does not pay of the time a calibration measured right after a flush: the code,
    # framework state and buffers the flush evicted and the call refetched (seconds, by kind), split in what traffic
    # beyond a core's L2 (l2_bytes) evicts and what only traffic beyond the last-level cache (llc_bytes) does. A task
    # pays each at costs.traffic_share of the rank's traffic since it last ran a task of the kind's family
    # (Task.kernel_traffic) against that flush (evicted_fixed_after_bytes), beyond the warm fixed time of its kind
    # in fixed_time_s_by_kind (costs.evicted_fixed_time_s). On the 2-vCPU Intel VM (300 MiB L3) the dot
    # interaction's forward took 0.90 ms after the flush, 0.64 ms after its own inputs' lookups and 0.44 ms warm
    # (benchmarks/bench_interaction_context.py). Empty = none (built-in presets: no cited figure; calibrations
    # without the context benchmark keep their flushed fixed time in fixed_time_s_by_kind).
    evicted_fixed_l2_s_by_kind: dict[str, float] = field(default_factory=dict)
    evicted_fixed_llc_s_by_kind: dict[str, float] = field(default_factory=dict)
    evicted_fixed_after_bytes: float = math.inf
    # A GEMM's efficiency beyond its flops: the factor by which a non-cubic shape runs below a cube of the
    # same flops, against its aspect (costs.gemm_aspect: 1 for a cube, smaller for a narrower shape). Constant
    # 1 = flops alone decide (built-in presets: their cited tables are for the model's own GEMMs); a host
    # calibration fits it from narrow GEMMs measured beside the cubes.
    gemm_aspect_efficiency: EfficiencyTable = field(default_factory=lambda: EfficiencyTable.constant(1.0))
    # The GEMM kernel's micro-kernel width in output columns (n of C[m, n], row-major; fp32 elements) and how it
    # handles a remainder: "binary", one narrower kernel per set bit of it, each pass as slow as a full one, or
    # "padded", one full-width pass (costs.vector_block_efficiency). On the 2-vCPU VM (torch 2.13, AVX-512) the
    # block is 16 and the remainder binary: n = 42 runs in 4 passes (16, 16, 8, 2), at 42/64 of n = 64's rate.
    # 0 = not modelled (built-in presets: their cited tables are for the model's own GEMMs); a host calibration
    # fits it from a sweep over n ("gemm_columns").
    gemm_vector_block: int = 0
    gemm_remainder: str = "binary"
    # Fraction of a matrix task's compulsory memory traffic (its operands and result at stream bandwidth)
    # that runs under its arithmetic: 1 = the roofline, time = max(flops time, bytes time); 0 = none, time =
    # their sum (costs.gemm_time_s). Built-in presets: 1, the roofline. A host calibration fits it from GEMMs
    # timed in training-step order, with their operands gone from the caches as in a step.
    gemm_memory_overlap: float = 1.0
    # What a GEMM pays when its operands were evicted from the caches since it last touched them (the weights after
    # a step's embedding work, the activations the backward re-reads): a fixed time per call (packing buffers and
    # code refetched, seconds) plus gemm_evicted_traffic_factor x its compulsory traffic time at stream bandwidth,
    # both beyond the warm roofline, scaled by the byte-weighted share of its inputs evicted
    # (costs.evicted_operand_share: cache_miss_share of the traffic since each was last touched, over that of
    # gemm_evicted_after_bytes, the flush the calibration timed them after). 0 = not modelled (built-in presets:
    # no cited figure); a host calibration times GEMMs right after a flush of their own (fit.fit_evicted_gemm).
    gemm_evicted_call_s: float = 0.0
    gemm_evicted_traffic_factor: float = 0.0
    # ... plus gemm_evicted_compute_factor x its arithmetic time at the warm efficiency, at the same share: a cold
    # GEMM's excess that grows with its flops rather than its bytes (a 16-core host: +20, +93 and +346 us for 67,
    # 268 and 537 MFLOP reading 1.5, 5.3 and 5 MB; docs/calibration.md). 0 = not modelled (built-in presets).
    gemm_evicted_compute_factor: float = 0.0
    # What a GEMM pays for following other ops rather than itself, whatever the traffic in between: this factor x the
    # traffic time (at task_bandwidth_cap) of the part of its compulsory bytes its cores' L2 caches hold (cores x
    # l2_bytes; costs.sequence_time_s). In a loop of itself a GEMM finds its packed panels and code in its cores'
    # L2; after other ops it refills them, as much as it has up to that capacity. 0 = not modelled (built-in
    # presets); a host calibration fits it from GEMMs timed in training-step order (fit.fit_evicted_gemm).
    gemm_sequence_l2_factor: float = 0.0
    # What a GEMM pays after its rank went a while without one, by how long: ((gap s, extra s), ...), gap increasing,
    # interpolated linearly and held past the last (costs.gemm_idle_time_s). Where given it takes the place of
    # gemm_evicted_call_s's charge by traffic: on a shared VM the time since the previous call set what the call
    # paid, not the traffic in between (benchmarks/bench_gap_in_step.py). Empty = not modelled (built-in presets).
    gemm_idle_extra_s: tuple[tuple[float, float], ...] = ()
    # What writing a task's result costs per byte when its memory was evicted since its last use (the stores read
    # each line back first), by kind ("gemm", "elementwise"), at a share traffic_share(traffic since, of
    # cold_output_after_bytes, the flush the calibration's cold buffers had seen); empty = not modelled (built-in
    # presets: no cited figure). A host calibration times it (benchmarks/outputs.py). The traffic since an output's
    # memory was last used is taken as one iteration of the rank's: a step allocates the same tensors in the same
    # order each iteration, so the allocator hands each output its counterpart's block of the iteration before.
    cold_output_s_per_byte_by_kind: dict[str, float] = field(default_factory=dict)
    cold_output_after_bytes: float = math.inf
    # The rate (B/s) at which an element-wise task streams the bytes of inputs still in the last-level cache and of
    # its output (the calibration's cached ReLU, ColdOutputFit.elementwise_cached_GBps): an activation reads the tensor
    # its GEMM just wrote, which never reaches memory; only its evicted inputs' bytes go through the memory domain
    # (costs.elementwise_cached_split). 0: not modelled, every byte at memory bandwidth (built-in presets).
    elementwise_cache_Bps: float = 0.0
    gemm_evicted_after_bytes: float = math.inf
    # Ranks whose programs are identical still reach a synchronising collective at different times: each rank's
    # compute since the ranks were last together varies (scheduler ticks, interrupts, a hypervisor's steal, a slower
    # core), and the collective waits for the last one. arrival_excess gives how much later than a typical rank the
    # last of arrival_excess_ranks ranks arrives, as a fraction of that stretch of compute, against the stretch's
    # length in seconds (a table interpolated in log(length), as the efficiency tables; here a fraction >= 0, not an
    # efficiency). costs.arrival_excess_s scales it to other rank counts. Constant 0 = not modelled (built-in
    # presets: no cited figure); a host calibration measures it ("skew" benchmark: ranks of equal work meeting at a
    # barrier).
    arrival_excess: EfficiencyTable = field(default_factory=lambda: EfficiencyTable.constant(0.0))
    arrival_excess_ranks: int = 2

    def flops_rate(self, precision: str) -> float:
        """Peak op/s for ``precision``; falls back to fp32 when the unit has no faster path."""
        if precision in self.peak_flops:
            return self.peak_flops[precision]
        return self.peak_flops["fp32"]


@dataclass(frozen=True)
class Link:
    """One full-duplex physical link (or a trunk of ``lanes`` parallel links) between graph nodes u and v."""

    u: str
    v: str
    kind: str  # "upi" | "opa" | "pcie" | "ethernet" | "nic" | "trunk" | ...
    bandwidth_Bps: float  # per direction, whole trunk
    latency_s: float
    overhead_s: float = 0.0  # per-message software overhead paid by a flow that crosses this link type
    one_sided: bool = True  # False: data is copied through a NIC stack (extra memory traffic at both ends)
    lanes: int = 1
    width: int = 1  # electrical lanes per physical link (PCIe x4 -> 4); informational, already in bandwidth_Bps
    type_name: str = ""  # the link type's name in the topology file (e.g. "opa", "pcie-x4")


# Hashed ECMP: the pair (src, dst) of ranks takes path (src * ECMP_HASH_PRIME + dst) % count of its sorted
# equal-cost set, so one source's flows spread over the set. The engine's compiled route search uses the same prime.
ECMP_HASH_PRIME = 7919


def ecmp_index(src_rank: int, dst_rank: int, count: int) -> int:
    """Which of ``count`` sorted equal-cost paths the rank pair (src, dst) takes."""
    return (src_rank * ECMP_HASH_PRIME + dst_rank) % count


class Topology:
    """A built fabric: graph, ranks in order, compute specs, links and (ECMP) routes between ranks."""

    def __init__(
        self,
        name: str,
        graph: nx.Graph,
        ranks: list[str],
        source: str | None = None,
        hosts: list[str] | None = None,
        description: str = "",
    ) -> None:
        self.name = name
        self.graph = graph
        self.ranks = list(ranks)
        self.source = source or name
        # Host CPUs next to accelerator ranks (kind "host"): they run CPU work and host-staged transfers.
        self.hosts = list(hosts or [])
        self.description = description
        for node in self.ranks:
            if node not in graph:
                raise DlrmsimError(f"rank node '{node}' is not in the graph", source=self.source, field="ranks")
            if not isinstance(graph.nodes[node].get("compute"), ComputeSpec):
                raise DlrmsimError(f"rank node '{node}' has no compute spec", source=self.source, field="ranks")
        self._route_cache: dict[tuple[str, str], list[list[str]]] = {}

    @property
    def num_ranks(self) -> int:
        return len(self.ranks)

    def node(self, rank: int) -> str:
        return self.ranks[rank]

    def compute(self, rank: int) -> ComputeSpec:
        """Compute spec of a rank."""
        return self.graph.nodes[self.ranks[rank]]["compute"]

    def link(self, u: str, v: str) -> Link:
        return self.graph.edges[u, v]["link"]

    @cached_property
    def links(self) -> list[Link]:
        return [data["link"] for _, _, data in self.graph.edges(data=True)]

    def with_specs(
        self,
        compute: Callable[[ComputeSpec], ComputeSpec] | None = None,
        link: Callable[[Link], Link] | None = None,
        source: str | None = None,
    ) -> Topology:
        """A copy (same class, ranks and wiring) whose every compute spec is ``compute(spec)`` and every link
        ``link(l)`` (None keeps them); ``source`` names where the change came from. This topology is not modified."""
        graph = self.graph.copy()
        if compute is not None:
            for node, data in graph.nodes(data=True):
                if isinstance(data.get("compute"), ComputeSpec):
                    graph.nodes[node]["compute"] = compute(data["compute"])
        if link is not None:
            for u, v, data in graph.edges(data=True):
                if isinstance(data.get("link"), Link):
                    graph.edges[u, v]["link"] = link(data["link"])
        new = copy.copy(self)
        new.graph = graph
        new._route_cache = {}
        new.__dict__.pop("links", None)  # cached_property of the old graph's links
        if source is not None:
            new.source = source
        return new

    def node_routes(self, src: str, dst: str) -> list[list[str]]:
        """All shortest (fewest-hop) node paths from src to dst, in a stable order: the ECMP set."""
        key = (src, dst)
        if key not in self._route_cache:
            if src == dst:
                paths = [[src]]
            else:
                paths = sorted(nx.all_shortest_paths(self.graph, src, dst))
            self._route_cache[key] = paths
        return self._route_cache[key]

    def routes(self, src_rank: int, dst_rank: int) -> list[list[str]]:
        """All equal-cost shortest paths between two ranks, as node lists."""
        return self.node_routes(self.ranks[src_rank], self.ranks[dst_rank])

    def route(self, src_rank: int, dst_rank: int) -> list[str]:
        """One deterministic shortest path, spread over the ECMP set by the (src, dst) pair."""
        paths = self.routes(src_rank, dst_rank)
        return paths[ecmp_index(src_rank, dst_rank, len(paths))]

    def hops(self, src_rank: int, dst_rank: int) -> int:
        return len(self.routes(src_rank, dst_rank)[0]) - 1

    def path_links(self, path: list[str]) -> list[Link]:
        return [self.link(a, b) for a, b in zip(path, path[1:], strict=False)]

    def host_compute(self, host: int) -> ComputeSpec:
        """Compute spec of host CPU number ``host`` (index into ``hosts``)."""
        return self.graph.nodes[self.hosts[host]]["compute"]

    def rank_of(self, node: str) -> int:
        """Rank index of a graph node (ValueError if it is not a rank)."""
        if not hasattr(self, "_rank_index"):
            self._rank_index = {n: i for i, n in enumerate(self.ranks)}
        return self._rank_index[node] if node in self._rank_index else self.ranks.index(node)

    def path_latency_s(self, path: list[str]) -> float:
        """Zero-load latency of a node path (s): its links' latencies plus every transit node's ``latency_s``.

        This is the latency the engine charges a flow (switches carry their traversal latency as a node
        attribute).
        """
        transit = sum(float(self.graph.nodes[n].get("latency_s") or 0.0) for n in path[1:-1])
        return sum(link.latency_s for link in self.path_links(path)) + transit

    def __repr__(self) -> str:
        return f"Topology({self.name!r}, ranks={self.num_ranks}, links={self.graph.number_of_edges()})"
