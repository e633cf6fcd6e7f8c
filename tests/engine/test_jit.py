"""The compiled kernels' disk cache is keyed by all their sources (dlrmsim/engine/jit.py)."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import numba
import pytest

from dlrmsim.engine import jit


def _files(tmp_path: Path, contents: dict[str, str]) -> list[Path]:
    out = []
    for name, text in contents.items():
        p = tmp_path / name
        p.write_text(text)
        out.append(p)
    return out


def test_digest_changes_with_any_kernel_source_and_not_with_order(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = _files(tmp_path / "a", {"fluid.py": "x = 1\n", "maxmin.py": "y = 2\n"})
    b = _files(tmp_path / "b", {"fluid.py": "x = 1\n", "maxmin.py": "y = 3\n"})
    # because a change in a callee's file (maxmin) must reach its callers' cache key too: numba's own check
    # looks at the caller's file only
    assert jit.sources_digest(a) != jit.sources_digest(b)
    # and the same sources give the same key however they are listed
    assert jit.sources_digest(a) == jit.sources_digest(list(reversed(a)))


def test_cache_dir_follows_numba_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    # because a user who points numba's cache somewhere keeps it there, one folder per source digest
    assert jit.cache_dir("0123456789abcdef") == tmp_path / "numba-0123456789abcdef"


def test_stale_caches_are_removed_and_the_current_one_kept(tmp_path: Path) -> None:
    current, old = tmp_path / "numba-new", tmp_path / "numba-old"
    current.mkdir()
    old.mkdir()
    (old / "f.nbi").write_text("stale")
    other = tmp_path / "unrelated"
    other.mkdir()
    jit._remove_stale(current)
    # because only caches of other sources go: nothing else in the folder is ours to delete
    assert current.is_dir() and not old.exists() and other.is_dir()


def test_the_engine_compiles_into_the_cache_of_its_current_sources() -> None:
    import dlrmsim.engine.fluid  # noqa: F401 - the kernels are decorated at import

    digest = jit.sources_digest(jit.HERE / m for m in jit.KERNEL_MODULES)
    # because numba picks each kernel's cache folder when it is decorated, from numba.config.CACHE_DIR
    assert Path(numba.config.CACHE_DIR).name == f"numba-{digest}"


def _unwritable(*paths: Path):  # noqa: ANN202 - a stand-in for jit._writable
    """``jit._writable`` that says no for folders under ``paths`` (this suite may run as root, who can write anywhere)."""
    real = jit._writable

    def writable(directory: Path) -> bool:
        return not any(directory.is_relative_to(p) for p in paths) and real(directory)

    return writable


def test_no_home_and_a_read_only_package_fall_back_to_a_private_temp_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    monkeypatch.setattr(jit, "_writable", _unwritable(jit.HERE))
    # because a container under a user id with no home, running a package it cannot write, must still import the
    # engine: without a writable cache folder numba refuses every cache=True kernel ("no locator available")
    found = jit.cache_dir("0123456789abcdef")
    assert found == tmp_path / f"dlrmsim-{os.getuid()}" / "numba-0123456789abcdef"
    # and that folder is this user's alone
    assert stat.S_IMODE((tmp_path / f"dlrmsim-{os.getuid()}").stat().st_mode) & 0o077 == 0


def test_a_temp_folder_others_can_write_is_not_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    planted = tmp_path / f"dlrmsim-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)
    # because numba runs the machine code it finds in its cache, a folder someone else could have filled is refused
    assert jit._private_temp() is None


def test_the_home_cache_comes_before_the_temp_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setattr(Path, "home", staticmethod(lambda: tmp_path / "home"))
    monkeypatch.setattr(jit, "_writable", _unwritable(jit.HERE))
    # because a home cache outlives reboots (a temp folder may not), it is preferred where it can be written
    assert jit.cache_dir("0123456789abcdef") == tmp_path / "home" / ".cache" / "dlrmsim" / "numba-0123456789abcdef"
    assert not (tmp_path / "tmp").exists()
