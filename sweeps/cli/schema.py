"""`fade-sweep schema`: the sweep file's JSON Schema on stdout, for editors (the YAML language server's
`# yaml-language-server: $schema=...`) and validators; light: pydantic and the registries, no Ray."""

from __future__ import annotations

import argparse
import json

from sweeps.spec.document import sweep_schema


def cmd_schema(args: argparse.Namespace) -> None:
    print(json.dumps(sweep_schema(), indent=2))
