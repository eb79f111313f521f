"""lazygraph.datasets: the IDX reader on small files written here, the bundled MNIST split, batches."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from lazygraph import datasets

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
@pytest.mark.parametrize("compress", [False, True])
def test_idx_round_trip(tmp_path, dtype, compress):
    arr = (np.arange(2 * 3 * 4) - 5).astype(dtype).reshape(2, 3, 4)
    if dtype == np.uint8:
        arr = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / "a.idx"
    datasets.write_idx(path, arr, compress=compress)
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == compress
    back = datasets.read_idx(path)
    assert back.dtype == np.dtype(dtype) and back.dtype.isnative
    np.testing.assert_array_equal(back, arr)


def test_idx_header_is_the_standard_layout(tmp_path):
    # Written by hand: magic 0x00000801 (ubyte, 1 dim), count 3, then the bytes.
    path = tmp_path / "labels"
    path.write_bytes(bytes([0, 0, 8, 1, 0, 0, 0, 3, 7, 2, 9]))
    np.testing.assert_array_equal(datasets.read_idx(path), [7, 2, 9])
    big = tmp_path / "big"
    big.write_bytes(bytes([0, 0, 0x0B, 1, 0, 0, 0, 2, 1, 2, 0xFF, 0xFE]))  # big-endian int16
    np.testing.assert_array_equal(datasets.read_idx(big), [258, -2])


@pytest.mark.parametrize(
    "data, match",
    [
        (b"\x01\x00\x08\x01", "magic"),
        (bytes([0, 0, 0x42, 1, 0, 0, 0, 1, 0]), "type code"),
        (bytes([0, 0, 8, 2, 0, 0, 0, 2]), "truncated"),
        (bytes([0, 0, 8, 1, 0, 0, 0, 4, 1, 2]), "size mismatch"),
    ],
)
def test_idx_corrupt_files_are_rejected(tmp_path, data, match):
    path = tmp_path / "bad"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=match):
        datasets.read_idx(path)
    gz = tmp_path / "bad.gz"
    gz.write_bytes(gzip.compress(data)[:-3])  # truncated gzip stream
    with pytest.raises(ValueError):
        datasets.read_idx(gz)


def _write_mnist_dir(folder: Path, compress: bool, dotted: bool) -> datasets.MNIST:
    rng = np.random.default_rng(0)
    split = datasets.MNIST(
        rng.integers(0, 256, (12, 28, 28), dtype=np.uint8),
        rng.integers(0, 10, 12).astype(np.uint8),
        rng.integers(0, 256, (5, 28, 28), dtype=np.uint8),
        rng.integers(0, 10, 5).astype(np.uint8),
    )
    for key, stem in datasets.IDX_FILES.items():
        name = stem.replace("-idx", ".idx") if dotted else stem
        datasets.write_idx(
            folder / (name + (".gz" if compress else "")), getattr(split, key), compress=compress
        )
    return split


@pytest.mark.parametrize("compress, dotted", [(False, False), (True, False), (True, True)])
def test_load_mnist_from_idx_dir(tmp_path, compress, dotted):
    want = _write_mnist_dir(tmp_path, compress, dotted)
    got = datasets.load_mnist(tmp_path)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_load_mnist_dir_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        datasets.load_mnist(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
        datasets.load_mnist(tmp_path)
    _write_mnist_dir(tmp_path, False, False)
    datasets.write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.zeros(4, np.uint8))
    with pytest.raises(ValueError, match="test images"):
        datasets.load_mnist(tmp_path)


def test_bundled_split_is_stratified_real_digits():
    d = datasets.load_mnist()
    assert d.x_train.shape == (4000, 28, 28) and d.x_test.shape == (1000, 28, 28)
    assert d.x_train.dtype == np.uint8 and d.y_train.dtype == np.uint8
    np.testing.assert_array_equal(np.bincount(d.y_train, minlength=10), 400)
    np.testing.assert_array_equal(np.bincount(d.y_test, minlength=10), 100)
    assert 0.1 < (d.x_train > 0).mean() < 0.3  # digit strokes on a black background
    train_rows = {row.tobytes() for row in d.x_train}
    assert not any(row.tobytes() in train_rows for row in d.x_test)  # disjoint splits
    assert len(set(d.y_train[:20].tolist())) > 3  # shuffled, not sorted by label


def test_derive_script_split_is_stratified_and_seeded():
    spec = importlib.util.spec_from_file_location("derive", ROOT / "scripts" / "derive_mnist_5k.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    labels = np.repeat(np.arange(10), 50)
    train, test = mod.stratified_split(labels, 10, seed=1)
    assert len(set(train) | set(test)) == 500 and not set(train) & set(test)
    np.testing.assert_array_equal(np.bincount(labels[test]), 10)
    again = mod.stratified_split(labels, 10, seed=1)
    np.testing.assert_array_equal(again[1], test)


def test_batches():
    x, y = np.arange(10).reshape(10, 1), np.arange(10)
    got = list(datasets.batches(x, y, 4))
    assert [len(b[1]) for b in got] == [4, 4, 2] and datasets.num_batches(10, 4) == 3
    assert [len(b[1]) for b in datasets.batches(x, y, 4, drop_last=True)] == [4, 4]
    shuffled = list(datasets.batches(x, y, 3, shuffle=True, rng=np.random.default_rng(0)))
    ys = np.concatenate([b[1] for b in shuffled])
    assert sorted(ys) == list(range(10)) and list(ys) != list(range(10))
    assert all(np.array_equal(b[0][:, 0], b[1]) for b in shuffled)
    with pytest.raises(ValueError, match="batch_size"):
        next(datasets.batches(x, y, 0))
