"""Detect this machine (cores, memory, CPU model, clock, vector width) to fill the ``detect`` fields of a topology.

Only what the operating system tells us is detected. Rates (memory bandwidth, GEMM efficiency) stay the
placeholders of ``presets/host.yaml`` until calibration overlays fitted values.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path


@dataclass(frozen=True)
class HostInfo:
    """What the OS reports about this machine; clocks in GHz, memory in bytes."""

    model: str
    cores: int
    memory_B: float
    clock_GHz: float
    base_clock_GHz: float
    flops_per_cycle_per_core: dict[str, float]


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _memory_B(meminfo: str) -> float:
    match = re.search(r"^MemTotal:\s+(\d+)\s*kB", meminfo, re.M)
    if match:
        return float(match.group(1)) * 1024.0
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8e9  # unknown: a placeholder so the model still builds


def _cpuinfo_field(cpuinfo: str, name: str) -> str | None:
    match = re.search(rf"^{name}\s*:\s*(.+)$", cpuinfo, re.M)
    return match.group(1).strip() if match else None


def _clocks_GHz(cpuinfo: str, model: str) -> tuple[float, float]:
    """(max, base) clock: cpufreq when the kernel exposes it, else the '@ X GHz' in the model name, else cpu MHz."""
    max_khz = _read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").strip()
    base_khz = _read("/sys/devices/system/cpu/cpu0/cpufreq/base_frequency").strip()
    named = re.search(r"@\s*([\d.]+)\s*GHz", model)
    mhz = _cpuinfo_field(cpuinfo, "cpu MHz")
    fallback = float(named.group(1)) if named else (float(mhz) / 1000 if mhz else 2.0)
    top = float(max_khz) / 1e6 if max_khz.isdigit() else fallback
    base = float(base_khz) / 1e6 if base_khz.isdigit() else fallback
    return top, min(base, top)


def flops_per_cycle(flags: set[str]) -> dict[str, float]:
    """Peak fp32 (and bf16 where the ISA has a dot product) flops per cycle per core from the CPU flags.

    Assumes two FMA units per core (the server parts this simulator models): AVX-512 2 x 16 lanes x 2,
    AVX2 2 x 8 x 2, SSE 2 x 4 x 2 (or 4 x 2 NEON lanes on aarch64). A guess until calibration measures it.
    """
    if "avx512f" in flags:
        out = {"fp32": 64.0}
        if "avx512_bf16" in flags or "amx_bf16" in flags:
            out["bf16"] = 128.0
        return out
    if "avx2" in flags and "fma" in flags:
        return {"fp32": 32.0}
    if "asimd" in flags:
        return {"fp32": 16.0}
    return {"fp32": 16.0}


@lru_cache(maxsize=1)
def detect() -> HostInfo:
    """Inspect this machine once per process."""
    cpuinfo = _read("/proc/cpuinfo")
    model = _cpuinfo_field(cpuinfo, "model name") or _cpuinfo_field(cpuinfo, "Model") or os.uname().machine
    flags_line = _cpuinfo_field(cpuinfo, "flags") or _cpuinfo_field(cpuinfo, "Features") or ""
    top, base = _clocks_GHz(cpuinfo, model)
    return HostInfo(
        model=model,
        cores=_cores(),
        memory_B=_memory_B(_read("/proc/meminfo")),
        clock_GHz=top,
        base_clock_GHz=base,
        flops_per_cycle_per_core=flops_per_cycle(set(flags_line.split())),
    )
