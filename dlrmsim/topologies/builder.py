"""Load a topology YAML (preset or path), apply what-if edits, convert to SI and build the checked Topology.

Steps: read the YAML; apply dotted overrides and generator parameters (``sockets=1024``); rewrite unit
spellings (``units.py``); validate against ``schema.TopologyFile``; turn compute types into
``ComputeSpec``s; run the fabric's generator; check the graph (connected, switch ports not exceeded,
at least one rank). Every problem is a one-line ``DlrmsimError`` naming the file, the field and a fix.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import networkx as nx

from dlrmsim import config
from dlrmsim.errors import DlrmsimError, unknown_name_error
from dlrmsim.host import read_host
from dlrmsim.topologies import schema
from dlrmsim.topologies.generators import GENERATE, Wiring
from dlrmsim.topologies.routing import FatTreeTopology
from dlrmsim.topologies.topology import ComputeSpec, EfficiencyTable, Topology
from dlrmsim.topologies.units import normalize_units

PRESET_DIR = Path(__file__).resolve().parent / "presets"

_GENERATOR_MODELS: dict[str, type[schema._Generator]] = {
    "full_mesh": schema.FullMesh,
    "ring": schema.Ring,
    "torus_2d": schema.Torus2D,
    "single_switch": schema.SingleSwitch,
    "fat_tree": schema.FatTree,
    "twisted_hypercube": schema.TwistedHypercube,
    "sled_rack": schema.SledRack,
    "host": schema.HostFabric,
    "explicit": schema.Explicit,
}
_COUNT_ALIASES = ("sockets", "ranks", "endpoints", "cards")


def topology_names() -> list[str]:
    """Names of the built-in topology presets."""
    return config.preset_names(PRESET_DIR)


def load_spec(
    name_or_path: str | Path, overrides: dict[str, Any] | None = None, **params: Any
) -> tuple[schema.TopologyFile, str]:
    """The validated topology file (quantities in the units their field names carry) and its source name."""
    path = config.resolve(name_or_path, PRESET_DIR, "topology")
    data = config.read_yaml(path)
    source = path.name if path.parent == PRESET_DIR else str(path)
    if overrides:
        data = config.apply_overrides(data, overrides, source)
    if params:
        data = _apply_params(data, params, source)
    return parse_spec(data, source), source


def sockets_override(name_or_path: str | Path, sockets: int | None) -> dict[str, Any]:
    """The dotted override that scales a topology's fabric to ``sockets`` endpoints (``--sockets N``).

    Only generators with an endpoint count scale this way (fat trees, meshes, rings, single switches): their
    other fields (nodes, leaves, pruning, switch ports) stay as the file has them and the generator adds leaves
    and upper switches. None gives no override.
    """
    if sockets is None:
        return {}
    if sockets < 1:
        raise DlrmsimError(f"--sockets {sockets} is not a socket count", field="--sockets", fix="give a positive number")
    path = config.resolve(name_or_path, PRESET_DIR, "topology")
    data = config.read_yaml(path)
    source = path.name if path.parent == PRESET_DIR else str(path)
    fabric = data.get("fabric") if isinstance(data, dict) else None
    generator = str(fabric.get("generator")) if isinstance(fabric, dict) else "?"
    model = _GENERATOR_MODELS.get(generator)
    if model is None or model.count_field != "endpoints" or "endpoints" not in fabric:
        other = (
            f" (its size is fabric.{model.count_field}: use --topology-set fabric.{model.count_field}=N)"
            if model and model.count_field
            else ""
        )
        raise DlrmsimError(
            f"a {generator} fabric has no socket count to scale{other}",
            source=source,
            field="--sockets",
            fix="drop --sockets, or use a fat_tree, full_mesh, ring or single_switch topology such as clx-64s-opa",
        )
    return {"fabric.endpoints": sockets}


def parse_spec(data: Any, source: str) -> schema.TopologyFile:
    """Validate raw YAML data (after overrides) as a topology file, accepting any known unit spelling."""
    data, renames = normalize_units(data, source)
    data = _resolve_likes(data, source)
    try:
        return config.validate(schema.TopologyFile, data, source)
    except DlrmsimError as err:
        if err.field in renames:
            raise DlrmsimError(err.message, source=err.source, field=renames[err.field], fix=err.fix) from None
        raise


def _resolve_likes(data: Any, source: str) -> Any:
    """Expand ``like: other`` in link types: the other type's fields, then this type's own."""
    links = data.get("links") if isinstance(data, dict) else None
    if not isinstance(links, dict) or not any(isinstance(v, dict) and "like" in v for v in links.values()):
        return data
    resolved: dict[str, Any] = {}

    def resolve(name: str, chain: tuple[str, ...]) -> Any:
        if name in resolved:
            return resolved[name]
        entry = links[name]
        if not isinstance(entry, dict) or entry.get("like") is None:
            resolved[name] = entry
            return entry
        parent = entry["like"]
        field = f"links.{name}.like"
        if parent not in links:
            raise unknown_name_error("link type", str(parent), [k for k in links if k != name], source=source, field=field)
        if parent in chain or parent == name:
            raise DlrmsimError(
                f"link types refer to each other in a loop ({' -> '.join((*chain, name, parent))})",
                source=source,
                field=field,
                fix="make one of them a full definition",
            )
        base = resolve(parent, (*chain, name))
        merged = {k: v for k, v in base.items() if k != "like"} if isinstance(base, dict) else {}
        if "bandwidth_GBps" in entry:  # a rate given here replaces the parent's, whichever form it used
            merged.pop("lane_bandwidth_GBps", None)
            merged.pop("width", None)
        if "lane_bandwidth_GBps" in entry or "width" in entry:
            merged.pop("bandwidth_GBps", None)
        merged.update(entry)
        resolved[name] = merged
        return merged

    data = dict(data)
    data["links"] = {name: resolve(name, ()) for name in links}
    return data


def _apply_params(data: Any, params: dict[str, Any], source: str) -> Any:
    """Set generator parameters (``sockets=1024``) on the ``fabric`` mapping; the aliases reach its count field."""
    if not isinstance(data, dict) or not isinstance(data.get("fabric"), dict):
        raise DlrmsimError("the file has no fabric mapping to apply parameters to", source=source, field="fabric")
    data = copy.deepcopy(data)
    fabric = data["fabric"]
    model = _GENERATOR_MODELS.get(str(fabric.get("generator")))
    if model is None:
        return data  # validation reports the bad generator
    fields = [f for f in model.model_fields if f != "generator"]
    for key, value in params.items():
        if key in fields:
            fabric[key] = value
        elif key in _COUNT_ALIASES and model.count_field in ("endpoints", "ranks"):
            fabric[model.count_field] = value
        else:
            raise DlrmsimError(
                f"unknown parameter '{key}' for a {fabric['generator']} fabric",
                source=source,
                field=f"fabric.{key}",
                fix=f"use one of: {', '.join(fields)}",
            )
    return data


def load_topology(name_or_path: str | Path, overrides: dict[str, Any] | None = None, **params: Any) -> Topology:
    """Build a built-in topology by name (``topology_names()``) or a user's YAML by path.

    ``overrides`` are dotted-path edits of the YAML before validation (``{"links.opa.bandwidth_GBps": 25}``);
    ``params`` set fabric fields (``sockets=1024``, ``sleds=4``, ``ranks=2``; ``sockets``/``ranks`` reach
    the generator's endpoint count).
    """
    spec, source = load_spec(name_or_path, overrides, **params)
    topo = build_topology(spec, source)
    if params:
        topo.name = f"{spec.name}({', '.join(f'{k}={v}' for k, v in params.items())})"
    if params or any(str(k).startswith("fabric.") for k in overrides or {}):
        topo.description = scaled_description(topo, spec)
    return topo


def scaled_description(topo: Topology, spec: schema.TopologyFile) -> str:
    """A description that stays true after a generator parameter changed the size: counted from the built graph,
    with the preset's own description marked as the unscaled form."""
    kinds: dict[str, int] = {}
    for _, data in topo.graph.nodes(data=True):
        kinds[data.get("kind", "node")] = kinds.get(data.get("kind", "node"), 0) + 1
    counted = ", ".join(f"{n} {k}{'es' if k == 'switch' and n != 1 else 's' if n != 1 else ''}" for k, n in kinds.items())
    return f"{counted} ({spec.fabric.generator} fabric, {topo.num_ranks} ranks); unscaled preset: {spec.description}"


def build_graph(
    name_or_path: str | Path | schema.TopologyFile, overrides: dict[str, Any] | None = None, **params: Any
) -> nx.Graph:
    """The networkx graph of a topology: nodes have ``kind`` (and ``compute`` for endpoints), edges ``link``."""
    if isinstance(name_or_path, schema.TopologyFile):
        return build_topology(name_or_path, name_or_path.name).graph
    return load_topology(name_or_path, overrides, **params).graph


def build_topology(spec: schema.TopologyFile, source: str) -> Topology:
    """Run the fabric's generator over the file's types and check the resulting graph."""
    specs: dict[str, ComputeSpec] = {}
    attrs: dict[str, dict] = {}
    for name, ctype in spec.compute.items():
        specs[name], attrs[name] = compute_spec(name, ctype)
    wiring = Wiring(spec, source, specs, attrs)
    GENERATE[spec.fabric.generator](spec.fabric, wiring)
    check_graph(wiring, source)
    cls = FatTreeTopology if spec.fabric.generator == "fat_tree" else Topology
    topo = cls(spec.name, wiring.graph, wiring.ranks, source=source, hosts=wiring.hosts, description=spec.description)
    topo.spec = spec  # type: ignore[attr-defined]
    return topo


def _table(points: list, attr: str) -> EfficiencyTable:
    if not points:
        return EfficiencyTable.constant(1.0)
    return EfficiencyTable(tuple((float(getattr(p, attr)), float(p.efficiency)) for p in points))


def compute_spec(name: str, ctype: schema.Processor | schema.Card) -> tuple[ComputeSpec, dict[str, Any]]:
    """SI ComputeSpec of a compute type, plus descriptive node attributes (model, clocks, power, SRAM)."""
    mem = ctype.memory
    capacity_GB = mem.capacity_GB
    if isinstance(ctype, schema.Card):
        peak = {"int8": ctype.int8_TOPS * 1e12, "fp16": ctype.fp16_TFLOPS * 1e12}
        if ctype.fp32_TFLOPS is not None:
            peak["fp32"] = ctype.fp32_TFLOPS * 1e12
        cs = ComputeSpec(
            name=name,
            cores=ctype.cores,
            clock_hz=(ctype.clock_GHz or 0.0) * 1e9,
            peak_flops=peak,
            memory_bandwidth_Bps=mem.bandwidth_GBps * 1e9,
            memory_capacity_B=float(capacity_GB) * 1e9 if capacity_GB != "detect" else _detected().memory_B,
            numa_nodes=mem.numa_nodes,
            gemm_efficiency=_table(ctype.gemm_efficiency, "flops"),
            gemm_memory_overlap=ctype.gemm_memory_overlap,
            memory_efficiency=_table(mem.efficiency, "bytes"),
            saturation_cores=mem.saturation_cores,
            kind="card",
        )
        extra = {
            "model": ctype.model,
            "power_W": ctype.power_W,
            "sram_per_core_B": None if ctype.sram_per_core_GB is None else ctype.sram_per_core_GB * 1e9,
            "shared_cache_B": None if ctype.shared_cache_GB is None else ctype.shared_cache_GB * 1e9,
            "calibrated": True,
        }
        return cs, extra
    host = _detected() if _uses_detect(ctype) else None
    model = host.model if ctype.model == "detect" and host else ctype.model
    cores = host.cores if ctype.cores == "detect" and host else ctype.cores
    turbo = host.clock_GHz if ctype.turbo_avx_clock_GHz == "detect" and host else ctype.turbo_avx_clock_GHz
    base = host.base_clock_GHz if ctype.base_avx_clock_GHz == "detect" and host else ctype.base_avx_clock_GHz
    fpc = host.flops_per_cycle_per_core if ctype.flops_per_cycle_per_core == "detect" and host else ctype.flops_per_cycle_per_core
    capacity_B = host.memory_B if capacity_GB == "detect" and host else float(capacity_GB) * 1e9
    assert isinstance(cores, int) and isinstance(turbo, float) and isinstance(base, float) and isinstance(fpc, dict)
    clock = turbo if ctype.peak_clock == "turbo" else base
    if ctype.bf16_arithmetic == "fp32":
        # No bf16 units (a detected ISA may still list them): bf16 matrix math falls back to the fp32 rate
        # (ComputeSpec.flops_rate), while the workload's bf16 bytes stay halved.
        fpc = {p: f for p, f in fpc.items() if p != "bf16"}
    elif ctype.bf16_arithmetic == "native" and "bf16" not in fpc:
        raise DlrmsimError(
            "bf16_arithmetic is native but the detected ISA has no bf16 units",
            source=name,
            field=f"compute.{name}.bf16_arithmetic",
            fix="set it to fp32 or leave it out",
        )
    cs = ComputeSpec(
        name=name,
        cores=cores,
        clock_hz=clock * 1e9,
        peak_flops={p: cores * clock * 1e9 * f for p, f in fpc.items()},
        memory_bandwidth_Bps=mem.bandwidth_GBps * 1e9,
        memory_capacity_B=capacity_B,
        numa_nodes=mem.numa_nodes,
        gemm_efficiency=_table(ctype.gemm_efficiency, "flops"),
        gemm_memory_overlap=ctype.gemm_memory_overlap,
        memory_efficiency=_table(mem.efficiency, "bytes"),
        saturation_cores=mem.saturation_cores,
        kind=ctype.kind,
        **_sparse_update(ctype),
    )
    extra = {
        "model": model,
        "power_W": ctype.power_W,
        "base_clock_hz": base * 1e9,
        "turbo_clock_hz": turbo * 1e9,
        "calibrated": ctype.calibrated,
    }
    return cs, extra


def _uses_detect(ctype: schema.Processor) -> bool:
    return "detect" in (
        ctype.model,
        ctype.cores,
        ctype.base_avx_clock_GHz,
        ctype.turbo_avx_clock_GHz,
        ctype.flops_per_cycle_per_core,
        ctype.memory.capacity_GB,
    )


def _detected():
    return read_host()


def check_graph(w: Wiring, source: str) -> None:
    """The fabric has ranks, is connected, and no switch has more links than ports."""
    g = w.graph
    field = "fabric.edges" if w.spec.fabric.generator == "explicit" else "fabric"
    if not w.ranks:
        raise DlrmsimError(
            "the fabric has no ranks (socket or card nodes)", source=source, field="fabric", fix="add compute nodes"
        )
    if g.number_of_nodes() > 1 and not nx.is_connected(g):
        anchor = w.ranks[0]
        reached = nx.node_connected_component(g, anchor)
        stray = [n for n in g.nodes if n not in reached]
        more = f" (and {len(stray) - 1} more)" if len(stray) > 1 else ""
        raise DlrmsimError(
            f"the fabric is disconnected: node '{stray[0]}'{more} cannot reach '{anchor}'",
            source=source,
            field=field,
            fix=f"add a link from '{stray[0]}' to the rest of the fabric",
        )
    for node, data in g.nodes(data=True):
        ports = data.get("ports")
        if ports is None:
            continue
        used = sum(edata["trunk"] for _, _, edata in g.edges(node, data=True))
        if used > ports:
            raise DlrmsimError(
                f"{data['kind']} '{node}' needs {used} ports but type '{data['switch_type']}' has {ports}",
                source=source,
                field=f"switches.{data['switch_type']}.ports",
                fix=f"use a switch with at least {used} ports, or attach fewer endpoints to each switch",
            )


def _sparse_update(ctype: schema.Processor) -> dict[str, float | int]:
    """ComputeSpec fields for the sparse-update conflict model (absent in YAML: conflicts cost nothing)."""
    su = ctype.sparse_update
    if su is None:
        return {}
    return {
        "cache_line_bytes": su.cache_line_bytes,
        "atomic_conflict_s": su.atomic_conflict_us * 1e-6,
        "rtm_conflict_s": su.rtm_conflict_us * 1e-6,
    }


def precision_note(name_or_path: str | Path, overrides: dict[str, Any] | None, precision: str) -> str | None:
    """One line saying how a bf16 run uses sockets without bf16 units (None when every socket has them, or for fp32).

    Such a socket runs bf16 matrix math at its fp32 rate (``bf16_arithmetic: fp32``; ComputeSpec.flops_rate falls
    back to fp32), so a bf16 speed-up there comes only from the halved bytes of tables, activations and messages.
    """
    if precision != "bf16":
        return None
    spec, _ = load_spec(name_or_path, overrides)
    slow: dict[str, list[str]] = {}  # processor model -> its compute types without bf16 units
    for name, ctype in spec.compute.items():
        if isinstance(ctype, schema.Processor) and ctype.kind == "socket":
            cs, attrs = compute_spec(name, ctype)
            if "bf16" not in cs.peak_flops:
                slow.setdefault(str(attrs["model"]), []).append(name)
    if not slow:
        return None
    which = "; ".join(f"{model} ({', '.join(names)})" for model, names in slow.items())
    return (
        f"note: {which} has no bf16 units (bf16_arithmetic: fp32): bf16 halves the bytes of tables, activations "
        f"and messages, but matrix math runs at the fp32 rate"
    )


def rates_note(
    name_or_path: str | Path, overrides: dict[str, Any] | None, calibration: str | None = None, measured: Any = None
) -> str | None:
    """One line saying which rates a run uses, for a topology with placeholder rates (``calibrated: false``, the host).

    With a calibration: the file, where and when it was measured (``measured``: its ``HostInfo``). Without: the peak
    derived from the detected ISA and clock, and that memory, GEMM efficiency and link rates are placeholders.
    None for a topology whose rates all come from its file (datasheets and papers) and no calibration.
    """
    if calibration is not None:
        when = (
            f" (measured on {measured.name}, {measured.date}{', quick plan' if measured.quick else ''}, {measured.backend})"
            if measured
            else ""
        )
        return f"rates: calibrated, from {calibration}{when}: compute, memory and shared-memory link rates are its fitted ones"
    spec, _ = load_spec(name_or_path, overrides)
    for name, ctype in spec.compute.items():
        if isinstance(ctype, schema.Processor) and not ctype.calibrated:
            cs, attrs = compute_spec(name, ctype)
            fpc = cs.peak_flops["fp32"] / (cs.cores * cs.clock_hz)
            return (
                f"rates: uncalibrated defaults for {name} ({attrs['model']}): "
                f"fp32 peak {cs.peak_flops['fp32'] / 1e12:.3g} TFLOPS "
                f"from the ISA ({cs.cores} cores x {cs.clock_hz / 1e9:.2f} GHz x {fpc:g} flop/cycle); memory "
                f"{cs.memory_bandwidth_Bps / 1e9:g} GB/s, GEMM efficiency and links are placeholders (dlrmsim calibrate "
                f"measures them; use the file with --calibration)"
            )
    return None
