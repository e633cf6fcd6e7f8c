"""The operation interface both the micro-benchmarks and the DLRM runner use, and the backend selection.

One ``Ops`` object per backend (NumPy, or PyTorch CPU) carries everything that touches a framework:

* thread control (``threads(n)``, the only place a calibration sets a kernel thread count);
* *prepared operations* for the micro-benchmarks: zero-argument callables that run one kernel on
  pre-allocated inputs, so a benchmark times only the kernel (``make_gemm``, ``make_linear``, ``make_stream``,
  ``make_tiny``, ``flush``);
* the tensor operations of a DLRM training step (``addmm``, ``relu``, the EmbeddingBag forward, backward and
  sparse SGD update, ...), which the runner composes into an iteration and the embedding, interaction and
  step-order GEMM benchmarks time one by one, so a fitted rate and a validated iteration run the same code.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from dlrmsim.errors import unknown_name_error
from dlrmsim.host import last_level_cache_bytes

Op = Callable[[], object]


def embedding_bytes(batch: int, pooling: int, dim: int, unique_rows: int, index_bytes: int = 8) -> dict[str, float]:
    """Bytes moved by the EmbeddingBag forward, backward and sparse SGD update (fp32 table, fp32 grads).

    Byte counts follow dlrmsim.workloads.model so that a fitted bandwidth means the same thing to the simulator
    as to the benchmark. forward: P rows read per sample, the indices read, one pooled row written
    (model.embedding_forward_bytes); backward: the pooled gradient read and expanded to one gradient row per
    lookup (model.embedding_backward_bytes); update: every gradient row and index read, every touched row read
    and written once.
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


# Ops.flush streams this many times the last-level cache: enough that nothing of a timed call's code or data is left
# in it (the simulator reads the same figure: ComputeSpec.task_overhead_after_bytes).
FLUSH_LLC_MULTIPLE = 2
# torch's at::internal::GRAIN_SIZE: an element-wise op on more elements is split over the intra-op thread pool
# ([PyTorch-2.13] aten/src/ATen/Parallel.h; TensorIterator's for_each divides by it).
TORCH_GRAIN_ELEMENTS = 32768.0
# Classes of tiny framework op whose fixed cost the dispatch benchmark times apart (Ops.make_tiny_of_class): an
# element-wise op of two tensors, one with a Python scalar operand, and a reduction.
OP_CLASSES = ("mul", "scalar", "reduce")


class Ops(ABC):
    """One backend's operations. ``make_*`` return prepared zero-argument operations; the others are the tensor
    operations of a training step, on the backend's tensors (``tensor`` converts a NumPy array to one)."""

    name: str
    # Elements above which the backend splits one element-wise op over its threads (fork and join); inf: never
    # (NumPy's ufuncs run on the calling thread).
    parallel_grain_elements: float = math.inf
    # At most this many bytes a flush (None: no limit); set with limit_flush. A tiny calibration limits it
    # (calibrate.TINY_FLUSH_BYTES): on a host with a 300 MiB cache a full flush moves 1.2 GB and took 62 ms.
    flush_limit_bytes: int | None = None

    # --- threads and versions ---------------------------------------------------------------------------------

    @abstractmethod
    def threads(self, n: int) -> AbstractContextManager[Any]:
        """Context manager running the enclosed kernels on ``n`` threads (and, with torch, autograd off): every
        prepared op and training-step op runs inside it."""

    @abstractmethod
    def versions(self) -> dict[str, str]:
        """Library versions that determine kernel speed (BLAS, framework)."""

    # --- prepared operations (micro-benchmarks) ---------------------------------------------------------------

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

    def make_tiny_of_class(self, op_class: str, elements: int) -> Op:
        """A tiny op of ``op_class`` (:data:`OP_CLASSES`) on an ``elements``-long fp32 vector, a new output each call:
        "scalar" adds a Python float (``x + 0.5``, as a loss adds its epsilon), "reduce" takes the mean (``x.mean()``,
        as a loss reduces over the batch), "mul" is :meth:`make_tiny`."""
        if op_class == "mul":
            return self.make_tiny(elements)
        a = self.tensor(np.full(elements, 1.0, dtype=np.float32))
        # the Python operator, as a loss writes it: a framework wraps the float into a 0-dim tensor each call
        return (lambda: a + 0.5) if op_class == "scalar" else (lambda: a.mean())

    def make_into(self, kind: str, rows: int, cols: int, outputs: int) -> Callable[[int], None]:
        """An op writing a fresh ``rows`` x ``cols`` fp32 result into the i-th of ``outputs`` preallocated buffers:
        ``kind`` "gemm" (A[rows, 64] @ B[64, cols], a GEMM's output tiles) or "elementwise" (ReLU of a
        ``rows`` x ``cols`` input). Called with one index it writes a buffer in cache; cycled over buffers that
        together exceed the last-level cache, each write meets a buffer evicted since its last use, as a step's
        allocator hands back memory the rest of the step evicted."""
        rng = np.random.default_rng(0)
        bufs = [np.zeros((rows, cols), dtype=np.float32) for _ in range(outputs)]
        if kind == "gemm":
            a = rng.random((rows, 64), dtype=np.float32)
            b = rng.random((64, cols), dtype=np.float32)
            return lambda i: np.matmul(a, b, out=bufs[i])
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        return lambda i: np.maximum(x, np.float32(0.0), out=bufs[i])

    def make_relu_pairs(self, rows: int, cols: int, pairs: int) -> Callable[[int], None]:
        """ReLU of the i-th of ``pairs`` ``rows`` x ``cols`` fp32 inputs into the i-th of as many outputs: cycled, each
        call finds its tensors where ``pairs`` pairs' footprint leaves them (benchmarks/outputs.py)."""
        rng = np.random.default_rng(0)
        xs = [rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(pairs)]
        bufs = [np.zeros((rows, cols), dtype=np.float32) for _ in range(pairs)]
        return lambda i: np.maximum(xs[i], np.float32(0.0), out=bufs[i])

    def make_multiply_into(self, elements: int) -> Op:
        """An element-wise multiply of an ``elements``-long fp32 vector into a preallocated output: an op with no
        allocation, so that its time is its arithmetic and the framework's threading alone."""
        a = np.full(elements, 1.0, dtype=np.float32)
        out = np.empty_like(a)
        return lambda: np.multiply(a, a, out=out)

    def make_rewarm(self) -> Op:
        """The framework work every training step runs before any of its calls (a layer's forward and backward):
        after a flush, it brings back the state all the framework's ops share (dispatch, autograd, allocator) and
        leaves the timed call's own code and data evicted, as the rest of a step leaves them. NumPy has no such
        shared state worth the name: nothing."""
        return lambda: None

    def then_rewarm(self, before: Op) -> Op:
        """``before`` (a flush, or traffic), then :meth:`make_rewarm`'s work: the context a step's call meets."""
        rewarm = self.make_rewarm()

        def op() -> None:
            before()
            rewarm()

        return op

    def make_flush(self, nbytes: int) -> Op:
        """Read and write a private ``nbytes`` buffer (see ``flush``)."""
        buf = np.ones(max(1, nbytes // 4), dtype=np.float32)
        return lambda: np.add(buf, np.float32(1.0), out=buf)

    def limit_flush(self, nbytes: int | None) -> None:
        """Flush at most ``nbytes`` from now on (None: twice the last-level cache); a flush buffer built for another
        size is dropped."""
        self.flush_limit_bytes = nbytes
        self._flush_op = None

    def flush_bytes(self) -> int:
        """The bytes :meth:`flush` reads and writes: twice the last-level cache, at most ``flush_limit_bytes``."""
        full = FLUSH_LLC_MULTIPLE * last_level_cache_bytes()
        return min(full, self.flush_limit_bytes) if self.flush_limit_bytes else full

    def flush(self) -> None:
        """Evict the caches: read and write a private buffer twice the last-level cache. Run before a timed
        call, it leaves code, tensors and framework metadata where the rest of a training iteration leaves
        them (embedding tables and activations stream far more than the cache holds between two calls)."""
        op = getattr(self, "_flush_op", None)
        if op is None:
            op = self._flush_op = self.make_flush(self.flush_bytes())
        op()

    # --- tensor operations of a training step (the DLRM runner) -------------------------------------------------

    @abstractmethod
    def tensor(self, a: np.ndarray) -> Any:
        """The backend's tensor holding ``a`` (shared memory where the backend allows)."""

    @abstractmethod
    def numpy(self, x: Any) -> np.ndarray:
        """A NumPy view (or copy) of a backend tensor."""

    @abstractmethod
    def cat(self, xs: list[Any], axis: int) -> Any: ...

    @abstractmethod
    def stack(self, xs: list[Any], axis: int) -> Any: ...

    @abstractmethod
    def exp(self, x: Any) -> Any: ...

    @abstractmethod
    def log(self, x: Any) -> Any: ...

    @abstractmethod
    def zeros(self, shape: tuple[int, ...]) -> Any: ...

    @abstractmethod
    def swap(self, x: Any) -> Any:
        """``x`` with its axes 1 and 2 swapped (a batched transpose)."""

    @abstractmethod
    def addmm(self, b: Any, x: Any, w: Any) -> Any:
        """x @ w^T + b: a linear layer's forward."""

    def mask(self, y: Any) -> Any:
        return y > 0

    @abstractmethod
    def relu(self, y: Any) -> Any: ...

    @abstractmethod
    def relu_backward(self, dy: Any, y: Any) -> Any:
        """Gradient through ReLU given its output ``y``: dy where y > 0, else 0 (one fused kernel)."""

    @abstractmethod
    def sigmoid(self, y: Any) -> Any: ...

    @abstractmethod
    def new_table(self, rows: int, dim: int, rng: np.random.Generator) -> Any:
        """An fp32 embedding table of ``rows`` x ``dim``, values uniform in [-0.01, 0.01]."""

    @abstractmethod
    def table_array(self, table: Any) -> np.ndarray:
        """The table's weights as a NumPy array (for checks, not timed)."""

    @abstractmethod
    def emb_forward(self, table: Any, idx: np.ndarray) -> Any:
        """EmbeddingBag (sum) forward over ``idx`` (batch, pooling): the pooled rows (batch, dim)."""

    @abstractmethod
    def emb_backward(self, table: Any, idx: np.ndarray, dpooled: Any) -> Any:
        """Backward of the last ``emb_forward`` on ``table``: one gradient row per lookup."""

    @abstractmethod
    def emb_update(self, table: Any, idx: np.ndarray, grad: Any, lr: float) -> None:
        """Sparse SGD on the rows ``idx`` touched: table[i] -= lr * grad, repeated rows accumulated."""

    @abstractmethod
    def sgd_step(self, param: Any, grad: Any, lr: float) -> None:
        """Dense SGD on one parameter tensor, in place: param -= lr * grad."""
