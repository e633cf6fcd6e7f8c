"""The report renders in headless Chromium with the network cut off: one non-empty SVG per figure, no console errors.

Needs Debian's ``chromium`` (``apt-get install -y chromium``); skipped with a message where it is missing.
No DevTools client: a copy of the page gets a small script that records errors, console.error calls and every
resource the page loaded into the DOM, which ``--dump-dom`` prints after plotly has drawn.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from dlrmsim.studies.report import build_report, topology_figures
from dlrmsim.studies.results import load_results
from dlrmsim.studies.runner import run_sweep
from dlrmsim.studies.spec import plan_sweep
from tests.studies import sweep_evaluators as ev

CHROMIUM = next((p for p in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")) if p and Path(p).exists()), None)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install -y chromium) - report render not checked"),
]

PROBE = """<script>
window.__dlrmsimErrors = [];
window.addEventListener("error", function (e) { window.__dlrmsimErrors.push("error: " + e.message); });
window.addEventListener("unhandledrejection", function (e) { window.__dlrmsimErrors.push("unhandled rejection: " + e.reason); });
(function () {
  var original = console.error;
  console.error = function () { window.__dlrmsimErrors.push("console.error: " + Array.prototype.join.call(arguments, " ")); original.apply(console, arguments); };
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
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # no network: any http(s) fetch fails and shows up below
        "--enable-logging=stderr", "--v=0", "--virtual-time-budget=15000", "--dump-dom", page.as_uri(),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


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
