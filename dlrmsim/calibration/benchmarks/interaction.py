"""Dot-interaction benchmarks (fit.fit_interaction): the runner's unfused interaction forward and backward
over batches and (tables, dim) shapes, and, where TorchRec is installed, TorchRec's own ``InteractionArch`` over
the same shapes (its backward is autograd's, a different kernel mix: see :func:`time_torchrec_interaction`)."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from dlrmsim.calibration.benchmarks.timing import BenchTask, TimingPolicy, median_spread
from dlrmsim.calibration.dlrm_runner import dot_interaction_bwd, dot_interaction_fwd
from dlrmsim.calibration.ops import Op, Ops
from dlrmsim.calibration.schema import Measurement
from dlrmsim.calibration.targets.torchrec import require_torchrec
from dlrmsim.workloads import model
from dlrmsim.workloads.schema import Workload


@dataclass(frozen=True)
class InteractionConfig:
    batch: int
    tables: int  # S: the interaction stacks S + 1 feature vectors per sample
    dim: int


def interaction_configs(quick: bool) -> list[InteractionConfig]:
    """Batches and (tables, dim) from the validation cases' 4 x 32 up to MLPerf's 26 tables: enough spread in
    samples, flops per sample and bytes to separate a per-sample cost from the small matrices' flop rate."""
    shapes = [(4, 32), (4, 128), (16, 32), (26, 64)] if quick else [(4, 32), (4, 128), (8, 64), (16, 32), (26, 64), (26, 128)]
    batches = (256, 2048) if quick else (256, 1024, 4096)
    return [InteractionConfig(b, s, e) for s, e in shapes for b in batches]


def interaction_workload(cfg: InteractionConfig) -> Workload:
    """A workload whose interaction has ``cfg``'s shape, for the model's flop, byte and op counts."""
    return Workload(
        name=f"interaction S{cfg.tables} E{cfg.dim}",
        tables={"count": cfg.tables, "rows": 1},  # type: ignore[arg-type]
        embedding_dim=cfg.dim,
        lookups_per_sample=1,
        bottom_mlp=[cfg.dim, cfg.dim],
        top_mlp=[1],
        minibatch={"strong_global": cfg.batch, "weak_local": cfg.batch},
    )


def time_interaction(ops: Ops, cfg: InteractionConfig, policy: TimingPolicy, flush: Op) -> dict[str, list[float]]:
    """Per-repeat seconds of the runner's dot interaction forward and backward, each right after ``flush``
    (in an iteration they follow the embedding ops and the top MLP, whose data evicts the caches)."""
    rng = np.random.default_rng(cfg.batch + cfg.tables + cfg.dim)
    n, e = cfg.batch, cfg.dim
    bot = ops.tensor(rng.standard_normal((n, e), dtype=np.float32))
    emb = [ops.tensor(rng.standard_normal((n, e), dtype=np.float32)) for _ in range(cfg.tables)]
    li, lj = (ops.tensor(a.astype(np.int64)) for a in np.tril_indices(cfg.tables + 1, k=-1))
    d_inter = ops.tensor(rng.standard_normal((n, e + cfg.tables * (cfg.tables + 1) // 2), dtype=np.float32))
    clock = time.perf_counter
    out: dict[str, list[float]] = {"forward": [], "backward": []}
    for i in range(policy.warmup + policy.repeats):
        flush()
        t0 = clock()
        feats, _ = dot_interaction_fwd(ops, bot, emb, li, lj)
        t1 = clock()
        flush()
        t2 = clock()
        dot_interaction_bwd(ops, d_inter, feats, li, lj)
        t3 = clock()
        if i >= policy.warmup:
            out["forward"].append(t1 - t0)
            out["backward"].append(t3 - t2)
    return out


def torchrec_interaction_available() -> bool:
    """Whether TorchRec (and torch) can be imported, without importing them."""
    return importlib.util.find_spec("torchrec") is not None and importlib.util.find_spec("torch") is not None


def torchrec_interaction_inputs(cfg: InteractionConfig, rng: np.random.Generator) -> tuple[Any, Any, Any, Any]:
    """TorchRec's ``InteractionArch`` of ``cfg``'s S tables and, drawn from ``rng``: its dense input (batch, E) and
    sparse input (batch, S, E), both needing gradients, and a gradient of its output (batch, E + S (S + 1) / 2)."""
    torch, _ = require_torchrec()  # quietly: torchrec's import makes torch.fx log a deprecation
    from torchrec.models.dlrm import InteractionArch

    n, e, s = cfg.batch, cfg.dim, cfg.tables
    arch = InteractionArch(num_sparse_features=s)
    dense = torch.from_numpy(rng.standard_normal((n, e), dtype=np.float32)).requires_grad_()
    sparse = torch.from_numpy(rng.standard_normal((n, s, e), dtype=np.float32)).requires_grad_()
    grad = torch.from_numpy(rng.standard_normal((n, e + s + s * (s - 1) // 2), dtype=np.float32))
    return arch, dense, sparse, grad


def time_torchrec_interaction(ops: Ops, cfg: InteractionConfig, policy: TimingPolicy, flush: Op) -> dict[str, list[float]]:
    """Per-repeat seconds of TorchRec's ``InteractionArch`` forward and of its autograd backward, each right after
    ``flush``, on the threads ``ops.threads`` set.

    TorchRec stacks the dense and the S sparse vectors, takes ``bmm(X, X^T)`` and gathers the upper triangle; its
    backward is autograd's: BmmBackward forms both operands' gradients, ``dZ X`` and ``X^T dZ``, the second a
    product of (E x (S+1)) by ((S+1) x (S+1)) matrices that runs far below the first (E=128, batch 1024, 2 threads
    of this project's host: 0.79 ms against 0.15 ms), then adds them into X's gradient. The runner's hand-written
    backward forms ``(dZ + dZ^T) X`` once. So TorchRec's interaction is measured as TorchRec runs it."""
    torch, _ = require_torchrec()
    arch, dense, sparse, grad = torchrec_interaction_inputs(cfg, np.random.default_rng(cfg.batch + cfg.tables + cfg.dim))
    clock = time.perf_counter
    out: dict[str, list[float]] = {"forward": [], "backward": []}
    with torch.enable_grad():  # ops.threads turns autograd off for the runner's kernels
        for i in range(policy.warmup + policy.repeats):
            dense.grad = sparse.grad = None
            flush()
            t0 = clock()
            y = arch(dense, sparse)
            t1 = clock()
            flush()
            t2 = clock()
            y.backward(grad)
            t3 = clock()
            if i >= policy.warmup:
                out["forward"].append(t1 - t0)
                out["backward"].append(t3 - t2)
    return out


# One shape for the interaction's contexts (the validation cases' 4 tables of E=32 at batch 1024): what a flush makes
# a call refetch is its kernels' code and state, the same whatever the shape (benchmarks/bench_interaction_context.py:
# on the 2-vCPU Intel VM the per-sample slope was the same after the flush, after traffic and warm, within 15 %).
CONTEXT_CONFIG = InteractionConfig(batch=1024, tables=4, dim=32)
# Traffic before a timed call, in multiples of a core's L2 and of the last-level cache: enough to empty the L2 while
# most of the last-level cache stays, and half the last-level cache. 0 (a warm call) and the flush complete the set.
CONTEXT_L2_MULTIPLE = 4
CONTEXT_LLC_FRACTION = 0.5


def context_traffic(l2_bytes: int, llc_bytes: int) -> dict[str, int]:
    """Bytes of traffic before a timed call per context (besides the flush): warm, past the L2, half the LLC."""
    return {"warm": 0, "l2": CONTEXT_L2_MULTIPLE * l2_bytes, "llc": int(CONTEXT_LLC_FRACTION * llc_bytes)}


def interaction_context_task(
    k: Ops, cores: int, policy: TimingPolicy, l2_bytes: int, llc_bytes: int, kernel: InteractionKernel = "framework"
) -> BenchTask:
    """The interaction at one shape after different traffic: the calibration's flush, none (a warm call), traffic
    past a core's L2 and half the last-level cache, interleaved round by round. The fit (fit.fit_interaction_context)
    splits what the flush adds into what the L2 and the last-level cache hold, so that a step's call pays for what its
    own traffic evicted."""
    benchmark, timer = _KERNELS[kernel]
    cfg = CONTEXT_CONFIG
    # a warm-up and a timed call of each direction per context and round: without the warm-up, the timed calls'
    # outputs went to memory the timer's new inputs had just displaced, and the warm call ran slower than the one
    # after 4 L2s of traffic on the 2-vCPU Intel VM (0.65 against 0.56 ms at 2 threads)
    one = TimingPolicy(warmup=1, repeats=1, min_sample_s=policy.min_sample_s)

    def nothing() -> None:
        return None

    def run() -> list[Measurement]:
        traffic = context_traffic(l2_bytes, llc_bytes)
        before: dict[str, Op] = {"flush": k.flush, "warm": nothing}
        before.update({name: k.make_flush(nbytes) for name, nbytes in traffic.items() if nbytes > 0})
        # every context ends with the framework work a step runs before the call (Ops.make_rewarm), as the
        # interaction's other rows are timed: the contexts differ only in the traffic before it
        before = {name: k.then_rewarm(op) for name, op in before.items()}
        sizes = {"flush": k.flush_bytes(), **traffic}
        names = list(before)
        samples: dict[tuple[str, str], list[float]] = {(c, d): [] for c in names for d in ("forward", "backward")}
        with k.threads(cores):
            for r in range(policy.warmup + policy.repeats):
                for c in names[r % len(names) :] + names[: r % len(names)]:  # each context after each other in turn
                    got = timer(k, cfg, one, before[c])
                    if r >= policy.warmup:
                        for d, ts in got.items():
                            samples[(c, d)] += ts
        out = []
        for (c, d), ts in samples.items():
            med, spread = median_spread(ts)
            out.append(
                Measurement(
                    benchmark=f"{benchmark}_context",  # type: ignore[arg-type]
                    name=f"{benchmark} context {d} {c} b{cfg.batch} S{cfg.tables} E{cfg.dim} c{cores}",
                    cores=cores,
                    params={"direction": d, "context": c, "traffic_bytes": float(sizes[c]), "batch": cfg.batch},
                    time_s=med,
                    spread_pct=spread,
                    repeats=len(ts),
                )
            )
        return out

    label = "dot interaction" if kernel == "framework" else "torchrec interaction"
    return BenchTask(f"{label} context", f"{benchmark}_context c{cores}", run, repeat=True)


InteractionKernel = Literal["framework", "torchrec"]
# kernel -> (benchmark name of its rows, timer)
_KERNELS: dict[str, tuple[str, Callable[[Ops, InteractionConfig, TimingPolicy, Op], dict[str, list[float]]]]] = {
    "framework": ("interaction", time_interaction),
    "torchrec": ("interaction_torchrec", time_torchrec_interaction),
}


def interaction_task(
    k: Ops, cfg: InteractionConfig, cores: int, policy: TimingPolicy, kernel: InteractionKernel = "framework"
) -> BenchTask:
    """One interaction shape on ``cores`` cores: the runner's kernel, or TorchRec's (``kernel``)."""
    benchmark, timer = _KERNELS[kernel]
    base = f"b{cfg.batch} S{cfg.tables} E{cfg.dim} c{cores}"

    def run() -> list[Measurement]:
        w = interaction_workload(cfg)
        with k.threads(cores):
            # after the flush, the framework work a step runs before the call (Ops.then_rewarm): a step's other
            # ops keep the framework's shared state warm, which a flush alone would leave for this call to refetch
            samples = timer(k, cfg, policy, k.then_rewarm(k.flush))
        out = []
        for direction, ts in samples.items():
            back = direction == "backward"
            med, spread = median_spread(ts)
            out.append(
                Measurement(
                    benchmark=benchmark,  # type: ignore[arg-type]
                    name=f"{benchmark} {direction} {base}",
                    cores=cores,
                    params={
                        "direction": direction,
                        "batch": cfg.batch,
                        "tables": cfg.tables,
                        "dim": cfg.dim,
                        "ops": model.interaction_ops(w, backward=back),
                    },
                    flops=model.interaction_flops(w, cfg.batch, backward=back),
                    bytes=(2.0 if back else 1.0) * model.interaction_bytes(w, cfg.batch),
                    time_s=med,
                    spread_pct=spread,
                    repeats=len(ts),
                )
            )
        return out

    label = "dot interaction" if kernel == "framework" else "torchrec interaction"
    return BenchTask(label, f"{benchmark} {base}", run, repeat=True)
