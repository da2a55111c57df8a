"""`python -m sweeps.cli ...`: the `fade-sweep` command."""

from sweeps.cli import console

console()
