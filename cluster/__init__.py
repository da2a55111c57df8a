"""Where sweeps run: the embedded local Ray or a running cluster."""
