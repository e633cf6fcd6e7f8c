"""The reference PyTorch DLRM (facebookresearch/dlrm, ``dlrm_s_pytorch.py``) as a validation target.

The project does not vendor that script: the user passes the path of a checkout of
https://github.com/facebookresearch/dlrm (the script imports its sibling modules) and the case runs it as a
subprocess with flags derived from the case's workload, on random data, with ``--print-time --print-freq 1``.
Its per-iteration "ms/it" lines are the measurement (the reference times forward, loss, backward and the
optimizer step, after the data loader has produced the batch). Consecutive iterations are grouped into
samples of at least ``min_sample_s`` as for every target, warm-up iterations dropped.

What the reference does per step, which the simulator has to model: ``nn.EmbeddingBag(mode="sum",
sparse=True)`` tables whose sparse gradients ``torch.optim.SGD`` applies in a separate step, and dense MLPs.
Multi-rank runs go through ``torch.distributed.run`` with the gloo backend (one process per rank).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from dlrmsim.calibration.targets.measurement import StepMeasurement, per_step_samples
from dlrmsim.errors import DlrmsimError
from dlrmsim.workloads.model import interaction_width
from dlrmsim.workloads.schema import Workload

SCRIPT = "dlrm_s_pytorch.py"
_MS_PER_IT = re.compile(r"Finished training it (\d+)/(\d+) of epoch \d+, ([0-9.]+) ms/it")


def find_script(path: Path) -> Path:
    """``dlrm_s_pytorch.py`` inside ``path`` (a checkout) or ``path`` itself; a one-line error otherwise."""
    path = path.expanduser().resolve()  # the script runs from inside its checkout: a relative path would not
    script = path / SCRIPT if path.is_dir() else path
    if script.name != SCRIPT or not script.is_file():
        raise DlrmsimError(
            f"no {SCRIPT} at {path}",
            field="--reference",
            fix="clone https://github.com/facebookresearch/dlrm into a temporary directory and pass its path",
        )
    return script


def reference_args(w: Workload, batch: int, iterations: int) -> list[str]:
    """Command-line flags of ``dlrm_s_pytorch.py`` that build and train workload ``w`` on random data.

    The reference's ``--arch-mlp-top`` includes the interaction output width as its first entry; its fixed
    ``--num-indices-per-lookup`` is dlrmsim's lookups per sample. Only uniform indices exist in its random
    generator, so a Zipf workload is refused.
    """
    if w.index_distribution.kind != "uniform":
        raise DlrmsimError(
            f"workload {w.name}: the reference DLRM's random data has uniform indices only",
            field="index_distribution",
            fix="validate zipf cases against the project runner or torchrec",
        )
    if w.precision != "fp32":
        raise DlrmsimError(f"workload {w.name}: the reference DLRM trains fp32 only", field="precision")

    def dashed(xs: list[int]) -> str:
        return "-".join(str(x) for x in xs)

    return [
        "--arch-sparse-feature-size",
        str(w.embedding_dim),
        "--arch-embedding-size",
        dashed(w.table_rows),
        "--arch-mlp-bot",
        dashed(w.bottom_mlp),
        "--arch-mlp-top",
        dashed([interaction_width(w), *w.top_mlp]),
        "--arch-interaction-op",
        w.interaction,
        "--data-generation",
        "random",
        "--num-indices-per-lookup",
        str(w.lookups_per_sample),
        "--num-indices-per-lookup-fixed",
        "True",
        "--mini-batch-size",
        str(batch),
        "--num-batches",
        str(iterations),
        "--loss-function",
        "bce",
        "--learning-rate",
        "0.01",
        "--nepochs",
        "1",
        "--print-time",
        "--print-freq",
        "1",
    ]


def parse_step_times(output: str) -> list[float]:
    """Seconds per iteration from the reference's "Finished training it i/n ..., X ms/it" lines, in order."""
    return [float(m.group(3)) / 1e3 for m in _MS_PER_IT.finditer(output)]


def measure_reference(
    path: Path,
    w: Workload,
    batch: int,
    ranks: int = 1,
    threads: int = 1,
    iterations: int = 30,
    warmup: int = 5,
    min_sample_s: float = 0.05,
    timeout_s: float = 900.0,
) -> StepMeasurement:
    """Run the reference DLRM on this host and return its per-step samples (global ``batch`` over ``ranks``).

    ``threads`` per process, through OMP_NUM_THREADS (the reference sets no thread count itself).
    """
    script = find_script(path)
    args = reference_args(w, batch, iterations + warmup)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    if ranks == 1:
        cmd = [sys.executable, str(script), *args]
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={ranks}",
            str(script),
            *args,
            "--dist-backend",
            "gloo",
        ]
    try:
        proc = subprocess.run(cmd, cwd=script.parent, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise DlrmsimError(f"the reference DLRM ran past {timeout_s:.0f} s", field="--reference") from None
    times = parse_step_times(proc.stdout)
    if proc.returncode != 0 or len(times) <= warmup:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise DlrmsimError(
            f"the reference DLRM failed (exit {proc.returncode}): {last}",
            field="--reference",
            fix="run the printed flags by hand in the checkout; it needs torch, scikit-learn and tensorboard",
        )
    # With several ranks every process prints; rank 0's lines come first and carry the same step times.
    samples, k = per_step_samples(times[warmup : warmup + iterations], min_sample_s)
    if not samples:
        raise DlrmsimError("the reference DLRM's iterations are too few for one sample", field="--iterations")
    return StepMeasurement("reference", threads, batch, tuple(samples), k)
