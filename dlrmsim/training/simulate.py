"""Training simulation: every rank walks its iteration program on the engine (``ranks.py``).

It loads the inputs (topology, workload, backend, calibration), checks that the placement and memory
allow the rank count, builds the task graph (``taskgraph.py``), runs it on the engine, and turns the
records into the iteration time and its breakdown: compute, pre/post-processing, and the time the
compute stream sat waiting on each kind of collective (exposed communication).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from dlrmsim.calibration.apply import apply_calibration, calibrated_backend_overrides
from dlrmsim.calibration.schema import load_calibration
from dlrmsim.config import StrictModel
from dlrmsim.engine.backends import Backend, load_backend
from dlrmsim.engine.costs import (
    progress_thread_interference,
    tracks_operand_traffic,
)
from dlrmsim.engine.resources import CommSettings
from dlrmsim.engine.simulation import Simulation, gc_paused
from dlrmsim.errors import DlrmsimError
from dlrmsim.topologies import load_topology
from dlrmsim.topologies.builder import load_spec
from dlrmsim.topologies.mapping import RankMapping, capacities, remap
from dlrmsim.topologies.topology import Topology
from dlrmsim.training.implementations import load_implementation
from dlrmsim.training.optimizers import load_optimizer
from dlrmsim.training.ranks import CollectiveCoordinator, RankPrograms
from dlrmsim.training.taskgraph import (
    Collective,
    CommVariant,
    IterationGraph,
    IterationSettings,
    UpdateCosts,
    UpdateStrategy,
    build_iteration,
)
from dlrmsim.workloads import load_workload, model
from dlrmsim.workloads.placement import Placement, PlacementSpec, map_placement, min_ranks_for_capacity, place
from dlrmsim.workloads.schema import Loader, Workload

Scaling = Literal["strong", "weak", "single"]
# TrainingConfig fields left out of a result's JSON when unset (None, or False for an opt-in approximation).
OPTIONAL_KNOBS = ("rank_sockets", "sockets", "threads_per_rank", "implementation", "lockstep_collectives")


DEFAULT_BACKEND = "ccl"  # what a topology without default_backend simulates with


class TrainingConfig(StrictModel):
    """Everything one simulated training iteration depends on; names and paths resolve to YAML files."""

    topology: str = "clx-64s-opa"
    workload: str = "mlperf"
    ranks: int = Field(8, ge=1)
    scaling: Scaling = "strong"
    backend: str = Field(
        DEFAULT_BACKEND, description="backend preset or YAML; when not given: the topology's default_backend, else ccl"
    )
    placement: PlacementSpec = PlacementSpec()
    comm: CommVariant = "alltoall"
    precision: Literal["fp32", "bf16"] | None = None
    blocking: bool = False
    update_strategy: UpdateStrategy = "race_free"
    fuse_backward_update: bool = False
    implementation: str | None = Field(
        None,
        description="implementation profile (torchrec-fused, or a YAML): which kinds run on one thread, fused update; "
        "None: every task on all the rank's cores",
    )
    optimizer: str = Field("sgd", description="optimizer preset (sgd, lamb) or an optimizer YAML")
    comm_cores: int | None = Field(None, ge=0, description="override the backend's pinned communication cores")
    allreduce_algorithm: str | None = None
    alltoall_algorithm: str | None = None
    loader: Literal["none", "reference", "v1"] | None = Field(
        None,
        description="data loader: reference (full global batch per rank), v1 (local batch + index alltoall), "
        "none (random data); default: the workload's",
    )
    calibration: str | None = None
    topology_overrides: dict[str, Any] = {}
    workload_overrides: dict[str, Any] = {}
    backend_overrides: dict[str, Any] = {}
    seed: int = 0
    sockets: int | None = Field(
        None, ge=1, description="scale the topology's fabric to this many sockets (cards, host ranks): the generator's count"
    )
    threads_per_rank: int | None = Field(
        None, ge=1, description="host topology only: cores per rank process (default: the host's cores split evenly)"
    )
    rank_sockets: list[int] | None = Field(
        None, description="topology endpoint (socket) of each rank, in rank order; None: the memory-aware default"
    )
    lockstep_collectives: bool = Field(
        False,
        description="approximation, off by default: a collective's ranks enter each step together (a barrier per "
        "step), so a step's flows end at a few instants instead of one each; faster at many ranks, see "
        "docs/architecture.md for its measured error",
    )

    @model_validator(mode="before")
    @classmethod
    def _topology_default_backend(cls, data: Any) -> Any:
        """No backend named: the topology's own (the host's calibrated collectives, ``shm``), else ccl."""
        if isinstance(data, dict) and data.get("backend") is None:
            data = {**data, "backend": topology_default_backend(data.get("topology") or cls.model_fields["topology"].default)}
        return data


def topology_default_backend(topology: str) -> str:
    """The backend a topology file names as its default (``default_backend``), else ccl. A topology that does
    not load keeps ccl here: loading it later reports the problem in one line."""
    try:
        spec, _ = load_spec(topology)
    except DlrmsimError:
        return DEFAULT_BACKEND
    return spec.default_backend or DEFAULT_BACKEND


@dataclass(frozen=True)
class Breakdown:
    """Where a rank's iteration went (seconds). The parts add up to the iteration time."""

    compute_s: float
    prepost_s: float
    exposed_allreduce_s: float
    exposed_alltoall_s: float
    other_s: float = 0.0  # idle at the end, waiting for slower ranks


@dataclass
class TrainingResult:
    """The simulated iteration: time, breakdown of the slowest rank, per-rank view and raw records."""

    config: TrainingConfig
    iteration_s: float
    breakdown: Breakdown
    per_rank: list[Breakdown]
    global_batch: int
    wait_per_collective_s: dict[str, float]
    comm_bytes: dict[str, float]
    records: list[Any] = field(repr=False, default_factory=list)
    time_to_train_s: float | None = None
    epochs: float | None = None
    # The ranks' arrival skew (CollectiveCoordinator): the delay each collective started with after its last post,
    # and "iteration_end", the last rank's lateness at the next iteration's first synchronisation (s). Part of the
    # exposed waits and other_s; empty where the compute spec measures no skew.
    arrival_wait_s: dict[str, float] = field(default_factory=dict)

    @property
    def imbalance(self) -> float:
        """Busiest rank's compute+prepost over the mean (1.0 = perfectly balanced)."""
        busy = [b.compute_s + b.prepost_s for b in self.per_rank]
        mean = sum(busy) / len(busy)
        return max(busy) / mean if mean > 0 else 1.0

    @property
    def samples_per_s(self) -> float:
        return self.global_batch / self.iteration_s

    def to_row(self) -> dict[str, float | str | None]:
        """Flat outputs for tables, sweeps and JSON."""
        row: dict[str, float | str | None] = {
            "iteration_s": self.iteration_s,
            "global_batch": self.global_batch,
            "samples_per_s": self.samples_per_s,
            "imbalance": self.imbalance,
            "alltoall_bytes": self.comm_bytes.get("alltoall", 0.0),
            "allreduce_bytes": self.comm_bytes.get("allreduce", 0.0),
            "time_to_train_s": self.time_to_train_s,
        }
        row.update(asdict(self.breakdown))
        return row

    def to_json(self) -> dict[str, Any]:
        return {
            # Placement-of-ranks knobs only when set: documents written before they existed keep their keys.
            "config": self.config.model_dump(
                mode="json", exclude={k for k in OPTIONAL_KNOBS if getattr(self.config, k) in (None, False)}
            ),
            "iteration_s": self.iteration_s,
            "global_batch": self.global_batch,
            "samples_per_s": self.samples_per_s,
            "breakdown": asdict(self.breakdown),
            "imbalance": self.imbalance,
            "per_rank": [asdict(b) for b in self.per_rank],
            "wait_per_collective_s": self.wait_per_collective_s,
            "comm_bytes": self.comm_bytes,
            "epochs": self.epochs,
            "time_to_train_s": self.time_to_train_s,
        }


@dataclass
class Inputs:
    """Loaded and checked inputs of a training simulation."""

    topology: Topology
    workload: Workload
    backend: Backend
    placement: Placement
    settings: IterationSettings
    mapping: RankMapping | None = None  # the sockets the ranks run on (topology already remapped to them)


def load_inputs(
    cfg: TrainingConfig, workload: Workload | None = None, topology: Topology | None = None, placement: Placement | None = None
) -> Inputs:
    """Load YAMLs, apply what-ifs and calibration, check placement and memory; refuse what cannot run.

    ``workload`` / ``topology`` objects, when given, replace loading ``cfg.workload`` / ``cfg.topology``
    (validation builds its small workloads in memory); a ``placement`` (e.g. a TorchRec plan read by
    ``dlrmsim.interop.torchrec``) replaces placing the tables by ``cfg.placement``.
    """
    wl_over = dict(cfg.workload_overrides)
    if cfg.precision is not None:
        wl_over["precision"] = cfg.precision
    if workload is not None:
        w = workload.model_copy(update={"precision": cfg.precision}) if cfg.precision else workload
    else:
        w = load_workload(cfg.workload, wl_over or None)
    w = with_loader(w, cfg.loader)
    topo = topology if topology is not None else load_training_topology(cfg)
    impl = load_implementation(cfg.implementation) if cfg.implementation else None
    threads_by_kind = impl.threads_by_kind() if impl is not None else {}
    be_over: dict[str, Any] = {}
    if cfg.calibration:
        cal = load_calibration(Path(cfg.calibration))
        topo = apply_calibration(topo, cal, w.index_distribution.kind, impl)
        be_over.update(calibrated_backend_overrides(cal, cfg.backend))
    be_over.update(cfg.backend_overrides)
    if cfg.comm_cores is not None:
        be_over["comm_cores"] = cfg.comm_cores
    if cfg.allreduce_algorithm:
        be_over["algorithms.allreduce"] = cfg.allreduce_algorithm
    if cfg.alltoall_algorithm:
        be_over["algorithms.alltoall"] = cfg.alltoall_algorithm
    backend = load_backend(cfg.backend, be_over or None)
    cores0 = topo.compute(0).cores
    if backend.comm_cores >= cores0:  # no core left to compute on (an unpinned backend would go negative)
        raise DlrmsimError(
            f"backend uses {backend.comm_cores} communication cores but rank 0 has only {cores0}",
            field="comm_cores",
            fix=f"use fewer (--comm-cores {cores0 - 1} or 0)" if cores0 > 1 else "use --comm-cores 0, or --backend shm",
        )
    if cfg.ranks > topo.num_ranks:
        raise DlrmsimError(
            f"{cfg.ranks} ranks but the topology has {topo.num_ranks}",
            source=topo.source,
            field="ranks",
            fix=f"use at most {topo.num_ranks} ranks, or a larger topology (a fat tree scales with --sockets {cfg.ranks})",
        )
    if placement is None:
        placement = place(w, cfg.placement, cfg.ranks, source=_source(cfg.workload))
    elif placement.ranks != cfg.ranks:
        raise DlrmsimError(
            f"the placement is for {placement.ranks} ranks, the run for {cfg.ranks}",
            field="ranks",
            fix=f"run {placement.ranks} ranks",
        )
    optimizer = load_optimizer(cfg.optimizer)
    # Ranks go to sockets whose memory holds their shards (topologies/mapping.py); rank r is then topo.compute(r).
    mapping = map_placement(
        w,
        placement,
        capacities(topo),
        optimizer.state_bytes_per_param,
        cfg.rank_sockets,
        source=_source(cfg.workload),
        topology=topo.name,
    )
    topo = remap(topo, mapping.sockets)
    check_memory(w, placement, topo, cfg, optimizer.state_bytes_per_param)
    spec = topo.compute(0)
    compute_cores = max(1, spec.cores - backend.comm_cores)
    costs = update_costs(topo)
    settings = IterationSettings(
        global_batch=model.global_batch(w, cfg.ranks, cfg.scaling),
        comm=cfg.comm,
        blocking=cfg.blocking,
        bucket_bytes=backend.bucket_bytes,
        update_strategy=cfg.update_strategy,
        fuse_backward_update=cfg.fuse_backward_update or (impl is not None and impl.fuse_backward_update),
        input_dist=impl.input_dist if impl is not None else None,
        dense_first=impl is not None and impl.dense_first,
        written_out_loss=impl is None or impl.loss == "written_out",
        sharded_software=impl is not None and impl.sharded_software,
        dense_autograd=impl is not None and impl.dense_autograd,
        optimizer_object=impl.optimizer_object if impl is not None else "none",
        track_operands=any(tracks_operand_traffic(topo.compute(r)) for r in range(cfg.ranks)),
        op_threads=tuple(sorted(threads_by_kind.items())),
        optimizer=optimizer,
        threads=compute_cores,
        update_costs=costs,
        allreduce_prepost_passes=backend.prepost.allreduce_passes,
        alltoall_prepost_passes=backend.prepost.alltoall_passes,
    )
    return Inputs(topo, w, backend, placement, settings, mapping)


def load_training_topology(cfg: TrainingConfig) -> Topology:
    """The topology by name or path. A host topology becomes ``cfg.ranks`` processes on this machine, as
    ``torchrun --nproc_per_node=N`` starts them: its cores split evenly, or ``threads_per_rank`` each."""
    over = dict(cfg.topology_overrides)
    params = {"sockets": cfg.sockets} if cfg.sockets is not None else {}
    topo = load_topology(cfg.topology, over or None, **params)
    fabric = topo.spec.fabric  # type: ignore[attr-defined]
    if fabric.generator != "host":
        if cfg.threads_per_rank is not None:
            raise DlrmsimError(
                "--threads-per-rank applies to the host topology only",
                source=topo.source,
                field="threads_per_rank",
                fix="drop it, or use -t host",
            )
        return topo
    if cfg.ranks == topo.num_ranks and cfg.threads_per_rank is None:
        return topo
    if cfg.threads_per_rank is not None:
        over[f"compute.{fabric.compute}.cores"] = cfg.ranks * cfg.threads_per_rank
    return load_topology(cfg.topology, over or None, ranks=cfg.ranks)


def with_loader(w: Workload, loader: str | None) -> Workload:
    """``w`` with its data loader replaced: "none" drops it; "reference"/"v1" sets its kind (the workload's
    loader parameters, or the defaults when it had none); None keeps the workload's."""
    if loader is None:
        return w
    if loader == "none":
        return w.model_copy(update={"loader": None})
    base = w.loader or Loader()
    return w.model_copy(update={"loader": base.model_copy(update={"kind": loader})})


def update_costs(topo: Topology) -> UpdateCosts:
    """Cache-line conflict costs of the sparse update, from the processor's YAML (via the compute spec)."""
    spec = topo.compute(0)
    return UpdateCosts(
        atomic_conflict_s=spec.atomic_conflict_s,
        rtm_conflict_s=spec.rtm_conflict_s,
        cache_line_bytes=spec.cache_line_bytes,
        core_bandwidth_Bps=spec.memory_bandwidth_Bps / (spec.saturation_cores or spec.cores),
    )


def _source(workload: str) -> str:
    return workload if workload.endswith((".yaml", ".yml")) else f"{workload}.yaml"


def check_memory(w: Workload, placement: Placement, topo: Topology, cfg: TrainingConfig, state: float) -> None:
    """Each rank's tables, weights and ``state`` bytes of optimizer state per parameter fit its memory."""
    needs = [placement.memory_on(w, r, state) for r in range(placement.ranks)]
    short = [r for r in range(placement.ranks) if needs[r] > topo.compute(r).memory_capacity_B]
    if short:
        need, have = needs[short[0]], topo.compute(short[0]).memory_capacity_B
        smallest = min_ranks_for_capacity(w, cfg.placement, have, state)
        fix = f"use at least {smallest} ranks" if smallest else "use column_wise placement or larger memory"
        raise DlrmsimError(
            f"{cfg.ranks} ranks need {need / 1e9:.1f} GB per rank but a rank has {have / 1e9:.1f} GB",
            source=_source(cfg.workload),
            field="tables",
            fix=fix,
        )


# --- the SimPy side --------------------------------------------------------------------------------------


def run_iteration(inputs: Inputs, cfg: TrainingConfig, record_flows: bool = True, run_ahead: bool = True) -> TrainingResult:
    """Simulate one iteration on the engine and summarise it.

    ``record_flows=False`` keeps no per-flow records of collectives (a trace wants them; the breakdown does not):
    at 1024 ranks an alltoall alone is a million flows. ``run_ahead=False`` keeps every instant of a collective in
    Python (see :class:`dlrmsim.engine.simulation.Simulation`), for comparison.
    """
    with gc_paused():  # building a 1024-rank program allocates some 100,000 tasks and steps: see gc_paused
        return _run_iteration(inputs, cfg, record_flows, run_ahead)


def _run_iteration(inputs: Inputs, cfg: TrainingConfig, record_flows: bool, run_ahead: bool) -> TrainingResult:
    graph = build_iteration(inputs.workload, inputs.placement, inputs.settings)
    p = inputs.placement.ranks
    tails = [0.0] * p
    if any(inputs.topology.compute(r).gemm_idle_extra_s for r in range(p)):
        # A GEMM is priced by the time since its rank's previous one, and an iteration's first GEMM follows the
        # previous iteration's last: a first pass gives each rank that tail (the iterations repeat).
        sim, _, accs, _ = _simulate(inputs, cfg, graph, False, run_ahead, tails)
        tails = [a["end"] - a["last_gemm_end"] for a in accs]  # (a rank without GEMMs never reads its own)
    sim, coord, accs, waits = _simulate(inputs, cfg, graph, record_flows, run_ahead, tails)
    end = max(a["end"] for a in accs)
    # The last rank's lateness at the next iteration's first synchronisation: the ranks' idle time at the end, other_s.
    iteration = end + coord.late_end(end)
    per_rank = [
        Breakdown(
            compute_s=a["compute"],
            prepost_s=a["prepost"],
            exposed_allreduce_s=a["wait_allreduce"],
            exposed_alltoall_s=a["wait_alltoall"],
            other_s=iteration - a["end"],
        )
        for a in accs
    ]
    slowest = max(range(p), key=lambda r: accs[r]["end"])
    comm_bytes: dict[str, float] = {}
    for c in graph.collectives.values():
        comm_bytes[c.category] = comm_bytes.get(c.category, 0.0) + collective_payload(c)
    wait_max = {cid: max(w.get(cid, 0.0) for w in waits) for cid in graph.collectives}
    result = TrainingResult(
        config=cfg,
        iteration_s=iteration,
        breakdown=per_rank[slowest],
        per_rank=per_rank,
        global_batch=inputs.settings.global_batch,
        wait_per_collective_s=wait_max,
        comm_bytes=comm_bytes,
        records=sim.records,
        arrival_wait_s=dict(coord.arrival_wait_s),
    )
    result.epochs, result.time_to_train_s = time_to_train(
        inputs.workload, inputs.settings.optimizer.name, inputs.settings.global_batch, iteration
    )
    return result


def _simulate(
    inputs: Inputs, cfg: TrainingConfig, graph: IterationGraph, record_flows: bool, run_ahead: bool, gemm_tails_s: list[float]
) -> tuple[Simulation, CollectiveCoordinator, list[dict[str, float]], list[dict[str, float]]]:
    """One pass of the iteration on a fresh engine: (the simulation, its coordinator, each rank's times, each rank's
    waits per collective). ``gemm_tails_s``: per rank, RankPrograms' ``gemm_tails_s``."""
    comm = comm_settings(inputs.backend, inputs.topology.compute(0).cores)
    sim = Simulation(
        inputs.topology,
        seed=cfg.seed,
        comm=comm,
        record_flows=record_flows,
        run_ahead=run_ahead,
        lockstep_collectives=cfg.lockstep_collectives,
    )
    coord = CollectiveCoordinator(sim, graph, inputs.backend, inputs.placement.ranks)
    ranks = RankPrograms(sim, graph, coord, inputs.workload.precision, dict(inputs.settings.op_threads), gemm_tails_s)
    ranks.start()
    sim.run(ranks.done)
    return sim, coord, ranks.accs, ranks.waits


def collective_payload(c: Collective) -> float:
    """Bytes a collective carries by its definition: the alltoall matrix total, or Eq. 1's per-rank buffer."""
    if c.matrix is not None:
        return float(c.matrix.sum())
    return c.nbytes


def comm_settings(backend: Backend, cores: int) -> CommSettings:
    """The engine's communication parameters for a backend preset.

    An unpinned progress thread takes ``core_share`` of one core while communication is in flight; what that
    costs compute and communication is :func:`dlrmsim.engine.costs.progress_thread_interference`.
    """
    kw: dict[str, Any] = {
        "pinned_cores": backend.comm_cores,
        "message_overhead_s": backend.message_overhead_s,
        "in_order_completion": backend.in_order,
        "algorithms": backend.algorithms.model_dump(),
        "intra_node_copy_cores": backend.intra_node_copy_cores,
    }
    if backend.progress == "unpinned_thread" and backend.interference is not None:
        inter = backend.interference
        kw["progress_thread_unpinned"] = True
        kw["stolen_cores"] = inter.core_share
        kw["barrier_synchronized"] = inter.barrier_synchronized
        kw["comm_slowdown"] = progress_thread_interference(
            inter.core_share, cores - backend.comm_cores, inter.barrier_synchronized
        ).comm_slowdown
    return CommSettings(**kw)


def time_to_train(w: Workload, optimizer: str, global_batch: int, iteration_s: float) -> tuple[float | None, float | None]:
    """Epochs to converge from the workload's convergence runs (same optimizer, nearest batch) and the time.

    iterations = epochs x dataset samples / global batch.
    """
    conv = w.convergence
    if conv is None:
        return None, None
    runs = [r for r in conv.runs if r.optimizer == optimizer]
    if not runs:
        return None, None
    run = min(runs, key=lambda r: abs(r.global_batch - global_batch))
    iterations = run.epochs * conv.dataset_samples / global_batch
    return run.epochs, iterations * iteration_s


def simulate_training(cfg: TrainingConfig, record_flows: bool = True) -> TrainingResult:
    """Load, check, simulate: the one call behind `dlrmsim simulate`, scaling studies and sweeps."""
    return run_iteration(load_inputs(cfg), cfg, record_flows)
