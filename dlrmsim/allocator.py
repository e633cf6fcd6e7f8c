"""How this process's C allocator treats large arrays: reused once freed, instead of handed back to the system.

glibc's malloc serves an allocation above its mmap threshold (at most 32 MiB by default, 128 KiB at first) with
a fresh ``mmap`` and unmaps it when it is freed, so the next array of that size starts again from untouched pages:
the kernel zeroes and maps each one on first use. A 1024-rank simulation builds and frees hundreds of megabytes
of flow tables per collective; on the project's 2-vCPU VM a first touch costs about 2 s per GiB (300 MiB of fresh
``np.empty(...).fill`` took 0.67 s, the same again in reused memory 0.05 s), and the 1024-rank MLPerf run spent
2.7 s in the kernel (354,000 page faults) where with freed memory kept for reuse it spent 1.2 s (219,000).

:func:`keep_freed_memory` raises the mmap and trim thresholds (glibc's ``mallopt``, the knobs of
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_``) so that allocations up to :data:`KEEP_BYTES` come
from the heap and stay there when freed. Peak memory is unchanged (what is kept is what the run had in use at
its peak); the process simply does not shrink between its peaks. The command-line entry point calls it; a
library user running many simulations in one process may call it too. Nothing a simulation computes changes.
"""

from __future__ import annotations

import ctypes
import sys

# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Arrays up to this size come from the heap and are kept when freed (the largest a 1024-rank run builds are some
# 200 MB; mallopt takes a C int, so at most 2 GiB - 1).
KEEP_BYTES = 1 << 30


def keep_freed_memory(keep_bytes: int = KEEP_BYTES) -> bool:
    """Let this process reuse freed allocations up to ``keep_bytes`` instead of returning them to the system;
    whether the C library took the setting (False where it is not glibc's malloc, e.g. macOS, Windows, musl)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # glibc returns 1 on success; musl's mallopt is a stub returning 0
    return mallopt(M_MMAP_THRESHOLD, keep_bytes) == 1 and mallopt(M_TRIM_THRESHOLD, keep_bytes) == 1
