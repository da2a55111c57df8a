"""The sweep service, one layer per folder, lowest first (each imports only the layers before it,
and fade_core, tasks and cluster below them all):

  spec/      what to run: sweep files, presets, planning into packs, what a pack costs (no Ray)
  packs/     how a pack runs: the PackRunner chunk/bin/checkpoint loop, linear and neural runners, the dry run (no Ray)
  store/     the results store: `Store.open(path or URI)`, the one reader and writer of a results folder (no Ray)
  analysis/  what the results mean: statistics, tables, the report, functions of the store's frames (no Ray)
  tune/      everything that touches Ray Tune: the driver, the trainable, pack slots, the store checked from every node
  cli/       the `fade-sweep` command, and a sweep submitted as a Ray Job (`cli/jobs.py`)

See docs/architecture.md.
"""
