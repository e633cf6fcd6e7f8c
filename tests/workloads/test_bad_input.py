"""Bad workload input: one line naming file and field, exit code 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import yaml

from dlrmsim.workloads import PRESET_DIR
from tests.conftest import assert_one_line_error


def _preset(name: str) -> dict:
    return yaml.safe_load((PRESET_DIR / f"{name}.yaml").read_text())


def test_malformed_yaml(cli, tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: x\ntables: {count: 2, rows: [1, 2\nembedding_dim: 4\n")
    assert_one_line_error(cli("workload", "show", str(bad)), "broken.yaml", "malformed YAML", "line")


def test_unknown_preset(cli) -> None:
    assert_one_line_error(cli("workload", "show", "smal"), "unknown workload 'smal'", "small")


def test_negative_size(cli, tmp_path: Path) -> None:
    data = _preset("small")
    data["embedding_dim"] = -64
    path = tmp_path / "neg.yaml"
    path.write_text(yaml.safe_dump(data))
    assert_one_line_error(cli("workload", "show", str(path)), "neg.yaml", "embedding_dim")


def test_negative_table_rows(cli, tmp_path: Path) -> None:
    data = _preset("mlperf")
    data["tables"]["rows"][3] = -1
    path = tmp_path / "rows.yaml"
    path.write_text(yaml.safe_dump(data))
    assert_one_line_error(cli("workload", "show", str(path)), "rows.yaml", "tables.rows")


def test_dot_interaction_needs_bottom_width_equal_to_embedding_dim(cli, tmp_path: Path) -> None:
    data = _preset("small")
    data["bottom_mlp"] = [512, 512, 32]
    path = tmp_path / "width.yaml"
    path.write_text(yaml.safe_dump(data))
    assert_one_line_error(cli("workload", "show", str(path)), "width.yaml", "bottom_mlp output width 32", "embedding_dim 64")


def test_typo_field_gets_a_suggestion(cli, tmp_path: Path) -> None:
    data = _preset("small")
    data["embeding_dim"] = data.pop("embedding_dim")
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(data))
    assert_one_line_error(cli("workload", "show", str(path)), "typo.yaml")


def test_more_ranks_than_placement_allows(cli) -> None:
    res = cli("workload", "show", "small", "--ranks", "16")
    assert_one_line_error(res, "small.yaml", "tables", "16 ranks exceed the 8", "column_wise")


def test_column_wise_accepts_more_ranks_than_tables(cli) -> None:
    res = cli("workload", "show", "small", "--ranks", "16", "--placement", "column_wise", "--json")
    assert res.code == 0, res.err


def test_unknown_placement(cli) -> None:
    assert_one_line_error(cli("workload", "show", "small", "--ranks", "2", "--placement", "diagonal"), "strategy")
