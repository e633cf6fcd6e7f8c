"""A generic layer-list workload: any network described as its layers' flops and bytes per sample.

A user describes a ResNet-like or MLP-like mix without a model definition: each layer has a name, a kind,
flops per sample and bytes of memory traffic per sample (plus bytes read once per call, e.g. weights).
Whether a layer ends compute-bound or bandwidth-bound is decided only by the roofline of those numbers on
the processor; ``kind`` is a label for reports. Units: flops (a multiply-add counts 2), bytes, samples.

Layout of a layer workload file (see layer_presets/*.yaml)::

    name: mlp-like
    description: ...
    batch: 1024                 # samples per socket (NUMA node) per iteration
    parameters: 8.4e6           # trainable parameters (count): the gradient every instance synchronises
    parameter_bytes: 4          # bytes per parameter (fp32)
    repeat: 1                   # the layer list is run this many times in sequence (a repeated block)
    backward: {flops_factor: 2.0, bytes_factor: 2.0}   # null: forward only (inference)
    layers:
      - {name: fc1, kind: gemm, flops_per_sample: 2.1e6, bytes_per_sample: 8192, bytes_per_call: 4.2e6}
      - {name: relu1, kind: elementwise, flops_per_sample: 1024, bytes_per_sample: 8192}
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt

from dlrmsim import config
from dlrmsim.config import StrictModel

PRESET_DIR = Path(__file__).resolve().parent / "layer_presets"

LayerKind = Literal[
    "gemm",
    "conv",
    "elementwise",
    "activation",
    "batchnorm",
    "layernorm",
    "pooling",
    "embedding",
    "interaction",
    "softmax",
    "other",
]


class LayerSpec(StrictModel):
    """One layer: its work per sample and the bytes it reads once per call whatever the batch (weights)."""

    name: str
    kind: LayerKind
    flops_per_sample: NonNegativeFloat = Field(description="floating-point operations per sample (multiply-add = 2)")
    bytes_per_sample: NonNegativeFloat = Field(description="memory traffic per sample (bytes): activations read and written")
    bytes_per_call: NonNegativeFloat = Field(0.0, description="memory traffic per call independent of the batch (weights), bytes")


class Backward(StrictModel):
    """The backward pass: the layer list reversed, each layer's flops and bytes scaled by these factors."""

    flops_factor: NonNegativeFloat = Field(2.0, description="backward flops / forward flops (data + weight gradients: 2)")
    bytes_factor: NonNegativeFloat = Field(2.0, description="backward bytes / forward bytes")


class LayerWorkload(StrictModel):
    """A network as a list of layers (a training iteration when ``backward`` is set, else one inference pass)."""

    name: str
    description: str = ""
    batch: PositiveInt = Field(description="samples per socket (NUMA node) per iteration")
    parameters: NonNegativeFloat = Field(description="trainable parameters (count); their gradient is synchronised")
    parameter_bytes: PositiveFloat = Field(4.0, description="bytes per parameter and per gradient element")
    precision: Literal["fp32", "bf16"] = "fp32"
    repeat: PositiveInt = Field(1, description="the layer list runs this many times in sequence")
    backward: Backward | None = Field(default_factory=Backward, description="null: forward only")
    layers: list[LayerSpec] = Field(min_length=1)

    @property
    def model_bytes(self) -> float:
        """Bytes of one weight (or gradient) copy."""
        return self.parameters * self.parameter_bytes


@dataclass(frozen=True)
class LayerTask:
    """One layer execution at a batch: flops and bytes of memory traffic (bytes)."""

    name: str
    kind: str
    flops: float
    bytes: float


def layer_tasks(w: LayerWorkload, batch: float) -> list[LayerTask]:
    """The iteration's layer sequence at ``batch`` samples: forward (repeated), then backward in reverse."""
    fwd: list[LayerTask] = []
    for r in range(w.repeat):
        tag = f"r{r}." if w.repeat > 1 else ""
        for layer in w.layers:
            fwd.append(
                LayerTask(
                    f"{tag}{layer.name}.fwd",
                    layer.kind,
                    layer.flops_per_sample * batch,
                    layer.bytes_per_sample * batch + layer.bytes_per_call,
                )
            )
    if w.backward is None:
        return fwd
    b = w.backward
    bwd = [
        LayerTask(t.name[: -len(".fwd")] + ".bwd", t.kind, t.flops * b.flops_factor, t.bytes * b.bytes_factor)
        for t in reversed(fwd)
        if t.flops * b.flops_factor > 0 or t.bytes * b.bytes_factor > 0
    ]
    return fwd + bwd


def load_layer_workload(name_or_path: str | Path, overrides: dict[str, Any] | None = None) -> LayerWorkload:
    """Load a built-in layer-list preset by name (``layer_workload_names()``) or a user's YAML by path."""
    return config.load(name_or_path, LayerWorkload, PRESET_DIR, "layer workload", overrides)


def layer_workload_names() -> list[str]:
    return config.preset_names(PRESET_DIR)


def is_layer_workload_file(name_or_path: str | Path) -> bool:
    """True for a layer-list preset name, or a YAML file whose top level has a ``layers`` list."""
    p = Path(name_or_path)
    if p.suffix not in (".yaml", ".yml") and not p.exists():
        return str(name_or_path) in layer_workload_names()
    if not p.is_file():
        return False
    try:
        data = config.read_yaml(p)
    except Exception:  # noqa: BLE001 - a malformed file is reported by whichever loader reads it next
        return False
    return isinstance(data, dict) and "layers" in data
