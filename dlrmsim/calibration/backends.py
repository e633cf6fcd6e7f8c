"""Which backends exist and whether this machine has them (no NumPy or torch import: the CLI checks a
``--backend`` option with it before any heavy module loads)."""

from __future__ import annotations

import importlib.util

from dlrmsim.errors import DlrmsimError, unknown_name_error

BACKENDS = ("numpy", "torch")


def torch_available() -> bool:
    """Whether PyTorch can be imported (a blocked or broken torch counts as absent)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def default_backend() -> str:
    return "torch" if torch_available() else "numpy"


def require_torch() -> None:
    """The one "torch not installed" error of the calibration (one line, exit 2 at the CLI)."""
    if not torch_available():
        raise DlrmsimError(
            "backend 'torch' needs PyTorch, which is not installed",
            field="backend",
            fix="pip install 'dlrmsim[torch]' or use --backend numpy",
        )


def check_backend(backend: str) -> None:
    """One-line error for an unknown backend, or for torch where it is not installed."""
    if backend not in BACKENDS:
        raise unknown_name_error("backend", backend, BACKENDS)
    if backend == "torch":
        require_torch()
