"""Validated schema of a serving workload YAML: the model's tables and MLPs, the request stream, host batching,
the partitioning and transfer options of the accelerator node, and the named modelling assumptions.

Units follow the field names (``_ms``, ``_us``, ``_GB``, ``_GBps``, ``_ns``); :mod:`dlrmsim.serving.model`
converts them to SI.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from dlrmsim.config import StrictModel

TablePrecision = Literal["fp32", "fp16", "int8", "int4"]
DensePrecision = Literal["int8", "fp16"]
Placement = Literal["size", "lookups"]
TransferPath = Literal["p2p", "host_staged"]
TransferSize = Literal["partial", "fixed_max"]


class FixedPooling(StrictModel):
    """Every item looks up exactly ``value`` rows of the table."""

    kind: Literal["fixed"]
    value: PositiveInt

    @property
    def mean(self) -> float:
        return float(self.value)

    @property
    def max(self) -> int:
        return self.value


class PoissonPooling(StrictModel):
    """Rows per item ~ Poisson(``mean``), clipped to ``max`` (the size of a fixed, maximum-size index tensor)."""

    kind: Literal["poisson"]
    mean: PositiveFloat
    max: PositiveInt

    @model_validator(mode="after")
    def _max_above_mean(self) -> PoissonPooling:
        if self.max < self.mean:
            raise ValueError(f"max {self.max} is below the mean {self.mean}")
        return self


class UniformPooling(StrictModel):
    """Rows per item uniform on the integers ``low..high``."""

    kind: Literal["uniform"]
    low: Annotated[int, Field(ge=0)]
    high: PositiveInt

    @model_validator(mode="after")
    def _ordered(self) -> UniformPooling:
        if self.high < self.low:
            raise ValueError(f"high {self.high} is below low {self.low}")
        return self

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2.0

    @property
    def max(self) -> int:
        return self.high


Pooling = Annotated[FixedPooling | PoissonPooling | UniformPooling, Field(discriminator="kind")]


class TableGroup(StrictModel):
    """``count`` embedding tables of ``rows`` rows; each item of a request looks up ``pooling`` rows per table.

    One pooling factor is drawn per request and table (all items of a request share it: the request's user
    features decide how long its id lists are).
    """

    name: str
    count: PositiveInt
    rows: PositiveInt
    pooling: Pooling


class ServingModel(StrictModel):
    """The recommendation model being served."""

    tables: list[TableGroup] = Field(min_length=1)
    embedding_dim: PositiveInt
    table_precision: TablePrecision = "int8"
    row_overhead_bytes: NonNegativeFloat = Field(
        8.0, description="per-row quantization metadata stored beside the row (scale and bias), bytes"
    )
    index_bytes: PositiveInt = Field(4, description="bytes per lookup index")
    length_bytes: PositiveInt = Field(4, description="bytes per (item, table) lookup count")
    pooled_precision: Literal["fp32", "fp16", "int8"] = Field("fp16", description="precision of pooled embedding vectors")
    dense_features: PositiveInt = Field(description="dense input features per item (bottom MLP input width)")
    bottom_mlp: list[PositiveInt] = Field(min_length=2, description="[dense input width, hidden..., output width]")
    top_mlp: list[PositiveInt] = Field(min_length=1, description="output widths; the input is the interaction output")
    interaction: Literal["dot", "cat"] = "dot"
    dense_precision: DensePrecision = "int8"

    @model_validator(mode="after")
    def _shapes(self) -> ServingModel:
        if self.bottom_mlp[0] != self.dense_features:
            raise ValueError(f"bottom_mlp starts at {self.bottom_mlp[0]} but dense_features is {self.dense_features}")
        if self.interaction == "dot" and self.bottom_mlp[-1] != self.embedding_dim:
            raise ValueError(
                f"bottom_mlp output width {self.bottom_mlp[-1]} must equal embedding_dim {self.embedding_dim} for dot interaction"
            )
        return self

    @property
    def num_tables(self) -> int:
        return sum(g.count for g in self.tables)


class Requests(StrictModel):
    """Items (ranking candidates) per request, uniform on ``items_low..items_high``."""

    items_low: PositiveInt
    items_high: PositiveInt

    @model_validator(mode="after")
    def _ordered(self) -> Requests:
        if self.items_high < self.items_low:
            raise ValueError(f"items_high {self.items_high} is below items_low {self.items_low}")
        return self


class Batching(StrictModel):
    """Host batching: a batch closes at ``max_requests`` requests or ``timeout_ms`` after its first request."""

    max_requests: PositiveInt = 1
    timeout_ms: NonNegativeFloat = 0.0
    dense_batch_items: PositiveInt = Field(64, description="items per pass over the FC weights (GEMM batch)")


class Partitioning(StrictModel):
    """How a node serves the model (the options the issue compares)."""

    lookup_core_fraction: Annotated[float, Field(gt=0, lt=1)] = 1 / 3
    placement: Placement = "size"
    transfer: TransferPath = "p2p"
    transfer_size: TransferSize = "partial"
    command_batching: bool = True


class Assumptions(StrictModel):
    """Named modelling assumptions (each value's source is a comment in the preset)."""

    gemm_efficiency: Annotated[float, Field(gt=0, le=1)] = Field(
        0.5, description="achieved fraction of peak for FC GEMMs, used when the topology gives no efficiency table"
    )
    outstanding_misses_per_core: PositiveFloat = Field(32, description="memory requests one core keeps in flight")
    memory_latency_ns: PositiveFloat = Field(150, description="loaded DRAM latency of one random access")
    access_bytes: PositiveInt = Field(64, description="memory access granularity: a row read is rounded up to it")
    reserved_memory_GB: NonNegativeFloat = Field(1.0, description="per-card (per-socket) memory kept by the runtime")
    host_threads: PositiveInt = Field(8, description="host threads doing request pre-processing")
    preprocess_us_per_request: NonNegativeFloat = 50.0
    preprocess_us_per_item: NonNegativeFloat = 1.0
    service_time: Literal["model", "exponential"] = Field(
        "model",
        description="testing hook: 'exponential' replaces each batch's work by one task of Exp(service_mean_ms) on one card",
    )
    service_mean_ms: PositiveFloat = 1.0


class ServingWorkload(StrictModel):
    """A serving workload: model, request stream, batching, partitioning, latency budget and assumptions."""

    name: str
    description: str = ""
    model: ServingModel
    requests: Requests
    batching: Batching = Batching()
    partitioning: Partitioning = Partitioning()
    latency_budget_ms: PositiveFloat = 100.0
    assumptions: Assumptions = Assumptions()
