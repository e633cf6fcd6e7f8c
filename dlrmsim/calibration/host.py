"""Detect the host: CPU model, cores, clock, ISA (hence fp32 flops per cycle), memory; and compare hosts."""

from __future__ import annotations

import functools
import hashlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from dlrmsim.calibration.schema import HostInfo
from dlrmsim.output import err_console

# Bytes one core can move through its L1 per cycle: two 64-byte loads and one 64-byte store (the load/store
# ports of Skylake-SP, Ice Lake and Zen 4 cores). No memory stream can beat this, so cores x clock x 192 B
# is a generous but physical upper bound on any measured bandwidth (DRAM is far below it).
L1_BYTES_PER_CYCLE = 192.0


@dataclass(frozen=True)
class CpuFacts:
    cpu_model: str
    vendor: str
    threads: int
    sockets: int
    clock_GHz: float
    flags: frozenset[str]
    memory_GB: float


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def read_cpu_facts() -> CpuFacts:
    """Facts from /proc/cpuinfo, /proc/meminfo and cpufreq (Linux); conservative defaults elsewhere."""
    text = _cpuinfo()
    model, vendor, flags = "unknown", "unknown", frozenset()
    mhz: list[float] = []
    threads = 0
    physical_ids: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "processor":
            threads += 1
        elif key == "model name":
            model = value
        elif key == "vendor_id":
            vendor = value
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
        elif key == "cpu MHz":
            try:
                mhz.append(float(value))
            except ValueError:
                pass
        elif key == "physical id":
            physical_ids.add(value)
    max_freq = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    clock = 0.0
    if max_freq.is_file():
        try:
            clock = float(max_freq.read_text().strip()) / 1e6  # kHz -> GHz
        except ValueError:
            clock = 0.0
    if clock <= 0 and mhz:
        clock = max(mhz) / 1e3
    if clock <= 0:
        clock = 3.0  # no /proc: assume a typical server clock; stated in the file as clock_GHz
    memory_gb = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_gb = float(line.split()[1]) * 1024 / 1e9
                break
    except OSError:
        pass
    return CpuFacts(
        cpu_model=model,
        vendor=vendor,
        threads=threads or (os.cpu_count() or 1),
        sockets=max(1, len(physical_ids)),
        clock_GHz=clock,
        flags=flags,
        memory_GB=memory_gb or 1.0,
    )


def flops_per_cycle(flags: frozenset[str]) -> tuple[float, str]:
    """fp32 flops per cycle per core from the ISA flags, and the ISA named.

    Assumes two FMA pipes of the widest vector width (the Skylake-SP / Ice Lake server figure): avx512f
    2 x 16 lanes x 2 = 64; avx2 with fma 2 x 8 x 2 = 32; avx without fma, one add and one multiply pipe of
    8 lanes = 16; sse 2 x 4 = 8. Cores that split a 512-bit op into two 256-bit halves (Zen 4) really do
    32, so on them this is a generous bound, never an underestimate.
    """
    if "avx512f" in flags:
        return 64.0, "avx512f"
    if "avx2" in flags and "fma" in flags:
        return 32.0, "avx2+fma"
    if "avx" in flags:
        return 16.0, "avx"
    return 8.0, "sse"


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def detect_host(backend: str, quick: bool, libraries: dict[str, str], date: str) -> HostInfo:
    facts = read_cpu_facts()
    cores = usable_cores()
    fpc, isa = flops_per_cycle(facts.flags)
    return HostInfo(
        name=socket.gethostname(),
        cpu_model=facts.cpu_model,
        vendor=facts.vendor,
        cores=cores,
        threads=facts.threads,
        sockets=facts.sockets,
        memory_GB=round(facts.memory_GB, 2),
        clock_GHz=round(facts.clock_GHz, 4),
        flops_per_cycle_fp32=fpc,
        isa=isa,
        peak_fp32_GFLOPs=round(cores * facts.clock_GHz * fpc, 3),
        memory_bound_GBps=round(cores * facts.clock_GHz * L1_BYTES_PER_CYCLE, 3),
        page_bytes=page_bytes(),
        l2_bytes=l2_cache_bytes(),
        llc_bytes=last_level_cache_bytes(),
        libraries=libraries,
        backend=backend,  # type: ignore[arg-type]
        date=date,
        quick=quick,
    )


@functools.cache
def cache_sizes() -> tuple[tuple[int, int], ...]:
    """(level, bytes) of each data or unified CPU cache Linux reports for cpu0 (sysfs cache index entries);
    empty elsewhere."""
    out = []
    for d in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind, text = ((d / f).read_text().strip() for f in ("level", "type", "size"))
        except OSError:
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
        digits = text.rstrip("KMGkmg")
        if kind != "Instruction" and digits.isdigit() and level.isdigit():
            out.append((int(level), int(digits) * unit))
    return tuple(out)


def last_level_cache_bytes(default: int = 32 << 20) -> int:
    """Size (bytes) of the largest CPU cache; ``default`` where Linux does not say."""
    return max((size for _, size in cache_sizes()), default=default)


def l2_cache_bytes(default: int = 1 << 20) -> int:
    """Size (bytes) of a core's level-2 cache; ``default`` where Linux does not say."""
    return next((size for level, size in cache_sizes() if level == 2), default)


def page_bytes(default: int = 4096) -> int:
    """The virtual memory page size (bytes); ``default`` where the OS does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return default


def steady_allocator() -> bool:
    """Put glibc malloc in the state a long training process reaches: freed blocks are reused, never handed
    back to the kernel and re-faulted. By default glibc maps each large temporary (a sparse gradient, its
    sort buffers) fresh and unmaps it on free, so every iteration pays page faults and zeroing, single-threaded
    kernel work whose cost depends on the process's allocation history. Measured here, it doubled the sparse
    update at 1 thread. Returns False where glibc's mallopt is not available (nothing changed)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_max = -1, -4
    return bool(mallopt(m_mmap_max, 0)) and bool(mallopt(m_trim_threshold, 2**31 - 1))


def peak_gflops(host: HostInfo, cores: int) -> float:
    """Physical fp32 peak of ``cores`` cores of this host (GFLOP/s)."""
    return cores * host.clock_GHz * host.flops_per_cycle_fp32


def host_differences(a: HostInfo, b: HostInfo) -> list[str]:
    """Human-readable differences that change kernel speed (hostnames alone do not count)."""
    out: list[str] = []
    for field in ("cpu_model", "vendor", "cores", "sockets", "isa", "flops_per_cycle_fp32"):
        va, vb = getattr(a, field), getattr(b, field)
        if va != vb:
            out.append(f"{field} {va!r} vs {vb!r}")
    if abs(a.memory_GB - b.memory_GB) > 0.1 * max(a.memory_GB, b.memory_GB):
        out.append(f"memory_GB {a.memory_GB:g} vs {b.memory_GB:g}")
    if abs(a.clock_GHz - b.clock_GHz) > 0.05 * max(a.clock_GHz, b.clock_GHz):
        out.append(f"clock_GHz {a.clock_GHz:g} vs {b.clock_GHz:g}")
    return out


def current_host_stub() -> HostInfo:
    """This machine's description, without library versions or date (for comparisons and cache keys)."""
    return detect_host("numpy", quick=True, libraries={}, date="")


def warn_if_other_host(host: HostInfo, source: str) -> list[str]:
    """Warn on stderr when a calibration was measured on a different machine; returns the differences."""
    diffs = host_differences(host, current_host_stub())
    if diffs:
        err_console.print(
            f"[bold yellow]warning:[/] {source}: calibration was measured on another host ({'; '.join(diffs)}); "
            "its rates may not hold here (fix: run dlrmsim calibrate on this machine)",
            highlight=False,
            soft_wrap=True,
        )
    return diffs


def host_key(host: HostInfo) -> str:
    """Stable key of the machine and software a measurement depends on (partial-results cache key)."""
    # "run-v9": the benchmark method (cold-cache timing, tables per embedding cycle recorded, collectives timed
    # per call after a compute gap, an embedding run's first call timed apart from its later calls, GEMMs in
    # training-step order, streams sampled five times and combined by their median, fresh embedding indices
    # every cycle, a first table shape also cycled over four tables); partial results of another method are
    # not reused.
    parts = ["run-v9", host.cpu_model, host.vendor, str(host.cores), host.isa, f"{host.memory_GB:.0f}", host.backend, str(host.quick)]
    parts += [f"{k}={v}" for k, v in sorted(host.libraries.items())]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]
