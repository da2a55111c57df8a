"""`python -m sweeps.cli ...`: the `fade-sweep` command."""

import sys

from sweeps.cli import main

sys.exit(main())
