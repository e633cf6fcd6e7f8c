"""The exploration notebooks run top to bottom without an error, and are committed without outputs.

Each notebook reads DLRMSIM_NOTEBOOK_SMALL: set to 1 it cuts its rank lists, fabric sizes and (notebook 03) the
calibration to a tiny subset, so the default suite executes all three in about a minute on 2 cores; notebook 03
reads the session's tiny calibration (DLRMSIM_CALIBRATION) instead of measuring one of its own. The
full-size runs (Large at 64 ranks, a whole quick calibration) are opt-in: ``pytest -m slow tests/test_notebooks.py``.

The kernel is always this interpreter (the venv's python with dlrmsim installed): the test writes its own
``python3`` kernelspec into a temporary directory instead of trusting whichever ``python3`` kernel Jupyter
would find first on this machine.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
REQUIRED = ("01_topologies.ipynb", "02_scaling_what_if.ipynb", "03_calibration.ipynb")
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))


def test_required_notebooks_present() -> None:
    assert set(REQUIRED) <= {p.name for p in NOTEBOOKS}, sorted(p.name for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path: Path) -> None:
    """Outputs (and execution counts) are stripped before committing: diffs stay readable and small."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count is not None)]
    assert not dirty, f"{path.name}: code cells {dirty} carry outputs; clear them before committing"
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "DLRMSIM_NOTEBOOK_SMALL" in source, f"{path.name} must read DLRMSIM_NOTEBOOK_SMALL (the small settings of these tests)"
    assert "matplotlib" not in source, "figures are plotly"


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding a ``python3`` kernelspec that starts ``sys.executable -m ipykernel_launcher``."""
    root = tmp_path_factory.mktemp("kernels")
    spec = root / "python3"
    spec.mkdir()
    spec.joinpath("kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (dlrmsim test venv)",
                "language": "python",
            }
        )
    )
    return root


def execute(path: Path, kernel_dir: Path, workdir: Path, timeout_s: int) -> nbformat.NotebookNode:
    """Run every cell in a fresh kernel with ``workdir`` as its working directory; raise on the first error."""
    nb = nbformat.read(path, as_version=4)
    km = KernelManager(kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernel_dir)]))
    client = NotebookClient(
        nb, km=km, kernel_name="python3", timeout=timeout_s, allow_errors=False, resources={"metadata": {"path": str(workdir)}}
    )
    client.execute()
    return nb


def _check_ran(nb: nbformat.NotebookNode, name: str) -> None:
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is not None for c in code), f"{name}: not every cell ran"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    figures = sum(1 for c in code for o in c.outputs if "application/vnd.plotly.v1+json" in o.get("data", {}))
    assert figures >= 3, f"{name}: expected plotly figures in the outputs, found {figures}"


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "name",
    # 03 reads the session's calibration: it runs with the calibration tests (serial, see tests/conftest.py)
    [pytest.param(n, marks=[pytest.mark.serial] if n == "03_calibration.ipynb" else []) for n in REQUIRED],
    ids=lambda n: n.removesuffix(".ipynb"),
)
def test_notebook_runs_small(
    name: str, kernel_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.setenv("DLRMSIM_NOTEBOOK_SMALL", "1")
    if name == "03_calibration.ipynb":
        # the session's tiny calibration (tests/conftest.py) instead of measuring another: the calibration tests run
        # the same plan through the same run_calibration, and test_notebook_runs_full measures inside the notebook
        monkeypatch.setenv("DLRMSIM_CALIBRATION", str(request.getfixturevalue("quick_cal_path")))
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebooks' temporary files land in pytest's directory
    # No wall-time assertion (a timed test passes or fails with the host's load): each cell has a 300 s timeout,
    # and `pytest --durations` shows what small mode costs.
    nb = execute(NOTEBOOK_DIR / name, kernel_dir, tmp_path, timeout_s=300)
    _check_ran(nb, name)
    _check_clean(tmp_path, name)


def _check_clean(tmp: Path, name: str) -> None:
    # because TMPDIR pointed the notebook's tempfile calls here, a directory it forgot to delete shows up here
    # (on a user's machine it would pile up in /tmp with every run)
    left = sorted(p.name for p in tmp.glob("dlrmsim-*"))
    assert left == [], f"{name} left temporary files behind: {left}; use tempfile.TemporaryDirectory"


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("name", REQUIRED, ids=lambda n: n.removesuffix(".ipynb"))
def test_notebook_runs_full(name: str, kernel_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLRMSIM_NOTEBOOK_SMALL", "0")
    monkeypatch.delenv("DLRMSIM_CALIBRATION", raising=False)  # notebook 03 measures
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    _check_ran(execute(NOTEBOOK_DIR / name, kernel_dir, tmp_path, timeout_s=1800), name)
    _check_clean(tmp_path, name)
