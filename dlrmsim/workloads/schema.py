"""Validated schema of a DLRM workload YAML (tables, MLPs, interaction, precision, minibatches)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, NonNegativeFloat, PositiveInt, model_validator

from dlrmsim.config import StrictModel

Precision = Literal["fp32", "bf16"]
TablePrecision = Literal["fp32", "bf16", "fp16", "int8", "int4"]

BYTES_PER_ELEMENT: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "int8": 1.0, "int4": 0.5}


class UniformIndices(StrictModel):
    """Every row of a table is equally likely to be looked up."""

    kind: Literal["uniform"] = "uniform"


class ZipfIndices(StrictModel):
    """Row r (1-based popularity rank) is looked up with probability proportional to r**-exponent."""

    kind: Literal["zipf"]
    exponent: Annotated[float, Field(gt=0)]


IndexDistribution = Annotated[UniformIndices | ZipfIndices, Field(discriminator="kind")]


class Tables(StrictModel):
    """Embedding tables: either ``count`` tables of ``rows`` rows, or one row count per table."""

    count: PositiveInt | None = None
    rows: PositiveInt | list[PositiveInt]

    @model_validator(mode="after")
    def _count_matches(self) -> Tables:
        if isinstance(self.rows, list):
            if not self.rows:
                raise ValueError("rows list is empty")
            if self.count is not None and self.count != len(self.rows):
                raise ValueError(f"count is {self.count} but rows lists {len(self.rows)} tables")
        elif self.count is None:
            raise ValueError("give count with a single row count, or a list of row counts")
        return self

    @property
    def row_counts(self) -> list[int]:
        if isinstance(self.rows, list):
            return list(self.rows)
        assert self.count is not None
        return [self.rows] * self.count


class Minibatch(StrictModel):
    """Minibatch sizes (samples) for the three standard experiments; ``single_socket`` is null when one socket
    cannot hold the model."""

    single_socket: PositiveInt | None = None
    strong_global: PositiveInt
    weak_local: PositiveInt


class Convergence(StrictModel):
    """Time-to-train inputs: epochs to converge for an optimizer at a global batch, and the data set size."""

    dataset_samples: PositiveInt
    runs: list[ConvergenceRun] = []


class ConvergenceRun(StrictModel):
    optimizer: Literal["sgd", "lamb"]
    global_batch: PositiveInt
    epochs: Annotated[float, Field(gt=0)]
    source: str = ""


LoaderKind = Literal["reference", "v1"]


class Loader(StrictModel):
    """How every rank gets its samples each iteration (Kalamkar et al., SC20, arXiv:2005.04680, MLPerf setup).

    ``reference``: the DLRM reference loader; every rank reads the whole global minibatch and keeps what it
    needs. ``v1``: the MLPerf v1.0 loader; each rank reads its local batch only and an alltoall sends every
    table's indices to the rank that owns the table. A sample is (dense features + one index per table + the
    label) values of ``value_bytes`` each (Criteo Terabyte in the binary form: 13 + 26 + 1 = 40 x 4 bytes).
    """

    kind: LoaderKind = "reference"
    value_bytes: PositiveInt = Field(4, description="bytes per stored value (int32 / fp32 in the binary Criteo format)")
    passes: NonNegativeFloat = Field(
        1.0,
        description="read+write sweeps over the bytes read; assumption: one copy from the page cache into the batch "
        "tensors (decoding and Python costs are not modelled)",
    )


class Workload(StrictModel):
    """A DLRM model and its training settings, as read from a workload YAML."""

    name: str
    description: str = ""
    tables: Tables
    embedding_dim: PositiveInt
    lookups_per_sample: PositiveInt = Field(description="pooling factor P: rows summed per table per sample")
    index_distribution: IndexDistribution = UniformIndices()
    bottom_mlp: list[PositiveInt] = Field(min_length=2, description="[dense input width, hidden..., output width]")
    top_mlp: list[PositiveInt] = Field(min_length=1, description="output widths; the input is the interaction output")
    interaction: Literal["dot", "cat"] = "dot"
    precision: Precision = "fp32"
    table_precision: TablePrecision | None = None
    index_bytes: PositiveInt = Field(8, description="bytes per lookup index (int64 in PyTorch)")
    minibatch: Minibatch
    convergence: Convergence | None = None
    loader: Loader | None = Field(None, description="data loader; none: synthetic random data, no loading cost")

    @model_validator(mode="after")
    def _dot_needs_matching_width(self) -> Workload:
        if self.interaction == "dot" and self.bottom_mlp[-1] != self.embedding_dim:
            raise ValueError(
                f"bottom_mlp output width {self.bottom_mlp[-1]} must equal embedding_dim {self.embedding_dim} "
                "for dot interaction (set the last bottom_mlp width to embedding_dim, or use interaction: cat)"
            )
        return self

    @property
    def table_rows(self) -> list[int]:
        return self.tables.row_counts

    @property
    def num_tables(self) -> int:
        return len(self.table_rows)

    @property
    def element_bytes(self) -> float:
        """Bytes of one dense weight, activation or gradient element."""
        return BYTES_PER_ELEMENT[self.precision]

    @property
    def table_element_bytes(self) -> float:
        """Bytes of one stored embedding element (split-SGD bf16 still stores fp32 master weights)."""
        if self.table_precision is not None:
            return BYTES_PER_ELEMENT[self.table_precision]
        return 4.0


Convergence.model_rebuild()
