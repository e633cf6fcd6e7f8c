"""Calibration on real CPUs: host kernels, micro-benchmarks, fitting, the calibration YAML, and applying it.

Heavy modules load lazily; ``from dlrmsim.calibration import run_calibration, load_calibration,
apply_calibration, run_dlrm_iteration`` is the public API.
"""

from __future__ import annotations

from dlrmsim.lazy import lazy_exports

_EXPORTS = {
    "Calibration": "dlrmsim.calibration.schema",
    "load_calibration": "dlrmsim.calibration.schema",
    "save_calibration": "dlrmsim.calibration.schema",
    "apply_calibration": "dlrmsim.calibration.apply",
    "run_calibration": "dlrmsim.calibration.calibrate",
    "run_dlrm_iteration": "dlrmsim.calibration.dlrm_runner",
    "IterationMeasurement": "dlrmsim.calibration.dlrm_runner",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = sorted(_EXPORTS)
