"""PyTorch CPU operations: addmm, EmbeddingBag with sparse gradients, the sparse SGD update.

Imported only when torch is installed (the optional ``dlrmsim[torch]`` extra); ``get_ops`` checks first.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import numpy as np
import torch

from dlrmsim.calibration.ops.base import TORCH_GRAIN_ELEMENTS, Op, Ops


@contextmanager
def torch_threads(n: int, grad: bool = False) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads and autograd off (on with ``grad``), restoring both after.

    Autograd is off by default because the runner computes gradients by hand, as autograd would; only the
    EmbeddingBag backward turns it on (``emb_forward``). Implementations that train with autograd (TorchRec, fbgemm's
    TBE) time their steps with ``grad=True``. Scoped to the block, so other torch code in the process keeps its own
    thread count and grad mode.
    """
    previous, was = torch.get_num_threads(), torch.is_grad_enabled()
    torch.set_num_threads(n)
    torch.set_grad_enabled(grad)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
        torch.set_grad_enabled(was)


# The rewarm's layer (make_rewarm): small enough to move next to no data (64 KiB of activations, 16 KiB of weights),
# so what it brings back is the framework's shared code and state, not the timed call's.
REWARM_BATCH = 256
REWARM_WIDTH = 64


class TorchOps(Ops):
    name = "torch"
    parallel_grain_elements = TORCH_GRAIN_ELEMENTS

    def __init__(self) -> None:
        self._outputs: dict[int, Any] = {}

    def threads(self, n: int) -> AbstractContextManager[Any]:
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

    # --- prepared operations ------------------------------------------------------------------------------------

    def make_flush(self, nbytes: int) -> Op:
        # A torch kernel on the current thread count, so the intra-op workers are as awake after it as after
        # the previous op of an iteration (a single-threaded flush lets them sleep, and waking them costs more
        # than a small kernel).
        buf = torch.ones(max(1, nbytes // 4))
        return lambda: buf.add_(1.0)

    def make_rewarm(self) -> Op:
        # One small layer's forward, ReLU and autograd backward (REWARM_* above). On the 2-vCPU Intel VM (2026-11-27,
        # 1 thread, benchmarks/bench_rewarm.py) it took back a third to a half of what the flush added: TorchRec's
        # interaction forward 1.23 -> 0.95 ms (0.54 warm), torch.optim.SGD's step over 10 tensors 0.55 -> 0.40 ms;
        # five tiny element-wise ops took back less of the interaction's (1.06 ms).
        g = torch.Generator().manual_seed(0)
        layer = torch.nn.Linear(REWARM_WIDTH, REWARM_WIDTH)
        x = torch.rand(REWARM_BATCH, REWARM_WIDTH, generator=g)

        def op() -> None:
            with torch.enable_grad():  # threads() turns autograd off for the runner's kernels
                layer(x).relu().sum().backward()

        return op

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

    def make_into(self, kind: str, rows: int, cols: int, outputs: int) -> Any:
        g = torch.Generator().manual_seed(0)
        bufs = [torch.zeros(rows, cols) for _ in range(outputs)]
        if kind == "gemm":
            a, b = torch.rand(rows, 64, generator=g), torch.rand(64, cols, generator=g)
            return lambda i: torch.mm(a, b, out=bufs[i])
        x = torch.randn(rows, cols, generator=g)
        return lambda i: torch.clamp_min(x, 0.0, out=bufs[i])  # torch.relu's kernel, with an out= argument

    def make_relu_pairs(self, rows: int, cols: int, pairs: int) -> Any:
        g = torch.Generator().manual_seed(0)
        xs = [torch.randn(rows, cols, generator=g) for _ in range(pairs)]
        bufs = [torch.zeros(rows, cols) for _ in range(pairs)]
        return lambda i: torch.clamp_min(xs[i], 0.0, out=bufs[i])

    def make_multiply_into(self, elements: int) -> Op:
        a = torch.full((elements,), 1.0)
        out = torch.empty_like(a)
        return lambda: torch.mul(a, a, out=out)

    # --- tensor operations of a training step -------------------------------------------------------------------

    def tensor(self, a: np.ndarray) -> Any:
        return torch.from_numpy(np.ascontiguousarray(a))

    def numpy(self, x: Any) -> np.ndarray:
        return x.contiguous().numpy()

    def cat(self, xs: list[Any], axis: int) -> Any:
        return torch.cat(xs, dim=axis)

    def stack(self, xs: list[Any], axis: int) -> Any:
        return torch.stack(xs, dim=axis)

    def exp(self, x: Any) -> Any:
        return torch.exp(x)

    def log(self, x: Any) -> Any:
        return torch.log(x)

    def zeros(self, shape: tuple[int, ...]) -> Any:
        return torch.zeros(shape)

    def swap(self, x: Any) -> Any:
        return x.transpose(1, 2)

    def addmm(self, b: Any, x: Any, w: Any) -> Any:
        return torch.addmm(b, x, w.t())

    def relu(self, y: Any) -> Any:
        return torch.relu(y)

    def relu_backward(self, dy: Any, y: Any) -> Any:
        # What autograd runs for nn.ReLU: one fused kernel, no bool mask materialised.
        return torch.ops.aten.threshold_backward(dy, y, 0.0)

    def sigmoid(self, y: Any) -> Any:
        return torch.sigmoid(y)

    def new_table(self, rows: int, dim: int, rng: np.random.Generator) -> Any:
        # from_pretrained: the module's own init would fill the table once more (normal_), as long again.
        weight = torch.empty(rows, dim).uniform_(-0.01, 0.01)
        return torch.nn.EmbeddingBag.from_pretrained(weight, freeze=False, mode="sum", sparse=True)

    def table_array(self, table: Any) -> np.ndarray:
        return table.weight.detach().numpy()

    def emb_forward(self, table: Any, idx: np.ndarray) -> Any:
        b, p = idx.shape
        flat = torch.from_numpy(idx.reshape(-1))
        offsets = torch.arange(0, b * p, p, dtype=torch.int64)
        with torch.enable_grad():
            out = table(flat, offsets)
        self._outputs[id(table)] = out
        return out.detach()

    def emb_backward(self, table: Any, idx: np.ndarray, dpooled: Any) -> Any:
        table.weight.grad = None
        with torch.enable_grad():
            self._outputs.pop(id(table)).backward(dpooled)
        return table.weight.grad  # sparse COO, one row per lookup

    def emb_update(self, table: Any, idx: np.ndarray, grad: Any, lr: float) -> None:
        table.weight.add_(grad, alpha=-lr)

    def sgd_step(self, param: Any, grad: Any, lr: float) -> None:
        # One fused op per tensor, what torch.optim.SGD (no momentum) runs per parameter on CPU.
        param.add_(grad, alpha=-lr)
