"""Validated YAML loading: preset names or file paths in, frozen pydantic models out."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from dlrmsim.errors import DlrmsimError, from_validation_error, unknown_name_error

PACKAGE_DIR = Path(__file__).resolve().parent

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for every config model: unknown fields are typos, and configs never change once loaded."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def read_yaml(path: Path) -> Any:
    """Parse a YAML file, turning syntax errors into one line with the line number."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise DlrmsimError(f"cannot read file ({exc.strerror})", source=path, fix="check the path") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise DlrmsimError(f"malformed YAML at {where}: {problem}", source=path, fix="fix the YAML syntax") from None


def validate(model_cls: type[M], data: Any, source: str | Path) -> M:
    """Validate plain data against ``model_cls``; errors name ``source`` and the field."""
    if not isinstance(data, dict):
        raise DlrmsimError("expected a mapping of fields at the top level", source=source, fix="see the built-in presets for the layout")
    try:
        return model_cls.model_validate(data)
    except ValidationError as err:
        err._dlrmsim_model = model_cls  # type: ignore[attr-defined]
        raise from_validation_error(err, source) from None


def preset_names(preset_dir: Path) -> list[str]:
    """Names of the YAML presets shipped in ``preset_dir`` (file stems)."""
    return sorted(p.stem for p in preset_dir.glob("*.yaml"))


def resolve(name_or_path: str | Path, preset_dir: Path, kind: str) -> Path:
    """A preset name or a YAML path to the file to load; unknown names get a helpful error."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.exists():
        if not candidate.is_file():
            raise DlrmsimError(f"no such {kind} file", source=candidate, fix="check the path")
        return candidate
    preset = preset_dir / f"{name_or_path}.yaml"
    if preset.is_file():
        return preset
    raise unknown_name_error(kind, str(name_or_path), preset_names(preset_dir))


def load(name_or_path: str | Path, model_cls: type[M], preset_dir: Path, kind: str, overrides: dict[str, Any] | None = None) -> M:
    """Load a preset or file as ``model_cls``, applying dotted-path ``overrides`` first."""
    path = resolve(name_or_path, preset_dir, kind)
    data = read_yaml(path)
    source = path.name if path.parent == preset_dir else str(path)
    if overrides:
        data = apply_overrides(data, overrides, source)
    return validate(model_cls, data, source)


def apply_overrides(data: Any, overrides: dict[str, Any], source: str) -> Any:
    """Return a copy of ``data`` with each ``a.b.c: value`` override set; the path must exist."""
    data = copy.deepcopy(data)
    for dotted, value in overrides.items():
        node = data
        parts = dotted.split(".")
        for i, part in enumerate(parts):
            key: Any = int(part) if isinstance(node, list) and part.isdigit() else part
            last = i == len(parts) - 1
            exists = (isinstance(node, dict) and key in node) or (isinstance(node, list) and isinstance(key, int) and key < len(node))
            if not exists:
                hint = f"known fields here: {', '.join(map(str, node))}" if isinstance(node, dict) else "check the path"
                raise DlrmsimError("unknown dotted path in override", source=source, field=dotted, fix=hint)
            if last:
                node[key] = value
            else:
                node = node[key]
    return data


def parse_assignments(items: list[str], flag: str, example: str = "links.opa.bandwidth_GBps=25") -> dict[str, Any]:
    """Command-line ``KEY=VALUE`` strings to a dict; values are read as YAML scalars (numbers, booleans, lists)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise DlrmsimError(f"'{item}' is not KEY=VALUE", field=flag, fix=f"write e.g. {flag} {example}")
        out[key.strip()] = yaml.safe_load(value)
    return out
