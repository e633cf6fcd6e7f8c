"""benchmarks/bench_torchrec_other.py: the pieces of TorchRec's step outside its DLRM's parts."""

from __future__ import annotations

import pytest


def test_each_piece_outside_the_parts_takes_time_and_all_fit_in_a_step() -> None:
    pytest.importorskip("torchrec")
    from benchmarks.bench_torchrec_other import other_pieces
    from dlrmsim.calibration.targets.torchrec import measure_step
    from dlrmsim.calibration.validate import ValidationCase, load_cases

    # the base case's model on small tables, so that the test builds it in milliseconds
    base = next(c.workload for c in load_cases() if c.name == "base")
    case = ValidationCase("small", base.model_copy(update={"tables": base.tables.model_copy(update={"rows": 1000})}), 256, 1, 1)
    pieces = other_pieces(case, steps=5)
    step = measure_step(case.workload, case.batch, case.threads, samples=3, min_sample_s=0.0)
    # Because each piece is a stretch of one step that runs framework code (zero_grad, DLRM.forward's own lines, the
    # loss module, autograd's start), each took time, and together they are a part of the step, not more than it
    assert set(pieces) == {"zero_grad", "forward_outside_parts", "loss_forward", "loss_backward_and_autograd_start"}
    assert all(v > 0 for v in pieces.values()), pieces
    assert sum(pieces.values()) < step.median_s, (pieces, step.median_s)
