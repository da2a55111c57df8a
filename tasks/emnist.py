"""Label-permuted EMNIST streams of tasks.md (full, and partial with stable classes).

Each step draws one image uniformly at random (with replacement); at step 0 and every
`period` steps a fresh permutation of the labels is drawn (in the partial variant,
`stable_classes` classes chosen per seed keep their label and only the others are
permuted among themselves). Draws come in counter-based blocks (`tasks.stream`), and
permutation k from its own generator.

The stream yields image indices and permuted labels; the images stay in one compact
uint8 tensor per worker process (`load_emnist`, cached), which the engine indexes on
its device.
"""

from __future__ import annotations

import functools
import gzip
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fade_core.architecture import Architecture
from tasks.stream import BLOCK, CounterStream, check_settings, counter_rng

if TYPE_CHECKING:  # torch is imported where tensors are made: the task registry is read by light commands
    import torch

CLASSES = 47  # balanced and bymerge share these 47 classes (0-9A-Zabdefghnqrt)
SPLITS_WITH_47_CLASSES = ("balanced", "bymerge")
PIXELS = 28 * 28
STUDENT = Architecture((PIXELS, 300, 150, CLASSES), negative_slope=0.01)
DATA_DIR_ENV = "FADE_EMNIST_DIR"
DOWNLOAD_HINT = (
    "get gzip.zip from https://biometrics.nist.gov/cs_links/EMNIST/gzip.zip (or let torchvision.datasets.EMNIST "
    "download it once) and put its emnist-*-ubyte.gz files there"
)

# Purposes of the counter-based generators; never reorder (streams would change).
_DRAWS, _PERMUTATIONS, _STABLE = range(3)


class DatasetError(ValueError):
    """The EMNIST files are missing or unreadable; the message says what is expected where."""


@dataclass(frozen=True)
class EmnistSettings:
    """Settings of interface.md. `data_dir` "" means $FADE_EMNIST_DIR; a relative path is
    taken from the directory the sweep is started in."""

    steps: int = 5_000_000
    period: int = 2_500  # steps between label permutations
    data_dir: str = ""
    split: str = "balanced"
    train: bool = True
    bin: int = 2_500  # steps per logged bin (one point per permutation window by default)
    stable_classes: int = 0  # classes that keep their label (the partial variant: 24)

    def __post_init__(self) -> None:
        directory = self.data_dir or os.environ.get(DATA_DIR_ENV, "")
        object.__setattr__(self, "data_dir", str(Path(directory).expanduser().absolute()) if directory else "")

    def check(self) -> None:
        check_settings("EMNIST", steps=self.steps, period=self.period, bin=self.bin)
        if self.split not in SPLITS_WITH_47_CLASSES:
            raise ValueError(f"EMNIST split {self.split!r} does not have the task's 47 classes; use one of {', '.join(SPLITS_WITH_47_CLASSES)}")
        if not 0 <= self.stable_classes <= CLASSES - 2:
            raise ValueError(f"stable_classes must be in [0, {CLASSES - 2}], got {self.stable_classes}")


@dataclass(frozen=True)
class PartialEmnistSettings(EmnistSettings):
    stable_classes: int = 24


def _idx_files(settings: EmnistSettings) -> tuple[Path, Path]:
    """The images and labels files, in `data_dir` itself or in torchvision's data_dir/EMNIST/raw."""
    if not settings.data_dir:
        raise DatasetError(
            f"no EMNIST folder given: set task_settings.data_dir or ${DATA_DIR_ENV} to a folder holding "
            f"emnist-{settings.split}-{'train' if settings.train else 'test'}-images-idx3-ubyte(.gz) and its labels file"
        )
    part = "train" if settings.train else "test"
    root = Path(settings.data_dir)
    found = []
    for kind, ndim in (("images", 3), ("labels", 1)):
        name = f"emnist-{settings.split}-{part}-{kind}-idx{ndim}-ubyte"
        candidates = [d / f"{name}{ext}" for d in (root, root / "EMNIST" / "raw") for ext in ("", ".gz")]
        path = next((c for c in candidates if c.is_file()), None)
        if path is None:
            raise DatasetError(f"EMNIST {settings.split}/{part}: no {name}[.gz] in {root} or {root / 'EMNIST' / 'raw'}; {DOWNLOAD_HINT}")
        found.append(path)
    return found[0], found[1]


def _read_idx(path: Path, ndim: int) -> np.ndarray:
    """An unsigned-byte IDX array (optionally gzipped), with its header checked."""
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise DatasetError(f"cannot read {path}: {err}; {DOWNLOAD_HINT}") from None
    header = 4 + 4 * ndim
    if len(data) < header or data[:3] != b"\x00\x00\x08" or data[3] != ndim:
        raise DatasetError(f"{path} is not an unsigned-byte IDX file with {ndim} dimension(s); {DOWNLOAD_HINT}")
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    if len(data) - header != int(np.prod(shape)):
        raise DatasetError(f"{path} is truncated or corrupt: header says {shape}, body has {len(data) - header} bytes")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


def _read_checked(images_path: Path, labels_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The images (N, 28, 28) and labels (N,) arrays, every header and size checked."""
    images, labels = _read_idx(images_path, 3), _read_idx(labels_path, 1)
    if images.shape[1:] != (28, 28) or len(images) != len(labels):
        raise DatasetError(f"{images_path} and {labels_path} do not match: {images.shape} images, {labels.shape} labels")
    if labels.max() >= CLASSES:
        raise DatasetError(f"{labels_path} has label {labels.max()}, but the task has {CLASSES} classes")
    return images, labels


@functools.lru_cache(maxsize=2)
def _load(images_path: Path, labels_path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = _read_checked(images_path, labels_path)
    import torch

    return torch.from_numpy(images.reshape(len(images), PIXELS).copy()), torch.from_numpy(labels.astype(np.int64))


def load_emnist(settings: EmnistSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (N, 784) uint8 and labels (N,) int64, decoded once per process and cached."""
    return _load(*_idx_files(settings))


def check_data(settings: EmnistSettings) -> None:
    """Raise DatasetError now (before a sweep starts) if the dataset is missing or unreadable
    (read and checked whole, but not kept, nor made tensors: the driver has no use for torch)."""
    _read_checked(*_idx_files(settings))


def pixels_to_inputs(images: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """uint8 pixels -> the network's input (float32 unless `dtype`): scaled to [0, 1], then (x - 0.5) / 0.5."""
    import torch

    return (images.to(dtype or torch.float32) / 255.0 - 0.5) / 0.5


@functools.lru_cache(maxsize=4)
def _images_on(settings_files: tuple[Path, Path], device: torch.device) -> torch.Tensor:
    return _load(*settings_files)[0].to(device)


class LabelPermutedStream(CounterStream):
    """One seed's stream; `chunk(start, n)` gives image indices (n,) and permuted labels (n,), int64."""

    def __init__(self, settings: EmnistSettings, seed: int):
        super().__init__(settings, seed)
        self.labels = load_emnist(settings)[1].numpy()
        stable = counter_rng(seed, _STABLE).permutation(CLASSES)[: settings.stable_classes]
        self.stable = np.sort(stable)
        self.moving = np.setdiff1d(np.arange(CLASSES), self.stable)

    def inputs(self, index: torch.Tensor, device: torch.device | str, dtype: torch.dtype) -> torch.Tensor:
        """Network inputs (n, 784) of the images drawn, gathered from one uint8 copy on `device`."""
        import torch

        images = _images_on(_idx_files(self.settings), torch.device(device))
        return pixels_to_inputs(images[index.to(images.device)], dtype)

    def permutation(self, k: int) -> np.ndarray:
        """Label map in force during window k (steps [k * period, (k + 1) * period))."""
        perm = np.arange(CLASSES)
        shuffle = counter_rng(self.seed, _PERMUTATIONS, k).permutation(len(self.moving))
        perm[self.moving] = self.moving[shuffle]
        return perm

    def _block(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        index = counter_rng(self.seed, _DRAWS, b).integers(0, len(self.labels), size=BLOCK)
        windows = np.arange(b * BLOCK, (b + 1) * BLOCK) // self.settings.period
        target = np.empty(BLOCK, dtype=np.int64)
        for k in np.unique(windows):
            where = windows == k
            target[where] = self.permutation(int(k))[self.labels[index[where]]]
        return index, target
