"""benchmarks/bench_reference_gap.py: the reference DLRM's step with its batches built in the loop and before it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.bench_reference_gap import CACHED, main, prebuilt_copy, profile_rows

# A stand-in for dlrm_s_pytorch.py: the training loop's anchor, per-step "ms/it" lines (slower where the batches are
# built in the loop, as the benchmark's copy is told apart by its file name), and with --enable-profiling a table.
FAKE = """
import sys
from pathlib import Path
def train(ext_dist, torch):
    ext_dist.barrier()
    with torch.autograd.profiler.profile(False):
        pass
ms = 10.0 if Path(sys.argv[0]).name == "dlrm_cached.py" else 12.0
for i in range(20):
    print(f"Finished training it {i + 1}/20 of epoch 0, {ms + 0.01 * i:.2f} ms/it, loss 0.7")
if "--enable-profiling" in sys.argv:
    Path("dlrm_s_pytorch_x_total.prof").write_text(
        "Name  Self CPU %  Self CPU  CPU total %  CPU total  CPU time avg  # of Calls\\n"
        "aten::add  9.47%  200.000ms  9.49%  200.2ms  2.9ms  100\\n"
    )
"""

TABLE = """------------------  -------  ---------  -----------  ---------  ------------  ----------
              Name  Self CPU %  Self CPU  CPU total %  CPU total  CPU time avg  # of Calls
------------------  -------  ---------  -----------  ---------  ------------  ----------
         aten::add    9.47%  439.067ms        9.49%  440.233ms       2.935ms         150
aten::index_select    2.85%  132.162ms        2.87%  133.014ms       1.108ms         120
       aten::empty    0.24%   10.998us        0.24%   10.998ms       6.543us        1681
"""


def test_the_copy_builds_every_batch_before_the_training_loop() -> None:
    copy = prebuilt_copy(FAKE)
    # because the one added line must sit right before the loop's profiler block, inside the same function
    assert "    train_ld = list(train_ld)" in copy and copy.index("list(train_ld)") < copy.index("profiler.profile(")
    assert copy.replace("    train_ld = list(train_ld)  # dlrmsim: every batch built before training\n", "") == FAKE
    with pytest.raises(SystemExit, match="anchor"):
        prebuilt_copy("print('another script')")


def test_profile_tables_are_read_per_operator() -> None:
    rows = profile_rows(TABLE)
    # because the self CPU column carries its unit, and the header and rule lines are not operators
    assert rows == {
        "aten::add": (pytest.approx(0.439067), 150),
        "aten::index_select": (pytest.approx(0.132162), 120),
        "aten::empty": (pytest.approx(10.998e-6), 1681),
    }


def test_both_versions_run_interleaved_and_are_kept(tmp_path: Path) -> None:
    ref = tmp_path / "dlrm"
    ref.mkdir()
    (ref / "dlrm_s_pytorch.py").write_text(FAKE)
    out = tmp_path / "out"
    assert main(["--reference", str(ref), "--threads", "1", "2", "--rounds", "1", "--profile", "--out", str(out)]) == 0
    (path,) = out.glob("*-reference-gap.json")
    rows = json.loads(path.read_text())["rows"]
    timed = [(r["threads"], r["version"], round(r["median_ms"], 2)) for r in rows if r["round"] == 0]
    # because each thread count runs the published script and then the copy, and the medians skip 5 warm-up steps
    assert timed == [
        (1, "as published", 12.12),
        (1, "batches prebuilt", 10.12),
        (2, "as published", 12.12),
        (2, "batches prebuilt", 10.12),
    ]
    profiled = [r for r in rows if r["round"] == "profile"]
    assert len(profiled) == 4 and profiled[0]["ops_ms_per_step"] == {"aten::add": 10.0}  # 200 ms over 20 steps
    assert sorted(p.name for p in ref.iterdir()) == ["dlrm_s_pytorch.py"]  # the checkout is left as it was
    assert CACHED not in {p.name for p in ref.iterdir()}
