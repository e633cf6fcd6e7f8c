"""bf16 on sockets without bf16 units, and the line saying which rates a host run uses (issue 28)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dlrmsim.engine import costs
from dlrmsim.topologies import load_topology
from dlrmsim.topologies.builder import precision_note, rates_note
from tests.conftest import assert_one_line_error


def test_bf16_matrix_math_runs_at_the_fp32_rate_without_bf16_units() -> None:
    clx, cpx = load_topology("clx-64s-opa").compute(0), load_topology("cpx-64s").compute(0)
    flops = 2.147e9  # a GEMM at the top of the efficiency table
    # Cascade Lake has no AVX512_BF16: a bf16 GEMM multiplies widened operands on the fp32 FMA units.
    assert costs.task_flop_rate(clx, flops, clx.cores, "bf16") == costs.task_flop_rate(clx, flops, clx.cores, "fp32")
    # Cooper Lake's VDPBF16PS does two bf16 products per fp32 lane: twice the fp32 rate.
    assert costs.task_flop_rate(cpx, flops, cpx.cores, "bf16") == pytest.approx(
        2 * costs.task_flop_rate(cpx, flops, cpx.cores, "fp32")
    )


def test_precision_note_names_the_sockets_without_bf16_units() -> None:
    note = precision_note("clx-64s-opa", None, "bf16")
    assert note is not None and "Intel Xeon Platinum 8280 (xeon-8280, xeon-8280-192g) has no bf16 units" in note
    assert "\n" not in note
    # Because a note must only appear when it is true: Cooper Lake has the units, and fp32 runs ask nothing of them.
    assert precision_note("cpx-64s", None, "bf16") is None
    assert precision_note("clx-64s-opa", None, "fp32") is None


@pytest.mark.parametrize(
    ("topology", "value", "needle"),
    [("clx-64s-opa", "native", "needs a bf16 entry"), ("cpx-64s", "fp32", "contradicts the bf16 entry")],
)
def test_bf16_arithmetic_must_agree_with_the_flops_table(cli, topology: str, value: str, needle: str) -> None:
    cpu = "xeon-8280" if topology == "clx-64s-opa" else "xeon-8376h"
    assert_one_line_error(cli("topology", "show", topology, "--set", f"compute.{cpu}.bf16_arithmetic={value}"), needle)


def test_simulate_bf16_on_cascade_lake_prints_the_note(cli) -> None:
    result = cli("simulate", "-t", "clx-64s-opa", "-w", "small", "-r", "2", "--precision", "bf16")
    assert result.code == 0, result.err
    assert "has no bf16 units" in result.err and "matrix math runs at the fp32 rate" in result.err


def test_rates_note_for_the_host() -> None:
    # The host preset's rates are placeholders (calibrated: false): a run must say so and name the ISA peak.
    note = rates_note("host", None)
    assert note is not None and note.startswith("rates: uncalibrated defaults for host-cpu")
    assert "TFLOPS from the ISA" in note and "placeholders" in note and "\n" not in note
    measured = SimpleNamespace(name="box", date="2026-11-24T10:00:00", quick=True, backend="numpy")
    cal = rates_note("host", None, "calibration/host-box.yaml", measured)
    assert cal == (
        "rates: calibrated, from calibration/host-box.yaml (measured on box, 2026-11-24T10:00:00, quick plan, numpy): "
        "compute, memory and shared-memory link rates are its fitted ones"
    )
    # A preset whose rates all come from its file (datasheets, papers) needs no such line.
    assert rates_note("clx-64s-opa", None) is None


def test_uncalibrated_host_run_prints_the_rates_line(cli) -> None:
    result = cli("simulate", "-t", "host", "-w", "small", "-r", "1", "--backend", "mpi")
    assert result.code == 0, result.err
    assert sum(line.startswith("rates: uncalibrated defaults") for line in result.err.splitlines()) == 1, result.err
