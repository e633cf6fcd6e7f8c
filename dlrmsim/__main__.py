"""`python -m dlrmsim`: the same CLI as the `dlrmsim` command."""

import sys

from dlrmsim.cli import main

sys.exit(main())
