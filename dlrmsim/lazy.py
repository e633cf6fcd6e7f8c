"""Lazy package exports (PEP 562): a package names what it exports, and each loads on first use.

Importing one submodule (a CLI module, say) then does not import the whole package and its heavy
dependencies.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``exports`` maps each public name to its module."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        sys.modules[package].__dict__[name] = value  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(sys.modules[package].__dict__) | set(exports))

    return __getattr__, __dir__
