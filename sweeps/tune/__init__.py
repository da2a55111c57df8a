"""Everything that touches Ray Tune: the driver (`run_sweep`), the trainable (one trial runs
one pack), the progress display and status.json writer, and `--dry-run` planning."""
