"""Dask arrays of lazygraph chunks: the same Dask code on NumPy chunks is the reference.

Every chunk is a lazygraph Array, results come back as lazygraph arrays, each task's chunk
runs as one cached graph (hit rate 1 - 1/chunks per chunk shape and process), and the cache
figures are gathered from a LocalCluster's workers.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lazygraph as lg

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
lgd = pytest.importorskip("lazygraph.dask")


def _pair(a: np.ndarray, chunks):
    """The same Dask array twice: lazygraph chunks and NumPy chunks."""
    return da.from_array(lg.asarray(a), chunks=chunks), da.from_array(a, chunks=chunks)


def _check(out, expected, rtol=1e-10):
    assert isinstance(out, lg.Array), type(out)
    assert out.dtype == np.asarray(expected).dtype, (out.dtype, np.asarray(expected).dtype)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=rtol, atol=1e-12)


@pytest.fixture
def cold_memory_cache(monkeypatch):
    """This process's cache empty and kept off the disk, so every new structure is one miss."""
    monkeypatch.setenv("LAZYGRAPH_CACHE", "memory")
    lg.cache.clear(disk=False)
    yield
    lg.cache.clear(disk=False)


PROGRAMS = {
    "elementwise": lambda d: d * 2 - d / 3 + 1,
    "ufuncs": lambda d: np.exp(np.tanh(d)) + np.abs(d),
    "sum": lambda d: d.sum(),
    "sum_axis0": lambda d: d.sum(axis=0),
    "mean_axis1": lambda d: d.mean(axis=1),
    "max": lambda d: d.max(axis=0),
    "min": lambda d: d.min(),
    "std": lambda d: d.std(),
    "var_axis0": lambda d: d.var(axis=0),
    "prod": lambda d: d.prod(axis=1),
    "matmul": lambda d: d @ d.T,
    "tensordot": lambda d: da.tensordot(d, d, axes=([0], [0])),
    "einsum": lambda d: da.einsum("ij,ij->i", d, d),
    "slicing": lambda d: d[1:7:2, ::-1],
    "fancy_index": lambda d: d[[0, 3, 5]],
    "concatenate": lambda d: da.concatenate([d, d * 2], axis=1),
    "stack": lambda d: da.stack([d, d + 1]),
    "transpose": lambda d: d.T + 1,
    "where": lambda d: da.where(d > 0, d, -d),
    "cumsum": lambda d: d.cumsum(axis=0),
    "argmax": lambda d: d.argmax(axis=0),
    "argmin_all": lambda d: d.argmin(),
    "rechunk": lambda d: d.rechunk((3, 2)) * 2,
    "reshape": lambda d: d.reshape(48) + 1,
    "clip_round": lambda d: da.round(d.clip(-0.5, 0.5), 2),
    "nansum": lambda d: da.nansum(d, axis=0),
    "linalg_norm": lambda d: da.linalg.norm(d),
    "topk": lambda d: da.topk(d.ravel(), 3),
    "dot": lambda d: da.dot(d, d.T),
    "unique": lambda d: da.unique(da.round(d * 2)),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_matches_numpy_chunks(name):
    a = np.random.default_rng(3).standard_normal((8, 6))
    dx, dn = _pair(a, (4, 3))
    program = PROGRAMS[name]
    with warnings.catch_warnings():
        # Dask's meta computations and every chunk's ops are recorded lazily (no NumPy fallback)
        warnings.simplefilter("error", lg.LazygraphFallbackWarning)
        lazy = program(dx)
        assert isinstance(lazy._meta, lg.Array), type(lazy._meta)
        out = lazy.compute(scheduler="sync")
    _check(out, program(dn).compute(scheduler="sync"))


def test_every_chunk_is_a_lazygraph_array():
    a = np.arange(24.0).reshape(4, 6)
    dx = da.from_array(lg.asarray(a), chunks=(2, 3))
    assert isinstance(dx._meta, lg.Array) and dx._meta.shape == (0, 0) and dx._meta.dtype == a.dtype
    seen = []
    dx.map_blocks(lambda b: seen.append(type(b)) or b, dtype=a.dtype).compute(scheduler="sync")
    assert seen and all(t is lg.Array for t in seen)
    assert all(type(b) is lg.Array for b in dask.compute(*dx.to_delayed().ravel(), scheduler="sync"))


def test_numpy_protocol_paths_dask_takes():
    """What Dask calls on chunks and metas records lazily and follows NumPy."""
    a = np.arange(6.0).reshape(2, 3)
    x = lg.asarray(a)
    with warnings.catch_warnings():
        warnings.simplefilter("error", lg.LazygraphFallbackWarning)
        for dtype in (np.float32, np.float64, None):  # tensordot's partial(np.add, dtype=)
            got, want = np.add(x, x, dtype=dtype), np.add(a, a, dtype=dtype)
            assert type(got) is lg.Array and got.dtype == want.dtype
            np.testing.assert_array_equal(np.asarray(got), want)
        z = np.zeros_like(x, shape=(4,), dtype=np.int32)  # wrap.py's broadcast trick
        assert type(z) is lg.Array and (z.shape, z.dtype) == ((4,), np.dtype(np.int32))
        f = np.full_like(x, 7, shape=(1, 2))
        np.testing.assert_array_equal(np.asarray(f), np.full_like(a, 7, shape=(1, 2)))
        e = np.array([], ndmin=2, like=x, dtype=np.float32)  # meta arrays (utils.array_safe)
        assert type(e) is lg.Array and (e.shape, e.dtype) == ((1, 0), np.dtype(np.float32))
    with pytest.raises(TypeError, match="same_kind"), warnings.catch_warnings():
        warnings.simplefilter("ignore", lg.LazygraphFallbackWarning)  # NumPy's rule decides, and raises
        np.add(x, x, dtype=np.int64)
    with pytest.raises(TypeError, match="structured dtype"):  # arg-reductions then use dicts
        np.empty_like(x, shape=(2,), dtype=[("vals", "f8"), ("arg", "i8")])


def test_store_writes_evaluated_chunks():
    a = np.random.default_rng(2).standard_normal((8, 6))
    dx, _ = _pair(a, (4, 3))
    out = np.zeros_like(a)
    da.store(np.sin(dx) * 2, out, scheduler="sync")
    np.testing.assert_allclose(out, np.sin(a) * 2, rtol=1e-12)


def test_percentile_from_evaluated_chunks():
    a = np.random.default_rng(1).standard_normal(40)
    dx, dn = _pair(a, 10)
    got = da.percentile(dx, [10, 50, 90]).compute(scheduler="sync")
    np.testing.assert_allclose(np.asarray(got), da.percentile(dn, [10, 50, 90]).compute(scheduler="sync"))


@settings(max_examples=25)
@given(data=st.data())
def test_random_shapes_and_chunks(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 7), min_size=1, max_size=3), label="shape"))
    chunks = tuple(data.draw(st.integers(1, n), label="chunk") for n in shape)
    dtype = data.draw(st.sampled_from([np.float64, np.float32, np.int64]), label="dtype")
    a = (np.random.default_rng(len(shape)).standard_normal(shape) * 10).astype(dtype)
    axis = data.draw(st.sampled_from([None, *range(len(shape))]), label="axis")
    program = data.draw(
        st.sampled_from(
            [
                lambda d: np.sin(d) * d + 1,
                lambda d: d.sum(axis=axis),
                lambda d: d.mean(axis=axis),
                lambda d: d.max(axis=axis),
                lambda d: d.std(axis=axis),
                lambda d: da.concatenate([d, d], axis=axis or 0),
                lambda d: d.T * 2,
                lambda d: da.where(d > 0.1, d, 0.0),
            ]
        )
    )
    dx, dn = _pair(a, chunks)
    tol = 1e-5 if a.dtype == np.float32 else 1e-10
    _check(program(dx).compute(scheduler="sync"), program(dn).compute(scheduler="sync"), rtol=tol)


def test_backend_creation_and_random():
    with dask.config.set({"array.backend": "lazygraph"}):
        ones = da.ones((5, 4), chunks=2, dtype=np.float32)
        full = da.full((3, 3), 7, chunks=2)
        ar = da.arange(0, 2, 0.25, chunks=3)
        draw = da.random.default_rng(5).standard_normal((6, 4), chunks=(3, 2))
    with dask.config.set({"array.backend": "numpy"}):
        ref = da.random.default_rng(5).standard_normal((6, 4), chunks=(3, 2))
    for x in (ones, full, ar, draw):
        assert isinstance(x._meta, lg.Array)
    _check(ones.compute(), np.ones((5, 4), np.float32))
    assert ones.compute().dtype == np.float32
    _check(full.compute(), np.full((3, 3), 7))
    _check(ar.compute(), np.arange(0, 2, 0.25))
    _check(draw.compute(), ref.compute())  # the same bit generators, so the same values
    back = draw.to_backend("numpy")
    assert isinstance(back._meta, np.ndarray) and isinstance(back.compute(), np.ndarray)
    _check(lgd.asarray(ref).compute(), ref.compute())
    there = ref.to_backend("lazygraph")
    assert isinstance(there._meta, lg.Array)
    _check(there.compute(), ref.compute())
    with pytest.raises(TypeError, match="expected a dask.array.Array"):
        lgd.asarray(np.ones(3))


def test_pickled_lazy_chunk_is_its_value():
    import pickle

    x = lg.asarray(np.arange(6.0))
    y = pickle.loads(pickle.dumps(np.exp(x[1:4]) + 1))
    assert isinstance(y, lg.Array) and y.device == x.device
    np.testing.assert_allclose(np.asarray(y), np.exp(np.arange(1.0, 4.0)) + 1)
    assert (y + x[:3]).shape == (3,)  # the device came back as this process's own
    for value in (x.sum(), x[2], x.reshape(2, 3).T, lg.asarray(np.arange(4, dtype=np.int32))):
        back = pickle.loads(pickle.dumps(value))
        assert type(back) is lg.Array and back.shape == value.shape and back.dtype == value.dtype
        np.testing.assert_array_equal(np.asarray(back), np.asarray(value))


def test_hit_rate_one_miss_per_chunk_shape_threaded(cold_memory_cache):
    a = np.random.default_rng(0).standard_normal((12, 8))
    # 16 chunks of one shape
    dx = da.from_array(lg.asarray(a), chunks=(3, 2))
    lg.cache.reset_stats()
    # persisted: the chunks' tasks alone (compute() would add the task joining them, one more graph)
    (y,) = dask.persist(np.cos(dx) * 3 + dx, scheduler="threads", num_workers=1)
    s = lgd.cache_stats()["total"]
    _check(y.compute(scheduler="sync"), np.cos(a) * 3 + a)
    assert (s["evaluations"], s["misses"], s["hits"]) == (16, 1, 15)
    assert s["hit_rate"] == pytest.approx(1 - 1 / 16)
    # two threads: their first chunks may both miss (each optimizes before the other publishes)
    lg.cache.clear(disk=False)
    (y,) = dask.persist(np.cos(dx) * 3 + dx, scheduler="threads", num_workers=2)
    s = lg.cache.stats()
    assert s["evaluations"] == 16 and 1 <= s["misses"] <= 2 and s["hits"] == 16 - s["misses"]
    assert all(type(v) is lg.Array for v in dict(y.dask).values() if not callable(v))
    # rows of 5, 5, 2: the cache keys a shape by its rank and which extents are 0 or 1, so
    # these chunks share one structure; rows of 5, 5, 1 are two (an extent of 1 broadcasts)
    for rows, misses in ((12, 1), (11, 2)):
        dx = da.from_array(lg.asarray(a[:rows]), chunks=(5, 8))
        lg.cache.clear(disk=False)
        (y,) = dask.persist(np.sin(dx) - dx * 2, scheduler="threads", num_workers=1)
        s = lg.cache.stats()
        _check(y.compute(scheduler="sync"), np.sin(a[:rows]) - a[:rows] * 2)
        assert (s["evaluations"], s["misses"], s["hits"]) == (3, misses, 3 - misses)


def _cluster_program(client, a):
    import distributed

    dx = da.from_array(lg.asarray(a), chunks=(2, 4))  # 8 chunks of one shape
    lgd.reset_cache_stats(client)
    y = (np.tanh(dx) * 2 - dx).persist()  # the chunks' tasks alone, their results kept on the workers
    distributed.wait(y)
    stats = lgd.cache_stats(client)
    _check(y.compute(), np.tanh(a) * 2 - a)
    return stats


def _on_local_cluster(processes: bool, seed: int) -> dict:
    """_cluster_program's figures on a local cluster of two one-thread workers (processes or threads)."""
    distributed = pytest.importorskip("distributed")
    a = np.random.default_rng(seed).standard_normal((8, 8))
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=processes, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        return _cluster_program(client, a)


def test_local_cluster_gathers_each_workers_cache(cold_memory_cache):
    stats = _on_local_cluster(processes=True, seed=7)
    workers = stats["workers"]
    assert len(workers) == 2 and stats["total"]["processes"] == 3
    assert sum(w["evaluations"] for w in workers.values()) == 8
    used = 0
    for w in workers.values():
        # each worker process optimizes the chunk structure once and replays it for the rest
        assert w["misses"] == (1 if w["evaluations"] else 0) and w["hits"] == max(w["evaluations"] - 1, 0)
        used += w["evaluations"] > 0
    assert stats["total"]["hit_rate"] == pytest.approx(1 - used / 8)
    assert stats["client"]["evaluations"] == 0  # the client only received values


def test_threaded_local_cluster_counts_its_process_once(cold_memory_cache):
    stats = _on_local_cluster(processes=False, seed=8)
    total = stats["total"]
    assert total["processes"] == 1 and stats["workers"]  # both workers report this process's figures
    assert all(w["pid"] == stats["client"]["pid"] for w in stats["workers"].values())
    # one cache for both worker threads: one miss, or two when their first chunks overlap
    assert total["evaluations"] == 8 and total["misses"] in (1, 2)
    assert total["hit_rate"] == pytest.approx(1 - total["misses"] / 8)


def test_importing_lazygraph_does_not_import_dask():
    # then the "lazygraph" backend is found through the dask.array.backends entry point (pyproject)
    code = """if True:
        import sys, lazygraph as lg
        assert 'dask' not in sys.modules
        import dask, dask.array as da
        assert 'lazygraph.dask' not in sys.modules
        with dask.config.set({"array.backend": "lazygraph"}):
            x = da.ones((4, 4), chunks=2)
        assert type(x.compute()) is lg.Array and 'lazygraph.dask' in sys.modules
        lg.dask.register()
        print(lg.dask.__name__)
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "lazygraph.dask"


def test_missing_dask_names_what_to_install():
    code = "import sys; sys.modules['dask'] = None; import lazygraph.dask"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "ImportError" in out.stderr and 'pip install "lazygraph[distributed]"' in out.stderr
