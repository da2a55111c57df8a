"""A small synthetic EMNIST in the real IDX format, so tests never need the real data."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np


def idx_bytes(array: np.ndarray) -> bytes:
    """An unsigned-byte IDX file: magic 0x0000 08 <ndim>, big-endian sizes, then the bytes."""
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_idx_dataset(directory: Path, images: int = 600, split: str = "balanced", train: bool = True,
                      compress: bool = True, labels: np.ndarray | None = None) -> Path:
    """Images whose mean brightness pattern depends on the class, plus noise; returns `directory`."""
    rng = np.random.default_rng(0)
    if labels is None:
        labels = np.arange(images) % 47
    patterns = rng.integers(0, 256, size=(47, 28, 28))
    pixels = np.clip(patterns[labels] + rng.integers(-40, 40, size=(len(labels), 28, 28)), 0, 255)
    part = "train" if train else "test"
    directory.mkdir(parents=True, exist_ok=True)
    for kind, ndim, array in (("images", 3, pixels), ("labels", 1, labels)):
        data = idx_bytes(array)
        name = f"emnist-{split}-{part}-{kind}-idx{ndim}-ubyte"
        if compress:
            (directory / f"{name}.gz").write_bytes(gzip.compress(data))
        else:
            (directory / name).write_bytes(data)
    return directory
