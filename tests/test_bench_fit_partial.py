"""benchmarks/fit_partial.py fits a gone machine's partial file only under a host record of the same kind."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks import fit_partial

HOST_FROM = Path(__file__).parents[1] / "validation/results/20261126-emr16-C/calibration-C.yaml"


def test_a_partial_file_of_another_kind_of_machine_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # because the key hashes CPU model, cores, ISA, memory and libraries, a 2-core file under a 16-core record
    # would fit one machine's rates to another's plan: it stops, naming both keys, and writes nothing
    partial = tmp_path / "cal.yaml.partial.jsonl"
    partial.write_text(json.dumps({"key": "0123456789abcdef flush 67108864", "task": "gemm 64 c1", "measurements": []}) + "\n")
    out = tmp_path / "out.yaml"
    monkeypatch.setattr(sys, "argv", ["fit_partial", str(partial), str(HOST_FROM), str(out)])
    with pytest.raises(SystemExit, match="65cdaeefaf29ebfe flush 629145600.*another kind of machine"):
        fit_partial.main()
    assert not out.exists()
