"""Dask arrays of lazygraph chunks: `da.from_array(x_lg, chunks=...)` runs lazygraph in every chunk.

import lazygraph.dask                      # registers lazygraph with dask.array (or: lg.dask.register())
dx = da.from_array(lg.asarray(a), chunks=(1000, 1000))
np.exp(dx).sum(axis=0).compute()           # a lazygraph Array; each chunk ran as one cached graph
lg.dask.cache_stats(client)                # lg.cache.stats() of every worker and of this process

Importing this module registers lazygraph's `Array` as a Dask chunk type, with its dispatch
functions (concatenate, tensordot, einsum, take, empty, divide, percentile, conversions to and
from NumPy), the "lazygraph" array backend (`dask.config.set({"array.backend": "lazygraph"})`,
also found through the `dask.array.backends` entry point), pickling of lazy arrays (evaluated,
then sent as their values) and the array optimization that evaluates every task's lazygraph
results where the task ends. Without that last one a chunk's graph would keep growing through
every later task (down to one graph over every chunk, evaluated on the client); with it each
task runs one graph, and tasks on chunks of the same shape share its structure, so the
transformation cache optimizes the first and replays the others. Importing lazygraph never
imports Dask; `lg.dask` imports this module on first use.
"""

from __future__ import annotations

import copyreg
import os
from typing import Any

import numpy as np

try:
    import dask
    import dask.array as da
    from dask.array.backends import ArrayBackendEntrypoint, array_creation_dispatch
    from dask.array.chunk_types import register_chunk_type
    from dask.array.dispatch import (
        concatenate_lookup,
        divide_lookup,
        einsum_lookup,
        empty_lookup,
        percentile_lookup,
        take_lookup,
        tensordot_lookup,
        to_numpy_dispatch,
    )
    from dask.array.optimization import optimize as _dask_optimize
    from dask.array.percentile import _percentile
    from dask.utils import Dispatch
except ImportError as _missing:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        f"lazygraph.dask needs Dask ({_missing}): install it with "
        '`pip install "lazygraph[distributed]"` (dask[array] and distributed)'
    ) from _missing

from lazygraph import cachectl
from lazygraph.api import divide, einsum, tensordot
from lazygraph.array import Array, from_node
from lazygraph.array_api import take
from lazygraph.creation import empty, full
from lazygraph.device import canonical
from lazygraph.engine import evaluate as evaluation
from lazygraph.shape import asarray as lg_asarray
from lazygraph.shape import concatenate
from ops.creation import BUFFER
from ops.node import Node

__all__ = [
    "LazygraphBackendEntrypoint",
    "asarray",
    "cache_stats",
    "evaluated",
    "meta",
    "register",
    "reset_cache_stats",
]


# -- values: chunks built without a copy, pickled as their values ----------------------------


def _owned(value: np.ndarray, device: str | None = None) -> Array:
    """A lazy array over a NumPy array nobody else holds (a fresh draw, an unpickled value): no copy."""
    arr = np.asarray(value, order="C")  # (not ascontiguousarray: it makes 0-d arrays 1-d)
    arr.flags.writeable = False
    node = Node(BUFFER, (), {}, arr.shape, arr.dtype, buffer=arr)
    node.device = canonical(device)
    return from_node(node)


def _rebuild(value: np.ndarray, device: str) -> Array:
    """Unpickle a lazy array: its value, on the device it was on."""
    return _owned(value, device)


def _reduce(x: Array) -> tuple[Any, tuple[np.ndarray, str]]:
    """Pickle a lazy array as its value (evaluating it here): graphs hold functions pickle refuses.

    Dask moves chunks between worker processes, and a device object must come back as the
    receiving process's own (devices compare by identity), so only the device's name travels.
    """
    return _rebuild, (np.asarray(x), str(x.device))


def meta(ndim: int = 0, dtype: Any = np.float64) -> Array:
    """The 0-size lazygraph array Dask keeps as a collection's `_meta` (its chunk type, dtype, ndim)."""
    return _owned(np.empty((0,) * ndim, dtype=dtype))


def asarray(x: Any) -> da.Array:
    """A Dask array with lazygraph chunks from one with NumPy chunks (each chunk copied once)."""
    if not isinstance(x, da.Array):
        raise TypeError(f"lazygraph.dask.asarray: expected a dask.array.Array, got {type(x).__name__}")
    if isinstance(x._meta, Array):
        return x
    return x.map_blocks(_to_lazygraph, dtype=x.dtype, meta=meta(x.ndim, x.dtype))


def _to_lazygraph(x: Any) -> Array:
    return to_lazygraph_dispatch(x)


# -- evaluation at task boundaries -----------------------------------------------------------


def evaluated(value: Any) -> Any:
    """Evaluate the lazy arrays a task returns (also inside a tuple, list or dict), as one graph.

    Dask keeps a task's result until its dependents run; a lazy result would carry its whole
    graph (and its inputs' buffers) into them. Evaluated, it is a leaf holding only its value.
    """
    if isinstance(value, Array):
        lazy = [value] if value.node.buffer is None else []
    elif isinstance(value, (tuple, list)):
        lazy = [v for v in value if isinstance(v, Array) and v.node.buffer is None]
    elif isinstance(value, dict):
        lazy = [v for v in value.values() if isinstance(v, Array) and v.node.buffer is None]
    else:
        return value
    if lazy:
        evaluation.evaluate([a.node for a in lazy])
    return value


def optimize(dsk: Any, keys: Any, **kwargs: Any) -> dict:
    """Dask's array optimization (culling, blockwise and linear fusion), then every task evaluates.

    Installed as Dask's `array_optimize`; tasks whose results are not lazygraph arrays only
    gain one isinstance check.
    """
    from dask._task_spec import Task, convert_legacy_graph
    from dask.utils import ensure_dict

    graph = convert_legacy_graph(ensure_dict(_dask_optimize(dsk, keys, **kwargs)))
    out = {}
    for key, node in graph.items():
        if isinstance(node, Task) and node.func is not evaluated:
            node = Task(key, evaluated, node, _data_producer=node.data_producer)
        out[key] = node
    return out


# -- dispatch: what Dask calls on chunks -----------------------------------------------------

#: Dask's conversion of a chunk to lazygraph (`dx.to_backend("lazygraph")`)
to_lazygraph_dispatch = Dispatch("to_lazygraph_dispatch")


@to_lazygraph_dispatch.register(np.ndarray)
def _numpy_to_lazygraph(data: np.ndarray, **kwargs: Any) -> Array:
    return lg_asarray(data)


@to_lazygraph_dispatch.register(Array)
def _lazygraph_to_lazygraph(data: Array, **kwargs: Any) -> Array:
    return data


@to_lazygraph_dispatch.register(object)
def _other_to_lazygraph(data: Any, **kwargs: Any) -> Array:
    return lg_asarray(np.asarray(data))


def _to_numpy(data: Array, **kwargs: Any) -> np.ndarray:
    # a writable copy: NumPy chunks are the caller's to modify, a lazy array's value is read-only
    return np.array(data)


def _concatenate(arrays: Any, axis: int = 0) -> Array:
    return concatenate(list(arrays), axis=axis)


def _tensordot(a: Any, b: Any, axes: Any = 2) -> Array:
    return tensordot(a, b, axes=axes)


def _einsum(subscripts: str, *operands: Any, dtype: Any = None, **kwargs: Any) -> Array:
    # Dask passes NumPy's casting=/order=/optimize=, which change nothing for lazygraph
    out = einsum(subscripts, *operands)
    return out if dtype is None or np.dtype(dtype) == out.dtype else out.astype(dtype)


def _empty(shape_: Any, dtype: Any = None, **kwargs: Any) -> Array:
    return empty(shape_, dtype=dtype)


def _take(a: Any, indices: Any, axis: int = 0) -> Array:
    return take(a, lg_asarray(np.asarray(indices)), axis=axis)


def _divide(x1: Any, x2: Any, out: Any = None, dtype: Any = None) -> Array:
    if out is not None:
        return divide(x1, x2, out=out)
    q = divide(x1, x2)
    return q if dtype is None or np.dtype(dtype) == q.dtype else q.astype(dtype)


def _chunk_percentile(a: Array, q: Any, method: str = "linear") -> tuple[Any, int]:
    # Dask merges the chunks' percentiles with NumPy, so each chunk's are NumPy values
    return _percentile(np.asarray(a), q, method)


# -- the "lazygraph" array backend -----------------------------------------------------------


class PCG64(np.random.PCG64):
    """NumPy's PCG64, named in lazygraph's module so Dask's Generator draws lazygraph chunks.

    Dask finds the library of a bit generator from its type's module (`lazygraph`) and calls
    `lazygraph.random.default_rng(bitgen)` in each chunk's task.
    """


class RandomState:
    """`np.random.RandomState` whose draws are lazygraph arrays (Dask's legacy `da.random.*`)."""

    def __init__(self, seed: Any = None) -> None:
        self._state = np.random.RandomState(seed)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._state, name)
        if not callable(attr):
            return attr

        def draw(*args: Any, **kwargs: Any) -> Any:
            out = attr(*args, **kwargs)
            return _owned(out) if isinstance(out, np.ndarray) else out

        return draw


def _creation_chunks(shape_: Any, dtype: Any, chunks: Any) -> tuple[tuple[int, ...], ...]:
    from dask.array.core import normalize_chunks

    shape_ = (shape_,) if isinstance(shape_, (int, np.integer)) else tuple(shape_)
    return normalize_chunks(chunks, shape_, dtype=np.dtype(dtype))


def _full_block(fill_value: Any, dtype: Any, block_info: Any = None) -> Array:
    return full(block_info[None]["chunk-shape"], fill_value, dtype=dtype)


def _filled(shape_: Any, fill_value: Any, dtype: Any, chunks: Any = "auto", **kwargs: Any) -> da.Array:
    dtype = np.dtype(np.float64 if dtype is None else dtype)
    blocks = _creation_chunks(shape_, dtype, chunks)
    return da.map_blocks(
        _full_block, fill_value, dtype, dtype=dtype, chunks=blocks, meta=meta(len(blocks), dtype)
    )


class LazygraphBackendEntrypoint(ArrayBackendEntrypoint):
    """Dask's "lazygraph" array backend: creation functions and `da.random` make lazygraph chunks."""

    def __init__(self) -> None:
        register()

    @classmethod
    def to_backend_dispatch(cls) -> Dispatch:
        return to_lazygraph_dispatch

    @classmethod
    def to_backend(cls, data: da.Array, **kwargs: Any) -> da.Array:
        return asarray(data)

    @property
    def RandomState(self) -> type:  # noqa: N802 - Dask's name
        return RandomState

    @property
    def default_bit_generator(self) -> type:
        return PCG64

    @staticmethod
    def ones(shape: Any, *, dtype: Any = None, meta: Any = None, **kwargs: Any) -> da.Array:
        return _filled(shape, 1, dtype, **kwargs)

    @staticmethod
    def zeros(shape: Any, *, dtype: Any = None, meta: Any = None, **kwargs: Any) -> da.Array:
        return _filled(shape, 0, dtype, **kwargs)

    @staticmethod
    def empty(shape: Any, *, dtype: Any = None, meta: Any = None, **kwargs: Any) -> da.Array:
        return _filled(shape, 0, dtype, **kwargs)

    @staticmethod
    def full(shape: Any, fill_value: Any, *, dtype: Any = None, meta: Any = None, **kwargs: Any) -> da.Array:
        if dtype is None:
            dtype = np.asarray(fill_value).dtype
        return _filled(shape, fill_value, dtype, **kwargs)

    @staticmethod
    def arange(
        start: Any, /, stop: Any = None, step: Any = 1, *, dtype: Any = None, meta: Any = None, **kwargs: Any
    ) -> da.Array:
        # NumPy's values (its float steps), each chunk copied into lazygraph in the same task
        with dask.config.set({"array.backend": "numpy"}):
            x = da.arange(start, stop, step, dtype=dtype, **kwargs)
        return asarray(x)


# -- registration ----------------------------------------------------------------------------

_registered: list[bool] = []


def _with_subclasses(cls: type) -> list[type]:
    found = [cls]
    for sub in cls.__subclasses__():
        found += _with_subclasses(sub)
    return found


def register() -> None:
    """Register lazygraph with dask.array (done on import; calling it again changes nothing)."""
    if _registered:
        return
    _registered.append(True)
    register_chunk_type(Array)
    concatenate_lookup.register(Array, _concatenate)
    tensordot_lookup.register(Array, _tensordot)
    einsum_lookup.register(Array, _einsum)
    empty_lookup.register(Array, _empty)
    take_lookup.register(Array, _take)
    divide_lookup.register(Array, _divide)
    percentile_lookup.register(Array, _chunk_percentile)
    to_numpy_dispatch.register(Array, _to_numpy)
    for cls in _with_subclasses(Array):  # pickle looks its reducers up by exact type
        copyreg.pickle(cls, _reduce)
    if "lazygraph" not in array_creation_dispatch._lookup:
        array_creation_dispatch.register_backend("lazygraph", LazygraphBackendEntrypoint())
    dask.config.set(array_optimize=optimize)


# -- the cache across workers ----------------------------------------------------------------

_FIELDS = (
    "hits",
    "misses",
    "evaluations",
    "distinct_graphs",
    "disk_hits",
    "optimize_seconds",
    "replay_seconds",
)


def _process_stats(reset: bool = False) -> dict[str, Any]:
    """This process's cache figures (run on each worker by `cache_stats`)."""
    if reset:
        cachectl.reset_stats()
    s = cachectl.stats(per_entry=False)
    return {"pid": os.getpid(), **{k: s[k] for k in _FIELDS}, "hit_rate": s["hit_rate"]}


def _rate(hits: int, misses: int) -> float:
    return hits / (hits + misses) if hits + misses else 0.0


def cache_stats(client: Any = None) -> dict[str, Any]:
    """`lg.cache.stats()` of every worker of a distributed `Client` and of this process, with totals.

    Caches are per process: each worker optimizes each chunk structure once (expected hit rate
    1 - 1/chunks per distinct chunk shape and worker). Returns {"workers": {address: figures},
    "client": figures, "total": summed figures and hit_rate}; workers running in this process
    (a LocalCluster with processes=False) are counted once in the total.
    """
    here = _process_stats()
    workers = client.run(_process_stats) if client is not None else {}
    seen: dict[int, dict[str, Any]] = {here["pid"]: here}
    for figures in workers.values():
        seen.setdefault(figures["pid"], figures)
    total: dict[str, Any] = {k: sum(f[k] for f in seen.values()) for k in _FIELDS}
    total["hit_rate"] = _rate(total["hits"], total["misses"])
    total["processes"] = len(seen)
    return {"workers": workers, "client": here, "total": total}


def reset_cache_stats(client: Any = None) -> None:
    """Zero the cache counters of this process and of every worker of `client` (entries stay)."""
    cachectl.reset_stats()
    if client is not None:
        client.run(_process_stats, True)


register()
