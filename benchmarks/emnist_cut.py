"""A cut of the EMNIST bymerge test split small enough to travel to the GPU machine (gpu_bundle.sh puts it in
the bundle; gpu_check_emnist.sh's sweep reads it): the first N images and their labels, as gzip-compressed
IDX files under the split's own names, so `data_dir` points at the cut as at the whole split.

    python benchmarks/emnist_cut.py SOURCE_DIR DEST_DIR [--images 12000]

The stream draws images uniformly from whatever the files hold, so a sweep on the cut is the same sweep
on every machine that has the cut (not the published one on the whole split).
"""

from __future__ import annotations

import argparse
import gzip
import struct
import sys
from pathlib import Path

NAMES = ("emnist-bymerge-test-images-idx3-ubyte.gz", "emnist-bymerge-test-labels-idx1-ubyte.gz")


def cut(source: Path, dest: Path, images: int) -> tuple[int, int]:
    """Writes the first `images` items of both files of `source` into `dest` -> (items, bytes written)."""
    dest.mkdir(parents=True, exist_ok=True)
    written = 0
    for name in NAMES:
        data = gzip.decompress((source / name).read_bytes())
        magic, count = struct.unpack(">II", data[:8])
        dims = magic & 0xFF
        shape = struct.unpack(f">{dims - 1}I", data[8 : 4 + 4 * dims]) if dims > 1 else ()
        item = 1
        for size in shape:
            item *= size
        keep = min(images, count)
        header = struct.pack(">II", magic, keep) + data[8 : 4 + 4 * dims]
        body = data[4 + 4 * dims : 4 + 4 * dims + keep * item]
        out = dest / name
        out.write_bytes(gzip.compress(header + body, compresslevel=9, mtime=0))
        written += out.stat().st_size
    return keep, written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--images", type=int, default=12_000)
    args = parser.parse_args()
    missing = [n for n in NAMES if not (args.source / n).is_file()]
    if missing:
        print(f"emnist_cut.py: {args.source} lacks {', '.join(missing)}; point it at the bymerge test split "
              "(/work/shared/data/emnist or $FADE_EMNIST_DIR)", file=sys.stderr)
        sys.exit(2)
    items, size = cut(args.source, args.dest, args.images)
    print(f"{args.dest}: the first {items:,} images and labels, {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
