"""Shared test fixtures: run the CLI in-process and capture its exit code and output; one calibration of this host
per test session.

The calibration runs the tiny plan: every benchmark kind and every fit, in one pass (about 25 s on 2 cores against
about 130 s for the quick plan), so the suite checks the whole calibration path on any host within its time budget.
It uses the numpy backend, so it runs without torch. The calibration tests reuse it, and so does notebook 03's
small run (DLRMSIM_CALIBRATION): one tiny calibration fewer, some 25 s of the suite. The quick plan's own agreement
check is `slow` (tests/calibration/test_quick_calibration.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Property tests must not fail because the machine is slow: no per-example deadline and no "too slow" health
# check (a loaded 2-vCPU VM runs an example 10x slower than a quiet server). Failures they find are real.
settings.register_profile("dlrmsim", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("dlrmsim")


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    """Call `dlrmsim ARGS...` in-process; returns CliResult(code, stdout, stderr)."""
    from dlrmsim.cli import main

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


def assert_one_line_error(result: CliResult, *needles: str) -> None:
    """A user error: exit 2, exactly one line on stderr, no traceback, mentioning each needle."""
    assert result.code == 2, (result.code, result.out, result.err)
    lines = [ln for ln in result.err.splitlines() if ln.strip()]
    assert len(lines) == 1, result.err
    assert "Traceback" not in result.err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture(scope="session")
def quick_cal_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from dlrmsim.calibration.calibrate import run_calibration

    out = tmp_path_factory.mktemp("cal") / "host-test.yaml"
    run_calibration(quick=True, backend="numpy", out=out, progress=False, tiny=True)
    return out


@pytest.fixture(scope="session")
def quick_cal(quick_cal_path: Path):  # noqa: ANN201 - a Calibration (imported here so collection stays light)
    from dlrmsim.calibration.schema import load_calibration

    return load_calibration(quick_cal_path)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``serial`` the tests that time this host's kernels: the calibration tests, every test that takes the
    session's calibration as a fixture, the torch tests (notebook 03 marks itself). ``make test`` runs the others
    on every core (pytest-xdist) and these afterwards in one process, alone on the machine. Their tolerances are
    for a host's own noise; a second test process beside them is not that (at two workers on two cores, the
    runner's phases stopped tiling its step)."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if (
            item.path.relative_to(item.config.rootpath).parts[:2] == ("tests", "calibration")
            or "quick_cal" in names
            or "quick_cal_path" in names
            or item.get_closest_marker("torch") is not None
        ):
            item.add_marker(pytest.mark.serial)
