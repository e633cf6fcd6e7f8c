"""The compiled kernels' disk cache is keyed by all their sources (dlrmsim/engine/jit.py)."""

from __future__ import annotations

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
