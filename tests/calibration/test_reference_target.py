"""The reference-DLRM target runs facebookresearch/dlrm's script with the case's model and reads its timing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dlrmsim.calibration.targets.measurement import per_step_samples
from dlrmsim.calibration.targets.reference import find_script, measure_reference, parse_step_times, reference_args
from dlrmsim.errors import DlrmsimError
from dlrmsim.workloads.model import interaction_width
from dlrmsim.workloads.schema import Workload

W = Workload.model_validate(
    {
        "name": "ref-tiny",
        "tables": {"rows": [1000, 2000, 3000]},
        "embedding_dim": 16,
        "lookups_per_sample": 4,
        "bottom_mlp": [13, 32, 16],
        "top_mlp": [32, 1],
        "minibatch": {"strong_global": 64, "weak_local": 64},
    }
)


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_flags_build_the_simulated_model() -> None:
    args = reference_args(W, 64, 20)
    # Because the reference's top MLP starts at the interaction output, its first width is (S+1)S/2 + E.
    assert flag(args, "--arch-mlp-top") == f"{interaction_width(W)}-32-1" == "22-32-1"
    # Because each table keeps its own row count and every sample looks up exactly P rows per table.
    assert flag(args, "--arch-embedding-size") == "1000-2000-3000"
    assert flag(args, "--num-indices-per-lookup") == "4" and flag(args, "--num-indices-per-lookup-fixed") == "True"
    assert flag(args, "--mini-batch-size") == "64" and flag(args, "--num-batches") == "20"


def test_zipf_is_refused_in_one_line() -> None:
    # validated from a dict: model_copy(update=...) would skip validation and warn when dumped
    zipf = Workload.model_validate({**W.model_dump(), "index_distribution": {"kind": "zipf", "exponent": 1.05}})
    # Because the reference's random data generator draws uniform indices only, a zipf case cannot be matched.
    with pytest.raises(DlrmsimError, match="uniform"):
        reference_args(zipf, 64, 20)


def test_missing_checkout_is_one_line(tmp_path: Path) -> None:
    # Because the project does not vendor the script, a wrong path must say where to get it.
    with pytest.raises(DlrmsimError, match="facebookresearch/dlrm"):
        find_script(tmp_path)


def test_parse_and_group_step_times() -> None:
    out = "\n".join(
        f"Finished training it {i}/8 of epoch 0, {t:.2f} ms/it, loss 0.69"
        for i, t in enumerate([20, 10, 10, 12, 10, 10, 11, 10], 1)
    )
    times = parse_step_times(out)
    assert times == pytest.approx([0.020, 0.010, 0.010, 0.012, 0.010, 0.010, 0.011, 0.010])
    samples, k = per_step_samples(times[1:], 0.02)
    # Because the median step is 10 ms, a 20 ms sample needs 2 steps; 7 steps make 3 whole samples.
    assert k == 2 and samples == pytest.approx([0.010, 0.011, 0.0105])


@pytest.mark.skipif(
    not os.environ.get("DLRMSIM_REFERENCE_DLRM"), reason="set DLRMSIM_REFERENCE_DLRM to a facebookresearch/dlrm checkout"
)
def test_runs_the_reference_script() -> None:
    m = measure_reference(Path(os.environ["DLRMSIM_REFERENCE_DLRM"]), W, 64, threads=1, iterations=6, warmup=2, min_sample_s=0.0)
    # Because every timed iteration becomes a sample when no minimum is set, all 6 come back, each positive.
    assert len(m.samples_s) == 6 and min(m.samples_s) > 0
