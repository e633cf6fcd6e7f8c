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


# --- issue 28: inputs that used to crash or pass silently --------------------------------------------------------


def test_binary_file_as_workload(cli, tmp_path: Path) -> None:
    # Because a binary file used to escape as UnicodeDecodeError, the error must name the file and say it is not text.
    path = tmp_path / "model.bin"
    path.write_bytes(bytes(range(256)) * 4)
    assert_one_line_error(cli("simulate", "-w", str(path), "-r", "2"), "model.bin", "not a text file")


def test_directory_as_workload(cli, tmp_path: Path) -> None:
    # Because a directory exists, "no such file" was wrong: say what it is and what to give instead.
    assert_one_line_error(cli("workload", "show", str(tmp_path)), str(tmp_path), "is a directory", ".yaml file inside")


def test_negative_rows_do_not_leak_pydantic_type_names(cli, tmp_path: Path) -> None:
    data = _preset("small")
    data["tables"]["rows"] = -5
    path = tmp_path / "neg.yaml"
    path.write_text(yaml.safe_dump(data))
    res = cli("workload", "show", str(path))
    # Because `rows` is `int | list[int]`, pydantic tags the location with its union member ("constrained-int")
    # and reports the list member as a second problem; neither means anything in a YAML file.
    assert_one_line_error(res, "neg.yaml: tables.rows:", "greater than 0", "positive")
    assert "constrained" not in res.err and "more problem" not in res.err


def test_huge_float_rows_get_a_fix_hint(cli, tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text((PRESET_DIR / "small.yaml").read_text().replace("rows: 1048576", "rows: 1.0e+30"))
    assert_one_line_error(
        cli("workload", "show", str(path)), "huge.yaml: tables.rows:", "1e+30", "too large", "fix: give a whole number"
    )


def test_fractional_rows(cli, tmp_path: Path) -> None:
    path = tmp_path / "frac.yaml"
    path.write_text((PRESET_DIR / "small.yaml").read_text().replace("rows: 1048576", "rows: 1000.5"))
    assert_one_line_error(cli("workload", "show", str(path)), "frac.yaml: tables.rows:", "1000.5 is not a whole number")


def test_duplicate_keys_are_refused(cli, tmp_path: Path) -> None:
    # Because PyYAML keeps the last of two equal keys silently, a copy-paste slip would change the model unseen.
    path = tmp_path / "dup.yaml"
    path.write_text((PRESET_DIR / "small.yaml").read_text().replace("embedding_dim: 64", "embedding_dim: 64\nembedding_dim: 32"))
    assert_one_line_error(
        cli("workload", "show", str(path)), "dup.yaml", "duplicate key 'embedding_dim'", "line", "give each key once"
    )


def test_uneven_batch_split_is_said(cli) -> None:
    # 8192 samples over 3 ranks: 2 ranks get 2731, 1 gets 2730; the run goes on and says so on stderr.
    res = cli("simulate", "-t", "skx-8s-upi", "-w", "small", "-r", "3", "--json")
    assert res.code == 0, res.err
    assert "does not divide by 3 ranks: 2 rank(s) get 2731 samples, 1 get 2730" in res.err
    assert "note" not in cli("simulate", "-t", "skx-8s-upi", "-w", "small", "-r", "4", "--json").err


def test_trace_into_missing_folder_fails_before_simulating(cli, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    import dlrmsim.training.simulate as ts

    def never(*a: object, **k: object) -> None:
        raise AssertionError("the simulation ran before the output path was checked")

    # Because the check must come before the (possibly long) simulation, running it at all is a failure here.
    monkeypatch.setattr(ts, "simulate_training", never)
    trace = tmp_path / "no" / "such" / "t.json"
    assert_one_line_error(
        cli("simulate", "-w", "small", "-r", "2", "--trace", str(trace)), "--trace", "folder does not exist", "mkdir -p"
    )
    assert_one_line_error(cli("simulate", "-w", "small", "-r", "2", "--trace", str(tmp_path)), "--trace", "is a directory")


def test_calibration_with_a_non_host_topology(cli, tmp_path: Path) -> None:
    cal = tmp_path / "cal.yaml"
    cal.write_text("{}\n")
    res = cli("simulate", "-t", "clx-2s-56c", "-w", "small", "-r", "2", "--calibration", str(cal))
    # Because a calibration measures this machine, the error is about the topology, not about core counts.
    assert_one_line_error(res, "--calibration", "'host' topology", "clx-2s-56c", "--topology host")
    assert "cores" not in res.err
