"""Every HTML page dlrmsim writes renders offline: plotly.js embedded, nothing fetched from a network.

Without a browser (CI installs nothing beyond pip): each kind of page (``topology show --html``, the sweep report,
the ``scaling --html`` report, the demo report) has no external ``src``/``href`` and carries plotly.js itself.
With Debian's ``chromium`` (``apt-get install -y chromium``; skipped with a message where it is missing): each
page is screenshotted in headless Chromium with name resolution switched off and must not be blank, and the
sweep report is checked in detail: one non-empty SVG per figure, no console errors. No DevTools client: a copy
of that page gets a small script that records errors, console.error calls and every resource the page loaded
into the DOM, which ``--dump-dom`` prints after plotly has drawn.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml
from plotly.offline import get_plotlyjs

from dlrmsim.cli import main as cli_main
from dlrmsim.studies.demo import run_demo
from dlrmsim.studies.report import build_report, topology_figures
from dlrmsim.studies.results import load_results
from dlrmsim.studies.runner import run_sweep
from dlrmsim.studies.spec import plan_sweep
from tests.studies import sweep_evaluators as ev
from tests.studies.conftest import EVALUATORS, TOY_TOPOLOGY
from tests.studies.html_checks import OfflineParser

CHROMIUM = next(
    (p for p in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")) if p and Path(p).exists()), None
)

needs_browser = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium not installed (apt-get install -y chromium): HTML rendering not checked in a browser",
)
KINDS = ("topology-show", "sweep-report", "scaling-report", "demo-report")
PLOTLY_BANNER = get_plotlyjs()[:40]  # "/**\n* plotly.js vX.Y.Z\n* Copyright ..." - the bundle's first line


def _cli(*args: str) -> None:
    try:
        cli_main(list(args))
    except SystemExit as exc:
        assert not exc.code, f"dlrmsim {' '.join(args)} exited {exc.code}"


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One page of each kind dlrmsim writes, made the way a user makes it (small inputs, a few seconds)."""
    root = tmp_path_factory.mktemp("pages")
    out = {kind: root / f"{kind}.html" for kind in KINDS}
    _cli("topology", "show", "skx-8s-upi", "--html", str(out["topology-show"]))
    _cli("scaling", "-t", "skx-8s-upi", "-w", "small", "-r", "1,2,4", "--html", str(out["scaling-report"]))
    run_demo(root / "demo", topologies=("skx-8s-upi",), workloads=("small",))  # `dlrmsim demo`, cut to one topology and workload
    out["demo-report"] = root / "demo" / "report.html"
    (root / "toy_topology.yaml").write_text(yaml.safe_dump(TOY_TOPOLOGY))
    grid = {
        "topology": "toy_topology.yaml",
        "workload": "small",
        "ranks": [1, 2],
        "blocking": [False, True],
        "topology_overrides": {"links.net.bandwidth_GBps": [12.5, 25]},
    }
    spec = root / "spec.yaml"
    spec.write_text(yaml.safe_dump({"name": "pages", "evaluator": f"{EVALUATORS}:cheap", "grid": grid}, sort_keys=False))
    run_sweep(plan_sweep(spec).points, root / "sweep", ev.cheap, serial=True, progress=False)
    build_report(load_results(root / "sweep"), out["sweep-report"])
    return out


class _Scripts(OfflineParser):
    def __init__(self) -> None:
        super().__init__()
        self.inline: list[str] = []
        self._in_script = False

    def on_tag(self, tag: str, attrs: dict[str, str | None]) -> None:
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.inline.append(data)


@pytest.mark.parametrize("kind", KINDS)
def test_every_html_page_carries_plotly_and_loads_nothing(pages: dict[str, Path], kind: str) -> None:
    page = pages[kind].read_text(encoding="utf-8")
    scripts = _Scripts()
    scripts.feed(page)
    # because `topology show --html` used include_plotlyjs="cdn" and drew a blank page offline
    assert scripts.external == [], scripts.external
    assert not re.search(r"<script[^>]+src=", page), "a <script src=...> needs a network or a second file"
    assert sum(PLOTLY_BANNER in s for s in scripts.inline) == 1, "plotly.js is embedded exactly once"
    assert "Plotly.newPlot" in page


def test_no_html_writer_in_the_package_uses_a_cdn() -> None:
    # because a new HTML writer (a study report, a notebook helper) must render offline like the four kinds above
    package = Path(__file__).resolve().parents[2] / "dlrmsim"
    offenders = [
        f"{path.relative_to(package.parent)}: {needle}"
        for path in sorted(package.rglob("*.py"))
        for needle in ('include_plotlyjs="cdn"', "include_plotlyjs='cdn'", "cdn.plot.ly", 'include_plotlyjs="directory"')
        if needle in path.read_text(encoding="utf-8")
    ]
    assert offenders == []


def _screenshot(page: Path, png: Path, profile: Path, height: int = 1200) -> None:
    profile.mkdir(exist_ok=True)
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--virtual-time-budget=15000",
        f"--window-size=1300,{height}",
        f"--screenshot={png}",
        page.as_uri(),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and png.exists(), done.stderr[-2000:]


def coloured_pixels(png: Path) -> int:
    """Pixels whose channels differ by more than 60 of 255: plotted traces, not text (black/grey) or background (white)."""
    image = pytest.importorskip("PIL.Image", reason="Pillow not installed: screenshot not analysed").open(png).convert("RGB")
    pixels = image.get_flattened_data() if hasattr(image, "get_flattened_data") else image.getdata()  # Pillow >= 12.1 / older
    return sum(1 for r, g, b in pixels if max(r, g, b) - min(r, g, b) > 60)


@pytest.mark.browser
@needs_browser
@pytest.mark.parametrize("kind", KINDS)
def test_every_html_page_draws_offline(pages: dict[str, Path], kind: str, tmp_path: Path) -> None:
    png = tmp_path / f"{kind}.png"
    _screenshot(pages[kind], png, tmp_path / "profile")
    # because a page whose plotly.js did not load shows only its headings and table (or nothing): no colour at all;
    # one drawn chart colours thousands of pixels (markers, lines, bars)
    assert coloured_pixels(png) > 2000, f"{kind}: screenshot has no chart drawn"


@pytest.mark.browser
@needs_browser
def test_the_blank_check_can_fail(tmp_path: Path) -> None:
    # because a test that cannot fail is a defect: a page whose plotly.js comes from a CDN must count as blank offline
    page = tmp_path / "blank.html"
    page.write_text(
        '<html><body><h1>dlrmsim</h1><div id="f"></div><script src="https://cdn.plot.ly/plotly-3.0.0.min.js"></script>'
        '<script>Plotly.newPlot("f", [{"y": [1, 3, 2]}]);</script></body></html>'
    )
    png = tmp_path / "blank.png"
    _screenshot(page, png, tmp_path / "profile")
    assert coloured_pixels(png) < 100


PROBE = """<script>
window.__dlrmsimErrors = [];
window.addEventListener("error", function (e) { window.__dlrmsimErrors.push("error: " + e.message); });
window.addEventListener("unhandledrejection", function (e) { window.__dlrmsimErrors.push("unhandled rejection: " + e.reason); });
(function () {
  var original = console.error;
  console.error = function () {
    window.__dlrmsimErrors.push("console.error: " + Array.prototype.join.call(arguments, " "));
    original.apply(console, arguments);
  };
})();
window.addEventListener("load", function () {
  setTimeout(function () {
    var pre = document.createElement("pre");
    pre.id = "dlrmsim-probe";
    pre.textContent = JSON.stringify({errors: window.__dlrmsimErrors,
      resources: performance.getEntriesByType("resource").map(function (r) { return r.name; })});
    document.body.appendChild(pre);
  }, 1000);
});
</script>"""


def _render(page: Path, tmp_path: Path) -> tuple[str, str]:
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # no network: any http(s) fetch fails and shows up below
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=15000",
        "--dump-dom",
        page.as_uri(),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


@pytest.mark.browser
@needs_browser
def test_every_chart_renders_offline_without_console_errors(write_spec, tmp_path: Path) -> None:
    spec = write_spec(evaluator="failing", blocking=[False, True], topology_overrides={"links.net.bandwidth_GBps": [12.5, 25]})
    out = tmp_path / "sweep"
    run_sweep(plan_sweep(spec).points, out, ev.failing, serial=True, progress=False)
    # the drawing of a real topology preset too, when the topology package can draw one
    drawings, _ = topology_figures(pd.DataFrame({"topology": ["skx-8s-upi"]}))
    page = build_report(load_results(out), tmp_path / "report.html", topology_figures=drawings).read_text()
    expected = int(re.search(r'<meta name="dlrmsim-figures" content="(\d+)">', page).group(1))
    assert expected == 5 + len(drawings)
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("<head>", "<head>\n" + PROBE, 1))

    dom, log = _render(probed, tmp_path)

    probe = re.search(r'<pre id="dlrmsim-probe">(.*?)</pre>', dom, re.S)
    assert probe, "the page never finished loading in Chromium"
    found = json.loads(probe.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    assert found["errors"] == []
    assert [r for r in found["resources"] if not r.startswith(("file:", "data:", "blob:"))] == []
    console = [ln for ln in log.splitlines() if ":CONSOLE" in ln and re.search(r"Uncaught|Error|Failed to load", ln)]
    assert console == []

    chunks = re.split(r'<div class="figure" data-figure="\d+">', dom)[1:]
    assert len(chunks) == expected
    for i, chunk in enumerate(chunks):
        chunk = chunk.split('<div class="figure"', 1)[0]
        assert re.search(r'<svg class="main-svg"', chunk), f"figure {i}: no SVG drawn"
        assert re.search(r'<g class="trace[ "]', chunk), f"figure {i}: SVG has no traces"
        assert re.search(r'<path [^>]*d="M', chunk), f"figure {i}: SVG has no drawn paths"
        assert re.search(r'class="gtitle"', chunk), f"figure {i}: no title drawn"
