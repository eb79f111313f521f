"""The NumPy-style namespace: elementwise math, reductions, linear algebra, creation.

Names follow the Python array API standard where it has the function; NumPy's spellings
are aliases. Every function records; nothing here computes.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, TextIO

import numpy as np

from lazygraph import debug, executor
from lazygraph.array import Array, record
from lazygraph.shape import _arr, moveaxis
from ops.elementwise import BINARY, UNARY

UFUNC_NAMES: dict[np.ufunc, str] = {fn: name for name, fn in {**BINARY, **UNARY}.items()}


def check_device(device: str | None) -> None:
    """Reject devices this build cannot place arrays on."""
    if device not in (None, "cpu"):
        raise ValueError(f"device {device!r} is not available (only 'cpu')")


def _elementwise(name: str, arity: int):
    def fn(*args: Any, out: Array | None = None) -> Array:
        if len(args) != arity:
            raise TypeError(f"{name}() takes {arity} positional arguments but {len(args)} were given")
        result = record(name, *args)
        if out is not None:
            if not isinstance(out, Array):
                raise TypeError(f"{name}: out= must be a lazygraph Array, got {type(out).__name__}")
            if result.shape != out.shape:
                raise ValueError(
                    f"{name}: out has shape {out.shape} but the result has shape {result.shape}"
                )
            if not np.can_cast(result.dtype, out.dtype, "same_kind"):
                raise TypeError(f"{name}: cannot cast output from {result.dtype} to out's {out.dtype}")
            out._write(result, op=name)
            return out
        return result

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise {name} (NumPy semantics, recorded lazily)."
    return fn


_mod = sys.modules[__name__]
for _name in BINARY:
    setattr(_mod, _name, _elementwise(_name, 2))
for _name in (*UNARY, "sigmoid", "erf"):
    setattr(_mod, _name, _elementwise(_name, 1))

ALIASES = {
    "true_divide": "divide",
    "power": "pow",
    "mod": "remainder",
    "absolute": "abs",
    "arcsin": "asin",
    "arccos": "acos",
    "arctan": "atan",
    "arctan2": "atan2",
    "invert": "bitwise_invert",
    "bitwise_not": "bitwise_invert",
    "left_shift": "bitwise_left_shift",
    "right_shift": "bitwise_right_shift",
}
for _alias, _name in ALIASES.items():
    setattr(_mod, _alias, getattr(_mod, _name))


def where(condition: Any, x: Any, y: Any) -> Array:
    """Elements of x where condition holds, else of y."""
    return record("where", condition, x, y)


def clip(x: Any, min: Any = None, max: Any = None) -> Array:
    """Limit values to [min, max] (either bound may be None)."""
    out = _arr(x)
    if min is not None:
        out = record("maximum", out, min)
    if max is not None:
        out = record("minimum", out, max)
    return out if out is not x else copy_of(out)


def copy_of(x: Array) -> Array:
    """A new array sharing nothing writable with x."""
    from lazygraph.shape import copy

    return copy(x)


def round(x: Any, decimals: int = 0) -> Array:  # noqa: A001 - array API name
    """Round half to even, to the given number of decimals."""
    return record("round", x, decimals=decimals)


around = round


def astype(x: Any, dtype: Any, copy: bool = True) -> Array:
    """Convert to dtype (NumPy unsafe casting)."""
    x = _arr(x)
    if not copy and np.dtype(dtype) == x.dtype:
        return x
    return record("astype", x, dtype=dtype)


# -- reductions ---------------------------------------------------------------------


def sum(x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Array:  # noqa: A001
    """Sum over axes."""
    return record("sum", x, axis=axis, dtype=dtype, keepdims=keepdims)


def prod(x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Array:
    """Product over axes."""
    return record("prod", x, axis=axis, dtype=dtype, keepdims=keepdims)


def mean(x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Array:
    """Arithmetic mean over axes."""
    return record("mean", x, axis=axis, dtype=dtype, keepdims=keepdims)


def var(x: Any, axis: Any = None, dtype: Any = None, ddof: float = 0, keepdims: bool = False, correction: float | None = None) -> Array:
    """Variance (ddof / array-API `correction` degrees of freedom removed)."""
    ddof = correction if correction is not None else ddof
    return record("var", x, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)


def std(x: Any, axis: Any = None, dtype: Any = None, ddof: float = 0, keepdims: bool = False, correction: float | None = None) -> Array:
    """Standard deviation."""
    ddof = correction if correction is not None else ddof
    return record("std", x, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)


def max(x: Any, axis: Any = None, keepdims: bool = False) -> Array:  # noqa: A001
    """Maximum over axes."""
    return record("max", x, axis=axis, keepdims=keepdims)


def min(x: Any, axis: Any = None, keepdims: bool = False) -> Array:  # noqa: A001
    """Minimum over axes."""
    return record("min", x, axis=axis, keepdims=keepdims)


amax, amin = max, min


def any(x: Any, axis: Any = None, keepdims: bool = False) -> Array:  # noqa: A001
    """Whether any element is true."""
    return record("any", x, axis=axis, keepdims=keepdims)


def all(x: Any, axis: Any = None, keepdims: bool = False) -> Array:  # noqa: A001
    """Whether every element is true."""
    return record("all", x, axis=axis, keepdims=keepdims)


def argmax(x: Any, axis: int | None = None, keepdims: bool = False) -> Array:
    """Index of the first maximum."""
    return record("argmax", x, axis=axis, keepdims=keepdims)


def argmin(x: Any, axis: int | None = None, keepdims: bool = False) -> Array:
    """Index of the first minimum."""
    return record("argmin", x, axis=axis, keepdims=keepdims)


def cumsum(x: Any, axis: int | None = None, dtype: Any = None) -> Array:
    """Running sum (axis None flattens)."""
    return record("cumsum", x, axis=axis, dtype=dtype)


def cumprod(x: Any, axis: int | None = None, dtype: Any = None) -> Array:
    """Running product (axis None flattens)."""
    return record("cumprod", x, axis=axis, dtype=dtype)


# -- linear algebra -----------------------------------------------------------------

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def matmul(a: Any, b: Any) -> Array:
    """Matrix product with broadcast batch dimensions (`@`)."""
    return record("matmul", a, b)


def einsum(subscripts: str, *operands: Any) -> Array:
    """Einstein summation."""
    return record("einsum", *operands, subscripts=subscripts)


def tensordot(a: Any, b: Any, axes: Any = 2) -> Array:
    """Sum products over the last `axes` axes of a and the first of b (or given axis lists)."""
    a, b = _arr(a), _arr(b)
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        if n < 0 or n > a.ndim or n > b.ndim:
            raise ValueError(f"tensordot: axes={n} does not fit shapes {a.shape} and {b.shape}")
        ax_a, ax_b = list(range(a.ndim - n, a.ndim)), list(range(n))
    else:
        ax_a, ax_b = axes
        ax_a = [ax_a] if isinstance(ax_a, int) else list(ax_a)
        ax_b = [ax_b] if isinstance(ax_b, int) else list(ax_b)
        if len(ax_a) != len(ax_b):
            raise ValueError("tensordot: shape-mismatch for sum (different numbers of axes)")
        ax_a = [x % a.ndim if a.ndim else x for x in ax_a]
        ax_b = [x % b.ndim if b.ndim else x for x in ax_b]
    la = list(_LETTERS[: a.ndim])
    lb = list(_LETTERS[a.ndim : a.ndim + b.ndim])
    for i, j in zip(ax_a, ax_b):
        lb[j] = la[i]
    out = [c for k, c in enumerate(la) if k not in ax_a] + [c for k, c in enumerate(lb) if k not in ax_b]
    return einsum(f"{''.join(la)},{''.join(lb)}->{''.join(out)}", a, b)


def dot(a: Any, b: Any) -> Array:
    """NumPy's dot: scalars multiply, otherwise contract a's last axis with b's second-to-last."""
    a, b = _arr(a), _arr(b)
    if a.ndim == 0 or b.ndim == 0:
        return record("multiply", a, b)
    return tensordot(a, b, axes=([-1], [max(b.ndim - 2, 0)]))


def inner(a: Any, b: Any) -> Array:
    """Contract the last axes of a and b."""
    a, b = _arr(a), _arr(b)
    if a.ndim == 0 or b.ndim == 0:
        return record("multiply", a, b)
    return tensordot(a, b, axes=([-1], [-1]))


def outer(a: Any, b: Any) -> Array:
    """Outer product of the flattened inputs."""
    from lazygraph.shape import ravel

    return einsum("i,j->ij", ravel(_arr(a)), ravel(_arr(b)))


def vecdot(a: Any, b: Any, axis: int = -1) -> Array:
    """Dot product along an axis, broadcasting the others (real dtypes)."""
    a, b = _arr(a), _arr(b)
    if a.dtype.kind == "c" or b.dtype.kind == "c":
        raise TypeError("vecdot: complex inputs are not supported")
    return einsum("...i,...i->...", moveaxis(a, axis, -1), moveaxis(b, axis, -1))


# -- evaluation and inspection ------------------------------------------------------


def eval(*arrays: Array) -> tuple[np.ndarray, ...]:  # noqa: A001 - the design's name
    """Evaluate several arrays as one graph; returns their (read-only) NumPy values."""
    arrays = tuple(_arr(a) for a in arrays)
    executor.evaluate([a.node for a in arrays])
    return tuple(a.numpy() for a in arrays)


def explain(*arrays: Array, file: TextIO | None = None) -> None:
    """Print the recorded graph that computes the arrays."""
    lines = debug.graph_lines([_arr(a).node for a in arrays])
    print("\n".join(lines), file=file or sys.stdout)


def to_dot(*arrays: Array) -> str:
    """Graphviz source of the recorded graph that computes the arrays."""
    return debug.dot_source([_arr(a).node for a in arrays])


def result_type(*xs: Any) -> np.dtype:
    """NumPy's result_type over arrays, dtypes and scalars."""
    return np.result_type(*(x.dtype if isinstance(x, Array) else x for x in xs))


def shape(x: Any) -> tuple[int, ...]:
    """Shape of an array (known without evaluating)."""
    return _arr(x).shape


def ndim(x: Any) -> int:
    """Number of dimensions."""
    return _arr(x).ndim


def size(x: Any) -> int:
    """Number of elements."""
    return _arr(x).size


__all__ = sorted(
    name
    for name, value in list(vars().items())
    if not name.startswith("_")
    and callable(value)
    and getattr(value, "__module__", None) == __name__
    and name not in ("check_device", "copy_of")
)
