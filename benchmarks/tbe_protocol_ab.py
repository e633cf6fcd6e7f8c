"""The TBE benchmark's two protocols, interleaved, as two calibration files for ``benchmarks/swap_rows.py``.

Every TBE configuration of the calibration ``CAL`` is timed twice in a row, once with each forward right after the
previous call's backward (the protocol before 2026-11-27) and once after the flush and the rewarm (since), in
alternating order from one configuration to the next, so that the host's drift lands on both alike. ``OUT``-flushed.yaml
and ``OUT``-back-to-back.yaml are ``CAL`` with its TBE rows replaced by each set.

    .venv/bin/python -m benchmarks.tbe_protocol_ab CAL.yaml OUT
    .venv/bin/python -m benchmarks.swap_rows OUT-flushed.yaml OUT-back-to-back.yaml RESULTS.csv --benchmarks tbe \\
        --phases embedding_fwd,embedding_update
"""

from __future__ import annotations

import sys
from pathlib import Path

from dlrmsim.calibration.benchmarks.tbe import calibrated_module, tbe_configs, tbe_rows
from dlrmsim.calibration.benchmarks.timing import QUICK_POLICY
from dlrmsim.calibration.ops import get_ops
from dlrmsim.calibration.schema import Measurement, load_calibration, save_calibration
from dlrmsim.host import last_level_cache_bytes


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    cal_path, out = Path(args[0]), args[1]
    cal = load_calibration(cal_path, warn_other_host=False)
    k = get_ops("torch")
    protocols = {"back-to-back": None, "flushed": k.then_rewarm(k.flush)}
    rows: dict[str, list[Measurement]] = {name: [] for name in protocols}
    configs = tbe_configs(last_level_cache_bytes(), calibrated_module())
    for i, cfg in enumerate(configs):
        order = list(protocols) if i % 2 == 0 else list(reversed(protocols))
        for name in order:
            rows[name] += tbe_rows(cfg, QUICK_POLICY, 1, protocols[name])
        print(f"{i + 1}/{len(configs)}", file=sys.stderr, end="\r")
    kept = [m for m in cal.measurements if m.benchmark != "tbe"]
    for name, got in rows.items():
        path = Path(f"{out}-{name}.yaml")
        save_calibration(cal.model_copy(update={"measurements": kept + got}), path)
        print(f"wrote {path}: {len(got)} TBE rows ({name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
