"""One NumPy/PyTorch operation layer for the calibration: the micro-benchmarks and the DLRM runner both run
their kernels through ``get_ops(backend)``, so a fitted rate and a validated iteration time the same code."""

from __future__ import annotations

from dlrmsim.calibration.backends import BACKENDS, check_backend, default_backend, require_torch, torch_available
from dlrmsim.calibration.ops.base import Op, Ops, embedding_bytes, make_indices
from dlrmsim.calibration.ops.numpy_ops import NumpyOps


def get_ops(backend: str | None = None) -> Ops:
    """The operations of ``backend`` ("numpy" or "torch"; None picks torch when installed). One-line error for an
    unknown backend or a missing torch."""
    backend = backend or default_backend()
    check_backend(backend)
    if backend == "numpy":
        return NumpyOps()
    # torch is an optional heavy package: its module is imported only when asked for (and installed).
    from dlrmsim.calibration.ops.torch_ops import TorchOps

    return TorchOps()


__all__ = [
    "BACKENDS",
    "NumpyOps",
    "Op",
    "Ops",
    "check_backend",
    "default_backend",
    "embedding_bytes",
    "get_ops",
    "make_indices",
    "require_torch",
    "torch_available",
]
