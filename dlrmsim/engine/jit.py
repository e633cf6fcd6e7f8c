"""The engine's compiled kernels, cached on disk under a key of all their sources.

numba's ``cache=True`` stores a kernel's machine code and checks only the kernel's own file for changes. A kernel
that calls a kernel of another module carries the callee's code inlined, so when only the callee's file changes (a
``git pull``, an upgrade) numba loads the caller's stale code and runs the old callee inside it, silently: the
numba documentation lists this among its caching limitations ("Cache invalidation fails to recognize changes in
functions defined in a different file"; numba issue #1833). It happened here: a faster ``maxmin.progressive_filling``
ran inside a cached ``fluid._solve_rates`` that still held the old one. A simulator must not answer with code it no
longer contains, so every engine kernel takes :func:`njit` from this module, and their cache lives in a directory
named by a digest of all the kernel modules' sources (:data:`KERNEL_MODULES`): a change to any of them starts a
fresh cache, compiled again on first use (``make`` runs ``python -m dlrmsim.warmup`` after installing).

The directory is ``__pycache__/numba-<digest>`` beside this file, or, where the package cannot be written,
``~/.cache/dlrmsim/numba-<digest>``, or, where there is no writable home either (a container run under a user id
with no home: ``Path.home()`` raises, or ``HOME=/``), a folder of this user's under the temporary directory; under
``$NUMBA_CACHE_DIR`` when the user set one. Without any, numba's ``cache=True`` refuses the kernels at import ("no
locator available"), so the last fallback is what keeps the simulator importable there. Caches of older sources in
the same place are removed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import numba

HERE = Path(__file__).resolve().parent
# Every engine module that defines a compiled kernel, and this one (it decides where they are cached).
KERNEL_MODULES = ("arrays.py", "fluid.py", "jit.py", "maxmin.py", "network.py", "phases.py", "routes.py")
PREFIX = "numba-"


def sources_digest(paths: Iterable[Path]) -> str:
    """A short digest of the files' names and contents (their order does not matter)."""
    h = hashlib.sha256()
    for p in sorted(paths, key=lambda q: q.name):
        h.update(p.name.encode())
        h.update(b"\0")
        h.update(p.read_bytes())
    h.update(numba.__version__.encode())
    return h.hexdigest()[:16]


def _writable(directory: Path) -> bool:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError:
        return False
    return True


def _home_cache() -> Path | None:
    """``~/.cache/dlrmsim``; None where the user has no home (no ``HOME`` and no passwd entry)."""
    try:
        return Path.home() / ".cache" / "dlrmsim"
    except RuntimeError:
        return None


def _private_temp() -> Path | None:
    """``<tmp>/dlrmsim-<uid>``, made for this user alone; None unless it is a real folder of this user's that no one
    else can write (numba loads machine code from it: a folder others could write would run their code)."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    if uid is None:
        return None
    base = Path(tempfile.gettempdir()) / f"dlrmsim-{uid}"
    try:
        base.mkdir(mode=0o700, exist_ok=True)
        st = base.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return base


def _bases() -> Iterator[Path]:
    """Where to cache, in order of preference, each tried only if the ones before cannot be written."""
    yield HERE / "__pycache__"
    for base in (_home_cache, _private_temp):
        found = base()
        if found is not None:
            yield found


def cache_dir(digest: str) -> Path | None:
    """Where kernels compiled from sources with ``digest`` are cached; None when no candidate can be written."""
    user = os.environ.get("NUMBA_CACHE_DIR")
    for base in [Path(user)] if user else _bases():
        if _writable(base / f"{PREFIX}{digest}"):
            return base / f"{PREFIX}{digest}"
    return None


def _remove_stale(current: Path) -> None:
    """Drop the caches of other sources beside ``current``, and the files numba's default in-tree cache left
    beside the kernels before this module existed (best effort: another process may hold them)."""
    for old in current.parent.glob(f"{PREFIX}*"):
        if old != current and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
    for pattern in ("*.nbi", "*.nbc"):
        for old in (HERE / "__pycache__").glob(pattern):
            old.unlink(missing_ok=True)


def _configure() -> None:
    here = cache_dir(sources_digest(HERE / m for m in KERNEL_MODULES))
    if here is not None:
        numba.config.CACHE_DIR = str(here)
        _remove_stale(here)


_configure()

# The decorator the kernel modules use; importing it from here is what puts their cache under the digest.
njit = numba.njit
