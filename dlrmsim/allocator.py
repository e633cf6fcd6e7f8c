"""How this process's C allocator treats large blocks: reused once freed, instead of handed back to the kernel.

By default glibc's malloc serves an allocation above its mmap threshold (which moves up to 32 MiB) with a fresh
``mmap`` and unmaps it on free, and trims freed memory at the top of its heap; the next block of that size then
starts from untouched pages, which the kernel zeroes and maps one fault at a time. :func:`steady_allocator` puts
malloc in the state a long-running process reaches: no mmap for any size, no trimming, so freed blocks are reused.

Two users, for two reasons:
- **Calibration** measures every kernel (and the project's runner trains) this way, as in a long training process:
  otherwise each iteration's large temporaries (a sparse gradient, its sort buffers) pay page faults and zeroing,
  single-threaded kernel work whose cost depends on the process's allocation history; measured on the project's
  host, it doubled the sparse update at 1 thread. ``validate`` leaves the TorchRec target under glibc's defaults,
  as a TorchRec user's script runs (``benchmarks/bench_allocator_faults.py`` measures the difference).
- **The simulator's own commands** (``dlrmsim.cli.main``, all but ``calibrate`` and ``validate``): a 1024-rank
  run builds and frees hundreds of megabytes of flow tables per collective. On the project's 2-vCPU VM a first
  touch costs about 2 s per GiB (300 MiB of ``np.empty(...).fill``: 0.67 s fresh, 0.05 s in reused memory); the
  1024-rank MLPerf run took 355,000 page faults and 1.5-2.5 s of system time by default, 222,000 and 1.3-1.5 s
  with freed memory kept. Peak memory is what the run had in use at its peak either way; the process just does not
  shrink between peaks. Nothing a simulation computes changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util

# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4


def steady_allocator() -> bool:
    """Make glibc malloc reuse freed blocks and never hand them back to the kernel (no mmap, no trimming); whether
    the C library took the setting (False where glibc's ``mallopt`` is not available: nothing changed)."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # glibc returns 1 on success; musl's mallopt is a stub that returns 0
    return mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, 2**31 - 1) == 1
