"""Implementation profiles: what a DLRM implementation does differently from the simulator's default step.

Two implementations of the same DLRM step can run different kernels with different parallelism: fbgemm's
table-batched embedding (TorchRec) updates rows inside its backward and runs on one thread whatever the
framework's thread count, PyTorch's EmbeddingBag writes sparse gradients for a separate SGD step and runs its
ops on every thread. A profile (presets/implementations/*.yaml) states that per simulator task kind, each
statement with the source it comes from (the implementation's code, or a micro-benchmark of the kernel alone);
the kernel rates themselves stay the calibration's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PositiveInt, field_validator

from dlrmsim import config
from dlrmsim.config import StrictModel

PRESET_DIR = Path(__file__).resolve().parent / "presets" / "implementations"

# Task kinds of the training task graph (taskgraph.Task.kind) a profile may pin to a thread count.
TASK_KINDS = frozenset(
    {
        "gemm",
        "elementwise",
        "embedding",
        "embedding_bwd",
        "update",
        "interaction",
        "interaction_bwd",
        "optimizer",
        "copy",
        "sharded",
        "autograd",
        "autograd_call",
    }
)


class OpThreads(StrictModel):
    """The threads one task kind runs on in this implementation, and where that statement comes from."""

    kind: str = Field(description="simulator task kind (taskgraph.Task.kind)")
    threads: PositiveInt = Field(description="threads the kind's kernels run on, whatever the framework's thread count")
    source: str = Field(min_length=1, description="where this comes from: the kernel's source file, or a measurement")

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        if v not in TASK_KINDS:
            raise ValueError(f"unknown task kind '{v}'; use one of: {', '.join(sorted(TASK_KINDS))}")
        return v


class InputDist(StrictModel):
    """How an implementation sends each rank's local batch of indices to the ranks that own the tables, before the
    lookups: one alltoall of the per-destination sizes (so receivers can allocate), then one alltoall for the
    lengths and one for the index values, posted together."""

    split_bytes_per_table: PositiveInt = Field(
        8, description="bytes of the sizes exchange per table a destination owns (one int64 count each)"
    )
    length_bytes: PositiveInt = Field(4, description="bytes of one length (lookups of one sample in one table)")
    source: str = Field(min_length=1, description="where this comes from: the implementation's code, or a trace")


class ImplementationProfile(StrictModel):
    """A DLRM implementation as the simulator models its step (see presets/implementations/*.yaml)."""

    name: str
    description: str = ""
    fuse_backward_update: bool = Field(
        False, description="the sparse update runs inside the embedding backward (no gradient rows written and read back)"
    )
    op_threads: list[OpThreads] = Field(default_factory=list)
    input_dist: InputDist | None = Field(
        None,
        description="with several ranks, the indices of each rank's local batch travel to the tables' owners by "
        "alltoall before the lookups; none: every rank already holds the indices it looks up",
    )
    embedding_kernel: Literal["framework", "tbe"] = Field(
        "framework",
        description="which calibrated embedding kernel the embedding kinds run: the framework's embedding bags, or "
        "fbgemm's table-batched embedding (the calibration's tbe fits, where it measured them)",
    )
    dense_first: bool = Field(
        False,
        description="the step runs the bottom MLP before the embedding lookups, and autograd runs the embedding "
        "backward (the output exchange's, then the tables') before the bottom MLP's, the sparse optimizer step after "
        "it; false: the hybrid-parallel schedule, lookups first so their exchange overlaps the bottom MLP",
    )
    optimizer_object: Literal["none", "dense", "all"] = Field(
        "none",
        description="which parameters the step hands to a torch.optim optimizer object (step and zero_grad each "
        "iteration), whose software cost per call and per tensor the calibration measures (benchmarks/optimizer.py): "
        "none (each tensor updated by hand), dense (the MLPs; tables updated elsewhere), all (the MLPs and the tables)",
    )
    sharded_software: bool = Field(
        False,
        description="with several ranks and sharded tables, each step runs the implementation's sharded-module "
        "software on every rank's compute thread (input and output distribution, awaitables, the data-parallel "
        "wrapper), which a calibration with torchrec measures (calibration.sharded_software, benchmarks/sharded.py) "
        "and a task of kind sharded pays; not charged on an uncalibrated topology",
    )
    dense_autograd: bool = Field(
        False,
        description="autograd differentiates the MLPs (nn.Linear and nn.ReLU modules, backward() through the engine): "
        "each layer costs its graph's recording and its nodes' execution beyond the written-out ops, which a torch "
        "calibration measures (calibration.autograd, benchmarks/autograd.py) and a task of kind autograd per layer "
        "pays, with one of kind autograd_call per step for the backward() call; false: the step writes the layers' "
        "backward ops out (the project runner); not charged on an uncalibrated topology",
    )
    loss: Literal["written_out", "module"] = Field(
        "written_out",
        description="how the step computes its loss: written_out, element-wise ops on the output (the project runner's "
        "binary cross-entropy, whose Python-float operands and mean cost more than other ops, calibration overhead "
        "scalar_op_extra_us_by_cores and reduce_op_extra_us_by_cores); module, one loss module's call "
        "(torch.nn.BCEWithLogitsLoss, MSELoss), a task of its own after the top MLP (loss.fwd, and loss.bwd where "
        "backward starts, booked under other as those implementations' phase tables book it), charged as the same "
        "count of ops without those classes",
    )
    interaction_kernel: Literal["framework", "torchrec"] = Field(
        "framework",
        description="which calibrated dot interaction the interaction kinds run: the project runner's, or TorchRec's "
        "InteractionArch with autograd's backward (the calibration's interaction_torchrec fits, where it measured them)",
    )

    @field_validator("op_threads")
    @classmethod
    def _one_per_kind(cls, v: list[OpThreads]) -> list[OpThreads]:
        kinds = [o.kind for o in v]
        dup = sorted({k for k in kinds if kinds.count(k) > 1})
        if dup:
            raise ValueError(f"kind {', '.join(dup)} listed more than once")
        return v

    def threads_by_kind(self) -> dict[str, int]:
        """Task kind -> threads it runs on; kinds not listed run on all the rank's compute cores."""
        return {o.kind: o.threads for o in self.op_threads}


def load_implementation(name_or_path: str | Path, overrides: dict[str, Any] | None = None) -> ImplementationProfile:
    """Load an implementation preset (torchrec-fused, ...) or a user's profile YAML."""
    return config.load(name_or_path, ImplementationProfile, PRESET_DIR, "implementation", overrides)


def implementation_names() -> list[str]:
    return config.preset_names(PRESET_DIR)


def task_cores(threads_by_kind: dict[str, int], kind: str, rank_cores: float) -> float:
    """Cores a task of ``kind`` runs on, of a rank with ``rank_cores`` compute cores: the kind's thread count
    from the implementation profile (never more than the rank has), or all of them."""
    threads = threads_by_kind.get(kind)
    return rank_cores if threads is None else float(min(threads, rank_cores))
