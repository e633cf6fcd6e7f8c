"""A GEMM among other ops pays for its size up to its cores' L2 (costs.sequence_time_s, benchmarks/bench_gemm_sequence.py):
the closed form, and an iteration's GEMMs each charged it once."""

from __future__ import annotations

import dataclasses

import pytest

from dlrmsim.engine.costs import sequence_bytes, sequence_time_s, task_bandwidth_cap
from dlrmsim.engine.frames import records_frame
from dlrmsim.topologies import load_topology
from dlrmsim.training.simulate import TrainingConfig, load_inputs, run_iteration
from tests.engine.handmade import simple_spec

L2 = 512 * 1024.0


def test_the_term_grows_with_the_bytes_up_to_the_cores_l2_and_then_holds() -> None:
    spec = dataclasses.replace(simple_spec(cores=2), l2_bytes=L2, gemm_sequence_l2_factor=0.8)
    # because a GEMM refills what of its working set its cores' L2 caches hold, a GEMM smaller than one core's L2
    # pays for all of its bytes, at its traffic time times the factor ...
    small = 64 * 1024.0
    assert sequence_time_s(spec, small, 1) == pytest.approx(0.8 * small / task_bandwidth_cap(spec, small, 1))
    # ... and one larger than its cores' L2 for only that much: two cores hold twice one core's
    assert sequence_bytes(8e6, 1, L2) == L2 and sequence_bytes(8e6, 2, L2) == 2 * L2
    big = 8e6
    assert sequence_time_s(spec, big, 2) == pytest.approx(0.8 * 2 * L2 / task_bandwidth_cap(spec, big, 2))
    # because the term is a factor of the time, doubling a GEMM past the knee changes nothing but the bandwidth cap
    assert sequence_time_s(spec, 2 * big, 2) == pytest.approx(0.8 * 2 * L2 / task_bandwidth_cap(spec, 2 * big, 2))
    # not calibrated (built-in presets): nothing
    assert sequence_time_s(simple_spec(cores=2), small, 1) == 0.0


def _iteration(factor: float) -> tuple[float, object, object]:
    cfg = TrainingConfig(topology="host", workload="small", ranks=1, scaling="strong", backend="shm", blocking=True)
    topo = load_topology("host", {"compute.host-cpu.cores": 2}, ranks=1).with_specs(
        compute=lambda s: dataclasses.replace(s, gemm_sequence_l2_factor=factor)
    )
    inputs = load_inputs(cfg, topology=topo)
    res = run_iteration(inputs, cfg)
    df = records_frame(res.records)
    return res.iteration_s, df[df["kind"] == "gemm"], topo.compute(0)


def test_every_gemm_of_an_iteration_pays_the_term_once() -> None:
    base, gemms, _ = _iteration(0.0)
    timed, gemms_timed, spec = _iteration(0.5)
    # because the term is a fixed time of each GEMM task, on one rank with nothing to overlap each GEMM lasts its
    # own term longer, and the iteration the sum of them
    extra = (gemms_timed["end"] - gemms_timed["start"]).to_numpy() - (gemms["end"] - gemms["start"]).to_numpy()
    assert len(extra) > 0 and (extra > 0).all()
    assert timed - base == pytest.approx(extra.sum(), rel=1e-9)
    # and no GEMM pays more than the term at its cores' whole L2
    cap = 0.5 * spec.cores * spec.l2_bytes / task_bandwidth_cap(spec, 1e12, spec.cores)
    assert extra.max() <= cap * (1 + 1e-9)
