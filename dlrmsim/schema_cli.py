"""`dlrmsim schema KIND`: the JSON Schema of each YAML kind a user writes, generated from the pydantic models.

The same models validate the files, so the schema cannot drift from what the loader accepts. ``docs/schema.md``
is generated from here too (``python -m dlrmsim.schema_cli docs/schema.md``); a test keeps it current.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel

from dlrmsim.errors import DlrmsimError, closest
from dlrmsim.output import print_json

PACKAGE = Path(__file__).resolve().parent

# kind -> (model as module:class, a commented example shipped with dlrmsim, what the kind is for). The models load
# on use: `dlrmsim --help` imports every command module and must not pay for the engine.
KINDS: dict[str, tuple[str, Path, str]] = {
    "workload": (
        "dlrmsim.workloads.schema:Workload",
        PACKAGE / "workloads/presets/small.yaml",
        "a DLRM training workload (`simulate -w FILE`)",
    ),
    "topology": (
        "dlrmsim.topologies.schema:TopologyFile",
        PACKAGE / "topologies/presets/clx-2s-56c.yaml",
        "hardware: compute, links, fabric (`-t FILE`)",
    ),
    "sweep": (
        "dlrmsim.studies.spec:SweepSpec",
        PACKAGE / "studies/examples/opa_bandwidth.yaml",
        "a parameter sweep (`dlrmsim sweep FILE`)",
    ),
    "serving": (
        "dlrmsim.workloads.serving.schema:ServingWorkload",
        PACKAGE / "workloads/serving/recsys-inference.yaml",
        "a serving workload (`serve -w FILE`)",
    ),
    "layers": (
        "dlrmsim.workloads.layers:LayerWorkload",
        PACKAGE / "workloads/layer_presets/mlp-like.yaml",
        "a layer-list workload (`instances -w FILE`)",
    ),
    "backend": (
        "dlrmsim.engine.backends:Backend",
        PACKAGE / "engine/presets/backends/mpi.yaml",
        "a communication backend (`--backend FILE`)",
    ),
}


def model_of(kind: str) -> type[BaseModel]:
    module, _, name = KINDS[kind][0].partition(":")
    return getattr(importlib.import_module(module), name)


def json_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of ``kind`` (one of :data:`KINDS`); a one-line error names the kinds otherwise."""
    if kind not in KINDS:
        hint = closest(kind, KINDS)
        raise DlrmsimError(
            f"unknown schema kind '{kind}'" + (f" (did you mean '{hint}'?)" if hint else ""),
            field="KIND",
            fix=f"use one of: {', '.join(KINDS)}",
        )
    return model_of(kind).model_json_schema()


def _type(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        return prop["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in prop:
        return " | ".join(_type(p) for p in prop["anyOf"])
    if "oneOf" in prop:
        return " | ".join(_type(p) for p in prop["oneOf"])
    if "enum" in prop:
        return " | ".join(json.dumps(v) for v in prop["enum"])
    if "const" in prop:
        return json.dumps(prop["const"])
    t = prop.get("type", "any")
    if t == "array":
        return f"list[{_type(prop.get('items', {}))}]"
    if t == "object" and "additionalProperties" in prop and isinstance(prop["additionalProperties"], dict):
        return f"map[str, {_type(prop['additionalProperties'])}]"
    return str(t)


def _rows(schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", []))
    out = ["| field | type | default | meaning |", "| --- | --- | --- | --- |"]
    for name, prop in schema.get("properties", {}).items():
        default = "required" if name in required else json.dumps(prop.get("default")) if "default" in prop else ""
        text = " ".join(str(prop.get("description", "")).split()).replace("|", "\\|")
        out.append(f"| `{name}` | {_type(prop).replace('|', '&#124;')} | {default.replace('|', '&#124;')} | {text} |")
    return out


def markdown() -> str:
    """docs/schema.md: for each kind, its fields (and those of every nested model) and a commented example."""
    lines = [
        "# YAML schema reference",
        "",
        "Generated from the pydantic models that validate each file (`python -m dlrmsim.schema_cli docs/schema.md`);",
        "`dlrmsim schema KIND` prints the JSON Schema. Units are in field names (`_GBps`, `_us`, `_GB`).",
        "",
    ]
    for kind, (model, example, what) in KINDS.items():
        schema = json_schema(kind)
        lines += [f"## {kind}: {what}", "", f"Model `{model.replace(':', '.')}`.", "", *_rows(schema), ""]
        for name, sub in sorted(schema.get("$defs", {}).items()):
            if sub.get("properties"):
                lines += [f"### {kind} / {name}", "", *_rows(sub), ""]
        rel = example.relative_to(PACKAGE.parent)
        lines += [f"Example (`{rel}`, as shipped):", "", "```yaml", example.read_text().rstrip(), "```", ""]
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    @app.command("schema")
    def schema_cmd(kind: str = typer.Argument(..., help=f"one of: {', '.join(KINDS)}")) -> None:
        """Print the JSON Schema of a YAML kind (workload, topology, sweep, serving, layers, backend)."""
        print_json(json_schema(kind))


if __name__ == "__main__":
    Path(sys.argv[1] if len(sys.argv) > 1 else "docs/schema.md").write_text(markdown())
