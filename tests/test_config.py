"""YAML parsing: a parsed document is remembered by its text, and what a caller gets is its own copy."""

from __future__ import annotations

import pytest

from dlrmsim.config import parse_yaml_text
from dlrmsim.errors import DlrmsimError


def test_a_parsed_document_is_a_fresh_copy_each_time() -> None:
    text = "name: x\nsizes: [1, 2]\nnested: {a: 1}\n"
    first = parse_yaml_text(text, "a.yaml")
    first["sizes"].append(3)
    first["nested"]["a"] = 99
    # Because the second parse of the same text comes from the remembered document, it must not see the first
    # caller's changes.
    assert parse_yaml_text(text, "b.yaml") == {"name": "x", "sizes": [1, 2], "nested": {"a": 1}}


def test_remembering_does_not_hide_an_error() -> None:
    # Because only documents that parsed are remembered, the same bad text fails every time, naming its file.
    for source in ("one.yaml", "two.yaml"):
        with pytest.raises(DlrmsimError, match="duplicate key 'a'"):
            parse_yaml_text("a: 1\na: 2\n", source)
