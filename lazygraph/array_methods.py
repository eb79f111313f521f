"""NumPy's ndarray methods on `Array`, with NumPy's method signatures (`out=`, `where=`,
`initial=`), each delegating to the lazy function of the same name.

Installed once, when the package is imported. `out=` takes a lazy array and is a recorded write
into it (views of it see the result, as in NumPy). `fill`, `put` and `flat[...] = v` are
recorded writes too. Evaluation points: `tobytes`, `tofile`, `dump`, `dumps` and iterating
`a.flat` (they hand out the values). `a.view(dtype)` reads the bytes as another dtype (a
`bitcast`: writes through it are recorded into `a`), `a.resize(shape)` changes the array in
place (zero-padded, NumPy's ownership checks). What a lazy array cannot do raises a `TypeError`
that says so: `byteswap`, `getfield`/`setfield`, `setflags`.
"""

from __future__ import annotations

import builtins
import operator
import pickle
import sys
from typing import Any

import numpy as np

import ops.bitcast  # noqa: F401  (registers the operator)
from lazygraph import api, creation, numlib, numlib_index, numlib_math, numlib_tricks
from lazygraph.array import Array, Storage, record
from lazygraph.owned_view import OwnedView
from lazygraph.shape import broadcast_to, concat, ravel, reshape, squeeze
from ops.bitcast import bitcast_shape

_NO_VALUE: Any = np._NoValue


def _store(result: Array, out: Any, op: str) -> Array:
    """`result`, or `result` written into `out` (a recorded write) and `out` returned."""
    if out is None:
        return result
    if isinstance(out, tuple):
        if len(out) != 1:
            raise ValueError(f"{op}: out must be one array, got a tuple of {len(out)}")
        out = out[0]
    if not isinstance(out, Array):
        raise TypeError(f"{op}: out must be a lazygraph array, got {type(out).__name__}")
    if tuple(out.shape) != tuple(result.shape):
        raise ValueError(f"{op}: out has shape {tuple(out.shape)}, the result has {tuple(result.shape)}")
    out[...] = result
    return out


def _masked(self: Array, where: Any, fill: Any) -> Array:
    """`self` with the elements outside `where` replaced by `fill` (the reductions' `where=`)."""
    return api.where(where, self, fill)


def _sum(
    self: Array,
    axis: Any = None,
    dtype: Any = None,
    out: Any = None,
    keepdims: bool = False,
    initial: Any = _NO_VALUE,
    where: Any = True,
) -> Array:
    """Sum of the elements (NumPy's method: `where=` masks, `initial=` is added)."""
    x = self if where is True else _masked(self, where, 0)
    r = api.sum(x, axis, dtype, keepdims)
    if initial is not _NO_VALUE:
        r = (r + initial).astype(r.dtype)
    return _store(r, out, "sum")


def _prod(
    self: Array,
    axis: Any = None,
    dtype: Any = None,
    out: Any = None,
    keepdims: bool = False,
    initial: Any = _NO_VALUE,
    where: Any = True,
) -> Array:
    """Product of the elements (NumPy's method: `where=` masks, `initial=` multiplies)."""
    x = self if where is True else _masked(self, where, 1)
    r = api.prod(x, axis, dtype, keepdims)
    if initial is not _NO_VALUE:
        r = (r * initial).astype(r.dtype)
    return _store(r, out, "prod")


def _extreme(name: str):
    fn = api.max if name == "max" else api.min

    def method(
        self: Array,
        axis: Any = None,
        out: Any = None,
        keepdims: bool = False,
        initial: Any = _NO_VALUE,
        where: Any = True,
    ) -> Array:
        if where is not True:
            if initial is _NO_VALUE:
                raise ValueError(f"{name}: reduction with where= needs an initial value (initial=)")
            x = _masked(self, where, initial)
        else:
            x = self
        if initial is not _NO_VALUE and x.size == 0:
            rshape = np.zeros(x.shape).max(axis, keepdims=keepdims, initial=0).shape
            r = creation.full(rshape, initial, dtype=x.dtype)
        else:
            r = fn(x, axis, keepdims)
            if initial is not _NO_VALUE:
                r = (api.maximum if name == "max" else api.minimum)(r, initial).astype(r.dtype)
        return _store(r, out, name)

    method.__name__ = name
    method.__doc__ = f"{name.capitalize()}imum along an axis (NumPy's method: `initial=`, `where=`, `out=`)."
    return method


def _logical(name: str):
    fn = api.any if name == "any" else api.all

    def method(self: Array, axis: Any = None, out: Any = None, keepdims: bool = False, *, where: Any = True):
        x = self if where is True else _masked(self, where, name == "all")
        return _store(fn(x, axis, keepdims), out, name)

    method.__name__ = name
    method.__doc__ = f"Whether {name} element is true (NumPy's method: `where=`, `out=`)."
    return method


def _count(self: Array, axis: Any, keepdims: bool, where: Any, dtype: np.dtype) -> Array:
    """How many elements `where` selects per result element, as `dtype`'s real type."""
    real = np.empty(0, dtype).real.dtype
    w = api.astype(broadcast_to(where, self.shape), real)
    return api.sum(w, axis, None, keepdims)


def _mean_dtype(self: Array, dtype: Any) -> np.dtype:
    if dtype is not None:
        return np.dtype(dtype)
    return np.dtype(np.float64) if self.dtype.kind in "iub" else self.dtype


def _mean(
    self: Array,
    axis: Any = None,
    dtype: Any = None,
    out: Any = None,
    keepdims: bool = False,
    *,
    where: Any = True,
) -> Array:
    """Arithmetic mean (NumPy's method: `where=` averages only the selected elements)."""
    if where is True:
        r = api.mean(self, axis, dtype, keepdims)
    else:
        rd = _mean_dtype(self, dtype)
        s = api.sum(_masked(self, where, 0), axis, rd, keepdims)
        r = (s / _count(self, axis, keepdims, where, rd)).astype(rd)
    return _store(r, out, "mean")


def _spread(name: str):
    def method(
        self: Array,
        axis: Any = None,
        dtype: Any = None,
        out: Any = None,
        ddof: float = 0,
        keepdims: bool = False,
        *,
        where: Any = True,
        correction: Any = _NO_VALUE,
    ) -> Array:
        ddof = ddof if correction is _NO_VALUE else correction
        if where is True:
            r = (api.var if name == "var" else api.std)(self, axis, dtype, ddof, keepdims)
        else:
            rd = _mean_dtype(self, dtype)
            n = _count(self, axis, True, where, rd)
            mu = api.sum(_masked(self, where, 0), axis, rd, True) / n
            dev = api.abs(self.astype(rd) - mu)
            sq = api.sum(api.where(where, dev * dev, 0), axis, None, keepdims)
            r = sq / api.maximum(_count(self, axis, keepdims, where, rd) - ddof, 0)
            if name == "std":
                r = api.sqrt(r)
        return _store(r, out, name)

    method.__name__ = name
    method.__doc__ = (
        f"{'Variance' if name == 'var' else 'Standard deviation'} (NumPy's method: ddof, where=)."
    )
    return method


def _arg(name: str):
    fn = api.argmax if name == "argmax" else api.argmin

    def method(self: Array, axis: int | None = None, out: Any = None, *, keepdims: bool = False) -> Array:
        return _store(fn(self, axis, keepdims), out, name)

    method.__name__ = name
    method.__doc__ = f"Index of the {name[3:]}imum (NumPy's method, `out=`)."
    return method


def _scan(name: str):
    fn = api.cumsum if name == "cumsum" else api.cumprod

    def method(self: Array, axis: int | None = None, dtype: Any = None, out: Any = None) -> Array:
        return _store(fn(self, axis, dtype), out, name)

    method.__name__ = name
    method.__doc__ = f"Cumulative {name[3:]} (NumPy's method, `out=`)."
    return method


def _round(self: Array, decimals: int = 0, out: Any = None) -> Array:
    """Round to `decimals` (NumPy's method, `out=`)."""
    return _store(api.round(self, decimals), out, "round")


def _clip(self: Array, min: Any = None, max: Any = None, out: Any = None, **kwargs: Any) -> Array:  # noqa: A002
    """Limit the values to [min, max] (NumPy's method; `a_min`/`a_max` spellings accepted)."""
    min = kwargs.pop("a_min", min)  # noqa: A001
    max = kwargs.pop("a_max", max)  # noqa: A001
    if kwargs:
        raise TypeError(f"clip: unexpected keyword arguments {sorted(kwargs)}")
    return _store(api.clip(self, min, max), out, "clip")  # neither bound: a copy, as NumPy 2 gives


def _dot(self: Array, b: Any, out: Any = None) -> Array:
    """Dot product with `b` (NumPy's method, `out=`)."""
    return _store(api.dot(self, b), out, "dot")


def _ptp(self: Array, axis: Any = None, out: Any = None, keepdims: bool = False) -> Array:
    """Range (max - min) along an axis (the method NumPy 1 had; `lg.ptp`)."""
    return _store(numlib_math.ptp(self, axis, keepdims), out, "ptp")


def _trace(
    self: Array, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None, out: Any = None
) -> Array:
    """Sum along a diagonal (`lg.trace`)."""
    return _store(numlib.trace(self, offset, axis1, axis2, dtype), out, "trace")


def _diagonal(self: Array, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Array:
    """The diagonal (`lg.diagonal`: a read-only copy, not a view)."""
    return numlib.diagonal(self, offset, axis1, axis2)


def _repeat(self: Array, repeats: Any, axis: int | None = None) -> Array:
    """Each element repeated (`lg.repeat`; static repeats)."""
    return numlib.repeat(self, repeats, axis)


def _put(self: Array, indices: Any, values: Any, mode: str = "raise") -> None:
    """Write `values` at flat `indices`, in place (`lg.put`, a recorded write)."""
    numlib_index.put(self, indices, values, mode)


def _fill(self: Array, value: Any) -> None:
    """Set every element to the scalar `value`, in place (a recorded write, like `a[...] = value`)."""
    if isinstance(value, Array) and value.ndim != 0 or np.ndim(value) != 0:
        raise ValueError(f"fill: value must be a scalar, got an array of shape {np.shape(value)}")
    self[...] = value


def _compress(self: Array, condition: Any, axis: int | None = None, out: Any = None) -> Array:
    """Selected slices along an axis (`lg.compress`; an evaluation point for a lazy condition)."""
    return _store(numlib_tricks.compress(condition, self, axis), out, "compress")


def _choose(self: Array, choices: Any, out: Any = None, mode: str = "raise") -> Array:
    """Pick from `choices` by this index array (`lg.choose`)."""
    return _store(numlib_tricks.choose(self, choices, mode=mode), out, "choose")


def _squeeze(self: Array, axis: Any = None) -> Array:
    """Length-1 axes removed (a view)."""
    return squeeze(self, axis)


class FlatIter:
    """`a.flat`: `flat[i]` reads (lazy), `flat[i] = v` writes (recorded); iterating evaluates."""

    def __init__(self, base: Array) -> None:
        self.base = base

    def __len__(self) -> int:
        return self.base.size

    def __getitem__(self, key: Any) -> Array:
        return ravel(self.base)[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        flat_idx = np.arange(self.base.size, dtype=np.intp)[key] if not isinstance(key, Array) else key
        if isinstance(key, Array) and key.dtype == np.bool_:
            raise TypeError("flat: a lazy boolean mask cannot index a.flat; use lg.place(a, mask, v)")
        numlib_index.put(self.base, flat_idx, value)

    def __iter__(self) -> Any:
        return iter(self.base.numpy().ravel().tolist())

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        v = self.base.numpy().ravel()
        return v if dtype is None else v.astype(dtype)

    def copy(self) -> Array:
        """A flattened copy (lazy)."""
        return ravel(self.base).copy()


class DtypeView(OwnedView):
    """`a.view(dtype)` with another dtype: reads follow `a`'s bytes, writes are recorded into `a`.

    A lazy value is not memory, so the view is the `bitcast` of `a`'s current value, re-read
    whenever `a` was written since; writing into the view (`b[...] = v`, `b += 1`) records the
    view's new bytes, cast back, as a write into `a`. Arrays derived from the view (`b[1:]`,
    `b + 1`) are ordinary values, as for `z.real`.
    """

    __slots__ = ("_dtype",)

    def __init__(self, owner: Array, dtype: np.dtype) -> None:
        self._dtype = dtype
        super().__init__(owner, readonly=owner._readonly)

    def _read(self) -> Array:
        return record("bitcast", self._owner, dtype=self._dtype)

    def _owner_value(self, mine: Array) -> Array:
        return record("bitcast", mine, dtype=self._owner.dtype)


def _view(self: Array, dtype: Any = None, type: Any = None) -> Array:  # noqa: A002
    """A view of the same data; another dtype reads (and writes) the bytes as NumPy's view does."""
    if isinstance(dtype, builtins.type) and issubclass(dtype, np.ndarray):
        dtype, type = None, dtype  # noqa: A001  (NumPy: a.view(ndarray_subclass))
    if type is not None:
        raise TypeError("view: type= (an ndarray subclass) is not supported by lazygraph arrays")
    if dtype is None or np.dtype(dtype) == self.dtype:
        return self[...]
    new = np.dtype(dtype)
    if new.itemsize != self.dtype.itemsize and self.ndim and self.shape[-1] != 1 and self.size:
        if self.view_of().strides[-1] != 1:
            raise ValueError(
                "view: To change to a dtype of a different size, the last axis must be contiguous"
            )
    bitcast_shape(self.shape, self.dtype, new)  # NumPy's errors now, at the user's line
    return DtypeView(self, new)


def _tobytes(self: Array, order: str = "C") -> bytes:
    """Raw bytes of the value (an evaluation point)."""
    return self.numpy().tobytes(order)


def _tofile(self: Array, fid: Any, sep: str = "", format: str = "%s") -> None:  # noqa: A002
    """Write the value to a file (an evaluation point)."""
    self.numpy().tofile(fid, sep, format)


def _dumps(self: Array) -> bytes:
    """A pickle of the evaluated value (an evaluation point), as NumPy's `dumps`."""
    return pickle.dumps(self.numpy())


def _dump(self: Array, file: Any) -> None:
    """Pickle the evaluated value to `file` (an evaluation point)."""
    if isinstance(file, (str, bytes)) or hasattr(file, "__fspath__"):
        with open(file, "wb") as f:
            pickle.dump(self.numpy(), f)
    else:
        pickle.dump(self.numpy(), file)


def _byteswap(self: Array, inplace: bool = False) -> Array:
    """Byte order swapped: not supported on lazy values (a clear error)."""
    raise TypeError(
        "byteswap: lazygraph arrays always hold native byte order; byte-swap the evaluated value "
        "(np.asarray(a).byteswap()) and wrap it with lg.asarray"
    )


def _resize(self: Array, *new_shape: Any, refcheck: bool = True) -> None:
    """NumPy's in-place `a.resize(shape)`: the flattened data cut or padded with zeros, recorded lazily.

    As in NumPy, only an array that owns its data can be resized, and with `refcheck` not one
    that other arrays view. The array then holds a new buffer: views taken earlier (with
    refcheck=False) keep reading the old one, where NumPy would leave them dangling.
    """
    if len(new_shape) == 1 and not isinstance(new_shape[0], (int, np.integer)):
        new_shape = tuple(new_shape[0]) if new_shape[0] is not None else ()
    shape = tuple(operator.index(d) for d in new_shape)
    if any(d < 0 for d in shape):
        raise ValueError(f"resize: negative dimensions not allowed (got {shape})")
    if self._view is not None or type(self) is not Array:
        raise ValueError("resize: cannot resize this array: it does not own its data")
    storage = self._storage
    if storage.requires_grad:
        raise ValueError("resize: cannot resize an array that requires grad (a leaf of differentiation)")
    # the storage's references: this array's slot and getrefcount's argument; more are views
    if refcheck and sys.getrefcount(storage) > 3:
        raise ValueError(
            "resize: cannot resize an array that references or is referenced by another array "
            "in this way; use the lg.resize function (a new array) or refcheck=False"
        )
    size = int(np.prod(shape, dtype=np.int64))
    flat = ravel(self)[:size]
    if flat.size < size:
        flat = concat([flat, creation.zeros((size - flat.size,), dtype=self.dtype)])
    self._storage = Storage(reshape(flat, shape).node)


def _unsupported(name: str, why: str):
    def method(self: Array, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{name}: {why}")

    method.__name__ = name
    method.__doc__ = f"Not supported on lazygraph arrays: {why}"
    return method


def _install() -> None:
    """Set the methods on `Array` (once, when this module is imported)."""
    methods: dict[str, Any] = {
        "sum": _sum,
        "prod": _prod,
        "max": _extreme("max"),
        "min": _extreme("min"),
        "any": _logical("any"),
        "all": _logical("all"),
        "mean": _mean,
        "var": _spread("var"),
        "std": _spread("std"),
        "argmax": _arg("argmax"),
        "argmin": _arg("argmin"),
        "cumsum": _scan("cumsum"),
        "cumprod": _scan("cumprod"),
        "round": _round,
        "clip": _clip,
        "dot": _dot,
        "ptp": _ptp,
        "trace": _trace,
        "diagonal": _diagonal,
        "repeat": _repeat,
        "put": _put,
        "fill": _fill,
        "compress": _compress,
        "choose": _choose,
        "squeeze": _squeeze,
        "view": _view,
        "tobytes": _tobytes,
        "tofile": _tofile,
        "dump": _dump,
        "dumps": _dumps,
        "byteswap": _byteswap,
        "resize": _resize,
        "getfield": _unsupported("getfield", "lazygraph arrays have no structured or raw field access"),
        "setfield": _unsupported("setfield", "lazygraph arrays have no structured or raw field access"),
        "setflags": _unsupported(
            "setflags", "a lazygraph array's flags are fixed (views of a broadcast are read-only)"
        ),
    }
    for name, fn in methods.items():
        setattr(Array, name, fn)
    Array.flat = property(FlatIter, doc="A flat index into the array (reads lazy, writes recorded).")


_install()
