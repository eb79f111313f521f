"""Derive lazygraph/data/mnist_5k.npz, the MNIST sample the package ships for offline training.

    python3 scripts/derive_mnist_5k.py [SOURCE_CSV_GZ] [--out PATH]

The source is the 5,000-digit MNIST sample (500 per class; 784 pixel values 0-255 then the
label per row). The output holds uint8 arrays x_train (4000, 28, 28), y_train (4000,),
x_test (1000, 28, 28), y_test (1000,): a stratified split (400 train / 100 test per class)
drawn with a fixed seed, so every run of this script produces the same file contents.
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

SEED = 20240611
TEST_PER_CLASS = 100
DEFAULT_SOURCE = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist_5k.csv.gz"
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "lazygraph" / "data" / "mnist_5k.npz"


def read_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 28, 28) uint8 and labels (N,) uint8 from the gzipped CSV."""
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.int64)
    if table.ndim != 2 or table.shape[1] != 785:
        raise ValueError(f"{path}: expected rows of 784 pixels and a label, got shape {table.shape}")
    if table.min() < 0 or table[:, :784].max() > 255 or table[:, 784].max() > 9:
        raise ValueError(f"{path}: pixel or label values out of range")
    return table[:, :784].reshape(-1, 28, 28).astype(np.uint8), table[:, 784].astype(np.uint8)


def stratified_split(labels: np.ndarray, test_per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Index arrays (train, test): `test_per_class` random test digits per class, both shuffled."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        test.append(idx[:test_per_class])
        train.append(idx[test_per_class:])
    # Shuffle across classes: the source is sorted by label.
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Compressed .npz written atomically (temporary file in the same folder, then os.replace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(buf.getvalue())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    """Read the CSV, split it and write the compact file."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", nargs="?", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    x, y = read_csv(args.source)
    train, test = stratified_split(y, TEST_PER_CLASS, SEED)
    write_npz(args.out, {"x_train": x[train], "y_train": y[train], "x_test": x[test], "y_test": y[test]})
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes): {len(train)} train, {len(test)} test")
    return 0


if __name__ == "__main__":
    sys.exit(main())
