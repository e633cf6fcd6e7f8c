"""Ctrl-C on a sweep (issue 28): one line "interrupted: N of M points saved; re-run to resume", exit 130, no
traceback, and the saved points are really there for the re-run."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlrmsim.errors import Interrupted
from dlrmsim.studies.results import load_results
from dlrmsim.studies.runner import run_sweep
from dlrmsim.studies.spec import SweepPoint, expand, load_spec
from tests.studies import sweep_evaluators as ev


def test_interrupted_serial_sweep_says_how_many_points_are_saved(write_spec, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    points = expand(load_spec(write_spec(ranks=[1, 2, 4, 8])))
    seen: list[SweepPoint] = []

    def stop_at_third(point: SweepPoint) -> dict[str, float]:
        # The third point "receives" Ctrl-C: the two before it are finished and appended.
        if len(seen) == 2:
            raise KeyboardInterrupt
        seen.append(point)
        return ev.cheap(point)

    out = tmp_path / "out"
    with pytest.raises(Interrupted) as info:
        run_sweep(points, out, stop_at_third, serial=True, progress=False)
    assert info.value.exit_code == 130
    assert info.value.one_line() == f"interrupted: 2 of {len(points)} points saved; re-run to resume"
    assert len(load_results(out)) == 2  # because "saved" must be true: the re-run skips exactly these
    again = run_sweep(points, out, ev.cheap, serial=True, progress=False)
    assert again.skipped == 2 and again.ran == len(points) - 2


def test_cli_prints_one_line_and_exits_130(cli, write_spec, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    import dlrmsim.studies.runner as runner

    def interrupted(*a: object, **k: object) -> None:
        raise Interrupted("interrupted: 3 of 10 points saved; re-run to resume")

    monkeypatch.setattr(runner, "run_sweep", interrupted)
    res = cli("sweep", str(write_spec(ranks=[1, 2])), "--out", str(tmp_path / "o"), "--serial")
    assert res.code == 130
    assert res.err.strip() == "interrupted: 3 of 10 points saved; re-run to resume"
    assert "Traceback" not in res.err
