"""Communication backends as validated YAML presets: who progresses collectives, and what that costs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from dlrmsim import config
from dlrmsim.config import StrictModel

PRESET_DIR = Path(__file__).resolve().parent / "presets" / "backends"


class Interference(StrictModel):
    """An unpinned progress thread sharing a compute core while communication is in flight.

    ``core_share`` is the fraction of one core the progress thread takes from the compute thread it shares
    with (0.5 when the OS time-slices two runnable threads fairly). With ``barrier_synchronized`` compute
    (statically partitioned kernels that end in a barrier) the whole kernel waits for that slowed thread.
    The progress thread itself only gets ``1 - core_share`` of a core, which stretches its software work.
    """

    core_share: Annotated[float, Field(gt=0, lt=1)]
    barrier_synchronized: bool = True


class PrePost(StrictModel):
    """Pre/post-processing passes (read + write sweeps over the buffer) per collective."""

    allreduce_passes: NonNegativeFloat
    alltoall_passes: NonNegativeFloat


class Algorithms(StrictModel):
    allreduce: str = "ring"
    alltoall: str = "direct"
    scatter: str = "direct"
    reduce_scatter: str = "ring"
    allgather: str = "ring"


class Backend(StrictModel):
    """A communication backend preset (see presets/backends/*.yaml for the sources of each value)."""

    name: str
    description: str = ""
    progress: Literal["pinned_cores", "unpinned_thread"]
    comm_cores: NonNegativeInt = Field(description="cores per socket pinned to communication and removed from compute")
    in_order: bool = Field(description="collectives complete in the order posted (one progress engine)")
    progress_engines: PositiveInt | None = Field(
        None,
        description="collectives a rank progresses at once, in posting order (1: one progress thread runs one collective "
        "after another); null: no limit",
    )
    interference: Interference | None = None
    intra_node_copy_cores: PositiveFloat | None = Field(
        None,
        description="cores that copy a rank's messages to and from ranks of the same shared-memory node (paths over "
        "load/store links only) through shared buffers, each at one core's streaming rate; null: such transfers run "
        "at link speed",
    )
    message_overhead_us: NonNegativeFloat = Field(description="software time per message on top of the links' own overhead")
    bucket_MB: PositiveFloat = Field(description="gradient bucket size for the overlapped allreduce")
    prepost: PrePost
    algorithms: Algorithms = Algorithms()

    @property
    def bucket_bytes(self) -> float:
        return self.bucket_MB * 1e6

    @property
    def message_overhead_s(self) -> float:
        return self.message_overhead_us * 1e-6


def load_backend(name_or_path: str | Path, overrides: dict[str, Any] | None = None) -> Backend:
    """Load a backend preset (ccl, mpi) or a user's backend YAML."""
    return config.load(name_or_path, Backend, PRESET_DIR, "backend", overrides)


def backend_names() -> list[str]:
    return config.preset_names(PRESET_DIR)
