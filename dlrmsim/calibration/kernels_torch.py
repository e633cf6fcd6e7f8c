"""PyTorch CPU kernels: addmm, EmbeddingBag with sparse gradients, and the sparse SGD update.

Imported only when torch is installed (the optional ``dlrmsim[torch]`` extra).
"""

from __future__ import annotations

import platform
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import numpy as np
import torch

from dlrmsim.calibration.kernels import EmbeddingOps, Kernels, Op


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads, restoring the previous count after."""
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


class TorchKernels(Kernels):
    name = "torch"

    def threads(self, n: int) -> AbstractContextManager[None]:
        return torch_threads(n)

    def versions(self) -> dict[str, str]:
        out = {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__}
        cfg = torch.__config__.show()
        for line in cfg.splitlines():
            line = line.strip()
            if line.startswith("- BLAS_INFO") or "Math Kernel Library" in line or line.startswith("- LAPACK"):
                out.setdefault("blas", line.lstrip("- "))
        for line in torch.__config__.parallel_info().splitlines():
            if "parallel backend" in line:
                out["parallel"] = line.split(":", 1)[-1].strip()
        return out

    def make_flush(self, nbytes: int) -> Op:
        # A torch kernel on the current thread count, so the intra-op workers are as awake after it as after
        # the previous op of an iteration (a single-threaded flush lets them sleep, and waking them costs more
        # than a small kernel).
        buf = torch.ones(max(1, nbytes // 4))
        return lambda: buf.add_(1.0)

    def make_gemm(self, m: int, n: int, k: int) -> Op:
        g = torch.Generator().manual_seed(0)
        a = torch.rand(m, k, generator=g)
        b = torch.rand(k, n, generator=g)
        c = torch.empty(m, n)
        return lambda: torch.mm(a, b, out=c)

    def make_linear(self, batch: int, fan_in: int, fan_out: int, which: str) -> Op:
        g = torch.Generator().manual_seed(0)
        w = torch.rand(fan_out, fan_in, generator=g)
        if which == "fwd":
            x = torch.rand(batch, fan_in, generator=g)
            bias = torch.rand(fan_out, generator=g)
            y = torch.empty(batch, fan_out)
            return lambda: torch.addmm(bias, x, w.t(), out=y)
        dy = torch.rand(batch, fan_out, generator=g)
        if which == "bwd_data":
            dx = torch.empty(batch, fan_in)
            return lambda: torch.mm(dy, w, out=dx)
        if which == "bwd_weights":
            x = torch.rand(batch, fan_in, generator=g)
            dw = torch.empty(fan_out, fan_in)
            return lambda: torch.mm(dy.t(), x, out=dw)
        raise ValueError(f"unknown pass {which!r}")

    def make_stream(self, kind: str, elements: int, threads: int) -> Op:
        # torch's element-wise kernels split over torch.get_num_threads() themselves.
        a = torch.ones(elements)
        b = torch.full((elements,), 2.0)
        c = torch.full((elements,), 0.5)
        if kind == "copy":
            return lambda: a.copy_(b)
        if kind == "triad":
            return lambda: torch.add(b, c, alpha=3.0, out=a)
        raise ValueError(f"unknown stream kind {kind!r}")

    def make_tiny(self, elements: int) -> Op:
        a = torch.full((elements,), 1.0)
        return lambda: torch.mul(a, a)

    def make_embedding(self, rows: int, dim: int, batch: int, pooling: int, indices: np.ndarray) -> EmbeddingOps:
        bag = torch.nn.EmbeddingBag(rows, dim, mode="sum", sparse=True)
        with torch.no_grad():
            bag.weight.fill_(0.01)
        idx = torch.from_numpy(np.ascontiguousarray(indices, dtype=np.int64))
        offsets = torch.arange(0, batch * pooling, pooling, dtype=torch.int64)
        dpooled = torch.full((batch, dim), 1e-3)
        unique_rows = int(torch.unique(idx).numel())
        lr = 0.01

        def forward() -> np.ndarray:
            with torch.no_grad():
                return bag(idx, offsets).numpy()

        # The backward op replays the autograd graph of one forward built here, outside the timed region.
        out = bag(idx, offsets)

        def backward() -> None:
            bag.weight.grad = None
            out.backward(dpooled, retain_graph=True)  # sparse COO gradient: one row per lookup

        backward()
        grad = bag.weight.grad

        def update() -> None:
            with torch.no_grad():
                # Sparse SGD: dense weight += -lr * sparse gradient (an index_add over the gradient rows).
                bag.weight.add_(grad, alpha=-lr)

        return EmbeddingOps(forward=forward, backward=backward, update=update, unique_rows=unique_rows)
