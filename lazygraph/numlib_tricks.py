"""NumPy's index tricks, selection and set functions over lazy arrays: `mgrid`, `ogrid`, `ix_`,
`r_`, `c_`, `block`, `mask_indices`, `apply_along_axis`, `vectorize`, `piecewise`, `select`, `extract`,
`compress`, `choose`, `place`, `ediff1d`, `trim_zeros`, `isin`, `intersect1d`, `union1d`,
`setdiff1d`, `setxor1d`, `lexsort`.

Compositions of existing operators, recorded lazily. Slice bounds, steps and directives of the
index-trick objects are static (they shape the graph). Evaluation points (the output shape
depends on values): `extract`, `compress` and `ix_` with a lazy condition or boolean array,
`place` with a lazy mask, `mask_indices`, `trim_zeros`, the `*1d` set functions (through `unique`), and
`vectorize` (it runs the Python function on the evaluated values: a fallback, not differentiable).
`piecewise` evaluates each function on the whole of `x` and selects (NumPy calls it on the
selected elements only: the functions must be elementwise). `isin` compares every element with
every test element (memory element.size * test.size). `choose` with lazy indices and
mode="raise" cannot check their range while recording: out-of-range indices fail at evaluation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from lazygraph import api, array_api, creation, numlib, numlib_index, numlib_sort
from lazygraph.array import Array
from lazygraph.creation import arange
from lazygraph.shape import _arr, asarray, broadcast_arrays, concat, moveaxis, ravel, reshape, stack

__all__ = [
    "apply_along_axis",
    "block",
    "c_",
    "choose",
    "compress",
    "ediff1d",
    "extract",
    "intersect1d",
    "isin",
    "ix_",
    "lexsort",
    "mask_indices",
    "mgrid",
    "ogrid",
    "piecewise",
    "place",
    "r_",
    "select",
    "setdiff1d",
    "setxor1d",
    "trim_zeros",
    "union1d",
    "vectorize",
]


def _slice_range(key: slice) -> Array:
    """A 1-d range from slice syntax; a complex step is the number of points (endpoint included)."""
    start = 0 if key.start is None else key.start
    step = key.step
    if isinstance(step, (complex, np.complexfloating)):
        length = int(abs(step))
        typ = np.result_type(start, key.stop, abs(step))
        delta = (key.stop - start) / float(length - 1) if length != 1 else length
        return arange(0, length, 1, dtype=typ) * delta + start
    return arange(start, key.stop, 1 if step is None else step)


class _Grid:
    """`mgrid` / `ogrid`: dense or open multi-dimensional ranges from slice syntax."""

    def __init__(self, sparse: bool) -> None:
        self.sparse = sparse

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return _slice_range(key)
        key = tuple(key)
        sizes, nums = [], []
        for k in key:
            start = 0 if k.start is None else k.start
            step = 1 if k.step is None else k.step
            if isinstance(step, (complex, np.complexfloating)):
                step = abs(step)
                sizes.append(int(step))
            else:
                sizes.append(int(np.ceil((k.stop - start) / step)))
            nums += [start, k.stop, step]
        typ = np.result_type(*nums)
        nn = [arange(n, dtype=typ) for n in sizes]
        for i, k in enumerate(key):
            start = 0 if k.start is None else k.start
            step = 1 if k.step is None else k.step
            if isinstance(step, (complex, np.complexfloating)):
                step = int(abs(step))
                if step != 1:
                    step = (k.stop - start) / float(step - 1)
            nn[i] = nn[i] * step + start
        open_ = [reshape(v, tuple(n if j == i else 1 for j, n in enumerate(sizes))) for i, v in enumerate(nn)]
        if self.sparse:
            return tuple(open_)
        return stack(broadcast_arrays(*open_)) if nn else asarray(np.zeros((0,), typ))


mgrid = _Grid(sparse=False)
ogrid = _Grid(sparse=True)


def _ndmin(x: Array, ndmin: int) -> Array:
    return reshape(x, (1,) * (ndmin - x.ndim) + tuple(x.shape)) if x.ndim < ndmin else x


class _Concatenator:
    """`r_` / `c_`: concatenation of arrays, scalars and slice ranges by index syntax."""

    def __init__(self, axis: int, ndmin: int, trans1d: int) -> None:
        self.axis, self.ndmin, self.trans1d = axis, ndmin, trans1d

    def __getitem__(self, key: Any) -> Array:
        if isinstance(key, str):
            raise ValueError("r_/c_: a directive needs at least one array after it")
        key = key if isinstance(key, tuple) else (key,)
        axis, ndmin, trans1d = self.axis, self.ndmin, self.trans1d
        objs, types = [], []
        for k, item in enumerate(key):
            if isinstance(item, slice):
                new = _slice_range(item)
                if ndmin > 1:
                    new = _ndmin(new, ndmin)
                    if trans1d != -1:
                        new = new.swapaxes(-1, trans1d)
            elif isinstance(item, str):
                if k != 0:
                    raise ValueError("r_/c_: special directives must be the first entry")
                if item in ("r", "c"):
                    raise TypeError(
                        "r_/c_: the matrix directives 'r' and 'c' are not supported (no matrix type)"
                    )
                try:
                    vec = [int(v) for v in item.split(",")]
                except ValueError as exc:
                    raise ValueError(f"r_/c_: unknown special directive {item!r}") from exc
                axis = vec[0]
                if len(vec) > 1:
                    ndmin = vec[1]
                if len(vec) > 2:
                    trans1d = vec[2]
                continue
            elif isinstance(item, (int, float, complex, bool, np.generic)):
                objs.append(_ndmin(asarray(item), ndmin))
                types.append(item)
                continue
            else:
                new = _arr(item)
                item_ndim = new.ndim
                new = _ndmin(new, ndmin)
                if trans1d != -1 and item_ndim < ndmin:
                    k2, k1 = ndmin - item_ndim, trans1d
                    if k1 < 0:
                        k1 += k2 + 1
                    defaxes = list(range(ndmin))
                    new = new.transpose(defaxes[:k1] + defaxes[k2:] + defaxes[k1:k2])
            objs.append(new)
            types.append(new.dtype)
        if not objs:
            raise ValueError("r_/c_: need at least one array to concatenate")
        final = np.result_type(*types)
        return concat([o.astype(final) for o in objs], axis=axis)


r_ = _Concatenator(axis=0, ndmin=1, trans1d=-1)
c_ = _Concatenator(axis=-1, ndmin=2, trans1d=0)


def ix_(*args: Any) -> tuple[Array, ...]:
    """Open-mesh index arrays from 1-d sequences (a lazy boolean one is an evaluation point)."""
    out = []
    nd = len(args)
    for k, seq in enumerate(args):
        if isinstance(seq, Array):
            a = seq
        else:
            v = np.asarray(seq)
            a = asarray(v.astype(np.intp) if v.size == 0 and v.dtype.kind not in "iub" else v)
        if a.ndim != 1:
            raise ValueError("ix_: cross index must be 1 dimensional")
        if a.dtype == np.bool_:
            (a,) = numlib_sort.nonzero(a)
        out.append(reshape(a, (1,) * k + (a.shape[0],) + (1,) * (nd - k - 1)))
    return tuple(out)


def block(arrays: Any) -> Array:
    """Assemble an array from nested lists of blocks (innermost lists join along the last axis)."""

    def depth(x: Any, path: str) -> tuple[int, int]:
        if isinstance(x, tuple):
            raise TypeError(f"block: {path} is a tuple; only lists can be used to arrange blocks")
        if isinstance(x, list):
            if not x:
                raise ValueError(f"block: {path} is an empty list")
            found = [depth(e, f"{path}[{i}]") for i, e in enumerate(x)]
            if len({d for d, _ in found}) != 1:
                raise ValueError(f"block: list depths are mismatched below {path}")
            return found[0][0] + 1, max(n for _, n in found)
        return 0, np.ndim(x) if not isinstance(x, Array) else x.ndim

    d, max_nd = depth(arrays, "arrays")
    nd = max(d, max_nd)

    def build(x: Any, level: int) -> Array:
        if level == d:
            return _ndmin(_arr(x), nd)
        return concat([build(e, level + 1) for e in x], axis=-(d - level))

    return build(arrays, 0)


def mask_indices(n: int, mask_func: Callable, k: Any = 0) -> tuple[Array, ...]:
    """Indices where `mask_func(ones((n, n)), k)` is nonzero (an evaluation point, via nonzero)."""
    m = creation.ones((n, n), dtype=int)
    return numlib_sort.nonzero(_arr(mask_func(m, k)) != 0)


def apply_along_axis(func1d: Callable, axis: int, arr: Any, *args: Any, **kwargs: Any) -> Array:
    """Apply `func1d` to each 1-d slice along `axis`: a Python loop recording one call per slice."""
    a = _arr(arr)
    axis = axis + a.ndim if axis < 0 else axis
    if not 0 <= axis < a.ndim:
        raise np.exceptions.AxisError(axis, a.ndim)
    moved = moveaxis(a, axis, -1)
    outer = tuple(moved.shape[:-1])
    if 0 in outer:
        raise ValueError("apply_along_axis: cannot apply when any iteration dimension is 0")
    results = [_arr(func1d(moved[ind], *args, **kwargs)) for ind in np.ndindex(*outer)]
    res = reshape(stack(results), outer + tuple(results[0].shape))
    nres = results[0].ndim
    for i in range(nres):
        res = moveaxis(res, len(outer) + i, axis + i)
    return res


class vectorize:  # noqa: N801 - NumPy's name
    """`np.vectorize` on lazy arrays: an evaluation point that runs the Python function on values.

    The arguments are evaluated, NumPy's vectorize runs `pyfunc` element by element, and the
    result comes back as a new lazy array (a constant: not differentiable). Write the function
    with lazygraph operations instead to keep it lazy.
    """

    def __init__(self, pyfunc: Callable, *args: Any, **kwargs: Any) -> None:
        self._np = np.vectorize(pyfunc, *args, **kwargs)
        self.pyfunc = pyfunc

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        def value(x: Any) -> Any:
            return x.numpy() if isinstance(x, Array) else x

        res = self._np(*[value(a) for a in args], **{k: value(v) for k, v in kwargs.items()})
        if isinstance(res, tuple):
            return tuple(asarray(r) for r in res)
        return asarray(res)


def piecewise(x: Any, condlist: Any, funclist: list, *args: Any, **kw: Any) -> Array:
    """Piecewise-defined values; each function is applied to all of `x` (must be elementwise)."""
    x = _arr(x)
    if isinstance(condlist, (Array, np.ndarray, bool, np.bool_)) or (
        isinstance(condlist, list)
        and condlist
        and not isinstance(condlist[0], (list, np.ndarray, Array))
        and x.ndim != 0
    ):
        condlist = [condlist]
    conds = [_arr(c).astype(np.bool_) if not isinstance(c, Array) else c for c in condlist]
    n = len(conds)
    if len(funclist) == n + 1:
        others = conds[0] if n == 1 else api.any(stack(broadcast_arrays(*conds)), 0)
        conds.append(api.logical_not(others) if n else creation.full_like(x, True, dtype=np.bool_))
    elif len(funclist) != n:
        raise ValueError(f"piecewise: with {n} condition(s), either {n} or {n + 1} functions are needed")
    y = creation.zeros_like(x)
    for cond, fn in zip(conds, funclist):
        val = fn(x, *args, **kw) if callable(fn) else fn
        y = api.where(cond, _arr(val).astype(x.dtype), y)
    return y


def _result_type(values: list) -> np.dtype:
    """NumPy's result type of arrays and (weak) Python scalars."""
    return np.result_type(*[v if isinstance(v, (int, float, complex)) else _arr(v).dtype for v in values])


def select(condlist: list, choicelist: list, default: Any = 0) -> Array:
    """Elements from the first choice whose condition holds, else `default`."""
    if len(condlist) != len(choicelist):
        raise ValueError("select: list of cases must be same length as list of conditions")
    if not condlist:
        raise ValueError("select with an empty condition list is not possible")
    raw = [*choicelist, default]
    choices = [_arr(c) for c in raw]
    dtype = _result_type(raw)
    conds = [_arr(c) for c in condlist]
    for i, c in enumerate(conds):
        if c.dtype != np.bool_:
            raise TypeError(f"select: invalid entry {i} in condlist: should be boolean ndarray")
    result = choices[-1].astype(dtype)
    for cond, choice in zip(reversed(conds), reversed(choices[:-1])):
        result = api.where(cond, choice.astype(dtype), result)
    return result


def extract(condition: Any, arr: Any) -> Array:
    """Elements of `arr` where `condition` is nonzero, flattened (an evaluation point)."""
    (idx,) = numlib_sort.nonzero(ravel(_arr(condition)))
    return array_api.take(ravel(_arr(arr)), idx)


def compress(condition: Any, a: Any, axis: int | None = None, out: Any = None) -> Array:
    """Slices along `axis` where the 1-d `condition` is true (evaluation point if it is lazy)."""
    a, cond = _arr(a), _arr(condition)
    if cond.ndim != 1:
        raise ValueError("compress: condition must be a 1-d array")
    if axis is None:
        a, axis = ravel(a), 0
    n = a.shape[axis]
    if cond.shape[0] > n:
        cond = cond[:n]
    (idx,) = numlib_sort.nonzero(cond)
    res = array_api.take(a, idx, axis=axis)
    if out is not None:
        out[...] = res
        return out
    return res


def choose(a: Any, choices: Any, out: Any = None, mode: str = "raise") -> Array:
    """Elements picked from `choices` by the index array `a` (all broadcast together)."""
    if mode not in ("raise", "wrap", "clip"):
        raise ValueError(f"choose: mode must be 'raise', 'wrap' or 'clip', got {mode!r}")
    static = not isinstance(a, Array)
    a = _arr(a)
    if a.dtype.kind not in "iub":
        raise TypeError(f"choose: index array must be integer, got {a.dtype}")
    raw = choices if not isinstance(choices, Array) else list(choices)
    choices = [_arr(c) for c in raw]
    n = len(choices)
    if n == 0:
        raise ValueError("choose: needs at least one choice")
    if mode == "raise" and static:
        v = np.asarray(a.numpy())
        if v.size and (v.min() < 0 or v.max() >= n):
            raise ValueError("choose: invalid entry in choice array")
    idx = a.astype(np.int64)
    if mode == "wrap":
        idx = idx % n
    elif mode == "clip":
        idx = api.clip(idx, 0, n - 1)
    dtype = _result_type(raw)
    parts = broadcast_arrays(idx, *[c.astype(dtype) for c in choices])
    stacked = stack(parts[1:])
    res = numlib.take_along_axis(stacked, reshape(parts[0], (1, *parts[0].shape)), axis=0)[0]
    if out is not None:
        out[...] = res
        return out
    return res


def place(arr: Array, mask: Any, vals: Any) -> None:
    """Write `vals` (repeated cyclically) where `mask` is true, in place (a lazy mask is evaluated)."""
    m = np.asarray(mask.numpy() if isinstance(mask, Array) else mask, dtype=bool)
    if m.size != arr.size:
        raise ValueError("place: mask and data must be the same size")
    idx = np.flatnonzero(m)
    if idx.size == 0:
        return
    if _arr(vals).size == 0:
        raise ValueError("place: cannot insert from an empty array")
    numlib_index.put(arr, idx, vals)


def ediff1d(ary: Any, to_end: Any = None, to_begin: Any = None) -> Array:
    """Differences of consecutive flattened elements, with optional values before and after."""
    a = ravel(_arr(ary))

    def extra(e: Any) -> Array:
        e = ravel(_arr(e))
        if not np.can_cast(e.dtype, a.dtype, casting="same_kind"):
            raise TypeError(
                f"ediff1d: dtype of to_begin/to_end ({e.dtype}) must be compatible with {a.dtype}"
            )
        return e.astype(a.dtype)

    parts = [] if to_begin is None else [extra(to_begin)]
    parts.append(a[1:] - a[:-1])
    if to_end is not None:
        parts.append(extra(to_end))
    return concat(parts) if len(parts) > 1 else parts[0]


def trim_zeros(filt: Any, trim: str = "fb", axis: Any = None) -> Array:
    """`filt` without leading/trailing zeros (an evaluation point: the bounds depend on values)."""
    a = _arr(filt)
    trim = trim.lower()
    axes = range(a.ndim) if axis is None else [ax % a.ndim for ax in np.atleast_1d(axis)]
    nz = np.asarray((a != 0).numpy())
    key = [slice(None)] * a.ndim
    for ax in axes:
        other = tuple(i for i in range(a.ndim) if i != ax)
        hits = np.flatnonzero(nz.any(axis=other)) if other else np.flatnonzero(nz)
        if hits.size == 0:
            start = stop = 0
        else:
            start = int(hits[0]) if "f" in trim else 0
            stop = int(hits[-1]) + 1 if "b" in trim else a.shape[ax]
        key[ax] = slice(start, stop)
    return a[tuple(key)]


def isin(
    element: Any, test_elements: Any, assume_unique: bool = False, invert: bool = False, *, kind: Any = None
) -> Array:
    """Whether each element occurs in `test_elements` (lazy: a broadcast compare and any)."""
    e, t = _arr(element), ravel(_arr(test_elements))
    if t.size == 0:
        hit = creation.zeros_like(e, dtype=np.bool_)
    else:
        hit = api.any(reshape(e, (*e.shape, 1)) == t, -1)
    return api.logical_not(hit) if invert else hit


def _mask(a: Array, m: Array) -> Array:
    (idx,) = numlib_sort.nonzero(m)
    return array_api.take(a, idx)


def intersect1d(ar1: Any, ar2: Any, assume_unique: bool = False, return_indices: bool = False) -> Any:
    """Sorted common values (an evaluation point, through unique)."""
    if return_indices:
        u1, i1 = numlib_sort.unique(ravel(_arr(ar1)), return_index=True)
        u2, i2 = numlib_sort.unique(ravel(_arr(ar2)), return_index=True)
        (keep,) = numlib_sort.nonzero(isin(u1, u2))
        common = array_api.take(u1, keep)
        return common, array_api.take(i1, keep), array_api.take(i2, numlib_sort.searchsorted(u2, common))
    u1 = ravel(_arr(ar1)) if assume_unique else numlib_sort.unique(ar1)
    u2 = ravel(_arr(ar2)) if assume_unique else numlib_sort.unique(ar2)
    return numlib_sort.sort(_mask(u1, isin(u1, u2)))


def union1d(ar1: Any, ar2: Any) -> Array:
    """Sorted values in either array (an evaluation point, through unique)."""
    return numlib_sort.unique(concat([ravel(_arr(ar1)), ravel(_arr(ar2))]))


def setdiff1d(ar1: Any, ar2: Any, assume_unique: bool = False) -> Array:
    """Values of `ar1` not in `ar2`, sorted unless assume_unique (an evaluation point)."""
    u = ravel(_arr(ar1)) if assume_unique else numlib_sort.unique(ar1)
    return _mask(u, isin(u, ar2, invert=True))


def setxor1d(ar1: Any, ar2: Any, assume_unique: bool = False) -> Array:
    """Sorted values in exactly one of the arrays (an evaluation point, through unique)."""
    u1 = ravel(_arr(ar1)) if assume_unique else numlib_sort.unique(ar1)
    u2 = ravel(_arr(ar2)) if assume_unique else numlib_sort.unique(ar2)
    aux = numlib_sort.sort(concat([u1, u2]))
    if aux.size == 0:
        return aux
    edge = asarray(np.array([True]))
    flag = concat([edge, aux[1:] != aux[:-1], edge])
    return _mask(aux, api.logical_and(flag[1:], flag[:-1]))


def lexsort(keys: Any, axis: int = -1) -> Array:
    """Indices sorting by several keys, the last one primary (lazy: repeated stable argsorts)."""
    if isinstance(keys, (Array, np.ndarray)):
        ks = [_arr(keys)[i] for i in range(keys.shape[0])] if keys.ndim > 0 else []
        if isinstance(keys, (Array, np.ndarray)) and _arr(keys).ndim == 0:
            raise TypeError("lexsort: need sequence of keys with len > 0")
    else:
        ks = [_arr(k) for k in keys]
    if not ks:
        raise TypeError("lexsort: need sequence of keys with len > 0")
    ks = list(broadcast_arrays(*ks))
    if ks[0].ndim == 0:
        raise np.exceptions.AxisError("lexsort: keys must be at least 1-d")
    idx = numlib_sort.argsort(ks[0], axis=axis)
    for k in ks[1:]:
        order = numlib_sort.argsort(numlib.take_along_axis(k, idx, axis), axis=axis)
        idx = numlib.take_along_axis(idx, order, axis)
    return idx
