"""This machine as its operating system reports it: the one reader both the ``host`` topology and calibration use.

Reported facts only (Linux's /proc/cpuinfo, /proc/meminfo, cpufreq and sysfs caches; portable fallbacks
elsewhere). Parsing is a pure function of the files' text (:func:`parse_host`), so tests feed it any machine.

A reported clock is not a bound on what a core does: a virtual machine reports its nominal clock while the core
boosts higher (an AMD EPYC guest reporting 2445 MHz ran a 1-core fp32 GEMM at 87 GFLOP/s, 1.11x
2.445 GHz x 32 flop/cycle). So the clock a *peak* uses is the highest of every reported clock and of what a
measured FMA-throughput probe implies (:func:`peak_clock`); calibration runs the probe and records which
source set the peak.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

# Used only when no source reports a clock (no /proc, no cpufreq, no "@ X GHz" in the model name): a typical
# server all-core turbo. A calibration's FMA probe raises it when the cores are faster.
ASSUMED_CLOCK_GHZ = 3.0

# Used only when neither /proc/meminfo nor sysconf reports memory, so that a topology still builds.
ASSUMED_MEMORY_B = 8e9

CPUFREQ = Path("/sys/devices/system/cpu/cpu0/cpufreq")


@dataclass(frozen=True)
class IsaPeak:
    """Peak flops per cycle per core that a core's vector ISA allows, by precision, and the ISA named."""

    isa: str
    flops_per_cycle: dict[str, float]

    @property
    def fp32(self) -> float:
        return self.flops_per_cycle["fp32"]


def isa_peak(flags: frozenset[str], machine: str = "x86_64") -> IsaPeak:
    """Flops per cycle per core from the ISA flags.

    Two vector pipes of the widest width, each a fused multiply-add (2 flops a lane) where the ISA has FMA:
    AVX-512 2 x 16 lanes x 2 = 64 (Skylake-SP, Cascade Lake, Ice Lake, Sapphire Rapids servers; Intel
    optimization manual); AVX2 + FMA 2 x 8 x 2 = 32 (Haswell and later, Zen); AVX without FMA, one add and one
    multiply pipe of 8 lanes = 16; SSE, one add and one multiply pipe of 4 lanes = 8; Arm NEON (asimd),
    two 128-bit FMA pipes 2 x 4 x 2 = 16. bf16 dot products (AVX512_BF16, AMX) double the fp32 rate.
    Cores that split a 512-bit op into two 256-bit halves (Zen 4) really do 32: on them this is a generous
    bound, never an underestimate.
    """
    if "avx512f" in flags:
        fpc = {"fp32": 64.0}
        if "avx512_bf16" in flags or "amx_bf16" in flags:
            fpc["bf16"] = 128.0
        return IsaPeak("avx512f", fpc)
    if "avx2" in flags and "fma" in flags:
        return IsaPeak("avx2+fma", {"fp32": 32.0})
    if "avx" in flags:
        return IsaPeak("avx", {"fp32": 16.0})
    if "asimd" in flags or machine in ("aarch64", "arm64"):
        return IsaPeak("asimd", {"fp32": 16.0})
    return IsaPeak("sse", {"fp32": 8.0})


@dataclass(frozen=True)
class HostFacts:
    """What the OS reports about this machine. Clocks in GHz, memory in bytes.

    ``clocks_GHz`` keeps every clock a source reported, by source name ("cpufreq max", "cpufreq base",
    "model name", "cpuinfo MHz"), so a reader can see why :attr:`clock_GHz` is what it is.
    """

    model: str
    vendor: str
    cores: int
    threads: int
    sockets: int
    memory_B: float
    flags: frozenset[str]
    machine: str
    clocks_GHz: dict[str, float] = field(default_factory=dict)

    @property
    def clock_GHz(self) -> float:
        """The highest clock any source reports (``ASSUMED_CLOCK_GHZ`` where none does)."""
        return max(self.clocks_GHz.values(), default=ASSUMED_CLOCK_GHZ)

    @property
    def clock_source(self) -> str:
        if not self.clocks_GHz:
            return "assumed"
        return max(self.clocks_GHz, key=lambda k: self.clocks_GHz[k])

    @property
    def base_clock_GHz(self) -> float:
        """The sustained clock: cpufreq's base frequency, else the model name's, else the highest reported."""
        for source in ("cpufreq base", "model name"):
            if source in self.clocks_GHz:
                return min(self.clocks_GHz[source], self.clock_GHz)
        return self.clock_GHz

    @property
    def isa(self) -> IsaPeak:
        return isa_peak(self.flags, self.machine)

    @property
    def flops_per_cycle_per_core(self) -> dict[str, float]:
        return dict(self.isa.flops_per_cycle)


def _field(cpuinfo: str, name: str) -> str | None:
    match = re.search(rf"^{name}\s*:\s*(.+)$", cpuinfo, re.M)
    return match.group(1).strip() if match else None


def _khz_to_GHz(text: str | None) -> float | None:
    text = (text or "").strip()
    return float(text) / 1e6 if text.isdigit() and int(text) > 0 else None


def parse_host(cpuinfo: str, meminfo: str, cpufreq: dict[str, str], cores: int, machine: str = "x86_64") -> HostFacts:
    """HostFacts from the text of /proc/cpuinfo and /proc/meminfo and the cpufreq files (name -> text, e.g.
    ``{"cpuinfo_max_freq": "3500000"}`` in kHz); ``cores`` is how many cores this process may use."""
    model = _field(cpuinfo, "model name") or _field(cpuinfo, "Model") or machine
    vendor = _field(cpuinfo, "vendor_id") or _field(cpuinfo, "CPU implementer") or "unknown"
    flags = frozenset((_field(cpuinfo, "flags") or _field(cpuinfo, "Features") or "").split())
    threads = len(re.findall(r"^processor\s*:", cpuinfo, re.M))
    sockets = len(set(re.findall(r"^physical id\s*:\s*(\S+)", cpuinfo, re.M)))
    clocks: dict[str, float] = {}
    for source, name in (("cpufreq max", "cpuinfo_max_freq"), ("cpufreq base", "base_frequency")):
        if (ghz := _khz_to_GHz(cpufreq.get(name))) is not None:
            clocks[source] = ghz
    if named := re.search(r"@\s*([\d.]+)\s*GHz", model):
        clocks["model name"] = float(named.group(1))
    mhz = [float(v) for v in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", cpuinfo, re.M)]
    if mhz and max(mhz) > 0:
        clocks["cpuinfo MHz"] = max(mhz) / 1e3
    mem = re.search(r"^MemTotal:\s+(\d+)\s*kB", meminfo, re.M)
    return HostFacts(
        model=model,
        vendor=vendor,
        cores=max(1, cores),
        threads=threads or max(1, cores),
        sockets=max(1, sockets),
        memory_B=float(mem.group(1)) * 1024.0 if mem else _sysconf_memory_B(),
        flags=flags,
        machine=machine,
        clocks_GHz=clocks,
    )


def _read(path: Path | str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _sysconf_memory_B() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return ASSUMED_MEMORY_B


def usable_cores() -> int:
    """Cores this process may use: its CPU affinity (a taskset, a container's cpuset), and at most its cgroup's CPU
    quota rounded up (a container or Kubernetes pod limited to 2 CPUs on a 64-core node sees all 64 in its affinity
    but gets two cores' time: 64 worker processes or a 64-thread calibration there would thrash or run out of
    memory). ``dask.system.cpu_count`` reads both (cgroup v1 and v2)."""
    # imported here: dask's package import costs ~0.2 s, and a simulation of a preset cluster never asks
    from dask.system import cpu_count

    return max(1, cpu_count())


@lru_cache(maxsize=1)
def read_host() -> HostFacts:
    """This machine's facts, read once per process."""
    cpufreq = {name: _read(CPUFREQ / name) for name in ("cpuinfo_max_freq", "base_frequency")}
    return parse_host(_read("/proc/cpuinfo"), _read("/proc/meminfo"), cpufreq, usable_cores(), platform.machine())


def peak_clock(facts: HostFacts, probe_GFLOPs_per_core: float | None = None) -> tuple[float, str]:
    """(GHz, source) of the clock a peak uses: the highest reported clock, or the clock a measured fp32
    FMA-throughput probe implies at the ISA's flops per cycle, whichever is higher.

    A kernel cannot beat cores x clock x flops/cycle, so a probe that does shows the reported clock is below
    what the core really runs at (a VM's nominal clock, a boost the OS does not report).
    """
    clock, source = facts.clock_GHz, facts.clock_source
    if probe_GFLOPs_per_core is not None and probe_GFLOPs_per_core > 0:
        implied = probe_GFLOPs_per_core / facts.isa.fp32
        if implied > clock:
            return implied, "fma probe"
    return clock, source


@lru_cache(maxsize=1)
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
