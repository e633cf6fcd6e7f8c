"""NumPy operations: BLAS GEMMs (threads via threadpoolctl), streams split over a thread pool, gathers.

NumPy's element-wise loops and fancy indexing run on one thread but release the GIL, so multi-core streams
split their rows over a ``ThreadPoolExecutor``.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from dlrmsim.calibration.ops.base import Op, Ops

# Element-wise chunk: 256 Ki fp32 = 1 MiB, small enough that the triad's temporary stays in L2, so the
# two NumPy passes (q*c, then +b) cost the DRAM traffic of one fused triad.
_CHUNK = 1 << 18


def _split(n: int, parts: int) -> list[slice]:
    return [slice(i * n // parts, (i + 1) * n // parts) for i in range(parts)]


class NumpyOps(Ops):
    name = "numpy"

    def __init__(self) -> None:
        self._pools: dict[int, ThreadPoolExecutor] = {}

    def _pool(self, n: int) -> ThreadPoolExecutor:
        if n not in self._pools:
            self._pools[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="dlrmsim-cal")
        return self._pools[n]

    def _parallel(self, fn: Callable[[slice], None], parts: list[slice]) -> None:
        if len(parts) == 1:
            fn(parts[0])
        else:
            list(self._pool(len(parts)).map(fn, parts))

    def threads(self, n: int) -> AbstractContextManager[Any]:
        return threadpool_limits(limits=n, user_api="blas")

    def versions(self) -> dict[str, str]:
        out = {"python": platform.python_version(), "numpy": np.__version__}
        for info in threadpool_info():
            if info.get("user_api") == "blas":
                out["blas"] = f"{info.get('internal_api')} {info.get('version')} ({info.get('architecture')})"
                break
        return out

    # --- prepared operations ------------------------------------------------------------------------------------

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

    # --- tensor operations of a training step -------------------------------------------------------------------

    def tensor(self, a: np.ndarray) -> Any:
        return a

    def numpy(self, x: Any) -> np.ndarray:
        return x

    def cat(self, xs: list[Any], axis: int) -> Any:
        return np.concatenate(xs, axis=axis)

    def stack(self, xs: list[Any], axis: int) -> Any:
        return np.stack(xs, axis=axis)

    def exp(self, x: Any) -> Any:
        return np.exp(x)

    def log(self, x: Any) -> Any:
        return np.log(x)

    def zeros(self, shape: tuple[int, ...]) -> Any:
        return np.zeros(shape, dtype=np.float32)

    def swap(self, x: Any) -> Any:
        return np.swapaxes(x, 1, 2)

    def addmm(self, b: Any, x: Any, w: Any) -> Any:
        y = x @ w.T
        y += b
        return y

    def relu(self, y: Any) -> Any:
        return np.maximum(y, np.float32(0.0))

    def relu_backward(self, dy: Any, y: Any) -> Any:
        return np.where(y > 0, dy, np.float32(0.0))

    def sigmoid(self, y: Any) -> Any:
        return 1.0 / (1.0 + np.exp(-y))

    def new_table(self, rows: int, dim: int, rng: np.random.Generator) -> Any:
        return rng.uniform(-0.01, 0.01, size=(rows, dim)).astype(np.float32)

    def table_array(self, table: Any) -> np.ndarray:
        return table

    def emb_forward(self, table: Any, idx: np.ndarray) -> Any:
        b, p = idx.shape
        return table[idx.reshape(-1)].reshape(b, p, -1).sum(axis=1)

    def emb_backward(self, table: Any, idx: np.ndarray, dpooled: Any) -> Any:
        return np.repeat(dpooled, idx.shape[1], axis=0)  # one gradient row per lookup

    def emb_update(self, table: Any, idx: np.ndarray, grad: Any, lr: float) -> None:
        # ufunc.at accumulates repeated indices correctly (one thread: NumPy has no race-free parallel scatter-add).
        np.subtract.at(table, idx.reshape(-1), np.float32(lr) * grad)

    def sgd_step(self, param: Any, grad: Any, lr: float) -> None:
        param -= np.float32(lr) * grad
