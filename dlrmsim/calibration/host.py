"""The calibration's record of its host (from :mod:`dlrmsim.host`, with a peak no kernel beats); compare hosts.

``HostInfo`` lives here rather than in :mod:`dlrmsim.calibration.schema` (which re-exports it), so that the
schema can warn about a calibration from another host without an import cycle."""

from __future__ import annotations

import hashlib
import math
import socket
import time
from typing import Annotated, Literal

import numpy as np
from pydantic import Field
from threadpoolctl import threadpool_limits

from dlrmsim.calibration.ops.base import FLUSH_LLC_MULTIPLE
from dlrmsim.config import StrictModel
from dlrmsim.host import l2_cache_bytes, last_level_cache_bytes, page_bytes, peak_clock, read_host
from dlrmsim.output import err_console

Positive = Annotated[float, Field(gt=0)]

# Bytes one core can move through its L1 per cycle: two 64-byte loads and one 64-byte store (the load/store
# ports of Skylake-SP, Ice Lake and Zen 4 cores). No memory stream can beat this, so cores x clock x 192 B
# is a generous but physical upper bound on any measured bandwidth (DRAM is far below it).
L1_BYTES_PER_CYCLE = 192.0


class HostInfo(StrictModel):
    """The machine a calibration was measured on, read from /proc and the libraries at run time."""

    name: str = Field(description="hostname")
    cpu_model: str
    vendor: str
    cores: Annotated[int, Field(gt=0)] = Field(description="cores the benchmarks may use (CPU affinity)")
    threads: Annotated[int, Field(gt=0)] = Field(description="hardware threads online")
    sockets: Annotated[int, Field(gt=0)] = 1
    memory_GB: Positive
    clock_GHz: Positive = Field(
        description="the clock peaks use: the highest reported clock, raised where the FMA probe or a "
        "measured kernel shows the core runs faster (a VM reports its nominal clock)"
    )
    reported_clock_GHz: Positive | None = Field(None, description="highest clock /proc or cpufreq reports")
    clock_source: str = Field(
        "reported", description="what set clock_GHz: a reported source, 'fma probe', or 'measured: <kernel>'"
    )
    flops_per_cycle_fp32: Positive = Field(description="per core, from the ISA flags (see dlrmsim.host.isa_peak)")
    isa: str = Field(description="widest vector ISA seen in the flags")
    peak_fp32_GFLOPs: Positive = Field(description="cores x clock x flops/cycle: the physical fp32 peak")
    memory_bound_GBps: Positive = Field(description="generous physical bound on any memory stream (see host.py)")
    page_bytes: Annotated[int, Field(gt=0)] = Field(4096, description="virtual memory page size (bytes)")
    l2_bytes: Annotated[int, Field(gt=0)] = Field(
        1 << 20, description="a core's level-2 cache (bytes): where page-table walks hit or miss"
    )
    llc_bytes: Annotated[int, Field(gt=0)] = Field(32 << 20, description="the last-level cache all cores share (bytes)")
    effective_llc_bytes: Annotated[int, Field(gt=0)] | None = Field(
        None,
        description="the capacity the cost model's cache miss share uses, fitted to the cache-reuse benchmark "
        "(fit.fit_effective_llc; a shared or virtualised cache keeps less than it reports); None: llc_bytes",
    )
    flush_bytes: Annotated[int, Field(gt=0)] | None = Field(
        None,
        description="bytes each benchmark's cache flush read and wrote (Ops.flush_bytes: twice llc_bytes, less in a "
        "tiny run); None: twice llc_bytes, as every file before this field flushed",
    )
    libraries: dict[str, str]
    backend: Literal["numpy", "torch"]
    date: str = Field(description="ISO 8601 time the calibration finished")
    load_average: Annotated[float, Field(ge=0)] = Field(
        0.0, description="highest 1-minute load average seen at the start and end of the run (above cores: shared, noisy)"
    )
    quick: bool

    @property
    def flushed_bytes(self) -> int:
        """The traffic a benchmark's flush put through the caches before its timed call (bytes)."""
        return self.flush_bytes or FLUSH_LLC_MULTIPLE * self.llc_bytes

    @property
    def model_llc_bytes(self) -> int:
        """The last-level cache capacity for the model's miss shares: measured where the calibration measured it,
        else as reported. (Flushes and swept buffers are sized from ``llc_bytes``: those are bytes moved.)"""
        return self.effective_llc_bytes or self.llc_bytes


def probe_fp32_GFLOPs_per_core(seconds: float = 0.15) -> float:
    """Best fp32 GEMM rate one core reaches (GFLOP/s): a 512^3 matrix product (its operands, 3 MiB, stay in
    the caches, so it runs at the core's FMA throughput as far as BLAS gets there), repeated for about
    ``seconds``, keeping the fastest call: other jobs only slow a call down, so the fastest is the truest.

    Used only to raise a reported clock that the core visibly beats (:func:`dlrmsim.host.peak_clock`).
    """
    n = 512
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    best = math.inf
    with threadpool_limits(limits=1):
        np.matmul(a, b, out=out)  # warm: BLAS threads, code and operands
        deadline = time.perf_counter() + seconds
        calls = 0
        while calls < 3 or time.perf_counter() < deadline:
            t0 = time.perf_counter()
            np.matmul(a, b, out=out)
            best = min(best, time.perf_counter() - t0)
            calls += 1
    return 2.0 * n**3 / best / 1e9


def detect_host(backend: str, quick: bool, libraries: dict[str, str], date: str, probe: bool = True) -> HostInfo:
    """This machine's record for a calibration file: the OS's facts (:func:`dlrmsim.host.read_host`) and a
    peak clock no kernel here can beat (the highest reported clock or what the FMA probe implies)."""
    facts = read_host()
    isa = facts.isa
    clock, source = peak_clock(facts, probe_fp32_GFLOPs_per_core() if probe else None)
    return HostInfo(
        name=socket.gethostname(),
        cpu_model=facts.model,
        vendor=facts.vendor,
        cores=facts.cores,
        threads=facts.threads,
        sockets=facts.sockets,
        memory_GB=round(facts.memory_B / 1e9, 2),
        clock_GHz=clock,  # unrounded: the peak bound must not fall below a clock this host reports
        reported_clock_GHz=round(facts.clock_GHz, 4),
        clock_source=source,
        flops_per_cycle_fp32=isa.fp32,
        isa=isa.isa,
        peak_fp32_GFLOPs=round(facts.cores * clock * isa.fp32, 3),
        memory_bound_GBps=round(facts.cores * clock * L1_BYTES_PER_CYCLE, 3),
        page_bytes=page_bytes(),
        l2_bytes=l2_cache_bytes(),
        llc_bytes=last_level_cache_bytes(),
        libraries=libraries,
        backend=backend,  # type: ignore[arg-type]
        date=date,
        quick=quick,
    )


def raise_peak_to(host: HostInfo, gflops_per_core: float, why: str) -> HostInfo:
    """``host`` with its clock raised so that one core's peak is at least ``gflops_per_core``; warns on stderr.

    A measured rate above cores x clock x flops/cycle means the clock is wrong (the core boosts beyond what the
    OS reports), never that a kernel beat physics: the peak moves, and nothing is clipped silently.
    """
    clock = gflops_per_core / host.flops_per_cycle_fp32
    if clock <= host.clock_GHz:
        return host
    err_console.print(
        f"[bold yellow]warning:[/] {why} ran at {gflops_per_core:.1f} GFLOP/s per core, above the peak of "
        f"{host.clock_GHz:g} GHz x {host.flops_per_cycle_fp32:g} flop/cycle ({host.clock_source}); "
        f"the peak clock is raised to {clock:.4g} GHz (fix: none needed; the host reports a clock below its boost)",
        highlight=False,
        soft_wrap=True,
    )
    clock = math.nextafter(clock, math.inf)  # so the measurement's efficiency is 1 at most after rounding
    return host.model_copy(
        update={
            "clock_GHz": clock,
            "clock_source": f"measured: {why}",
            "peak_fp32_GFLOPs": host.cores * clock * host.flops_per_cycle_fp32,
            "memory_bound_GBps": max(host.memory_bound_GBps, host.cores * clock * L1_BYTES_PER_CYCLE),
        }
    )


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
    # The reported clocks: a peak raised by a probe or a measurement moves with the host's mood, not its identity.
    ca, cb = a.reported_clock_GHz or a.clock_GHz, b.reported_clock_GHz or b.clock_GHz
    if abs(ca - cb) > 0.05 * max(ca, cb):
        out.append(f"clock_GHz {ca:g} vs {cb:g}")
    return out


def current_host_stub() -> HostInfo:
    """This machine's description, without library versions, date or probe (for comparisons)."""
    return detect_host("numpy", quick=True, libraries={}, date="", probe=False)


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
    parts = [
        "run-v9",
        host.cpu_model,
        host.vendor,
        str(host.cores),
        host.isa,
        f"{host.memory_GB:.0f}",
        host.backend,
        str(host.quick),
    ]
    parts += [f"{k}={v}" for k, v in sorted(host.libraries.items())]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]
