"""The sweep service, one layer per folder (each imports only the layers below it):

  spec/     what to run: sweep files, presets, planning into packs (no Ray)
  packs/    how a pack runs: the PackRunner chunk/bin/checkpoint loop, linear and neural runners (no Ray)
  results/  the Parquet store, polars queries, tables, the report, status.json (no Ray)
  tune/     everything that touches Ray Tune: the driver, the trainable, progress, dry runs
  cli.py    the `fade-sweep` command

See docs/architecture.md.
"""
