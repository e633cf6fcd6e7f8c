"""Units in YAML field names: rewrite ``bandwidth_Gbps: 100`` to the schema's canonical ``bandwidth_GBps: 12.5``.

A topology YAML may write a quantity in any known unit by naming the unit in the field
(``latency_ns``, ``capacity_GiB``, ``bandwidth_Gbps``) or by giving a string value with a unit
(``bandwidth_GBps: "100 Gbps"``). Before validation every such field is rewritten to the one
canonical unit per dimension the schema declares (GBps, us, GB, GHz, W); the builder then converts
those to SI. A field whose name ends in a quantity word with a unit we do not know
(``bandwidth_Gbits``) is a one-line error naming the field and the accepted spellings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from dlrmsim.errors import DlrmsimError


@dataclass(frozen=True)
class Unit:
    dimension: str  # "rate" | "time" | "size" | "frequency" | "power"
    si: float  # value of 1 of this unit in SI (B/s, s, B, Hz, W)


UNITS: dict[str, Unit] = {
    # rates: bytes or bits per second (decimal prefixes; Gbps is gigabits, GBps gigabytes)
    "Bps": Unit("rate", 1.0),
    "KBps": Unit("rate", 1e3),
    "MBps": Unit("rate", 1e6),
    "GBps": Unit("rate", 1e9),
    "TBps": Unit("rate", 1e12),
    "MiBps": Unit("rate", 2.0**20),
    "GiBps": Unit("rate", 2.0**30),
    "bps": Unit("rate", 1 / 8),
    "Kbps": Unit("rate", 1e3 / 8),
    "Mbps": Unit("rate", 1e6 / 8),
    "Gbps": Unit("rate", 1e9 / 8),
    "Tbps": Unit("rate", 1e12 / 8),
    # times
    "s": Unit("time", 1.0),
    "ms": Unit("time", 1e-3),
    "us": Unit("time", 1e-6),
    "ns": Unit("time", 1e-9),
    # sizes
    "B": Unit("size", 1.0),
    "KB": Unit("size", 1e3),
    "MB": Unit("size", 1e6),
    "GB": Unit("size", 1e9),
    "TB": Unit("size", 1e12),
    "KiB": Unit("size", 2.0**10),
    "MiB": Unit("size", 2.0**20),
    "GiB": Unit("size", 2.0**30),
    "TiB": Unit("size", 2.0**40),
    # frequencies
    "Hz": Unit("frequency", 1.0),
    "MHz": Unit("frequency", 1e6),
    "GHz": Unit("frequency", 1e9),
    # power
    "W": Unit("power", 1.0),
}

# The unit each dimension is stored in by the schema (the unit the presets write).
CANONICAL: dict[str, str] = {"rate": "GBps", "time": "us", "size": "GB", "frequency": "GHz", "power": "W"}

# Field-name stems that always carry a unit: a field ending in one of these plus an unknown suffix is
# a unit typo, not an unknown field.
QUANTITY_WORDS = ("bandwidth", "latency", "overhead", "capacity", "clock", "frequency", "power", "sram", "cache")

# Values that stand for "find this out on the running machine" (host topology); passed through untouched.
PASS_THROUGH_VALUES = ("detect",)

_VALUE_RE = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z/]*)\s*$")


def to_si(value: float, unit: str) -> float:
    """``value`` in ``unit`` (a key of UNITS) expressed in SI."""
    return value * UNITS[unit].si


def _suffix(key: str) -> tuple[str, str] | None:
    if "_" not in key:
        return None
    stem, unit = key.rsplit("_", 1)
    return stem, unit


def _is_quantity_stem(stem: str) -> bool:
    last = stem.rsplit("_", 1)[-1].lower()
    return any(last.startswith(word) or last.endswith(word) for word in QUANTITY_WORDS)


def _parse_value(value: Any, key: str, unit: Unit, path: str, source: str) -> Any:
    """A number, a numeric string, or "<number> <unit>" of the same dimension; returns the value in ``unit``."""
    if isinstance(value, bool) or value is None or isinstance(value, int | float):
        return value
    if not isinstance(value, str) or value in PASS_THROUGH_VALUES:
        return value
    match = _VALUE_RE.match(value)
    if not match:
        return value  # let validation report the type error
    number, given = float(match.group(1)), match.group(2)
    if not given:
        return number
    given = given.replace("/s", "ps")  # "100 Gb/s" -> "100 Gbps"
    known = UNITS.get(given)
    if known is None:
        raise DlrmsimError(
            f"unknown unit '{match.group(2)}' in value {value!r}",
            source=source,
            field=path,
            fix=f"use one of: {', '.join(u for u, d in UNITS.items() if d.dimension == unit.dimension)}",
        )
    if known.dimension != unit.dimension:
        raise DlrmsimError(
            f"value {value!r} is a {known.dimension} but the field is a {unit.dimension}",
            source=source,
            field=path,
            fix=f"give the value in {key.rsplit('_', 1)[1]}",
        )
    return number * known.si / unit.si


def normalize_units(data: Any, source: str, path: str = "") -> tuple[Any, dict[str, str]]:
    """Rewrite unit-suffixed fields to the canonical unit of their dimension.

    Returns the rewritten copy and a map from each rewritten dotted path to the path the user wrote,
    so later validation errors can name the user's spelling.
    """
    renames: dict[str, str] = {}

    def walk(node: Any, where: str) -> Any:
        if isinstance(node, list):
            return [walk(item, f"{where}.{i}" if where else str(i)) for i, item in enumerate(node)]
        if not isinstance(node, dict):
            return node
        out: dict[Any, Any] = {}
        for key, value in node.items():
            here = f"{where}.{key}" if where else str(key)
            split = _suffix(key) if isinstance(key, str) else None
            if split is None or isinstance(value, dict | list):
                out[key] = walk(value, here)
                continue
            stem, unit_name = split
            unit = UNITS.get(unit_name)
            if unit is None:
                if _is_quantity_stem(stem) and not _is_quantity_stem(unit_name):
                    raise DlrmsimError(
                        f"unknown unit '{unit_name}' in field name",
                        source=source,
                        field=here,
                        fix=f"write it as {stem}_{_canonical_for_stem(stem)} or another known unit ({', '.join(sorted(UNITS))})",
                    )
                out[key] = value
                continue
            canonical = CANONICAL[unit.dimension]
            new_key = f"{stem}_{canonical}"
            parsed = _parse_value(value, key, unit, here, source)
            if isinstance(parsed, int | float) and not isinstance(parsed, bool) and canonical != unit_name:
                parsed = parsed * unit.si / UNITS[canonical].si
            if new_key in out or (new_key != key and new_key in node):
                raise DlrmsimError(
                    f"the quantity is given twice ({key} and {new_key})", source=source, field=here, fix="keep one of them"
                )
            out[new_key] = parsed
            if new_key != key:
                renames[f"{where}.{new_key}" if where else new_key] = here
        return out

    return walk(data, path), renames


def _canonical_for_stem(stem: str) -> str:
    """The canonical unit a quantity stem is usually written in (for error messages)."""
    last = stem.rsplit("_", 1)[-1].lower()
    if "bandwidth" in last:
        return "GBps"
    if "latency" in last or "overhead" in last:
        return "us"
    if "capacity" in last or "sram" in last or "cache" in last:
        return "GB"
    if "clock" in last or "frequency" in last:
        return "GHz"
    if "power" in last:
        return "W"
    return "GBps"
