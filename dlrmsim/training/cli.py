"""`dlrmsim simulate`: one training iteration from the CLI (the scaling study is `dlrmsim scaling`, in studies)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from dlrmsim.config import parse_assignments, read_yaml, validate
from dlrmsim.errors import DlrmsimError, check_output_file
from dlrmsim.output import console, err_console, print_json, print_table
from dlrmsim.topologies.mapping import parse_socket_list

if TYPE_CHECKING:  # imported inside the commands: `dlrmsim --help` should not load the engine
    from dlrmsim.training.simulate import TrainingConfig, TrainingResult

RANK_SOCKETS_HELP = (
    "socket of each rank in rank order, e.g. 56-59 or 56,57,58 (default: first sockets, or ones whose memory holds the shards)"
)
COMMON = {
    "topology": typer.Option("clx-64s-opa", "--topology", "-t", help="topology preset or YAML path"),
    "workload": typer.Option("mlperf", "--workload", "-w", help="workload preset or YAML path"),
}


LOCKSTEP_HELP = (
    "approximation: a collective's ranks enter each step together (a barrier per step); several times faster at "
    "64+ ranks, iteration time within 0.1 % on the presets (docs/architecture.md)"
)


def make_config(**kw: Any) -> TrainingConfig:
    from dlrmsim.training.simulate import TrainingConfig

    placement = {"strategy": kw.pop("placement"), "replicate_below_rows": kw.pop("replicate_below_rows")}
    kw["placement"] = placement
    sockets = kw.pop("rank_sockets", None)
    if sockets:
        kw["rank_sockets"] = list(parse_socket_list(sockets))
    kw["topology_overrides"] = parse_assignments(kw.pop("topo_set"), "--topology-set")
    kw["workload_overrides"] = parse_assignments(kw.pop("wl_set"), "--workload-set")
    return validate(TrainingConfig, kw, "command line")


def check_host_topology(topology: str) -> None:
    """A calibration measures this machine: it applies only to a topology built by the ``host`` generator."""
    from dlrmsim.config import read_yaml, resolve
    from dlrmsim.topologies.builder import PRESET_DIR

    data = read_yaml(resolve(topology, PRESET_DIR, "topology"))
    fabric = data.get("fabric") if isinstance(data, dict) else None
    if not (isinstance(fabric, dict) and fabric.get("generator") == "host"):
        raise DlrmsimError(
            f"the calibration describes this machine (the 'host' topology), not topology '{topology}'",
            field="--calibration",
            fix="add --topology host, or drop --calibration",
        )


def run_notes(cfg: TrainingConfig) -> list[str]:
    """One-line notes on the rates a run uses: calibrated or placeholder rates (host), bf16 on sockets without bf16 units."""
    from dlrmsim.calibration.schema import Calibration
    from dlrmsim.topologies import precision_note, rates_note
    from dlrmsim.workloads import load_workload

    measured = None
    if cfg.calibration is not None:  # already loaded (and checked) by the run: read again without its host warning
        measured = validate(Calibration, read_yaml(Path(cfg.calibration)), cfg.calibration).host
    precision = cfg.precision or load_workload(cfg.workload, cfg.workload_overrides or None).precision
    notes = [
        rates_note(cfg.topology, cfg.topology_overrides or None, cfg.calibration, measured),
        precision_note(cfg.topology, cfg.topology_overrides or None, precision),
    ]
    return [n for n in notes if n]


def print_result(res: TrainingResult) -> None:
    cfg = res.config
    b = res.breakdown
    title = (
        f"{cfg.workload} on {cfg.topology}: {cfg.ranks} ranks, {cfg.scaling} scaling, backend {cfg.backend}, "
        f"{cfg.placement.strategy}, {cfg.comm}{', blocking' if cfg.blocking else ''}"
    )
    rows = [
        ("iteration", res.iteration_s * 1e3),
        ("compute", b.compute_s * 1e3),
        ("pre/post-processing", b.prepost_s * 1e3),
        ("exposed allreduce", b.exposed_allreduce_s * 1e3),
        ("exposed alltoall", b.exposed_alltoall_s * 1e3),
        ("idle (waiting for other ranks)", b.other_s * 1e3),
    ]
    print_table(title, ["slowest rank", "ms"], rows)
    waits = [(cid, t * 1e3) for cid, t in res.wait_per_collective_s.items() if t > 0]
    if waits:
        print_table("Wait per collective (max over ranks)", ["collective", "ms"], waits)
    busy = [p.compute_s + p.prepost_s for p in res.per_rank]
    console.print(
        f"global batch {res.global_batch}, {res.samples_per_s:,.0f} samples/s, "
        f"per-rank busy time {min(busy) * 1e3:.3f}..{max(busy) * 1e3:.3f} ms (imbalance {res.imbalance:.3f})"
    )
    if res.time_to_train_s is not None:
        console.print(
            f"time to train: {res.time_to_train_s / 60:.1f} min ({res.epochs} epochs at this batch's nearest convergence run)"
        )


def register(app: typer.Typer) -> None:
    @app.command()
    def simulate(
        topology: str = COMMON["topology"],
        workload: str = COMMON["workload"],
        ranks: int = typer.Option(8, "--ranks", "-r", help="number of ranks (one per socket or card)"),
        scaling: str = typer.Option("strong", help="strong | weak | single"),
        backend: str | None = typer.Option(
            None, help="backend preset (ccl, mpi, shm) or YAML path (default: the topology's, else ccl)"
        ),
        comm: str = typer.Option("alltoall", help="alltoall | fused-scatter | scatter-list"),
        placement: str = typer.Option("table_wise", help="table_wise | column_wise | row_wise"),
        replicate_below_rows: int | None = typer.Option(None, help="replicate tables with fewer rows (data parallel)"),
        blocking: bool = typer.Option(False, "--blocking", help="wait on each collective at once"),
        precision: str | None = typer.Option(None, help="fp32 | bf16 (default: the workload's)"),
        update_strategy: str = typer.Option("race_free", help="atomic | rtm | race_free"),
        fuse_backward_update: bool = typer.Option(False, "--fuse-backward-update"),
        implementation: str | None = typer.Option(
            None, help="implementation profile (torchrec-fused) or YAML: kinds it runs on one thread, fused update"
        ),
        optimizer: str = typer.Option("sgd", help="optimizer preset (sgd, lamb) or an optimizer YAML"),
        comm_cores: int | None = typer.Option(None, help="pinned communication cores (overrides the backend)"),
        allreduce_algorithm: str | None = typer.Option(None, help="ring | rs_ag | halving_doubling | hierarchical ..."),
        alltoall_algorithm: str | None = typer.Option(None, help="direct | pairwise | pairwise_xor"),
        loader: str | None = typer.Option(
            None, help="data loader: reference (every rank reads the global batch) | v1 (local batch + index alltoall) | none"
        ),
        calibration: str | None = typer.Option(None, help="calibration YAML (with --topology host)"),
        rank_sockets: str | None = typer.Option(None, "--rank-sockets", help=RANK_SOCKETS_HELP),
        sockets: int | None = typer.Option(
            None, "--sockets", help="scale the topology to N sockets (its generator's endpoint count), e.g. 1024"
        ),
        threads_per_rank: int | None = typer.Option(
            None, "--threads-per-rank", help="-t host: cores per rank process (default: cores / ranks)"
        ),
        topo_set: list[str] = typer.Option([], "--topology-set", help="what-if: PATH=VALUE on the topology YAML"),
        wl_set: list[str] = typer.Option([], "--workload-set", help="what-if: PATH=VALUE on the workload YAML"),
        lockstep_collectives: bool = typer.Option(False, "--lockstep-collectives", help=LOCKSTEP_HELP),
        json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
        trace: Path | None = typer.Option(None, help="write a Chrome/Perfetto trace (JSON) here"),
    ) -> None:
        """Simulate one training iteration and print its time and breakdown.

        With -t host, -r N simulates N processes on this machine (as torchrun --nproc_per_node=N starts them).
        """
        if trace is not None:
            check_output_file(trace, "--trace")
        cfg = make_config(**{k: v for k, v in locals().items() if k not in ("json_out", "trace")})
        if calibration is not None:
            check_host_topology(topology)
        from dlrmsim.training.simulate import simulate_training
        from dlrmsim.training.taskgraph import local_batches

        res = simulate_training(cfg, record_flows=trace is not None)  # flows only matter to a trace
        for note in run_notes(cfg):
            err_console.print(note, highlight=False, soft_wrap=True)
        if res.global_batch % cfg.ranks:
            sizes = local_batches(res.global_batch, cfg.ranks)
            extra = res.global_batch % cfg.ranks
            err_console.print(
                f"note: global batch {res.global_batch} does not divide by {cfg.ranks} ranks: {extra} rank(s) get "
                f"{max(sizes)} samples, {cfg.ranks - extra} get {min(sizes)} (the slowest rank sets the iteration)",
                highlight=False,
                soft_wrap=True,
            )
        if trace is not None:
            from dlrmsim.engine.trace import write_chrome_trace

            write_chrome_trace(res.records, trace)
        if json_out:
            print_json(res.to_json())
        else:
            print_result(res)
            if trace is not None:
                console.print(f"trace written to {trace}")
