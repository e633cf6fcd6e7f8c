"""dlrmsim.allocator: large blocks freed come back from the heap instead of fresh pages."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

from dlrmsim import allocator, cli

_PROBE = """
import ctypes, sys
import numpy as np
from dlrmsim.allocator import steady_allocator

class MallInfo2(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                               "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "keep":
    assert steady_allocator()
a = np.ones(64 << 17)  # 64 MiB
print(libc.mallinfo2().hblkhd)  # bytes in mmapped regions
"""


def _glibc_has_mallinfo2() -> bool:
    try:
        ctypes.CDLL(None).mallinfo2  # noqa: B018 - only whether the symbol exists
    except (OSError, AttributeError):
        return False
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _glibc_has_mallinfo2(), reason="glibc's malloc only")
def test_a_large_array_comes_from_the_heap_once_freed_memory_is_kept() -> None:
    # Because glibc maps an allocation above its mmap threshold (32 MiB at most by default) on its own, a 64 MiB array
    # shows in the mmapped bytes; in the steady state nothing is mmapped: it comes from the heap, which keeps it.
    def mmapped(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True)
        return int(out.stdout.split()[-1])

    assert mmapped("default") >= 64 << 20
    assert mmapped("keep") < 64 << 20


def test_without_glibc_it_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    # Because the setting is glibc's mallopt, where no C library is found the call must change nothing and say so.
    monkeypatch.setattr(allocator.ctypes.util, "find_library", lambda _name: None)
    assert allocator.steady_allocator() is False


@pytest.mark.parametrize(
    ("argv", "steady"),
    [
        (["simulate", "-t", "x"], True),
        (["--verbose", "instances"], True),
        (["calibrate", "--quick"], False),
        (["validate"], False),
    ],
)
def test_the_cli_keeps_defaults_for_commands_that_time_real_kernels(argv: list[str], steady: bool) -> None:
    # Because validate times TorchRec under glibc's defaults, as a user's script runs, and calibrate sets its own
    # allocator state, the CLI must leave the allocator alone for them and set it for the simulator's commands.
    assert cli.measures_host(argv) is not steady
