"""NumPy's ufunc methods on lazygraph's binary functions, recorded lazily: `lg.add.at`, `lg.maximum.accumulate`.

Importing this module gives every binary elementwise function of the namespace (`lg.add`,
`lg.maximum`, `lg.bitwise_xor`, `lg.hypot`, ...) NumPy's `reduce`, `accumulate`, `reduceat`,
`outer` and `at`, and `nin`, `nout`, `nargs`, `identity`. `np.add.at(x, i, v)` and
`np.maximum.accumulate(x)` on lazy arrays reach the same methods (lazygraph/methods.py).

- `reduce` and `accumulate` record the existing reductions and scans (sum, prod, max, min, all,
  any, cumsum, cumprod) where those give NumPy's dtype, else the `ufunc_reduce` / `accumulate`
  operators (ops/scan.py). `where=` masks with the identity (or `initial`).
- `reduceat` records `reduceat`: indices may be lazy (an index out of range fails at evaluation).
- `outer` is the function applied to broadcast reshapes of its operands.
- `at` is a recorded write: the `ufunc_at` operator (unbuffered: repeated indices accumulate)
  gives the new value of the array, which is written back, so views see it as in NumPy.

Unary functions (`lg.negative`, `lg.sin`) get NumPy's unary-ufunc behaviour: `reduce`,
`accumulate`, `reduceat` and `outer` raise NumPy's error before evaluating anything; `at` with a
basic index is a recorded write, with advanced indices (repeats apply the function repeatedly) it
falls back to NumPy's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from lazygraph import api, fallback, numlib_math, txn
from lazygraph.array import Array, as_node, record
from lazygraph.indexing import parse_index
from lazygraph.shape import _arr, asarray, reshape
from ops.base import dtype_by_example, normalize_axes

_NO_VALUE = np._NoValue
#: ufunc -> the reduction operator that computes its reduce (when the dtypes agree)
REDUCTIONS = {"add": "sum", "multiply": "prod", "maximum": "max", "minimum": "min"}
REDUCTIONS_BOOL = {"logical_and": "all", "logical_or": "any"}
#: ufunc -> the scan operator that computes its accumulate
SCANS = {"add": "cumsum", "multiply": "cumprod"}
_TYPED = ("sum", "prod", "cumsum", "cumprod")  # operators with a dtype= attribute


def _axes(name: str, x: Array, axis: Any) -> tuple[int, ...]:
    if x.ndim == 0 and (axis is None or axis in (0, -1, ())):
        return ()  # NumPy's reductions accept axis 0 / -1 on a 0-d array
    return normalize_axes(f"{name}.reduce", axis, x.ndim)


def _write_out(name: str, result: Array, out: Any) -> Array:
    if out is None:
        return result
    (target,) = out if isinstance(out, tuple) else (out,)
    if not isinstance(target, Array):
        raise TypeError(f"{name}: out= must be a lazygraph Array, got {type(target).__name__}")
    if target.shape != result.shape:
        raise ValueError(f"{name}: out has shape {target.shape} but the result has shape {result.shape}")
    target[...] = result
    return target


def _reduce(name: str) -> Callable:
    uf = getattr(np, name)

    def reduce(
        array: Any,
        axis: Any = 0,
        dtype: Any = None,
        out: Any = None,
        keepdims: bool = False,
        initial: Any = _NO_VALUE,
        where: Any = True,
    ) -> Array:
        x = _arr(array)
        axes = _axes(name, x, axis)
        if where is not True:
            # masked elements count as the identity (initial, if given, is added once by the reduction)
            fill = uf.identity if uf.identity is not None or initial is _NO_VALUE else initial
            if fill is None:
                raise ValueError(
                    f"{name}.reduce: reduction operation {name!r} does not have an identity, "
                    "so to use a where mask one has to specify 'initial'"
                )
            masked = api.where(where, x, asarray(fill, dtype=x.dtype))
            if masked.shape != x.shape:
                raise ValueError(f"{name}.reduce: where= of shape {np.shape(where)} does not fit {x.shape}")
            x = masked
        attrs: dict = {"axis": axes, "keepdims": bool(keepdims)}
        if dtype is not None:
            attrs["dtype"] = np.dtype(dtype)
        named = REDUCTIONS.get(name) or (REDUCTIONS_BOOL.get(name) if x.dtype == np.bool_ else None)
        if initial is _NO_VALUE and named and (dtype is None or named in _TYPED):
            expected = dtype_by_example(f"{name}.reduce", uf.reduce, (x.node,), **attrs)
            result = record(named, x, **attrs)
            if result.dtype == expected:
                return _write_out(f"{name}.reduce", result, out)
        if initial is not _NO_VALUE and initial is not None:
            attrs["initial"] = initial
        return _write_out(f"{name}.reduce", record("ufunc_reduce", x, ufunc=name, **attrs), out)

    return reduce


def _accumulate(name: str) -> Callable:
    uf = getattr(np, name)

    def accumulate(array: Any, axis: int = 0, dtype: Any = None, out: Any = None) -> Array:
        x = _arr(array)
        attrs: dict = {"axis": axis}
        if dtype is not None:
            attrs["dtype"] = np.dtype(dtype)
        result = record("accumulate", x, ufunc=name, **attrs)
        scan = SCANS.get(name)
        if scan is not None:  # the scan operator has gradients and fusion rules: use it when it agrees
            expected = dtype_by_example(f"{name}.accumulate", uf.accumulate, (x.node,), **attrs)
            if expected == result.dtype:
                result = record(scan, x, **attrs)
        return _write_out(f"{name}.accumulate", result, out)

    return accumulate


def _reduceat(name: str) -> Callable:
    def reduceat(array: Any, indices: Any, axis: int = 0, dtype: Any = None, out: Any = None) -> Array:
        x = _arr(array)
        if not isinstance(indices, Array):
            static = np.asarray(indices)
            if static.dtype.kind not in "iu" and static.size == 0:
                static = static.astype(np.intp)
            if static.ndim == 1 and static.dtype.kind in "iu" and x.ndim:
                n = x.shape[axis if -x.ndim <= axis < x.ndim else 0]
                bad = static[(static < 0) | (static >= n)]
                if bad.size:
                    raise IndexError(f"{name}.reduceat: index {int(bad[0])} out-of-bounds [0, {n})")
            indices = static
        attrs: dict = {"axis": axis}
        if dtype is not None:
            attrs["dtype"] = np.dtype(dtype)
        result = record("reduceat", x, indices, ufunc=name, **attrs)
        txn.note_origin(result.node)  # lazy indices are data: out of range fails at evaluation
        return _write_out(f"{name}.reduceat", result, out)

    return reduceat


def _outer(fn: Callable, name: str) -> Callable:
    def outer(a: Any, b: Any, /, **kwargs: Any) -> Array:
        a, b = _arr(a), _arr(b)
        return fn(reshape(a, a.shape + (1,) * b.ndim), b, **kwargs)

    return outer


def _at(fn: Callable, name: str) -> Callable:
    uf = getattr(np, name)

    def at(a: Any, indices: Any, b: Any = None, /) -> None:
        if not isinstance(a, Array):  # a NumPy array to write into: NumPy's, on evaluated operands
            fallback.array_ufunc(uf, "at", (a, indices) if b is None else (a, indices, b), {})
            return None
        if b is None:
            raise TypeError(f"{name}.at: second operand needed for a binary ufunc")
        view, template, operands = parse_index(a, indices, f"{name}.at", Array)
        if template is None:  # basic indexing touches each element once: buffered = unbuffered
            region = a._derive(view)
            region[...] = fn(region, b)
            return None
        value = b if isinstance(b, Array) else asarray(b) if not isinstance(b, (int, float, bool)) else b
        as_node(value, f"{name}.at")
        result = record("ufunc_at", a, value, *operands, ufunc=name, index=template)
        txn.note_origin(result.node)  # index arrays are data: out of range fails at evaluation
        a[...] = result
        return None

    return at


def attach(fn: Any, ufunc: np.ufunc) -> None:
    """Give lazygraph's binary function `fn` lazy ufunc methods and NumPy's ufunc attributes."""
    name = ufunc.__name__
    fn.reduce = _reduce(name)
    fn.accumulate = _accumulate(name)
    fn.reduceat = _reduceat(name)
    fn.outer = _outer(fn, name)
    fn.at = _at(fn, name)
    for method in fallback.UFUNC_METHODS:
        m = getattr(fn, method)
        m.__name__ = m.__qualname__ = f"{name}.{method}"
        m.__doc__ = f"NumPy's {name}.{method}, recorded lazily (lazygraph/ufuncs.py)."
        m.lazy = True
    for attr in ("nin", "nout", "nargs", "identity", "ntypes", "types", "signature"):
        setattr(fn, attr, getattr(ufunc, attr))


def _unary_refused(name: str, method: str) -> Callable:
    # NumPy's own error, raised before anything is evaluated (a fallback would evaluate first)
    what = "outer product" if method == "outer" else method

    def refused(*args: Any, **kwargs: Any) -> None:
        raise ValueError(f"{what} only supported for binary functions")

    return refused


def _unary_at(fn: Callable, name: str) -> Callable:
    uf = getattr(np, name)

    def at(a: Any, indices: Any, b: Any = None, /) -> None:
        if b is not None:
            raise ValueError("second operand provided when ufunc is unary")
        if isinstance(a, Array):
            view, template, _ = parse_index(a, indices, f"{name}.at", Array)
            if template is None:  # basic indexing touches each element once: a recorded write
                region = a._derive(view)
                region[...] = fn(region)
                return None
        # repeated advanced indices apply the function repeatedly: NumPy's, on evaluated operands
        fallback.array_ufunc(uf, "at", (a, indices), {})
        return None

    return at


def attach_unary(fn: Any, ufunc: np.ufunc) -> None:
    """Give lazygraph's unary function `fn` NumPy's ufunc methods: `at`, and NumPy's errors for the rest."""
    name = ufunc.__name__
    for method in ("reduce", "accumulate", "reduceat", "outer"):
        setattr(fn, method, _unary_refused(name, method))
    fn.at = _unary_at(fn, name)
    for method in fallback.UFUNC_METHODS:
        m = getattr(fn, method)
        m.__name__ = m.__qualname__ = f"{name}.{method}"
        m.__doc__ = f"NumPy's {name}.{method} for a unary ufunc (lazygraph/ufuncs.py)."
        m.lazy = True
    for attr in ("nin", "nout", "nargs", "identity", "ntypes", "types", "signature"):
        setattr(fn, attr, getattr(ufunc, attr))


def install(*modules: Any) -> list[str]:
    """Attach lazy ufunc methods to every unary or binary ufunc-like function of `modules`; their names."""
    done = []
    for mod in modules:
        for name, fn in list(vars(mod).items()):
            uf = getattr(np, name, None)
            if (
                isinstance(uf, np.ufunc)
                and uf.nin in (1, 2)
                and uf.nout == 1
                and uf.signature is None
                and callable(fn)
                and getattr(fn, "__module__", "").startswith("lazygraph")
            ):
                (attach if uf.nin == 2 else attach_unary)(fn, uf)
                done.append(name)
    return done


INSTALLED = install(api, numlib_math)
