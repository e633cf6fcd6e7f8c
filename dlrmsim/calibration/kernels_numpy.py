"""NumPy kernels: BLAS GEMMs (threads via threadpoolctl), gathers and streams split over a thread pool.

NumPy's element-wise loops and fancy indexing run on one thread but release the GIL, so multi-core
streams and embedding ops split their rows over a ``ThreadPoolExecutor``.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from dlrmsim.calibration.kernels import EmbeddingOps, Kernels, Op

# Element-wise chunk: 256 Ki fp32 = 1 MiB, small enough that the triad's temporary stays in L2, so the
# two NumPy passes (q*c, then +b) cost the DRAM traffic of one fused triad.
_CHUNK = 1 << 18


def _split(n: int, parts: int) -> list[slice]:
    return [slice(i * n // parts, (i + 1) * n // parts) for i in range(parts)]


class NumpyKernels(Kernels):
    name = "numpy"

    def __init__(self) -> None:
        self._threads = 1
        self._pools: dict[int, ThreadPoolExecutor] = {}

    def _pool(self, n: int) -> ThreadPoolExecutor:
        if n not in self._pools:
            self._pools[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="dlrmsim-cal")
        return self._pools[n]

    @contextmanager
    def threads(self, n: int) -> Iterator[None]:
        previous = self._threads
        self._threads = n
        try:
            with threadpool_limits(limits=n, user_api="blas"):
                yield
        finally:
            self._threads = previous

    def versions(self) -> dict[str, str]:
        out = {"python": platform.python_version(), "numpy": np.__version__}
        for info in threadpool_info():
            if info.get("user_api") == "blas":
                out["blas"] = f"{info.get('internal_api')} {info.get('version')} ({info.get('architecture')})"
                break
        return out

    def _parallel(self, fn, parts: list) -> None:  # noqa: ANN001 - small internal helper
        if len(parts) == 1:
            fn(parts[0])
        else:
            list(self._pool(len(parts)).map(fn, parts))

    def make_gemm(self, m: int, n: int, k: int) -> Op:
        rng = np.random.default_rng(0)
        a = rng.random((m, k), dtype=np.float32)
        b = rng.random((k, n), dtype=np.float32)
        c = np.empty((m, n), dtype=np.float32)
        return lambda: np.matmul(a, b, out=c)

    def make_linear(self, batch: int, fan_in: int, fan_out: int, which: str) -> Op:
        rng = np.random.default_rng(0)
        w = rng.random((fan_out, fan_in), dtype=np.float32)
        if which == "fwd":
            x = rng.random((batch, fan_in), dtype=np.float32)
            bias = rng.random(fan_out, dtype=np.float32)
            y = np.empty((batch, fan_out), dtype=np.float32)

            def fwd() -> None:
                np.matmul(x, w.T, out=y)
                np.add(y, bias, out=y)

            return fwd
        dy = rng.random((batch, fan_out), dtype=np.float32)
        if which == "bwd_data":
            dx = np.empty((batch, fan_in), dtype=np.float32)
            return lambda: np.matmul(dy, w, out=dx)
        if which == "bwd_weights":
            x = rng.random((batch, fan_in), dtype=np.float32)
            dw = np.empty((fan_out, fan_in), dtype=np.float32)
            return lambda: np.matmul(dy.T, x, out=dw)
        raise ValueError(f"unknown pass {which!r}")

    def make_stream(self, kind: str, elements: int, threads: int) -> Op:
        a = np.ones(elements, dtype=np.float32)
        b = np.full(elements, 2.0, dtype=np.float32)
        c = np.full(elements, 0.5, dtype=np.float32)
        parts = _split(elements, threads)
        q = np.float32(3.0)
        if kind == "copy":
            return lambda: self._parallel(lambda s: np.copyto(a[s], b[s]), parts)
        if kind != "triad":
            raise ValueError(f"unknown stream kind {kind!r}")

        def triad_part(s: slice) -> None:
            tmp = np.empty(_CHUNK, dtype=np.float32)
            for i in range(s.start, s.stop, _CHUNK):
                j = min(i + _CHUNK, s.stop)
                t = tmp[: j - i]
                np.multiply(c[i:j], q, out=t)
                np.add(t, b[i:j], out=a[i:j])

        return lambda: self._parallel(triad_part, parts)

    def make_embedding(self, rows: int, dim: int, batch: int, pooling: int, indices: np.ndarray) -> EmbeddingOps:
        table = np.full((rows, dim), 0.01, dtype=np.float32)  # touches every page once, unlike np.empty
        idx = np.ascontiguousarray(indices, dtype=np.int64).reshape(batch, pooling)
        pooled = np.empty((batch, dim), dtype=np.float32)
        dpooled = np.full((batch, dim), 1e-3, dtype=np.float32)
        grad_rows = np.empty((batch * pooling, dim), dtype=np.float32)
        lr = np.float32(0.01)
        flat = idx.reshape(-1)
        unique_rows = int(np.unique(flat).size)
        kernels = self

        def batches() -> list[slice]:
            return _split(batch, kernels._threads) if batch >= kernels._threads else [slice(0, batch)]

        def forward() -> np.ndarray:
            def part(s: slice) -> None:
                gathered = table[idx[s].reshape(-1)]
                np.sum(gathered.reshape(-1, pooling, dim), axis=1, out=pooled[s])

            kernels._parallel(part, batches())
            return pooled

        def backward() -> None:
            # The sum's gradient: each lookup's row gets the sample's pooled gradient.
            g = grad_rows.reshape(batch, pooling, dim)

            def part(s: slice) -> None:
                g[s] = dpooled[s, None, :]

            kernels._parallel(part, batches())

        def update() -> None:
            # Sparse SGD: table[i] -= lr * g for every lookup; ufunc.at accumulates repeated indices
            # correctly (one thread: NumPy has no race-free parallel scatter-add).
            np.subtract.at(table, flat, lr * grad_rows)

        return EmbeddingOps(forward=forward, backward=backward, update=update, unique_rows=unique_rows)
