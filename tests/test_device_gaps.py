"""Programs that failed on a real GPU (H200, CuPy 14) where the CPU passed: each runs on the
emulated device in CI and on "cuda" where a GPU is present, against NumPy.

Found by running the suite with `LAZYGRAPH_DEVICE=cuda`: casts and in-place updates that went
through a host array, scans of 0-d arrays, partitions of empty arrays, batched solves with a
broadcast right-hand side, out-of-range gathers (CuPy wraps them around) and complex
scatter-adds (CuPy's add.at takes no complex).
"""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg

DEVICES = ["cuda-emulated", pytest.param("cuda", marks=pytest.mark.cuda)]


@pytest.fixture(params=DEVICES)
def dev(request: pytest.FixtureRequest) -> str:
    return request.param


def test_element_update_with_a_cast(dev: str) -> None:
    a = np.array([True, False, True])
    x = lg.asarray(a, device=dev)
    x[1] += 1  # bool += int: NumPy's cast back into bool
    want = a.copy()
    want[1] += 1
    np.testing.assert_array_equal(x.numpy(), want)
    f = lg.asarray(np.arange(4, dtype=np.int32), device=dev)
    f[2] *= 2.5
    w = np.arange(4, dtype=np.int32)
    w[2] *= 2.5
    np.testing.assert_array_equal(f.numpy(), w)


@pytest.mark.parametrize("fn", ["cumsum", "cumprod"])
def test_scans_of_a_0d_array(dev: str, fn: str) -> None:
    x = lg.asarray(np.float64(2.5), device=dev)
    np.testing.assert_array_equal(
        getattr(lg, fn)(x, axis=0).numpy(), getattr(np, fn)(np.float64(2.5), axis=0)
    )


def test_partition_of_empty_arrays(dev: str) -> None:
    for shape in [(0,), (0, 0), (3, 0)]:
        a = np.zeros(shape)
        got = lg.partition(lg.asarray(a, device=dev), 0, axis=0) if shape[0] else None
        if got is not None:
            assert got.numpy().shape == np.partition(a, 0, axis=0).shape
        got = lg.sort(lg.asarray(a, device=dev), axis=-1)
        assert got.numpy().shape == a.shape


def test_batched_solve_with_a_broadcast_right_hand_side(dev: str) -> None:
    r = np.random.default_rng(0)
    a = r.standard_normal((2, 3, 3)) + 3 * np.eye(3)
    for b in (r.standard_normal((3, 2)), r.standard_normal(3), r.standard_normal((1, 3, 4))):
        got = lg.linalg.solve(lg.asarray(a, device=dev), lg.asarray(b, device=dev)).numpy()
        np.testing.assert_allclose(got, np.linalg.solve(a, b), rtol=1e-12, atol=1e-12)


def test_out_of_range_gathers_raise_index_error(dev: str) -> None:
    x = lg.asarray(np.arange(6.0).reshape(2, 3), device=dev)
    for bad in ([0, 3], [-4]):
        with pytest.raises(IndexError, match="out of bounds"):
            x[:, lg.asarray(np.array(bad), device=dev)].numpy()
    with pytest.raises(IndexError):
        lg.take(x.reshape(-1), lg.asarray(np.array([6]), device=dev)).numpy()
    np.testing.assert_array_equal(x[:, lg.asarray(np.array([-1, 0]), device=dev)].numpy(), [[2, 0], [5, 3]])


def test_complex_scatter_add(dev: str) -> None:
    base = np.zeros(4, dtype=np.complex128)
    idx = np.array([0, 2, 2])
    val = np.array([1 + 1j, 2 - 1j, 0.5j])
    want = base.copy()
    np.add.at(want, idx, val)
    x = lg.asarray(base, device=dev)
    lg.add.at(x, lg.asarray(idx, device=dev), lg.asarray(val, device=dev))
    np.testing.assert_array_equal(x.numpy(), want)


def test_operations_of_python_scalars_only_under_a_device_default(dev: str) -> None:
    with lg.device(dev):
        a = lg.add(2, 3)  # neutral: it joins whatever device it meets
        assert int(a) == 5 and a.numpy().dtype == np.int64
        x = lg.asarray(np.ones(3)) + lg.multiply(2.0, 1.5)
        np.testing.assert_array_equal(x.numpy(), np.full(3, 4.0))
        assert not bool(lg.isnan(lg.asarray(1.0)))


def test_a_numpy_value_written_over_a_whole_device_array_is_copied_there(dev: str) -> None:
    # nn.init's `w[...] = values` made a device parameter hold host memory: its first training
    # step then recorded a host leaf and the second a device one (two structures, not one)
    x = lg.zeros((3, 4), dtype=np.float32, device=dev)
    vals = np.arange(12, dtype=np.float32).reshape(3, 4)
    x[...] = vals
    assert not isinstance(x.node.buffer, np.ndarray)
    vals[0, 0] = -1.0  # the write copied the value, as NumPy's does
    np.testing.assert_array_equal(x.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4))
    with lg.device(dev):
        layer = lg.nn.Linear(5, 4)
    assert all(not isinstance(p.node.buffer, np.ndarray) for p in layer.parameters())


def test_a_training_step_records_one_structure_from_the_first_step(dev: str) -> None:
    lg.manual_seed(0)
    with lg.device(dev):
        model = lg.nn.Sequential(lg.nn.Linear(5, 16), lg.nn.ReLU(), lg.nn.Linear(16, 3))
    opt = lg.optim.SGD(model.parameters(), 0.1, momentum=0.9)
    rng = np.random.default_rng(0)
    lg.cache.reset_stats()
    for _ in range(3):
        x = lg.asarray(rng.standard_normal((8, 5)).astype(np.float32), device=dev)
        loss = lg.nn.functional.cross_entropy(model(x), rng.integers(0, 3, 8))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert lg.cache.stats()["distinct_graphs"] == 1
