"""Validated YAML loading: preset names or file paths in, frozen pydantic models out."""

from __future__ import annotations

import copy
import math
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


# libyaml's parser when PyYAML was built with it (the wheels are): the pure-Python one spent seconds of a study
# re-reading the same preset files.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_SafeLoader):  # type: ignore[misc,valid-type]
    """A SafeLoader that refuses a key given twice in one mapping (plain PyYAML keeps the last one silently)."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, yaml.Mark] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: let PyYAML report it
            break
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}' (first given at line {first.line + 1})", key_node.start_mark
            )
        seen[key] = key_node.start_mark
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def parse_yaml_text(text: str, source: str | Path) -> Any:
    """Parse YAML text strictly: syntax errors and duplicate keys become one line with the line number, and
    a non-finite number (``.inf``, ``.nan``) is refused: no hardware rate or size is infinite."""
    got = _PARSED.get(text)
    if got is not None:
        return copy.deepcopy(got)  # callers may change what they get
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        problem = getattr(exc, "problem", None) or "not valid YAML"
        fix = "give each key once" if problem.startswith("duplicate key") else "fix the YAML syntax"
        raise DlrmsimError(f"malformed YAML at {where}: {problem}", source=source, fix=fix) from None
    reject_non_finite(data, source)
    if len(_PARSED) < _PARSED_MAX:
        _PARSED[text] = copy.deepcopy(data)
    return data


# Documents already parsed, by their text (a study loads the same presets for every point).
_PARSED: dict[str, Any] = {}
_PARSED_MAX = 256


def reject_non_finite(data: Any, source: str | Path | None, path: str = "") -> None:
    """Raise a one-line error at the first infinite or NaN number inside ``data`` (a YAML document)."""
    if isinstance(data, float) and not math.isfinite(data):
        raise DlrmsimError(
            f"{data} is not a finite number",
            source=source,
            field=path or None,
            fix="give a finite value (a what-if of unlimited bandwidth is a large finite one, e.g. 1e6)",
        )
    if isinstance(data, dict):
        for k, v in data.items():
            reject_non_finite(v, source, f"{path}.{k}" if path else str(k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            reject_non_finite(v, source, f"{path}.{i}" if path else str(i))


def read_yaml(path: Path) -> Any:
    """Parse a YAML file, turning unreadable files, syntax errors and duplicate keys into one line."""
    if path.is_dir():
        raise DlrmsimError("is a directory, not a YAML file", source=path, fix="give the path of a .yaml file inside it")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DlrmsimError(f"cannot read file ({exc.strerror})", source=path, fix="check the path") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DlrmsimError(f"not a text file (byte {exc.start} is not UTF-8)", source=path, fix="give a YAML file") from None
    return parse_yaml_text(text, path)


def validate(model_cls: type[M], data: Any, source: str | Path) -> M:
    """Validate plain data against ``model_cls``; errors name ``source`` and the field."""
    if not isinstance(data, dict):
        raise DlrmsimError(
            "expected a mapping of fields at the top level", source=source, fix="see the built-in presets for the layout"
        )
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
    if candidate.is_dir():
        raise DlrmsimError(f"is a directory, not a {kind} file", source=candidate, fix="give the path of a .yaml file inside it")
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
            exists = (isinstance(node, dict) and key in node) or (
                isinstance(node, list) and isinstance(key, int) and key < len(node)
            )
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
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise DlrmsimError(
                f"'{value}' is not a YAML value", field=f"{flag} {key.strip()}", fix="quote it or write a number"
            ) from None
        reject_non_finite(out[key.strip()], None, f"{flag} {key.strip()}")
    return out
