"""DLRM model math as small pure functions: layer shapes, flops, embedding bytes, Eq. 1 and Eq. 2.

Units are SI throughout: bytes, flops (floating-point operations, a multiply-add counts 2), samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from dlrmsim.workloads.schema import IndexDistribution, Workload, ZipfIndices


class Pass(StrEnum):
    """The three GEMMs of a fully connected layer in training."""

    FORWARD = "fwd"
    BACKWARD_DATA = "bwd_data"
    BACKWARD_WEIGHTS = "bwd_weights"


@dataclass(frozen=True)
class Layer:
    """One fully connected layer y = W x + b with ``fan_in`` inputs and ``fan_out`` outputs."""

    name: str
    fan_in: int
    fan_out: int
    part: str  # "bottom" or "top"
    index: int

    @property
    def params(self) -> int:
        """Weights plus biases (elements)."""
        return self.fan_in * self.fan_out + self.fan_out

    @property
    def is_first(self) -> bool:
        return self.part == "bottom" and self.index == 0


@dataclass(frozen=True)
class Gemm:
    """A GEMM C[m, n] += A[m, k] B[k, n]; flops = 2 m n k."""

    m: int
    n: int
    k: int

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    def bytes_moved(self, element_bytes: float) -> float:
        """Compulsory traffic: read A and B, read and write C once (bytes)."""
        return element_bytes * (self.m * self.k + self.k * self.n + 2 * self.m * self.n)


def bottom_layers(w: Workload) -> list[Layer]:
    widths = w.bottom_mlp
    return [Layer(f"bot{i}", widths[i], widths[i + 1], "bottom", i) for i in range(len(widths) - 1)]


def interaction_width(w: Workload) -> int:
    """Width of the interaction output: (S+1)S/2 pairwise dots plus the bottom output, or the concatenation."""
    s = w.num_tables
    if w.interaction == "dot":
        return (s + 1) * s // 2 + w.bottom_mlp[-1]
    return (s + 1) * w.embedding_dim if w.bottom_mlp[-1] == w.embedding_dim else s * w.embedding_dim + w.bottom_mlp[-1]


def top_layers(w: Workload) -> list[Layer]:
    widths = [interaction_width(w), *w.top_mlp]
    return [Layer(f"top{i}", widths[i], widths[i + 1], "top", i) for i in range(len(widths) - 1)]


def mlp_layers(w: Workload) -> list[Layer]:
    """All MLP layers in forward order: bottom then top."""
    return bottom_layers(w) + top_layers(w)


def layer_gemm(layer: Layer, batch: int, which: Pass) -> Gemm:
    """GEMM shape of one pass of a layer over ``batch`` samples."""
    if which is Pass.FORWARD:
        return Gemm(m=batch, n=layer.fan_out, k=layer.fan_in)
    if which is Pass.BACKWARD_DATA:
        return Gemm(m=batch, n=layer.fan_in, k=layer.fan_out)
    return Gemm(m=layer.fan_out, n=layer.fan_in, k=batch)


def layer_flops(layer: Layer, batch: int, which: Pass) -> float:
    """2 N fi fo for every pass, except that the first bottom layer has no input gradient to compute."""
    if which is Pass.BACKWARD_DATA and layer.is_first:
        return 0.0
    return layer_gemm(layer, batch, which).flops


def interaction_gemm(w: Workload, batch: int) -> Gemm:
    """The batched Z = X X^T of the dot interaction, as one GEMM of batch * (S+1) x (S+1) x E."""
    f = w.num_tables + 1
    return Gemm(m=batch * f, n=f, k=w.embedding_dim)


def interaction_flops(w: Workload, batch: int, backward: bool = False) -> float:
    """Dot interaction: 2 (S+1)^2 E per sample forward, twice that backward; cat interaction is a copy."""
    if w.interaction == "cat":
        return 0.0
    fwd = interaction_gemm(w, batch).flops
    return 2.0 * fwd if backward else fwd


def interaction_ops(w: Workload, backward: bool = False) -> float:
    """Framework ops of the unfused interaction, as ``calibration.dlrm_runner`` runs it. dot forward: stack,
    transpose, batched matmul, gather of the lower triangle, concat (5); backward: zeros, slice, scatter,
    transpose, add, batched matmul, slice, select and add for the bottom output, one select per table
    (9 + S). cat: one concat forward, one slice per table and one for the bottom output backward."""
    if w.interaction == "cat":
        return 1.0 + w.num_tables if backward else 1.0
    return 9.0 + w.num_tables if backward else 5.0


def interaction_bytes(w: Workload, batch: int) -> float:
    """Memory traffic of the forward interaction as frameworks run it, unfused (bytes).

    dot: stack the S+1 vectors into one tensor (read + write), the batched Z = X X^T (read X, write Z),
    gather the (S+1)S/2 distinct pairs of Z (read + write), concatenate them with the bottom output (read +
    write the output). cat: one concatenation (read + write the output).
    """
    eb = w.element_bytes
    width = interaction_width(w)
    if w.interaction == "cat":
        return eb * batch * 2 * width
    f = w.num_tables + 1
    pairs = f * (f - 1) // 2
    return eb * batch * (2 * f * w.embedding_dim + f * w.embedding_dim + f * f + 2 * pairs + 2 * width)


def activation_bytes(batch: int, width: int, element_bytes: float, backward: bool = False) -> float:
    """An unfused element-wise activation over a (batch, width) tensor (bytes).

    Forward reads the GEMM output and writes the activation (2 passes); backward reads the incoming
    gradient and the saved activation and writes the gradient (3 passes).
    """
    return (3.0 if backward else 2.0) * batch * width * element_bytes


def flops_per_sample(w: Workload) -> tuple[float, float]:
    """(forward, backward) flops of one sample through MLPs and interaction."""
    fwd = sum(layer_flops(layer, 1, Pass.FORWARD) for layer in mlp_layers(w)) + interaction_flops(w, 1)
    bwd = sum(layer_flops(layer, 1, p) for layer in mlp_layers(w) for p in (Pass.BACKWARD_DATA, Pass.BACKWARD_WEIGHTS))
    return fwd, bwd + interaction_flops(w, 1, backward=True)


# --- embeddings -------------------------------------------------------------------------------------------


def table_bytes(w: Workload, rows: int, columns: int | None = None) -> float:
    """Bytes a table (or a column slice of it) occupies."""
    cols = w.embedding_dim if columns is None else columns
    return rows * cols * w.table_element_bytes


def tables_bytes(w: Workload) -> float:
    """All embedding tables, bytes."""
    return sum(table_bytes(w, r) for r in w.table_rows)


def mlp_bytes(w: Workload) -> float:
    """MLP weights and biases, bytes (fp32 master copy)."""
    return sum(layer.params for layer in mlp_layers(w)) * 4.0


def embedding_forward_bytes(w: Workload, batch: int, tables: int = 1, columns: int | None = None) -> float:
    """Bytes one EmbeddingBag forward moves: P rows read per sample and table, indices read, pooled rows written."""
    cols = w.embedding_dim if columns is None else columns
    read_eb = w.element_bytes if w.table_precision is None else w.table_element_bytes
    rows_read = batch * w.lookups_per_sample * tables
    return rows_read * cols * read_eb + rows_read * w.index_bytes + batch * tables * cols * w.element_bytes


def embedding_backward_bytes(w: Workload, batch: int, tables: int = 1, columns: int | None = None) -> float:
    """Bytes of the backward: the pooled gradient is read and expanded into one gradient row per lookup."""
    cols = w.embedding_dim if columns is None else columns
    eb = w.element_bytes
    lookups = batch * w.lookups_per_sample * tables
    return batch * tables * cols * eb + lookups * cols * 4.0


def expected_unique_rows(rows: int, draws: float, dist: IndexDistribution) -> float:
    """Expected number of distinct rows touched by ``draws`` independent lookups into a table of ``rows`` rows.

    Uniform: rows (1 - (1 - 1/rows)^draws). Zipf: sum over rows of 1 - (1 - p_r)^draws, evaluated on
    log-spaced blocks of popularity ranks (exact for small tables, within ~0.1% for 40M rows).
    """
    if draws <= 0:
        return 0.0
    if not isinstance(dist, ZipfIndices):
        return float(rows * -np.expm1(draws * np.log1p(-1.0 / rows))) if rows > 1 else 1.0
    ranks, weights = _rank_blocks(rows)
    p = ranks ** (-dist.exponent)
    p /= float(np.sum(p * weights))
    touched = -np.expm1(draws * np.log1p(-np.minimum(p, 1.0 - 1e-15)))
    return float(np.sum(touched * weights))


def _rank_blocks(rows: int, exact_below: int = 4096, blocks: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """Representative ranks and their multiplicities covering 1..rows."""
    if rows <= exact_below:
        return np.arange(1, rows + 1, dtype=float), np.ones(rows)
    head = np.arange(1, exact_below + 1, dtype=float)
    edges = np.unique(np.geomspace(exact_below + 1, rows + 1, blocks).astype(np.int64))
    lo, hi = edges[:-1], edges[1:]
    mid = np.sqrt(lo * (hi - 1.0).clip(min=lo))
    return np.concatenate([head, mid]), np.concatenate([np.ones(exact_below), (hi - lo).astype(float)])


def hottest_row_share(rows: int, dist: IndexDistribution) -> float:
    """Probability that a lookup hits the most popular row (1/rows for uniform)."""
    if not isinstance(dist, ZipfIndices):
        return 1.0 / rows
    ranks, weights = _rank_blocks(rows)
    return 1.0 / float(np.sum(ranks ** (-dist.exponent) * weights))


def update_rows(w: Workload, rows: int, batch: int) -> float:
    """Rows touched by the sparse SGD update of one table in one iteration."""
    return expected_unique_rows(rows, batch * w.lookups_per_sample, w.index_distribution)


# --- communication volumes ---------------------------------------------------------------------------------


def allreduce_bytes(w: Workload) -> float:
    """Eq. 1: bytes of MLP weight gradients each rank allreduces per iteration.

    Independent of the rank count and the minibatch.
    """
    return sum(layer.params for layer in mlp_layers(w)) * w.element_bytes


def alltoall_bytes(w: Workload, global_batch: int, tables: int | None = None) -> float:
    """Eq. 2: total bytes all ranks exchange in one direction of the embedding alltoall.

    S N E bytes_per_element, N the global minibatch.
    """
    s = w.num_tables if tables is None else tables
    return s * global_batch * w.embedding_dim * w.element_bytes


def global_batch(w: Workload, ranks: int, scaling: str) -> int:
    """Global minibatch for a scaling mode: constant under strong scaling, local x ranks under weak."""
    if scaling == "strong":
        return w.minibatch.strong_global
    if scaling == "weak":
        return w.minibatch.weak_local * ranks
    if scaling == "single":
        if w.minibatch.single_socket is None:
            raise ValueError(f"workload {w.name} has no single-socket minibatch")
        return w.minibatch.single_socket
    raise ValueError(f"unknown scaling mode {scaling!r}")


def sample_bytes(w: Workload) -> float:
    """Bytes of one stored training sample (dense features, one index per table per lookup, label), or 0 without
    a loader."""
    if w.loader is None:
        return 0.0
    return float((w.bottom_mlp[0] + w.num_tables * w.lookups_per_sample + 1) * w.loader.value_bytes)


def loader_read_bytes(w: Workload, local_batch: int, global_batch: int) -> float:
    """Bytes one rank's loader reads per iteration: the global minibatch (reference) or its local batch (v1)."""
    if w.loader is None:
        return 0.0
    return sample_bytes(w) * (global_batch if w.loader.kind == "reference" else local_batch)
