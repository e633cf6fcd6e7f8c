"""pyproject.toml's dependency floors and .ci/lower-bounds.txt, the pins that check those floors, say the same."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _floors() -> dict[str, str]:
    """Each dependency of pyproject.toml (the project's and the test extra's) and its ">=" floor, by normalised name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = {}
    for req in [*project["dependencies"], *project["optional-dependencies"]["test"]]:
        m = re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*>=\s*([0-9][0-9A-Za-z.]*)", req)
        if m and not re.search(r"<", req):  # a pinned range (ruff's one minor version) is not a floor to check
            floors[m.group(1).lower().replace("_", "-")] = m.group(3)
    return floors


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / ".ci" / "lower-bounds.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def test_every_floor_is_pinned_at_itself() -> None:
    floors, pins = _floors(), _pins()
    # because a floor nobody installs is a guess: raising one without the pin (or adding a dependency without one)
    # leaves the lower-bound check testing something else
    assert floors, "no floors read from pyproject.toml"
    assert {name: pins.get(name) for name in floors} == floors
