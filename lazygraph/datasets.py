"""Datasets for the examples: MNIST from the bundled 5,000-digit sample or from IDX files.

`load_mnist()` needs no download: the package ships `data/mnist_5k.npz`, 5,000 real MNIST
digits split 4,000 train / 1,000 test, stratified (400 / 100 per class), derived by
`scripts/derive_mnist_5k.py`. `load_mnist(data_dir)` reads the standard IDX files
(`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`,
`t10k-labels-idx1-ubyte`, each optionally gzipped) for the full 60,000 / 10,000 set.
Nothing here executes code from disk: .npz files are read with allow_pickle=False.
"""

from __future__ import annotations

import gzip
import os
import zipfile
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ops.fileio import atomic_write

#: IDX type codes (the third byte of the magic number) -> big-endian NumPy dtypes
IDX_DTYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
IDX_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}


class MNIST(NamedTuple):
    """uint8 images (N, 28, 28) and uint8 labels (N,) for the train and test splits."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def parse_idx(data: bytes, name: str = "<bytes>") -> np.ndarray:
    """Decode IDX bytes (magic 0, 0, type, ndim; big-endian int32 dims; data) to an array."""
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{name}: not an IDX file (bad magic number)")
    code, ndim = data[2], data[3]
    dtype = IDX_DTYPES.get(code)
    if dtype is None:
        raise ValueError(f"{name}: unknown IDX data type code 0x{code:02x}")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{name}: truncated IDX header")
    dims = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    expected = header + int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        raise ValueError(
            f"{name}: IDX size mismatch: dims {dims} need {expected} bytes, file has {len(data)}"
        )
    arr = np.frombuffer(data, dtype=dtype, offset=header).reshape(dims)
    return arr.astype(dtype.newbyteorder("="))  # native byte order, and a writable copy


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file, gzipped or not (detected from the content, not the name)."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise ValueError(f"{path}: corrupt gzip data ({e})") from e
    return parse_idx(raw, str(path))


def write_idx(path: str | os.PathLike, array: np.ndarray, compress: bool = False) -> None:
    """Write an array as an IDX file (gzipped when compress), atomically."""
    arr = np.asarray(array)
    code = next(
        (c for c, dt in IDX_DTYPES.items() if dt == arr.dtype.newbyteorder(">") or dt == arr.dtype), None
    )
    if code is None:
        raise TypeError(f"write_idx: dtype {arr.dtype} has no IDX type code")
    header = bytes([0, 0, code, arr.ndim]) + np.asarray(arr.shape, dtype=">u4").tobytes()
    data = header + arr.astype(IDX_DTYPES[code], copy=False).tobytes()
    if compress:
        data = gzip.compress(data, mtime=0)
    atomic_write(Path(path), data)


def _find_idx(folder: Path, stem: str) -> Path:
    # Distributions name them 'train-images-idx3-ubyte' or 'train-images.idx3-ubyte', maybe .gz.
    dotted = stem.replace("-idx", ".idx")
    for name in (stem, stem + ".gz", dotted, dotted + ".gz"):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"load_mnist: {folder} has no {stem} (or {stem}.gz)")


def _check(split: MNIST, source: str) -> MNIST:
    for xs, ys, part in ((split.x_train, split.y_train, "train"), (split.x_test, split.y_test, "test")):
        if xs.ndim != 3 or ys.ndim != 1 or len(xs) != len(ys):
            raise ValueError(f"{source}: {part} images {xs.shape} and labels {ys.shape} do not match")
        if xs.dtype != np.uint8 or ys.dtype.kind not in "iu" or (ys.size and int(ys.max()) > 9):
            raise ValueError(f"{source}: {part} split is not uint8 images with labels 0-9")
    return MNIST(split.x_train, split.y_train.astype(np.uint8), split.x_test, split.y_test.astype(np.uint8))


def load_bundled_mnist() -> MNIST:
    """The 4,000 / 1,000 digit split shipped inside the package."""
    ref = resources.files("lazygraph").joinpath("data", "mnist_5k.npz")
    try:
        with ref.open("rb") as f, np.load(f, allow_pickle=False) as z:
            split = MNIST(*(z[k] for k in MNIST._fields))
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise ValueError(
            f"load_mnist: the bundled file {ref} is missing or corrupt ({e}); reinstall lazygraph"
        ) from e
    return _check(split, "bundled mnist_5k.npz")


def load_mnist(data_dir: str | os.PathLike | None = None) -> MNIST:
    """MNIST as uint8 arrays: the bundled sample, or the IDX files in `data_dir`."""
    if data_dir is None:
        return load_bundled_mnist()
    folder = Path(data_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"load_mnist: {folder} is not a directory")
    split = MNIST(*(read_idx(_find_idx(folder, IDX_FILES[k])) for k in MNIST._fields))
    return _check(split, str(folder))


def batches(
    x: np.ndarray,
    y: np.ndarray,
    batch_size: int,
    shuffle: bool = False,
    rng: np.random.Generator | None = None,
    drop_last: bool = False,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Mini-batches (x[i], y[i]) in order or in a fresh random order (pass a seeded rng)."""
    if batch_size < 1:
        raise ValueError(f"batches: batch_size must be positive, got {batch_size}")
    if len(x) != len(y):
        raise ValueError(f"batches: {len(x)} inputs but {len(y)} targets")
    n = len(x)
    order = (rng or np.random.default_rng()).permutation(n) if shuffle else np.arange(n)
    stop = n - n % batch_size if drop_last else n
    for i in range(0, stop, batch_size):
        idx = order[i : i + batch_size]
        yield x[idx], y[idx]


def num_batches(n: int, batch_size: int, drop_last: bool = False) -> int:
    """How many batches `batches` yields for n examples."""
    return n // batch_size if drop_last else -(-n // batch_size)
