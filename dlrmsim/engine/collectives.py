"""Collective algorithms: each turns (ranks, bytes, topology) into phases of point-to-point flows.

An algorithm is a small function registered with ``@algorithm(op, name)``. It receives a
:class:`CollectiveContext` and returns a list of :class:`Phase`. Ranks inside an algorithm are *local*
indices 0..p-1 into ``ctx.ranks``; the engine maps them to global ranks.

Execution semantics (engine): phases are *per-rank asynchronous*. A rank enters phase k+1 as soon as every
phase-k flow it sends or receives has arrived and its phase-k reduction (``reduce_bytes``) is done. A
phase-k flow starts when both its ends have entered phase k (``CommSettings.rendezvous``, default, as for
large MPI messages) or when its sender has (eager). A rank with nothing to do in a phase passes straight
through. This is how message-passing collectives behave (no global barrier between steps), and it lets a
slow link delay only the ranks that depend on it.

Byte conventions of ``nbytes`` (see :meth:`dlrmsim.engine.simulation.Simulation.collective`):
allreduce: the buffer each rank holds; alltoall: what each rank sends to the others in total (or a p x p
matrix via ``ctx.matrix``); allgather / reduce_scatter: the full (gathered) buffer; scatter: what the root
sends in total to the others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dlrmsim.errors import DlrmsimError, unknown_name_error
from dlrmsim.topologies.topology import Topology


@dataclass(frozen=True)
class FlowSpec:
    """One point-to-point transfer of a phase, between local rank indices (bytes)."""

    src_rank: int
    dst_rank: int
    nbytes: float


@dataclass
class Phase:
    """One step: flows (as arrays of local src, dst, bytes) and the bytes each rank reduces afterwards."""

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    reduce_bytes: np.ndarray | None = None  # (p,) bytes of incoming data each rank adds into its buffer

    @staticmethod
    def from_flows(flows: list[FlowSpec], reduce_bytes: np.ndarray | list[float] | None = None) -> Phase:
        return Phase(
            src=np.array([f.src_rank for f in flows], dtype=np.int64),
            dst=np.array([f.dst_rank for f in flows], dtype=np.int64),
            nbytes=np.array([f.nbytes for f in flows], dtype=float),
            reduce_bytes=None if reduce_bytes is None else np.asarray(reduce_bytes, dtype=float),
        )

    @property
    def flows(self) -> list[FlowSpec]:
        return [FlowSpec(int(s), int(d), float(b)) for s, d, b in zip(self.src, self.dst, self.nbytes, strict=True)]


@dataclass
class CollectiveContext:
    """What an algorithm may look at. ``ranks`` are global rank numbers; ``p = len(ranks)``."""

    op: str
    ranks: list[int]
    nbytes: float
    topology: Topology
    root: int = 0  # local index of the root (scatter)
    matrix: np.ndarray | None = None  # (p, p) bytes from i to j (alltoallv)
    extra: dict = field(default_factory=dict)

    @property
    def p(self) -> int:
        return len(self.ranks)

    def node_groups(self) -> list[list[int]]:
        """Local ranks grouped by shared-memory node: ranks joined by one-sided links (e.g. UPI) only.

        Groups are ordered by their smallest member; members ascending.
        """
        topo = self.topology
        local = {topo.node(r): i for i, r in enumerate(self.ranks)}
        parent = list(range(self.p))

        def find(a: int) -> int:
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        g = topo.graph
        for name, i in local.items():
            # walk one-sided links, possibly through non-rank nodes, to reach other ranks
            seen = {name}
            stack = [name]
            while stack:
                x = stack.pop()
                for y in g.neighbors(x):
                    if y in seen or not g.edges[x, y]["link"].one_sided:
                        continue
                    seen.add(y)
                    if y in local:
                        parent[find(local[y])] = find(i)
                    stack.append(y)
        groups: dict[int, list[int]] = {}
        for i in range(self.p):
            groups.setdefault(find(i), []).append(i)
        return sorted((sorted(v) for v in groups.values()), key=lambda v: v[0])


AlgorithmFn = Callable[[CollectiveContext], list[Phase]]
ALGORITHMS: dict[str, dict[str, AlgorithmFn]] = {}
DEFAULT_ALGORITHM = {
    "allreduce": "ring",
    "alltoall": "direct",
    "allgather": "ring",
    "reduce_scatter": "ring",
    "scatter": "direct",
}


def algorithm(op: str, name: str) -> Callable[[AlgorithmFn], AlgorithmFn]:
    """Register ``fn(ctx) -> list[Phase]`` as algorithm ``name`` of collective ``op``."""

    def deco(fn: AlgorithmFn) -> AlgorithmFn:
        ALGORITHMS.setdefault(op, {})[name] = fn
        return fn

    return deco


def get_algorithm(op: str, name: str | None) -> tuple[str, AlgorithmFn]:
    """Look up an algorithm (``None``: the op's default); unknown names raise a one-line DlrmsimError."""
    if op not in ALGORITHMS:
        raise unknown_name_error("collective", op, ALGORITHMS)
    name = name or DEFAULT_ALGORITHM.get(op) or next(iter(ALGORITHMS[op]))
    if name not in ALGORITHMS[op]:
        raise unknown_name_error(f"{op} algorithm", name, ALGORITHMS[op])
    return name, ALGORITHMS[op][name]


# ---- helpers ---------------------------------------------------------------------------------------
def _phase(src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray | float, reduce_bytes: np.ndarray | None = None) -> Phase:
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    nb = np.broadcast_to(np.asarray(nbytes, dtype=float), src.shape).copy()
    keep = src != dst
    return Phase(src[keep], dst[keep], nb[keep], reduce_bytes)


def _ring_steps(members: list[int], chunk: float, steps: int, reduce: bool, p_total: int) -> list[Phase]:
    """``steps`` ring steps over ``members`` (local ranks), each sending ``chunk`` bytes to the next."""
    m = np.asarray(members, dtype=np.int64)
    nxt = np.roll(m, -1)
    phases = []
    for _ in range(steps):
        red = None
        if reduce:
            red = np.zeros(p_total)
            red[m] = chunk
        phases.append(_phase(m, nxt, chunk, red))
    return phases


def _direct_all(members: list[int], chunk: float, reduce: bool, p_total: int) -> Phase:
    m = np.asarray(members, dtype=np.int64)
    k = len(m)
    src = np.repeat(m, k)
    dst = np.tile(m, k)
    red = None
    if reduce:
        red = np.zeros(p_total)
        red[m] = chunk * (k - 1)
    return _phase(src, dst, chunk, red)


# ---- allreduce ---------------------------------------------------------------------------------------
@algorithm("allreduce", "ring")
def allreduce_ring(ctx: CollectiveContext) -> list[Phase]:
    """Ring: p-1 reduce-scatter steps then p-1 allgather steps, each moving S/p to the next rank."""
    p = ctx.p
    if p == 1:
        return []
    chunk = ctx.nbytes / p
    members = list(range(p))
    return _ring_steps(members, chunk, p - 1, True, p) + _ring_steps(members, chunk, p - 1, False, p)


@algorithm("allreduce", "rsag")
def allreduce_rsag(ctx: CollectiveContext) -> list[Phase]:
    """Reduce-scatter + allgather, both direct: every rank sends S/p to every other, reduces, then gathers."""
    p = ctx.p
    if p == 1:
        return []
    chunk = ctx.nbytes / p
    members = list(range(p))
    return [_direct_all(members, chunk, True, p), _direct_all(members, chunk, False, p)]


@algorithm("allreduce", "rhd")
def allreduce_rhd(ctx: CollectiveContext) -> list[Phase]:
    """Recursive halving (reduce-scatter) then doubling (allgather), Rabenseifner.

    Non-power-of-two p: the ranks beyond the largest power of two first send their whole buffer to a partner
    (which reduces it) and get the result back at the end.
    """
    p = ctx.p
    if p == 1:
        return []
    s = ctx.nbytes
    p2 = 1 << (p.bit_length() - 1)
    extra = p - p2
    phases: list[Phase] = []
    if extra:
        src = np.arange(p2, p)
        red = np.zeros(p)
        red[src - p2] = s
        phases.append(_phase(src, src - p2, s, red))
    core = np.arange(p2)
    steps = p2.bit_length() - 1
    size = s
    for k in range(steps):
        dist = p2 >> (k + 1)
        size /= 2
        red = np.zeros(p)
        red[core] = size
        phases.append(_phase(core, core ^ dist, size, red))
    for k in reversed(range(steps)):
        dist = p2 >> (k + 1)
        phases.append(_phase(core, core ^ dist, size))
        size *= 2
    if extra:
        src = np.arange(p2, p)
        phases.append(_phase(src - p2, src, s))
    return phases


@algorithm("allreduce", "hierarchical")
def allreduce_hierarchical(ctx: CollectiveContext) -> list[Phase]:
    """Inside each node a direct reduce-scatter (S/g per member), then a ring allreduce of the S/g shard
    among the members with the same local index across nodes, then a direct allgather inside each node.

    Nodes are groups of ranks joined by one-sided links (:meth:`CollectiveContext.node_groups`); all groups
    must have the same size g.
    """
    p = ctx.p
    if p == 1:
        return []
    groups = ctx.node_groups()
    g = len(groups[0])
    if any(len(gr) != g for gr in groups):
        raise DlrmsimError(
            "hierarchical allreduce needs the same number of ranks on every node", field="algorithm", fix="use 'ring' or 'rhd'"
        )
    shard = ctx.nbytes / g
    phases: list[Phase] = []
    if g > 1:
        parts = [_direct_all(gr, shard, True, p) for gr in groups]
        phases.append(_merge(parts, p))
    n = len(groups)
    if n > 1:
        rings = [[gr[i] for gr in groups] for i in range(g)]
        per_ring = [allreduce_ring_members(r, shard, p) for r in rings]
        for k in range(len(per_ring[0])):
            phases.append(_merge([pr[k] for pr in per_ring], p))
    if g > 1:
        phases.append(_merge([_direct_all(gr, shard, False, p) for gr in groups], p))
    return phases


def allreduce_ring_members(members: list[int], nbytes: float, p_total: int) -> list[Phase]:
    """Ring allreduce phases of ``nbytes`` among ``members`` (local ranks of a larger collective)."""
    k = len(members)
    chunk = nbytes / k
    return _ring_steps(members, chunk, k - 1, True, p_total) + _ring_steps(members, chunk, k - 1, False, p_total)


def _merge(parts: list[Phase], p: int) -> Phase:
    red = None
    if any(ph.reduce_bytes is not None for ph in parts):
        red = np.zeros(p)
        for ph in parts:
            if ph.reduce_bytes is not None:
                red += ph.reduce_bytes
    return Phase(
        np.concatenate([ph.src for ph in parts]),
        np.concatenate([ph.dst for ph in parts]),
        np.concatenate([ph.nbytes for ph in parts]),
        red,
    )


# ---- alltoall ------------------------------------------------------------------------------------------
def _alltoall_matrix(ctx: CollectiveContext) -> np.ndarray:
    p = ctx.p
    if ctx.matrix is not None:
        m = np.asarray(ctx.matrix, dtype=float)
        if m.shape != (p, p):
            raise DlrmsimError(f"alltoallv matrix must be {p} x {p}, got {m.shape}", field="matrix")
        return m
    m = np.full((p, p), ctx.nbytes / max(p - 1, 1))
    np.fill_diagonal(m, 0.0)
    return m


@algorithm("alltoall", "direct")
def alltoall_direct(ctx: CollectiveContext) -> list[Phase]:
    """Every rank sends to every other rank at once: one phase of p(p-1) flows."""
    p = ctx.p
    m = _alltoall_matrix(ctx)
    src, dst = np.nonzero(m)
    keep = src != dst
    if p == 1 or not keep.any():
        return []
    return [Phase(src[keep].astype(np.int64), dst[keep].astype(np.int64), m[src[keep], dst[keep]])]


@algorithm("alltoall", "pairwise")
def alltoall_pairwise(ctx: CollectiveContext) -> list[Phase]:
    """Pairwise exchange: in step k (1..p-1) rank r sends to (r+k) mod p and receives from (r-k) mod p."""
    p = ctx.p
    m = _alltoall_matrix(ctx)
    r = np.arange(p)
    phases = []
    for k in range(1, p):
        d = (r + k) % p
        phases.append(_phase(r, d, m[r, d]))
    return phases


# ---- allgather / reduce_scatter ---------------------------------------------------------------------------
@algorithm("allgather", "ring")
def allgather_ring(ctx: CollectiveContext) -> list[Phase]:
    """p-1 steps, each rank forwards one S/p block to the next rank."""
    p = ctx.p
    return [] if p == 1 else _ring_steps(list(range(p)), ctx.nbytes / p, p - 1, False, p)


@algorithm("allgather", "direct")
def allgather_direct(ctx: CollectiveContext) -> list[Phase]:
    """Every rank sends its S/p block to every other rank at once."""
    p = ctx.p
    return [] if p == 1 else [_direct_all(list(range(p)), ctx.nbytes / p, False, p)]


@algorithm("reduce_scatter", "ring")
def reduce_scatter_ring(ctx: CollectiveContext) -> list[Phase]:
    """p-1 steps, each rank sends a partial S/p block to the next and reduces the one it receives."""
    p = ctx.p
    return [] if p == 1 else _ring_steps(list(range(p)), ctx.nbytes / p, p - 1, True, p)


@algorithm("reduce_scatter", "direct")
def reduce_scatter_direct(ctx: CollectiveContext) -> list[Phase]:
    """Every rank sends block j (S/p) to rank j at once, then reduces the p-1 blocks it received."""
    p = ctx.p
    return [] if p == 1 else [_direct_all(list(range(p)), ctx.nbytes / p, True, p)]


# ---- scatter ------------------------------------------------------------------------------------------------
@algorithm("scatter", "direct")
def scatter_direct(ctx: CollectiveContext) -> list[Phase]:
    """The root sends each other rank its nbytes/(p-1) share at once (one phase, p-1 concurrent flows)."""
    p = ctx.p
    if p == 1:
        return []
    others = np.array([i for i in range(p) if i != ctx.root], dtype=np.int64)
    return [_phase(np.full(p - 1, ctx.root), others, ctx.nbytes / (p - 1))]


@algorithm("scatter", "linear")
def scatter_linear(ctx: CollectiveContext) -> list[Phase]:
    """The root sends the shares one after another (p-1 phases of one flow), like a linear MPI scatter."""
    p = ctx.p
    share = ctx.nbytes / max(p - 1, 1)
    return [_phase(np.array([ctx.root]), np.array([i]), share) for i in range(p) if i != ctx.root]


@algorithm("scatter", "binomial")
def scatter_binomial(ctx: CollectiveContext) -> list[Phase]:
    """Binomial tree: in step k, every rank holding data forwards half of what it holds to a new rank."""
    p = ctx.p
    if p == 1:
        return []
    share = ctx.nbytes / (p - 1)
    # relative ranks v = (i - root) mod p; rank v receives from v - mask in the step with that mask
    phases = []
    mask = 1 << (max(p - 1, 1).bit_length() - 1)
    while mask >= 1:
        src, dst, nb = [], [], []
        for v in range(0, p, 2 * mask):
            w = v + mask
            if w < p:
                cnt = min(mask, p - w)  # ranks w .. w+cnt-1 live in that subtree
                src.append((v + ctx.root) % p)
                dst.append((w + ctx.root) % p)
                nb.append(cnt * share)
        phases.append(_phase(np.array(src), np.array(dst), np.array(nb)))
        mask >>= 1
    return phases


@algorithm("alltoall", "pairwise_xor")
def alltoall_pairwise_xor(ctx: CollectiveContext) -> list[Phase]:
    """MPICH's long-message pairwise exchange (MPIR_Alltoall_intra_pairwise): in step k (1..p-1) rank r
    exchanges with r XOR k when p is a power of two, else sends to (r+k) mod p and receives from (r-k) mod p.
    It ignores the topology: on a twisted hypercube some steps pair sockets two links apart."""
    p = ctx.p
    if p & (p - 1):
        return alltoall_pairwise(ctx)
    m = _alltoall_matrix(ctx)
    r = np.arange(p)
    return [_phase(r, r ^ k, m[r, r ^ k]) for k in range(1, p)]
