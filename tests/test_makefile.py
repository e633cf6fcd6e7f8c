"""The Makefile's choice of interpreter on machines other than ours: `make demo` and `make test` need Python 3.11 or
newer, whatever ``python3`` is, and must stay safe to re-run after a make with the wrong one.

Each test runs GNU make on a copy of the Makefile in a temporary folder, with stand-in interpreters: a script that
exits 1 is "older than 3.11" (the Makefile asks ``sys.exit(sys.version_info < (3, 11))``), and this interpreter is
a good one. Only ``make -n`` or a failing check runs, so nothing is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")

pytestmark = pytest.mark.skipif(MAKE is None, reason="GNU make is not installed")


def _project(tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True)
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    return tmp_path


def _old_python(path: Path) -> Path:
    """A stand-in for a Python older than 3.11: it answers the version check with exit status 1."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 1\n")
    path.chmod(0o755)
    return path


def _make(
    project: Path, *args: str, path_env: str | None = None, user_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """GNU make on ``project``'s Makefile, started afresh (make test runs this suite inside make); ``path_env`` replaces
    PATH, ``user_env`` adds to the environment."""
    env = {**os.environ, "MAKEFLAGS": ""}
    for inherited in ("PYTHON", "MAKELEVEL", "MFLAGS"):
        env.pop(inherited, None)
    if path_env is not None:
        env["PATH"] = path_env
    env |= user_env or {}
    return subprocess.run([MAKE, *args], cwd=project, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_an_older_python_is_refused_in_one_line_and_nothing_is_made(tmp_path: Path) -> None:
    project = _project(tmp_path / "p")
    old = _old_python(tmp_path / "bin" / "python3.10")
    run = _make(project, ".venv/.installed", f"PYTHON={old}")
    # Because pip would only refuse after the venv exists (and that venv then failed every later make), the check
    # comes first: exit 2, one line naming the interpreter and the fix, no .venv.
    assert run.returncode == 2, run.stderr
    ours = [line for line in run.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", line)]
    assert len(ours) == 1 and "no Python 3.11 or newer" in ours[0] and str(old) in ours[0] and "fix:" in ours[0]
    assert not (project / ".venv").exists()


def test_a_newer_python_is_found_when_python3_is_older(tmp_path: Path) -> None:
    project = _project(tmp_path / "p")
    bindir = tmp_path / "bin"
    _old_python(bindir / "python3")
    (bindir / "python3.12").symlink_to(sys.executable)  # this interpreter is 3.11 or newer
    run = _make(project, "-n", ".venv/bin/python", path_env=str(bindir))
    # Because python3.11 is absent and python3 too old, the first good name in the search order is python3.12.
    assert run.returncode == 0, run.stderr
    assert f'"{bindir / "python3.12"}" -m venv .venv' in run.stdout


def test_a_venv_of_an_older_python_is_made_again(tmp_path: Path) -> None:
    project = _project(tmp_path / "p")
    _old_python(project / ".venv" / "bin" / "python")
    (project / ".venv" / ".installed").touch()
    run = _make(project, "-n", ".venv/.installed", f"PYTHON={sys.executable}")
    # Because the stamps of a venv that cannot run would make every later make fail alike, that venv goes and the
    # plan starts from a new one with the given interpreter.
    assert run.returncode == 0, run.stderr
    assert "making it again" in run.stdout
    assert not (project / ".venv").exists()
    assert f'"{sys.executable}" -m venv .venv' in run.stdout


def _venv_without_pip(venv: Path) -> None:
    """A real venv of this interpreter, made without pip (fast, and as a venv module without ensurepip leaves it)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)


def test_a_venv_without_pip_is_made_again(tmp_path: Path) -> None:
    project = _project(tmp_path / "p")
    _venv_without_pip(project / ".venv")
    run = _make(project, "-n", ".venv/.installed", f"PYTHON={sys.executable}")
    # Because nothing can be installed into it (every later make would stop at `python -m pip`), it is made again.
    assert run.returncode == 0, run.stderr
    assert "making it again" in run.stdout
    assert not (project / ".venv").exists()


def test_a_working_venv_is_kept(tmp_path: Path) -> None:
    project = _project(tmp_path / "p")
    _venv_without_pip(project / ".venv")
    site = next((project / ".venv" / "lib").glob("python3.*/site-packages"))
    (site / "pip").mkdir()
    (site / "pip" / "__init__.py").write_text("")  # enough for the Makefile's importlib.util.find_spec("pip")
    run = _make(project, "-n", ".venv/bin/python", f"PYTHON={sys.executable}")
    # Because its interpreter runs, is new enough and has pip, nothing is rebuilt: make has nothing to do for it.
    assert run.returncode == 0, run.stderr
    assert "making it again" not in run.stdout and "-m venv" not in run.stdout
    assert (project / ".venv" / "bin" / "python").exists()


def test_a_venv_that_fails_to_be_made_is_removed(tmp_path: Path) -> None:
    project = _project(tmp_path / "p")
    broken = tmp_path / "bin" / "python3.11"
    broken.parent.mkdir(parents=True)
    # a Python that passes the version check, then, as `-m venv` without ensurepip does, leaves a half venv and fails
    broken.write_text('#!/bin/sh\ncase "$1" in -m) mkdir -p .venv/bin; touch .venv/bin/python; exit 1;; esac\nexit 0\n')
    broken.chmod(0o755)
    run = _make(project, ".venv/bin/python", f"PYTHON={broken}")
    # Because a half-made .venv would look made to the next make, it goes with the failure.
    assert run.returncode != 0
    assert not (project / ".venv").exists()


def _install_with_logging_venv(project: Path, user_env: dict[str, str]) -> list[str]:
    """Run ``make .venv/.installed`` over a stand-in venv interpreter that passes the Makefile's check and logs every
    other call with the environment it sees; ``user_env`` is added to this process's environment. Returns the log."""
    log = project / "calls.log"
    fake = project / ".venv" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text(
        f'#!/bin/sh\nif [ "$1" = "-c" ]; then echo True; exit 0; fi\n'
        f'echo "PIP_USER=$PIP_USER PYTHONPATH=$PYTHONPATH PYTHONHOME=$PYTHONHOME $*" >> {log}\n'
    )
    fake.chmod(0o755)
    run = _make(project, ".venv/.installed", f"PYTHON={sys.executable}", user_env=user_env)
    assert run.returncode == 0, run.stderr
    return log.read_text().splitlines()


def test_pip_installs_into_the_venv_whatever_the_user_pip_config_says(tmp_path: Path) -> None:
    calls = _install_with_logging_venv(_project(tmp_path / "p"), {"PIP_USER": "1"})
    pip_calls = [line for line in calls if "-m pip install" in line]
    # because a user's "user = true" makes pip refuse to install into a venv, make sets it off for its own pip
    assert pip_calls and all(line.startswith("PIP_USER=0 ") for line in pip_calls)


def test_the_venv_runs_without_the_user_python_path(tmp_path: Path) -> None:
    calls = _install_with_logging_venv(_project(tmp_path / "p"), {"PYTHONPATH": "/elsewhere/site-packages"})
    # because a PYTHONPATH (a cluster's module system sets one) comes before the venv's own packages, an older numpy
    # there would be the one installed against and tested; make's commands run without it
    assert calls and all(" PYTHONPATH= " in line for line in calls)
