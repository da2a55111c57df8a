"""The two files of a pack checkpoint folder, written on a worker (the tensors by
`PackRunner.save_checkpoint`, the record by the trainable), looked for by a resuming driver
(`sweeps.tune.resume`), which has no use for torch."""

CHECKPOINT_FILE = "pack_state.pt"  # tensors only, loaded with weights_only=True
CHECKPOINT_META = "pack.json"  # sweeps.store.records.CheckpointRecord: pack_id, steps_done, total_steps, dtype
