"""The NumPy-style namespace: elementwise math, reductions, linear algebra, creation.

Names follow the Python array API standard where it has the function; NumPy's spellings
are aliases. Every function records; nothing here computes.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

import numpy as np
from numpy.exceptions import ComplexWarning

from lazygraph import debug, txn
from lazygraph.array import (  # noqa: F401  (check_device: for importers)
    Array,
    check_device,
    record,
    result_dtype,
)
from lazygraph.engine import evaluate as evaluation
from lazygraph.recorders import binary_recorder, unary_recorder
from lazygraph.shape import _arr, moveaxis, ravel
from ops.base import drops_imaginary
from ops.elementwise import BINARY, UNARY

UFUNC_NAMES: dict[np.ufunc, str] = {fn: name for name, fn in {**BINARY, **UNARY}.items()}


def _elementwise(name: str, arity: int):
    lean = None  # the operator's lean recorder, bound on first use (one call per op after that)

    def fn(*args: Any, out: Array | None = None) -> Array:
        nonlocal lean
        if out is None and len(args) == arity:  # the common case, memoized per operand signature
            if lean is None:
                lean = unary_recorder(name) if arity == 1 else binary_recorder(name)
            return lean(*args)
        if len(args) != arity:
            raise TypeError(f"{name}() takes {arity} positional arguments but {len(args)} were given")
        if out is not None:
            if not isinstance(out, Array):
                raise TypeError(f"{name}: out= must be a lazygraph Array, got {type(out).__name__}")
            if out._readonly:  # NumPy checks this first, then dtypes, then shapes
                raise ValueError(f"{name}: output array is read-only (a broadcast view)")
            dtype = result_dtype(name, *args)
            if not np.can_cast(dtype, out.dtype, "same_kind"):
                raise TypeError(f"{name}: cannot cast output from {dtype} to out's {out.dtype}")
        result = record(name, *args)
        if out is not None:
            try:  # as NumPy: the result broadcasts to out's shape
                fits = tuple(np.broadcast_shapes(result.shape, out.shape)) == out.shape
            except ValueError:
                fits = False
            if not fits:
                raise ValueError(f"{name}: out has shape {out.shape} but the result has shape {result.shape}")
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
    "arcsinh": "asinh",
    "arccosh": "acosh",
    "arctanh": "atanh",
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
    if out.dtype.kind in "iu":
        # As np.clip: Python-int bounds outside the integer dtype's range are no bound.
        info = np.iinfo(out.dtype)
        if type(min) is int and min <= info.min:
            min = None
        if type(max) is int and max >= info.max:
            max = None
    if min is None and max is None:
        return record("positive", out)  # NumPy's identity clip: a copy (rejects bool)
    if min is None:
        return record("minimum", out, max)
    if max is None:
        return record("maximum", out, min)
    return record("clip", out, min, max)


def round(x: Any, decimals: int = 0) -> Array:  # noqa: A001 - array API name
    """Round half to even, to the given number of decimals."""
    return record("round", x, decimals=decimals)


around = round


def astype(x: Any, dtype: Any, copy: bool = True, device: Any = None) -> Array:
    """Convert to dtype (NumPy unsafe casting); copy=False returns x itself when the dtype matches."""
    check_device(device)
    x = _arr(x)
    if device is not None:
        x = x.to(device)  # a transfer where it lives elsewhere
    if not copy and np.dtype(dtype) == x.dtype:
        return x
    if drops_imaginary(x.dtype, dtype):  # NumPy's astype warns
        txn.warn_user("Casting complex values to real discards the imaginary part", ComplexWarning)
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


def _spread(
    op: str, x: Any, axis: Any, dtype: Any, ddof: float, keepdims: bool, correction: float | None
) -> Array:
    ddof = correction if correction is not None else ddof
    return record(op, x, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)


def var(
    x: Any,
    axis: Any = None,
    dtype: Any = None,
    ddof: float = 0,
    keepdims: bool = False,
    correction: float | None = None,
) -> Array:
    """Variance (ddof / array-API `correction` degrees of freedom removed)."""
    return _spread("var", x, axis, dtype, ddof, keepdims, correction)


def std(
    x: Any,
    axis: Any = None,
    dtype: Any = None,
    ddof: float = 0,
    keepdims: bool = False,
    correction: float | None = None,
) -> Array:
    """Standard deviation (ddof / array-API `correction` degrees of freedom removed)."""
    return _spread("std", x, axis, dtype, ddof, keepdims, correction)


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


def apply(op: Any, *operands: Any, **attrs: Any) -> Array:
    """Record an operator given by its record or name: how code calls an operator declared with
    ops.declare that has no function of its own in this namespace."""
    return record(op if isinstance(op, str) else op.name, *operands, **attrs)


def matmul(a: Any, b: Any) -> Array:
    """Matrix product with broadcast batch dimensions (`@`)."""
    return binary_recorder("matmul")(a, b)  # the lean recorder `@` uses (memoized per signature)


def einsum(subscripts: str, *operands: Any) -> Array:
    """Einstein summation."""
    return record("einsum", *operands, subscripts=subscripts)


def _contract(name: str, subscripts: str, a: Array, b: Array) -> Array:
    """einsum on behalf of `name`: a shape mismatch names the function the user called."""
    try:
        return einsum(subscripts, a, b)
    except ValueError as e:
        raise ValueError(f"{name}: shapes {a.shape} and {b.shape} not aligned ({e})") from None


def tensordot(a: Any, b: Any, axes: Any = 2) -> Array:
    """Sum products over the last `axes` axes of a and the first of b (or given axis lists)."""
    return _tensordot(a, b, axes, "tensordot")


def _tensordot(a: Any, b: Any, axes: Any, name: str) -> Array:
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
    for i, j in zip(ax_a, ax_b):  # einsum would broadcast a size-1 dimension; NumPy does not here
        if a.shape[i] != b.shape[j]:
            raise ValueError(f"{name}: shapes {a.shape} and {b.shape} not aligned (axis {i} vs axis {j})")
    la = list(_LETTERS[: a.ndim])
    lb = list(_LETTERS[a.ndim : a.ndim + b.ndim])
    for i, j in zip(ax_a, ax_b):
        lb[j] = la[i]
    out = [c for k, c in enumerate(la) if k not in ax_a] + [c for k, c in enumerate(lb) if k not in ax_b]
    return _contract(name, f"{''.join(la)},{''.join(lb)}->{''.join(out)}", a, b)


def dot(a: Any, b: Any) -> Array:
    """NumPy's dot: scalars multiply, otherwise contract a's last axis with b's second-to-last."""
    a, b = _arr(a), _arr(b)
    if a.ndim == 0 or b.ndim == 0:
        return record("multiply", a, b)
    return _tensordot(a, b, ([-1], [b.ndim - 2 if b.ndim >= 2 else 0]), "dot")  # (max is the reduction here)


def inner(a: Any, b: Any) -> Array:
    """Contract the last axes of a and b."""
    a, b = _arr(a), _arr(b)
    if a.ndim == 0 or b.ndim == 0:
        return record("multiply", a, b)
    return _tensordot(a, b, ([-1], [-1]), "inner")


def outer(a: Any, b: Any) -> Array:
    """Outer product of the flattened inputs."""
    return einsum("i,j->ij", ravel(_arr(a)), ravel(_arr(b)))


def vecdot(a: Any, b: Any, axis: int = -1) -> Array:
    """Dot product along an axis, broadcasting the others (complex a is conjugated, as the standard says)."""
    a, b = _arr(a), _arr(b)
    if a.dtype.kind == "c":
        a = record("conj", a)
    a, b = moveaxis(a, axis, -1), moveaxis(b, axis, -1)
    if a.shape[-1] != b.shape[-1]:  # core dimensions do not broadcast
        raise ValueError(f"vecdot: shapes {a.shape} and {b.shape} differ in the contracted axis")
    return _contract("vecdot", "...i,...i->...", a, b)


# -- evaluation and inspection ------------------------------------------------------


def eval(*arrays: Array) -> tuple[np.ndarray, ...]:  # noqa: A001 - the design's name
    """Evaluate several arrays as one graph; returns their (read-only) NumPy values."""
    arrays = [_arr(a) for a in arrays]  # lists, not generators: an evaluation point in a loop
    evaluation.evaluate([a.node for a in arrays])
    return tuple([a.numpy() for a in arrays])


def realize(*arrays: Array) -> tuple[Array, ...]:
    """Evaluate several arrays as one graph and keep their values where they live (no copy to
    the host, unlike `eval`): on a GPU, the kernels are queued and the arrays hold the results."""
    arrays = [_arr(a) for a in arrays]
    evaluation.evaluate([a.node for a in arrays])
    return tuple(arrays)


def explain(*arrays: Array, file: TextIO | None = None) -> None:
    """Print the recorded graph P, the optimized graph Q and the passes that fired (runs nothing)."""
    roots = [_arr(a).node for a in arrays]
    lines = ["P = recorded graph:", *debug.graph_lines(roots), *evaluation.explain_lines(roots)]
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
    if not name.startswith("_") and callable(value) and getattr(value, "__module__", None) == __name__
)
