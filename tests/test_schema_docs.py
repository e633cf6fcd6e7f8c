"""`dlrmsim schema KIND` and docs/schema.md come from the models that validate the files, and stay current."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dlrmsim.cli import main
from dlrmsim.schema_cli import KINDS, markdown

DOC = Path(__file__).resolve().parents[1] / "docs" / "schema.md"


def test_schema_page_is_current() -> None:
    # Because the page is generated, a model change without regenerating it would leave users a wrong reference.
    assert DOC.read_text() == markdown(), "docs/schema.md is stale: run python -m dlrmsim.schema_cli docs/schema.md"


@pytest.mark.parametrize("kind", list(KINDS))
def test_schema_accepts_the_shipped_example(kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    main(["schema", kind])
    schema = json.loads(capsys.readouterr().out)
    example = yaml.safe_load(KINDS[kind][1].read_text())
    # Because the shipped example loads through the same model, the published JSON Schema must accept it too.
    jsonschema.validate(example, schema)
    assert set(schema["properties"]) >= set(example)


def test_schema_rejects_a_typo_the_way_the_loader_does(capsys: pytest.CaptureFixture[str]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    main(["schema", "workload"])
    schema = json.loads(capsys.readouterr().out)
    example = yaml.safe_load(KINDS["workload"][1].read_text())
    example["alpha"] = 1.05  # the misspelling a user made (the field is index_distribution.exponent)
    # Because workload files forbid unknown fields, the schema says so (additionalProperties: false).
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(example, schema)
