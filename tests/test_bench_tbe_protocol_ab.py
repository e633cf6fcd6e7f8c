"""benchmarks/tbe_protocol_ab.py: the TBE benchmark's two protocols as two calibrations that differ in those rows only."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlrmsim.calibration.schema import Calibration, load_calibration


def test_both_files_keep_every_other_row_and_time_each_configuration_both_ways(
    quick_cal: Calibration, quick_cal_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torchrec")
    import benchmarks.tbe_protocol_ab as ab
    from dlrmsim.calibration.benchmarks.tbe import TbeConfig

    tiny = [TbeConfig(1000, 16, 4, 64, 3, "uniform", 0, "sparse_arch")]
    monkeypatch.setattr(ab, "tbe_configs", lambda *_: tiny)
    assert ab.main([str(quick_cal_path), str(tmp_path / "ab")]) == 0
    b2b = load_calibration(tmp_path / "ab-back-to-back.yaml", warn_other_host=False)
    flushed = load_calibration(tmp_path / "ab-flushed.yaml", warn_other_host=False)
    # Because the A/B must differ in the TBE protocol alone, both files keep the calibration's other rows as they
    # were, and each holds a forward and an update row for every configuration, under the same names
    others = [m for m in quick_cal.measurements if m.benchmark != "tbe"]
    for cal in (b2b, flushed):
        assert [m for m in cal.measurements if m.benchmark != "tbe"] == others
    names = sorted(m.name for m in b2b.measurements if m.benchmark == "tbe")
    assert len(names) == 2 * len(tiny) and names == sorted(m.name for m in flushed.measurements if m.benchmark == "tbe")
