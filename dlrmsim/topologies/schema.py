"""Validated schema of a topology YAML: compute types, link types, switch types and the fabric description.

Quantities are stored in the unit their field names carry (GBps, us, GB, GHz, W; see ``units.py`` for
the other spellings a file may use); the builder converts them to SI. A fabric is either one of the
parametric generators (``generator: fat_tree``, ...) or an explicit node and edge list
(``generator: explicit``).

Layout of a topology file (see presets/*.yaml)::

    name: clx-64s-opa
    description: ...
    compute:                       # named compute types
      xeon-8280:                   # kind socket | host: a CPU
        kind: socket
        model: ...; cores: 28; base_avx_clock_GHz: 1.8; turbo_avx_clock_GHz: 2.4; peak_clock: turbo
        flops_per_cycle_per_core: {fp32: 64, bf16: 128}
        memory: {bandwidth_GBps: 105, capacity_GB: 96, numa_nodes: 1, saturation_cores: 7,
                 efficiency: [{bytes: 4096, efficiency: 0.5}, ...]}
        gemm_efficiency: [{flops: 1.0e+6, efficiency: 0.25}, ...]
      m2-card:                     # kind card: an accelerator
        kind: card
        cores: 12; int8_TOPS: 30; fp16_TFLOPS: 4; memory: {...}; power_W: 13
    links:                         # named link types, bandwidth per direction
      opa: {kind: opa, bandwidth_GBps: 12.5, latency_us: 0.45, overhead_us: 2.0, one_sided: false}
      opa-uplink: {like: opa, latency_us: 0.0}
      pcie-x4: {kind: pcie, lane_bandwidth_GBps: 0.985, width: 4, latency_us: 0.5, one_sided: true}
    switches:                      # named switch (or multi-host NIC) types
      opa-48: {ports: 48, latency_us: 0.1}
    fabric:                        # one generator and its parameters, or generator: explicit
      generator: fat_tree
      endpoints: 64
      ...
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from dlrmsim.config import StrictModel

Precision = Literal["fp32", "bf16", "fp16", "int8", "int4"]
Detect = Literal["detect"]  # filled in from the running machine (host topology)
Fraction = Annotated[float, Field(gt=0, le=1)]

LINK_KINDS = ("upi", "opa", "pcie", "ethernet", "nic", "shm", "infiniband", "trunk")
LinkKind = Literal["upi", "opa", "pcie", "ethernet", "nic", "shm", "infiniband", "trunk"]


class GemmPoint(StrictModel):
    """Achieved fraction of peak for a GEMM of ``flops`` floating-point operations (2*M*N*K)."""

    flops: PositiveFloat
    efficiency: Fraction


class StreamPoint(StrictModel):
    """Achieved fraction of peak memory bandwidth for a stream of ``bytes`` bytes."""

    bytes: PositiveFloat
    efficiency: Fraction


def _increasing(points: list, attr: str, what: str) -> None:
    sizes = [getattr(p, attr) for p in points]
    if sizes != sorted(sizes) or len(set(sizes)) != len(sizes):
        raise ValueError(f"{what} points must have strictly increasing {attr}")


class Memory(StrictModel):
    """The memory attached to one compute endpoint (one NUMA node per socket unless ``numa_nodes`` says more)."""

    bandwidth_GBps: PositiveFloat
    capacity_GB: PositiveFloat | Detect
    numa_nodes: PositiveInt = 1
    efficiency: list[StreamPoint] = Field(default_factory=list, description="achieved fraction of bandwidth by stream size")
    saturation_cores: PositiveFloat | None = Field(None, description="cores needed to reach the achieved bandwidth")

    @model_validator(mode="after")
    def _sorted(self) -> Memory:
        _increasing(self.efficiency, "bytes", "memory efficiency")
        return self


class SparseUpdate(StrictModel):
    """Costs of conflicting sparse embedding updates ([Kalamkar20], embedding update strategies; docs/sources.md)."""

    cache_line_bytes: PositiveInt = 64
    atomic_conflict_us: NonNegativeFloat = Field(description="one cache-line transfer between cores when two update the same row")
    rtm_conflict_us: NonNegativeFloat = Field(description="one aborted and retried transaction on a shared row")


# Processors and cards alike default to 1, the roofline: no cited figure for the built-in machines; a host
# calibration measures it (calibration.fit.fit_cold_gemm).
GemmMemoryOverlap = Annotated[
    float,
    Field(
        ge=0,
        le=1,
        description="share of a GEMM's compulsory memory traffic hidden under its arithmetic (1 = roofline max, 0 = sum)",
    ),
]


class Processor(StrictModel):
    """A CPU socket (a training rank) or a host CPU (kind ``host``, runs CPU work next to accelerators)."""

    kind: Literal["socket", "host"] = "socket"
    model: str | Detect
    cores: PositiveInt | Detect
    base_avx_clock_GHz: PositiveFloat | Detect
    turbo_avx_clock_GHz: PositiveFloat | Detect
    peak_clock: Literal["turbo", "base"] = Field("turbo", description="which AVX clock the peak flops use")
    flops_per_cycle_per_core: dict[Precision, PositiveFloat] | Detect
    bf16_arithmetic: Literal["native", "fp32"] | None = Field(
        None,
        description="how bf16 matrix math runs: native (bf16 dot-product units such as AVX512_BF16, at the bf16 entry of "
        "flops_per_cycle_per_core) or fp32 (no bf16 units: operands are widened to fp32 and multiplied at the fp32 rate; "
        "bf16 still halves the bytes moved). Default: native when flops_per_cycle_per_core has a bf16 entry, else fp32",
    )
    memory: Memory
    gemm_efficiency: list[GemmPoint] = Field(default_factory=list)
    gemm_memory_overlap: GemmMemoryOverlap = 1.0
    sparse_update: SparseUpdate | None = None
    power_W: PositiveFloat | None = None
    calibrated: bool = Field(True, description="false: the rates are placeholders until calibration overlays them")

    @model_validator(mode="after")
    def _check(self) -> Processor:
        _increasing(self.gemm_efficiency, "flops", "gemm efficiency")
        if isinstance(self.flops_per_cycle_per_core, dict) and "fp32" not in self.flops_per_cycle_per_core:
            raise ValueError("flops_per_cycle_per_core needs an fp32 entry (other precisions fall back to it)")
        if isinstance(self.flops_per_cycle_per_core, dict):
            has_bf16 = "bf16" in self.flops_per_cycle_per_core
            if self.bf16_arithmetic == "native" and not has_bf16:
                raise ValueError("bf16_arithmetic native needs a bf16 entry in flops_per_cycle_per_core (the bf16 units' rate)")
            if self.bf16_arithmetic == "fp32" and has_bf16:
                raise ValueError(
                    "bf16_arithmetic fp32 (no bf16 units) contradicts the bf16 entry of flops_per_cycle_per_core: drop one"
                )
        return self


class Card(StrictModel):
    """An accelerator card (a serving rank): int8 and fp16 throughput, local memory, SRAM, cores, power."""

    kind: Literal["card"]
    model: str
    cores: PositiveInt
    clock_GHz: PositiveFloat | None = Field(None, description="not needed by the model: peaks are given directly")
    int8_TOPS: PositiveFloat
    fp16_TFLOPS: PositiveFloat
    fp32_TFLOPS: PositiveFloat | None = None
    sram_per_core_GB: PositiveFloat | None = None
    shared_cache_GB: PositiveFloat | None = None
    memory: Memory
    gemm_efficiency: list[GemmPoint] = Field(default_factory=list)
    gemm_memory_overlap: GemmMemoryOverlap = 1.0
    power_W: PositiveFloat | None = None

    @model_validator(mode="after")
    def _check(self) -> Card:
        _increasing(self.gemm_efficiency, "flops", "gemm efficiency")
        return self


ComputeType = Annotated[Processor | Card, Field(discriminator="kind")]


class LinkType(StrictModel):
    """A kind of physical link. Bandwidth is per direction (links are full duplex).

    Give either ``bandwidth_GBps`` for the whole link, or ``lane_bandwidth_GBps`` and ``width`` (lanes per
    link, e.g. PCIe x4) so the link rate follows the lane count. ``like: other`` starts from another link
    type's fields (so an override of ``links.other.bandwidth_GBps`` reaches both).
    ``latency_us`` is the link's own latency; the builder adds half of each attached switch's latency to
    it, so the latencies along any endpoint-to-endpoint path sum to links plus switches traversed.
    """

    like: str | None = Field(None, description="copy every field of this other link type, then apply the ones given here")
    kind: LinkKind
    bandwidth_GBps: PositiveFloat | None = None
    lane_bandwidth_GBps: PositiveFloat | None = None
    width: PositiveInt | None = Field(None, description="lanes per link (PCIe x4 -> 4); needs lane_bandwidth_GBps")
    latency_us: NonNegativeFloat
    overhead_us: NonNegativeFloat = Field(0.0, description="per-message software overhead")
    one_sided: bool = Field(description="true: one-sided stores; false: copied through a NIC stack")
    description: str = ""

    @model_validator(mode="after")
    def _one_rate(self) -> LinkType:
        if self.bandwidth_GBps is not None and (self.lane_bandwidth_GBps is not None or self.width is not None):
            raise ValueError("give bandwidth_GBps, or lane_bandwidth_GBps with width, not both")
        if self.bandwidth_GBps is None:
            if self.lane_bandwidth_GBps is None or self.width is None:
                raise ValueError("give bandwidth_GBps, or lane_bandwidth_GBps and width")
        return self

    @property
    def link_bandwidth_GBps(self) -> float:
        """Per-direction bandwidth of one physical link of this type."""
        if self.bandwidth_GBps is not None:
            return self.bandwidth_GBps
        assert self.lane_bandwidth_GBps is not None and self.width is not None
        return self.lane_bandwidth_GBps * self.width


class SwitchType(StrictModel):
    """A switch (Ethernet/OPA/PCIe) or a multi-host NIC: a graph node that forwards but does no compute."""

    kind: Literal["switch", "nic"] = "switch"
    model: str = ""
    ports: PositiveInt
    latency_us: NonNegativeFloat = 0.0
    power_W: PositiveFloat | None = None


# ---------------------------------------------------------------------------------------------------------
# Fabrics


class _Generator(StrictModel):
    count_field: ClassVar[str | None] = None  # the field load_topology(..., sockets=/ranks=) sets


class FullMesh(_Generator):
    """Every endpoint linked to every other."""

    count_field: ClassVar[str | None] = "endpoints"
    generator: Literal["full_mesh"]
    endpoints: PositiveInt
    compute: str
    link: str


class Ring(_Generator):
    """Endpoints in a ring (two endpoints: one link)."""

    count_field: ClassVar[str | None] = "endpoints"
    generator: Literal["ring"]
    endpoints: PositiveInt
    compute: str
    link: str


class Torus2D(_Generator):
    """rows x cols endpoints, each linked to its four wrap-around neighbours."""

    generator: Literal["torus_2d"]
    rows: PositiveInt
    cols: PositiveInt
    compute: str
    link: str


class SingleSwitch(_Generator):
    """Every endpoint on one switch."""

    count_field: ClassVar[str | None] = "endpoints"
    generator: Literal["single_switch"]
    endpoints: PositiveInt
    compute: str
    link: str
    switch: str


class NodeCompute(StrictModel):
    """Endpoints of the listed (multi-socket) nodes use another compute type (e.g. more memory).

    Node indices past the fabric's last node are ignored, so a preset can be scaled down.
    """

    nodes: list[Annotated[int, Field(ge=0)]]
    compute: str


class FatTree(_Generator):
    """A k-level folded-Clos fat tree; the leaf level is pruned ``pruning``:1 (down:up ports).

    Endpoints are grouped in nodes of ``endpoints_per_node`` (filled in order), joined inside a node by
    ``intra_node_link`` (all pairs) when given; each endpoint has one ``endpoint_link`` to its leaf.
    Each leaf has ``endpoints_per_leaf / pruning`` uplinks; levels above the leaves are not pruned.
    ``levels`` (default: the fewest that fit the switch ports) counts switch levels.
    """

    count_field: ClassVar[str | None] = "endpoints"
    generator: Literal["fat_tree"]
    endpoints: PositiveInt
    compute: str
    endpoints_per_node: PositiveInt = 1
    intra_node_link: str | None = None
    intra_node_trunk: PositiveInt = Field(1, description="parallel intra_node_link links between each pair of a node's endpoints")
    endpoint_link: str
    uplink: str
    switch: str
    endpoints_per_leaf: PositiveInt
    pruning: Annotated[float, Field(ge=1)] = 1.0
    levels: Annotated[int, Field(ge=1)] | None = None
    node_compute: list[NodeCompute] = Field(default_factory=list)

    @model_validator(mode="after")
    def _shape(self) -> FatTree:
        up = self.endpoints_per_leaf / self.pruning
        if abs(up - round(up)) > 1e-9 or round(up) < 1:
            raise ValueError(
                f"endpoints_per_leaf / pruning = {self.endpoints_per_leaf} / {self.pruning} must be a whole number of uplinks"
            )
        if self.endpoints_per_leaf % self.endpoints_per_node:
            raise ValueError("endpoints_per_leaf must be a multiple of endpoints_per_node (a node sits on one leaf)")
        if self.endpoints % self.endpoints_per_node:
            raise ValueError("endpoints must be a multiple of endpoints_per_node")
        return self

    @property
    def uplinks_per_leaf(self) -> int:
        return round(self.endpoints_per_leaf / self.pruning)


class TwistedHypercube(_Generator):
    """A 2**dimension-endpoint hypercube with one pair of edges in a 4-cycle twisted (diameter dimension-1).

    Endpoint i's two halves (bit dimension-1) are the two boards of the 8-socket node.
    """

    generator: Literal["twisted_hypercube"]
    dimension: Annotated[int, Field(ge=3, le=12)] = 3
    compute: str
    link: str


class SledRack(_Generator):
    """Accelerator sleds on a top-of-rack switch.

    Per node: ``cards_per_node`` cards, each with a ``card_link`` to the node's ``pcie_switch``, which has a
    ``host_link`` to the node's host CPU. Per sled: ``nodes_per_sled`` nodes; each host has a ``nic_link``
    to the sled's shared multi-host ``nic``; the NIC has ``nodes_per_sled`` ``uplink`` ports to the ToR.
    """

    count_field: ClassVar[str | None] = "sleds"
    generator: Literal["sled_rack"]
    sleds: PositiveInt = 1
    nodes_per_sled: PositiveInt
    cards_per_node: PositiveInt
    card: str
    host: str
    card_link: str
    host_link: str
    pcie_switch: str
    nic: str
    nic_link: str
    uplink: str
    tor_switch: str


class HostFabric(_Generator):
    """This machine as ``ranks`` ranks of cores/ranks cores each, sharing one memory domain, joined by ``link``."""

    count_field: ClassVar[str | None] = "ranks"
    generator: Literal["host"]
    ranks: PositiveInt = 1
    compute: str
    link: str


class NodeSpec(StrictModel):
    name: str
    kind: Literal["socket", "card", "host", "switch", "nic"]
    compute: str | None = Field(None, description="compute type, for socket/card/host nodes")
    switch: str | None = Field(None, description="switch type, for switch/nic nodes")

    @model_validator(mode="after")
    def _typed(self) -> NodeSpec:
        if self.kind in ("switch", "nic"):
            if self.switch is None:
                raise ValueError(f"a {self.kind} node needs 'switch' (the switch type)")
        elif self.compute is None:
            raise ValueError(f"a {self.kind} node needs 'compute' (the compute type)")
        return self


class EdgeSpec(StrictModel):
    u: str
    v: str
    link: str
    trunk: PositiveInt = Field(1, description="parallel physical links bundled into one edge")


class Explicit(_Generator):
    """Nodes and edges listed one by one; ranks default to the socket/card nodes in listed order."""

    generator: Literal["explicit"]
    nodes: list[NodeSpec] = Field(min_length=1)
    edges: list[EdgeSpec] = Field(default_factory=list)
    ranks: list[str] | None = None


Fabric = Annotated[
    FullMesh | Ring | Torus2D | SingleSwitch | FatTree | TwistedHypercube | SledRack | HostFabric | Explicit,
    Field(discriminator="generator"),
]

GENERATORS = ("full_mesh", "ring", "torus_2d", "single_switch", "fat_tree", "twisted_hypercube", "sled_rack", "host", "explicit")


class TopologyFile(StrictModel):
    """A topology YAML: named compute, link and switch types, and the fabric that wires them."""

    name: str
    description: str = ""
    default_backend: str | None = Field(
        None, description="communication backend (preset or YAML) a training simulation uses when none is named; none: ccl"
    )
    compute: dict[str, ComputeType] = Field(min_length=1)
    links: dict[str, LinkType] = Field(default_factory=dict)
    switches: dict[str, SwitchType] = Field(default_factory=dict)
    fabric: Fabric
