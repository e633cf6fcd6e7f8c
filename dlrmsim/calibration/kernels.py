"""The kernel-runner interface and backend selection.

A kernel runner builds *prepared operations*: zero-argument callables that run one kernel on
pre-allocated inputs, so a benchmark times only the kernel. Two implementations stand behind this
interface: NumPy (always available; OpenBLAS threads controlled with threadpoolctl, element-wise work
split over a thread pool) and PyTorch CPU (addmm, EmbeddingBag with sparse gradients, the sparse SGD
update; threads controlled with torch.set_num_threads).
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np

from dlrmsim.errors import DlrmsimError, unknown_name_error

BACKENDS = ("numpy", "torch")

Op = Callable[[], object]


@dataclass(frozen=True)
class EmbeddingOps:
    """The three prepared embedding operations on one table (``forward`` returns the pooled rows).

    Byte counts (see ``embedding_bytes``) follow dlrmsim.workloads.model so that a fitted bandwidth
    means the same thing to the simulator as to the benchmark.
    """

    forward: Op
    backward: Op
    update: Op
    unique_rows: int


def embedding_bytes(batch: int, pooling: int, dim: int, unique_rows: int, index_bytes: int = 8) -> dict[str, float]:
    """Bytes moved by the EmbeddingBag forward, backward and sparse SGD update (fp32 table, fp32 grads).

    forward: P rows read per sample, the indices read, one pooled row written (model.embedding_forward_bytes);
    backward: the pooled gradient read and expanded to one gradient row per lookup (model.embedding_backward_bytes);
    update: every gradient row and index read, every touched row read and written once.
    """
    lookups = batch * pooling
    return {
        "forward": lookups * dim * 4.0 + lookups * index_bytes + batch * dim * 4.0,
        "backward": batch * dim * 4.0 + lookups * dim * 4.0,
        "update": lookups * dim * 4.0 + lookups * index_bytes + 2.0 * unique_rows * dim * 4.0,
    }


def make_indices(rows: int, count: int, distribution: str, exponent: float, rng: np.random.Generator) -> np.ndarray:
    """``count`` int64 row indices in [0, rows): uniform, or Zipf(exponent) over popularity ranks.

    Zipf ranks are drawn by inverse CDF on the exact finite distribution p_r ~ r**-exponent, then scattered
    over the table by a multiplicative hash, as the hot rows of a hashed categorical feature are.
    """
    if distribution == "uniform":
        return rng.integers(0, rows, size=count, dtype=np.int64)
    if distribution != "zipf":
        raise unknown_name_error("index distribution", distribution, ("uniform", "zipf"))
    weights = np.arange(1, rows + 1, dtype=np.float64) ** (-exponent)
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    ranks = np.searchsorted(cdf, rng.random(count), side="right").clip(max=rows - 1)
    # Multiplicative hash by an odd constant: a bijection on [0, 2^k) folded into [0, rows).
    return ((ranks.astype(np.uint64) * np.uint64(0x9E3779B1)) % np.uint64(rows)).astype(np.int64)


class Kernels(ABC):
    """One backend's kernels. Every ``make_*`` returns a prepared zero-argument operation."""

    name: str

    @abstractmethod
    def threads(self, n: int) -> AbstractContextManager[None]:
        """Context manager running the enclosed kernels on ``n`` threads."""

    @abstractmethod
    def versions(self) -> dict[str, str]:
        """Library versions that determine kernel speed (BLAS, framework)."""

    @abstractmethod
    def make_gemm(self, m: int, n: int, k: int) -> Op:
        """C[m, n] = A[m, k] @ B[k, n] in fp32 (2 m n k flops)."""

    @abstractmethod
    def make_linear(self, batch: int, fan_in: int, fan_out: int, which: str) -> Op:
        """One pass of a fully connected layer: "fwd" (y = x W^T + b), "bwd_data" (dx = dy W),
        "bwd_weights" (dW = dy^T x), with the layouts a framework uses."""

    @abstractmethod
    def make_stream(self, kind: str, elements: int, threads: int) -> Op:
        """STREAM "copy" (a = b) or "triad" (a = b + q c) over fp32 arrays of ``elements``, on ``threads`` threads."""

    def make_tiny(self, elements: int) -> Op:
        """An out-of-place element-wise multiply of two ``elements``-long fp32 vectors (a new output each call):
        the fixed per-op cost of the framework, with next to no arithmetic or memory traffic."""
        a = np.full(elements, 1.0, dtype=np.float32)
        return lambda: np.multiply(a, a)

    def make_flush(self, nbytes: int) -> Op:
        """Read and write a private ``nbytes`` buffer (see ``flush``)."""
        buf = np.ones(max(1, nbytes // 4), dtype=np.float32)
        return lambda: np.add(buf, np.float32(1.0), out=buf)

    def flush(self) -> None:
        """Evict the caches: read and write a private buffer twice the last-level cache. Run before a timed
        call, it leaves code, tensors and framework metadata where the rest of a training iteration leaves
        them (embedding tables and activations stream far more than the cache holds between two calls)."""
        op = getattr(self, "_flush_op", None)
        if op is None:
            from dlrmsim.host import last_level_cache_bytes

            op = self._flush_op = self.make_flush(2 * last_level_cache_bytes())
        op()

    @abstractmethod
    def make_embedding(self, rows: int, dim: int, batch: int, pooling: int, indices: np.ndarray) -> EmbeddingOps:
        """EmbeddingBag (sum) forward, backward to per-lookup gradient rows, and sparse SGD update."""


def torch_available() -> bool:
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a blocked or broken torch counts as absent
        return False


def default_backend() -> str:
    return "torch" if torch_available() else "numpy"


def get_kernels(backend: str | None = None) -> Kernels:
    """The kernel runner for ``backend`` ("numpy" or "torch"; None picks torch when installed)."""
    backend = backend or default_backend()
    if backend == "numpy":
        from dlrmsim.calibration.kernels_numpy import NumpyKernels

        return NumpyKernels()
    if backend == "torch":
        if not torch_available():
            raise DlrmsimError(
                "backend 'torch' needs PyTorch, which is not installed",
                field="backend",
                fix="pip install 'dlrmsim[torch]' or use --backend numpy",
            )
        from dlrmsim.calibration.kernels_torch import TorchKernels

        return TorchKernels()
    raise unknown_name_error("backend", backend, BACKENDS)

