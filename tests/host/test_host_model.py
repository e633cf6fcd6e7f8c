"""The one host model (dlrmsim.host): parsing what the OS reports, and a peak that bounds what cores really do.

Every case feeds parse_host text of /proc files, so the assertions hold on whatever machine runs them.
"""

from __future__ import annotations

import pytest

from dlrmsim.calibration.fit import fit_gemm, peak_bound_host
from dlrmsim.calibration.host import detect_host, peak_gflops
from dlrmsim.calibration.schema import Measurement
from dlrmsim.host import ASSUMED_CLOCK_GHZ, isa_peak, parse_host, peak_clock, read_host

# A 2-vCPU AMD EPYC guest as its /proc/cpuinfo reads: the nominal 2445 MHz, no cpufreq, AVX2 + FMA.
EPYC_GUEST = "".join(
    f"processor\t: {i}\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\ncpu MHz\t\t: 2445.404\n"
    "physical id\t: 0\nflags\t\t: fpu sse sse2 avx fma avx2 pni\n\n"
    for i in range(2)
)
XEON = (
    "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8180 CPU @ 2.50GHz\n"
    "cpu MHz\t\t: 1000.000\nphysical id\t: 0\nflags\t\t: avx avx2 fma avx512f avx512_bf16\n\n"
)
MEMINFO = "MemTotal:       24683656 kB\nMemFree:  1 kB\n"


def test_epyc_guest_is_parsed_and_its_clock_named_by_source() -> None:
    facts = parse_host(EPYC_GUEST, MEMINFO, {}, cores=2)
    assert (facts.model, facts.vendor, facts.threads, facts.sockets, facts.cores) == ("AMD EPYC", "AuthenticAMD", 2, 1, 2)
    assert facts.memory_B == 24683656 * 1024
    assert facts.clock_GHz == pytest.approx(2.445404) and facts.clock_source == "cpuinfo MHz"
    assert facts.isa.isa == "avx2+fma" and facts.flops_per_cycle_per_core == {"fp32": 32.0}


def test_cpufreq_max_beats_a_lower_cpuinfo_mhz_and_base_is_the_sustained_clock() -> None:
    # Because cpu MHz is the current (possibly idle) clock, the highest source wins: cpufreq's max of 3.8 GHz.
    facts = parse_host(XEON, MEMINFO, {"cpuinfo_max_freq": "3800000", "base_frequency": "2500000\n"}, cores=1)
    assert facts.clock_GHz == pytest.approx(3.8) and facts.clock_source == "cpufreq max"
    assert facts.base_clock_GHz == pytest.approx(2.5)
    assert facts.flops_per_cycle_per_core == {"fp32": 64.0, "bf16": 128.0}


def test_no_source_falls_back_to_one_assumed_clock() -> None:
    facts = parse_host("", "", {}, cores=4, machine="aarch64")
    assert facts.clock_GHz == ASSUMED_CLOCK_GHZ and facts.clock_source == "assumed"
    assert facts.isa.isa == "asimd" and facts.isa.fp32 == 16.0
    assert facts.memory_B > 0 and facts.threads == 4


def test_isa_peak_per_flag_set() -> None:
    # Two pipes of the widest vector, FMA counting 2 flops a lane; SSE and AVX without FMA add + multiply.
    assert isa_peak(frozenset({"avx512f", "avx2", "fma"})).fp32 == 64.0
    assert isa_peak(frozenset({"avx2", "fma", "avx"})).fp32 == 32.0
    assert isa_peak(frozenset({"avx"})).fp32 == 16.0
    assert isa_peak(frozenset({"sse2"})).fp32 == 8.0
    assert isa_peak(frozenset({"asimd"}), "aarch64").fp32 == 16.0


@pytest.mark.parametrize("measured_GFLOPs", [60.0, 87.0, 140.0])
def test_peak_bounds_a_gemm_measured_above_the_reported_clock(measured_GFLOPs: float) -> None:
    """The EPYC guest reports 2.445 GHz (78.25 GFLOP/s a core at 32 flop/cycle) but a 1-core GEMM ran at 87.
    Because a probe faster than the reported peak implies a faster clock, the probe raises the peak; and because a
    later GEMM may still beat the probe, the fit's bound raises it again. Either way the peak bounds the GEMM."""
    facts = parse_host(EPYC_GUEST, MEMINFO, {}, cores=2)
    clock, source = peak_clock(facts, probe_GFLOPs_per_core=0.9 * measured_GFLOPs)
    assert clock >= facts.clock_GHz
    assert source == ("fma probe" if 0.9 * measured_GFLOPs > 78.25 else "cpuinfo MHz")
    host = detect_host("numpy", quick=True, libraries={}, date="", probe=False).model_copy(
        update={"cores": 2, "clock_GHz": clock, "flops_per_cycle_fp32": 32.0, "peak_fp32_GFLOPs": 64.0 * clock}
    )
    n = 1024
    gemm = Measurement(
        benchmark="gemm",
        name="gemm 1024 c1",
        cores=1,
        time_s=2.0 * n**3 / (measured_GFLOPs * 1e9),
        repeats=3,
        flops=2.0 * n**3,
        params={"m": n, "n": n, "k": n},
    )
    bounded = peak_bound_host([gemm], host)
    assert gemm.flops / gemm.time_s <= peak_gflops(bounded, 1) * 1e9 * (1 + 1e-9)
    (table,) = fit_gemm([gemm], bounded).tables
    assert all(0 < e <= 1 for _, e in table.points)


def test_this_host_reads_and_its_calibration_peak_bounds_its_probe() -> None:
    # Because detect_host runs the FMA probe, the recorded peak of one core is at least what the probe measured.
    from dlrmsim.calibration.host import probe_fp32_GFLOPs_per_core

    facts = read_host()
    assert facts.cores >= 1 and facts.memory_B > 0 and facts.clock_GHz > 0
    host = detect_host("numpy", quick=True, libraries={}, date="")
    assert host.clock_GHz >= facts.clock_GHz and host.reported_clock_GHz == pytest.approx(facts.clock_GHz, rel=1e-3)
    assert peak_gflops(host, 1) > 0.5 * probe_fp32_GFLOPs_per_core(0.05)  # same probe, noise only slows it
