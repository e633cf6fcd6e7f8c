"""A real DLRM training iteration on this host: NumPy or PyTorch CPU, 1 or more processes, timed per phase.

Hybrid parallelism as in the DLRM paper (Naumov et al. 2019, arXiv:1906.00091, section 4.2): MLPs data parallel
(each rank takes N/R samples, weight gradients allreduced), embedding tables model parallel (table t lives on rank t
mod R and is looked up for
the global minibatch; an alltoall turns "my tables, all samples" into "all tables, my samples" and back for
the gradients). Blocking mode: every phase waits for the previous one, so the phase times add up to the
iteration. Inputs are random (dense features, labels, indices drawn from the workload's distribution).

Phases: bottom_mlp_fwd, embedding_fwd, alltoall_fwd, interaction_fwd, top_mlp_fwd (with the loss),
top_mlp_bwd, interaction_bwd, alltoall_bwd, embedding_bwd, bottom_mlp_bwd, allreduce (packing the
gradients into one flat buffer, the collective, averaging), embedding_update (sparse SGD on the touched
rows), mlp_update (dense SGD). With several ranks, arrival_wait: the time ranks spent in collectives waiting
for the last rank to arrive (their compute's imbalance), taken out of the collective phases, which keep the
packing, the time from the last arrival to each rank's exit, and the unpacking.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlrmsim.allocator import steady_allocator
from dlrmsim.calibration.collectives_host import implementation_for, run_ranks
from dlrmsim.calibration.ops import Ops, check_backend, get_ops, make_indices
from dlrmsim.errors import DlrmsimError
from dlrmsim.host import read_host, usable_cores
from dlrmsim.workloads.model import alltoall_bytes, interaction_width, tables_bytes
from dlrmsim.workloads.schema import Workload, ZipfIndices

PHASES = (
    "bottom_mlp_fwd",
    "embedding_fwd",
    "alltoall_fwd",
    "interaction_fwd",
    "top_mlp_fwd",
    "top_mlp_bwd",
    "interaction_bwd",
    "alltoall_bwd",
    "embedding_bwd",
    "bottom_mlp_bwd",
    "allreduce",
    "embedding_update",
    "mlp_update",
    "arrival_wait",
)
COLLECTIVE_PHASES = ("alltoall_fwd", "alltoall_bwd", "allreduce")
LEARNING_RATE = 0.01


@dataclass(frozen=True)
class IterationMeasurement:
    """Median times (seconds) of one training iteration and its phases, after warm-up.

    Per iteration a phase's time is the slowest rank's, a collective phase's after taking out each rank's
    wait for the last rank to arrive (summed over the collectives as ``arrival_wait``); ``iteration_s`` is
    the median of the per-iteration wall clock of the slowest rank. Byte counts are what the collectives
    were handed: ``allreduce_bytes`` per rank (Eq. 1 convention), ``alltoall_bytes`` all ranks, one
    direction (Eq. 2 convention).
    """

    workload: str
    backend: str
    ranks: int
    threads: int
    global_batch: int
    iterations: int
    warmup: int
    iteration_s: float
    phases_s: dict[str, float]
    iteration_samples_s: list[float] = field(default_factory=list)
    allreduce_bytes: float = 0.0
    alltoall_bytes: float = 0.0
    implementation: str = "none"
    final_loss: float = float("nan")

    @property
    def phase_sum_s(self) -> float:
        return sum(self.phases_s.values())


# --- the model -----------------------------------------------------------------------------------------------


def dot_interaction_fwd(ops: Ops, bot_out: Any, emb: list[Any], li: Any, lj: Any) -> tuple[Any, Any]:
    """Unfused dot interaction as DLRM runs it: stack the S+1 vectors, batched X X^T, gather the distinct
    pairs (``li``, ``lj``: the strict lower triangle), concatenate with the bottom output. Returns the
    stacked features (n, S+1, E), kept for the backward, and the interaction output (n, E + (S+1)S/2)."""
    feats = ops.stack([bot_out, *emb], 1)
    z = feats @ ops.swap(feats)
    return feats, ops.cat([bot_out, z[:, li, lj]], 1)


def dot_interaction_bwd(ops: Ops, d_inter: Any, feats: Any, li: Any, lj: Any) -> tuple[Any, list[Any]]:
    """Backward of :func:`dot_interaction_fwd`: the bottom output's gradient and one gradient per table."""
    n, f, width = feats.shape
    dz = ops.zeros((n, f, f))
    dz[:, li, lj] = d_inter[:, width:]
    dfeats = (dz + ops.swap(dz)) @ feats
    d_bot = d_inter[:, :width] + dfeats[:, 0]
    return d_bot, [dfeats[:, 1 + t] for t in range(f - 1)]


# Runs one GEMM of an MLP: (pass, layer index, the call) -> the call's result. The runner calls it directly;
# a benchmark passes one that times each call.
GemmCall = Callable[[str, int, Callable[[], Any]], Any]


def _call(which: str, layer: int, op: Callable[[], Any]) -> Any:
    return op()


def new_mlp(ops: Ops, widths: Sequence[int], rng: np.random.Generator) -> list[list[Any]]:
    """[weight (fan_out, fan_in), bias] per layer of an MLP of ``widths``, Xavier-uniform weights, zero biases."""
    layers = []
    for fi, fo in zip(widths, widths[1:], strict=False):
        bound = np.sqrt(6.0 / (fi + fo))
        layers.append(
            [ops.tensor(rng.uniform(-bound, bound, (fo, fi)).astype(np.float32)), ops.tensor(np.zeros(fo, dtype=np.float32))]
        )
    return layers


def mlp_forward(ops: Ops, layers: list[list[Any]], x: Any, sigmoid_last: bool, gemm: GemmCall = _call) -> tuple[Any, list[Any]]:
    """An MLP's forward (each layer: addmm, then ReLU or, last, a sigmoid): (output, every layer's input and the output)."""
    acts = [x]
    for i, (wt, b) in enumerate(layers):
        y = gemm("fwd", i, lambda b=b, x=acts[-1], wt=wt: ops.addmm(b, x, wt))
        # The framework's own activation kernels (nn.ReLU, torch.sigmoid), as DLRM uses them.
        y = ops.sigmoid(y) if sigmoid_last and i == len(layers) - 1 else ops.relu(y)
        acts.append(y)
    return acts[-1], acts


def mlp_backward(
    ops: Ops, layers: list[list[Any]], acts: list[Any], dz_last: Any, need_dx: bool, gemm: GemmCall = _call
) -> tuple[Any, list[Any]]:
    """An MLP's backward from ``dz_last``, the gradient before its last activation, in autograd's order (each layer
    from the last: weight gradient, bias gradient, input gradient, ReLU gradient): (input gradient or None, [dW, db, ...])."""
    grads: list[Any] = [None] * (2 * len(layers))
    dz = dz_last
    dx = None
    for i in range(len(layers) - 1, -1, -1):
        wt, _ = layers[i]
        grads[2 * i] = gemm("bwd_weights", i, lambda dz=dz, a=acts[i]: dz.T @ a)
        grads[2 * i + 1] = dz.sum(0)
        if i > 0 or need_dx:
            dx = gemm("bwd_data", i, lambda dz=dz, wt=wt: dz @ wt)
            if i > 0:
                dz = ops.relu_backward(dx, acts[i])
    return dx, grads


class _Rank:
    """One rank's share of the model and its inputs; ``iteration()`` runs one timed training step."""

    def __init__(self, w: Workload, global_batch: int, ops: Ops, comm: Any, seed: int, steps: int) -> None:
        self.w, self.ops, self.comm = w, ops, comm
        self.size = comm.size if comm is not None else 1
        self.rank = comm.rank if comm is not None else 0
        self.n_global = global_batch
        self.n = global_batch // self.size
        rng = np.random.default_rng(seed + 1000 * self.rank)
        # Every rank holds the same MLP weights (data parallel): seed them identically.
        wrng = np.random.default_rng(seed)
        s = w.num_tables
        self.owned = [t for t in range(s) if t % self.size == self.rank]
        self.per_rank = -(-s // self.size)  # alltoall blocks padded to the largest share
        self.calls: list[tuple[float, float]] = []  # this iteration's collectives: (entry, exit)
        self.bottom = new_mlp(ops, w.bottom_mlp, wrng)
        self.top = new_mlp(ops, [interaction_width(w), *w.top_mlp], wrng)
        self.tables = [ops.new_table(w.table_rows[t], w.embedding_dim, np.random.default_rng(seed + t)) for t in self.owned]
        f = s + 1
        li, lj = np.tril_indices(f, k=-1)  # (S+1)S/2 distinct pairs
        self.li, self.lj = ops.tensor(li.astype(np.int64)), ops.tensor(lj.astype(np.int64))  # converted once, not per step
        exponent = w.index_distribution.exponent if isinstance(w.index_distribution, ZipfIndices) else 1.0
        # A fresh minibatch for each of the ``steps`` iterations, drawn before timing, as training has: cycling
        # a few (this runner once cycled 3) revisits the same rows every few steps, and at the validation's
        # sizes (3 batches x 4 tables x 2 MiB of rows < the 32 MiB last-level cache) they could stay cached, a
        # reuse training over large tables does not have beyond its index distribution's own (a Zipf's hot
        # rows). Measured here, the change was within the host's noise (64 lookups/sample: update 17.7 ms both ways).
        idx_steps = [
            make_indices(
                w.table_rows[t],
                self.n_global * w.lookups_per_sample * steps,
                w.index_distribution.kind,
                exponent,
                np.random.default_rng(rng.integers(1 << 62)),
            ).reshape(steps, self.n_global, -1)
            for t in self.owned
        ]
        self.inputs = []
        for step in range(steps):
            dense = ops.tensor(rng.standard_normal((self.n, w.bottom_mlp[0])).astype(np.float32))
            labels = ops.tensor((rng.random(self.n) < 0.5).astype(np.float32).reshape(-1, 1))
            self.inputs.append((dense, labels, [idx[step] for idx in idx_steps]))

    def _collective(self, call: Callable[[], Any]) -> None:
        # Entry and exit on perf_counter's clock, the host's monotonic clock in every process: the parent
        # compares ranks' entries to split arrival wait from the collective itself.
        t0 = time.perf_counter()
        call()
        self.calls.append((t0, time.perf_counter()))

    def _alltoall(self, send: Any) -> Any:
        recv = self.ops.zeros(tuple(send.shape))
        self._collective(lambda: self.comm.alltoall(self.ops.numpy(send), self.ops.numpy(recv)))
        return recv

    def iteration(self, it: int) -> tuple[dict[str, float], float]:
        ops, w, n, e, size = self.ops, self.w, self.n, self.w.embedding_dim, self.size
        dense, labels, idx = self.inputs[it % len(self.inputs)]
        t: dict[str, float] = {}
        self.calls = []
        clock = time.perf_counter
        start = last = clock()

        def mark(phase: str) -> None:
            nonlocal last
            now = clock()
            t[phase] = now - last
            last = now

        bot_out, bot_acts = mlp_forward(ops, self.bottom, dense, sigmoid_last=False)
        mark("bottom_mlp_fwd")
        pooled = [ops.emb_forward(tab, ix) for tab, ix in zip(self.tables, idx, strict=True)]  # each (N, E)
        mark("embedding_fwd")
        if size > 1:
            blocks = pooled + [ops.zeros((self.n_global, e))] * (self.per_rank - len(pooled))
            send = ops.stack(blocks, 1).reshape(size, n, self.per_rank, e)  # by destination rank
            recv = self._alltoall(send)  # [src rank, my sample, src's k-th table, E]
            emb = [recv[tt % size, :, tt // size, :] for tt in range(w.num_tables)]
        else:
            emb = pooled
        mark("alltoall_fwd")
        if w.interaction == "dot":
            feats, inter = dot_interaction_fwd(ops, bot_out, emb, self.li, self.lj)
        else:
            inter = ops.cat([bot_out, *emb], 1)
        mark("interaction_fwd")
        p, top_acts = mlp_forward(ops, self.top, inter, sigmoid_last=True)
        eps = 1e-7
        loss = -(labels * ops.log(p + eps) + (1 - labels) * ops.log(1 - p + eps)).mean()
        mark("top_mlp_fwd")
        d_inter, top_grads = mlp_backward(ops, self.top, top_acts, (p - labels) / n, need_dx=True)
        mark("top_mlp_bwd")
        if w.interaction == "dot":
            d_bot, d_emb = dot_interaction_bwd(ops, d_inter, feats, self.li, self.lj)
        else:
            width = w.bottom_mlp[-1]
            d_bot = d_inter[:, :width]
            d_emb = [d_inter[:, width + tt * e : width + (tt + 1) * e] for tt in range(w.num_tables)]
        mark("interaction_bwd")
        if size > 1:
            blocks = [d_emb[tt] if tt < w.num_tables else ops.zeros((n, e)) for tt in range(self.per_rank * size)]
            # to the table's owner: [owner, my sample, owner's k-th table, E]
            send = ops.stack([ops.stack([blocks[k * size + r] for k in range(self.per_rank)], 1) for r in range(size)], 0)
            recv = self._alltoall(send)  # [src rank (sample block), sample, my k-th table, E]
            d_pooled = [ops.cat([recv[src, :, k, :] for src in range(size)], 0) for k in range(len(self.owned))]
        else:
            d_pooled = d_emb
        mark("alltoall_bwd")
        emb_grads = [ops.emb_backward(tab, ix, dp) for tab, ix, dp in zip(self.tables, idx, d_pooled, strict=True)]
        mark("embedding_bwd")
        _, bot_grads = mlp_backward(ops, self.bottom, bot_acts, ops.relu_backward(d_bot, bot_out), need_dx=False)
        mark("bottom_mlp_bwd")
        grads = bot_grads + top_grads
        if size > 1:
            flat = np.concatenate([ops.numpy(g).reshape(-1) for g in grads])
            self._collective(lambda: self.comm.allreduce(flat))
            flat /= size
            off = 0
            for i, g in enumerate(grads):
                k = int(np.prod(g.shape))
                grads[i] = ops.tensor(flat[off : off + k].reshape(tuple(g.shape)))
                off += k
            self.allreduce_bytes = flat.nbytes
        mark("allreduce")
        for tab, ix, g in zip(self.tables, idx, emb_grads, strict=True):
            ops.emb_update(tab, ix, g, LEARNING_RATE)
        mark("embedding_update")
        params = [p_ for layer in self.bottom + self.top for p_ in layer]
        for prm, g in zip(params, grads, strict=True):
            ops.sgd_step(prm, g, LEARNING_RATE)
        mark("mlp_update")
        self.last_loss = float(loss)
        return t, last - start


def _run_rank(
    comm: Any, w: Workload, global_batch: int, backend: str, threads: int, iterations: int, warmup: int, seed: int
) -> dict[str, Any]:
    ops = get_ops(backend)
    with ops.threads(threads):
        model = _Rank(w, global_batch, ops, comm, seed, warmup + iterations)
        model.allreduce_bytes = 0
        phases: list[dict[str, float]] = []
        totals: list[float] = []
        calls: list[list[tuple[float, float]]] = []
        for it in range(warmup + iterations):
            if comm is not None:
                comm.barrier()
            t, total = model.iteration(it)
            if it >= warmup:
                phases.append(t)
                totals.append(total)
                calls.append(model.calls)
    return {"phases": phases, "totals": totals, "calls": calls, "allreduce_bytes": model.allreduce_bytes, "loss": model.last_loss}


def iteration_phases(results: list[dict[str, Any]], i: int) -> dict[str, float]:
    """Iteration ``i``'s phase times over ranks: each phase its slowest rank's, a collective phase's after
    taking out the rank's wait for the last arrival (entry times compared across ranks), those waits summed
    as ``arrival_wait``. A collective phase still holds its packing and unpacking and the time from the last
    arrival to the rank's exit."""
    out = {ph: max(r["phases"][i].get(ph, 0.0) for r in results) for ph in PHASES}
    calls = [r["calls"][i] for r in results]
    if len(results) < 2 or not calls[0]:
        out["arrival_wait"] = 0.0
        return out
    waits = [[max(c[k][0] for c in calls) - mine[k][0] for k in range(len(mine))] for mine in calls]
    for k, ph in enumerate(COLLECTIVE_PHASES):
        out[ph] = max(r["phases"][i][ph] - waits[j][k] for j, r in enumerate(results))
    out["arrival_wait"] = sum(max(w[k] for w in waits) for k in range(len(calls[0])))
    return out


def _validate(w: Workload, global_batch: int, ranks: int, iterations: int) -> None:
    if ranks < 1 or global_batch < ranks or global_batch % ranks:
        raise DlrmsimError(
            f"global batch {global_batch} must be a positive multiple of ranks {ranks}",
            field="batch",
            fix="choose a batch divisible by the rank count",
        )
    if ranks > w.num_tables:
        raise DlrmsimError(
            f"{ranks} ranks exceed the {w.num_tables} tables (whole-table placement)",
            field="ranks",
            fix="use at most as many ranks as tables",
        )
    if iterations < 1:
        raise DlrmsimError("iterations must be at least 1", field="iterations", fix="give a positive count")
    need = tables_bytes(w) * (2.2 if w.index_distribution.kind == "zipf" else 1.1)
    have = read_host().memory_B
    if need > 0.8 * have:
        raise DlrmsimError(
            f"workload '{w.name}' needs {need / 1e9:.1f} GB of tables, this host has {have / 1e9:.1f} GB",
            field="tables",
            fix="scale the workload down (fewer rows) for a host run",
        )


def run_dlrm_iteration(
    workload: Workload,
    batch: int,
    ranks: int = 1,
    threads: int | None = None,
    backend: str = "numpy",
    iterations: int = 5,
    warmup: int = 2,
    seed: int = 0,
) -> IterationMeasurement:
    """Train ``workload`` on random inputs for warmup + iterations steps and return the median timings.

    ``batch`` is the global minibatch (split evenly over ``ranks`` processes); ``threads`` per rank
    (default: this process's cores / ranks). ``backend`` "torch" uses PyTorch CPU kernels and gloo
    collectives, "numpy" NumPy/BLAS and shared-memory collectives.
    """
    _validate(workload, batch, ranks, iterations)
    check_backend(backend)  # one-line error for a missing torch before any process starts
    threads = threads or max(1, usable_cores() // ranks)
    steady_allocator()  # as in calibration (rank processes set it up themselves): no per-iteration page faults
    if ranks == 1:
        results = [_run_rank(None, workload, batch, backend, threads, iterations, warmup, seed)]
        impl = "none"
    else:
        impl = implementation_for(backend)
        results = run_ranks(
            _run_rank,
            ranks,
            impl,
            args=(workload, batch, backend, threads, iterations, warmup, seed),
            threads_per_rank=threads,
            timeout_s=3600,
        )
    per_iter = [iteration_phases(results, i) for i in range(iterations)]
    totals = [max(r["totals"][i] for r in results) for i in range(iterations)]
    per_rank_tables = -(-workload.num_tables // ranks)
    moved_a2a = alltoall_bytes(workload, batch, tables=per_rank_tables * ranks) if ranks > 1 else 0.0
    return IterationMeasurement(
        workload=workload.name,
        backend=backend,
        ranks=ranks,
        threads=threads,
        global_batch=batch,
        iterations=iterations,
        warmup=warmup,
        iteration_s=statistics.median(totals),
        phases_s={ph: statistics.median(it[ph] for it in per_iter) for ph in PHASES},
        iteration_samples_s=totals,
        allreduce_bytes=float(results[0]["allreduce_bytes"]),
        alltoall_bytes=float(moved_a2a),
        implementation=impl,
        final_loss=float(results[0]["loss"]),
    )


Runner = Callable[..., IterationMeasurement]
