"""Regenerate ``simulate.json`` (only in a commit that changes the model on purpose and says why).

python -m tests.golden.record          # default scenarios
python -m tests.golden.record --slow   # also the large-rank scenarios
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.golden.scenarios import run, scenarios

GOLDEN = Path(__file__).with_name("simulate.json")


def main(argv: list[str]) -> None:
    with_slow = "--slow" in argv
    data = json.loads(GOLDEN.read_text()) if GOLDEN.is_file() else {}
    for s in scenarios():
        if s.slow and not with_slow:
            continue
        print(s.name, file=sys.stderr, flush=True)
        data[s.name] = run(s)
    GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
