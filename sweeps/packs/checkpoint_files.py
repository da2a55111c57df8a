"""The two files of a pack checkpoint folder: written by `PackRunner.save_checkpoint` on a
worker, looked for by a resuming driver (`sweeps.tune.resume`), which has no use for torch."""

CHECKPOINT_FILE = "pack_state.pt"  # tensors only, loaded with weights_only=True
CHECKPOINT_META = "pack.json"  # {"pack_id", "steps_done", "total_steps", "dtype"}
