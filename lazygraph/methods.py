"""Operators and methods of `Array`: the NumPy spellings users reach for (`a + b`, `x.sum()`)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from lazygraph import api, fallback, shape
from lazygraph.array import Array, Scalar
from lazygraph.elements import scalar_inplace
from lazygraph.recorders import (
    binary_recorder,
    record_binary,
    record_unary,
    reflected_recorder,
    unary_recorder,
)

_BINARY_DUNDERS = {
    "add": "add",
    "sub": "subtract",
    "mul": "multiply",
    "truediv": "divide",
    "floordiv": "floor_divide",
    "mod": "remainder",
    "pow": "pow",
    "matmul": "matmul",
    "and": "bitwise_and",
    "or": "bitwise_or",
    "xor": "bitwise_xor",
    "lshift": "bitwise_left_shift",
    "rshift": "bitwise_right_shift",
}
_COMPARISONS = {
    "eq": "equal",
    "ne": "not_equal",
    "lt": "less",
    "le": "less_equal",
    "gt": "greater",
    "ge": "greater_equal",
}
_UNARY_DUNDERS = {"neg": "negative", "pos": "positive", "abs": "abs", "invert": "bitwise_invert"}


def _forward(op: str):
    # the lean recorder itself is the method: `a + b` is one Python call (array.binary_recorder)
    return binary_recorder(op)


def _reflected(op: str):
    return reflected_recorder(op)


def _inplace(op: str):
    def method(self: Array, other: Any) -> Array:
        return self._inplace(op, other)

    return method


def _unary(op: str):
    return unary_recorder(op)


def _fast_power(x: Array, exponent: Any) -> str | None:
    """The unary operator NumPy's `x ** exponent` takes instead of `power`, so the bits match NumPy's.

    NumPy's array power calls square for a Python int 2, reciprocal for -1 and sqrt for a
    Python float 0.5 on float and complex arrays (their complex results differ from
    `power`'s in the last bits), and square for `bool ** 2` (int8, not int64).
    """
    kind, t = x.dtype.kind, type(exponent)
    if t is int:
        if exponent == 2 and kind in "bfc":
            return "square"
        if exponent == -1 and kind in "fc":
            return "reciprocal"
    elif t is float and exponent == 0.5 and kind in "fc":
        return "sqrt"
    return None


def _install() -> None:
    for dunder, op in _BINARY_DUNDERS.items():
        setattr(Array, f"__{dunder}__", _forward(op))
        setattr(Array, f"__r{dunder}__", _reflected(op))
        setattr(Array, f"__i{dunder}__", _inplace(op))
        if op != "matmul":  # an element's `s op= v` rebinds s (array.scalar_inplace)
            setattr(Scalar, f"__i{dunder}__", scalar_inplace(op))
    for dunder, op in _COMPARISONS.items():
        setattr(Array, f"__{dunder}__", _forward(op))
    for dunder, op in _UNARY_DUNDERS.items():
        setattr(Array, f"__{dunder}__", _unary(op))

    def _pow(self: Array, other: Any) -> Array:
        op = _fast_power(self, other)
        # the unary operator's lean recorder: `x ** 2` cost 5.4 us through `record`, `lg.square(x)` 0.9
        return record_binary("pow", self, other) if op is None else record_unary(op, self)

    def _ipow(self: Array, other: Any) -> Array:
        op = _fast_power(self, other)
        if op is None or self.dtype.kind not in "fc" or type(self)._inplace is not Array._inplace:
            return self._inplace("pow", other)  # (0-d scalars rebind, as `x = x ** k` would)
        if self._readonly:
            raise ValueError("pow: output array is read-only (a broadcast view)")
        self._write(record_unary(op, self), op="pow")
        return self

    Array.__pow__ = _pow
    Array.__ipow__ = _ipow

    def _reshape(self: Array, *new_shape: Any, copy: bool | None = None) -> Array:
        """New shape (a view when possible); accepts a tuple or separate ints."""
        if len(new_shape) == 1 and not isinstance(new_shape[0], int):
            new_shape = new_shape[0]
        return shape.reshape(self, new_shape, copy=copy)

    def _transpose(self: Array, *axes: Any) -> Array:
        """Permute axes (reverse when none given); accepts a tuple or separate ints."""
        if len(axes) == 1 and not isinstance(axes[0], int):
            axes = axes[0]
        return shape.permute_dims(self, axes or None)

    Array.reshape = _reshape
    Array.transpose = _transpose
    Array.permute = _transpose
    Array.T = property(lambda self: shape.permute_dims(self), doc="Axes reversed (a view).")
    Array.mT = property(shape.matrix_transpose, doc="Last two axes swapped (a view).")
    for name in (
        "sum",
        "prod",
        "mean",
        "var",
        "std",
        "max",
        "min",
        "any",
        "all",
        "argmax",
        "argmin",
        "cumsum",
        "cumprod",
        "astype",
        "round",
        "clip",
        "dot",
    ):
        setattr(Array, name, getattr(api, name))
    for name in ("swapaxes", "flatten", "ravel", "squeeze", "copy", "flip"):
        setattr(Array, name, getattr(shape, name))
    Array.__copy__ = shape.copy
    Array.__deepcopy__ = lambda self, memo: shape.copy(self)
    Array.__array_ufunc__ = _array_ufunc


#: the namespace NumPy's functions and composed ufuncs route to (set once by the package)
_namespace: ModuleType | None = None


def _array_ufunc(self: Array, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
    """NumPy's ufuncs on lazy arrays (`np.tanh(x)`, `np.add(a, b, out=c)`) record our ops."""
    name = "matmul" if ufunc is np.matmul else api.UFUNC_NAMES.get(ufunc)
    if name is None and method == "__call__" and not kwargs and _namespace is not None:
        # a ufunc the namespace composes from other operators (np.hypot, np.copysign, ...)
        impl = getattr(_namespace, ufunc.__name__, None)
        if callable(impl) and not isinstance(impl, (type, fallback.FallbackUfunc)):
            return impl(*inputs)
    if method != "__call__" and _namespace is not None:
        # ufunc methods lazygraph records (np.add.at on a lazy array, np.maximum.accumulate)
        lazy = getattr(getattr(_namespace, ufunc.__name__, None), method, None)
        if getattr(lazy, "lazy", False) and fallback.accepts(lazy, kwargs):
            if method != "at" or isinstance(inputs[0], Array):
                return lazy(*inputs, **kwargs)
    if "dtype" in kwargs and name is not None and method == "__call__":
        inputs, kwargs = _cast_to_loop(ufunc, inputs, kwargs)
    if name is None or method != "__call__" or set(kwargs) - {"out"}:
        # ufunc methods (np.add.at, np.maximum.accumulate), ufuncs and keywords we lack
        return fallback.array_ufunc(ufunc, method, inputs, kwargs)
    out = kwargs.pop("out", None)
    if out is not None:
        (target,) = out
        if not isinstance(target, Array) or name == "matmul":
            return fallback.array_ufunc(ufunc, method, inputs, {"out": out})
        # out= follows NumPy's rules (same_kind casting, broadcast to out's shape)
        return getattr(api, name)(*inputs, out=target)
    return getattr(api, name)(*inputs)


def _cast_to_loop(ufunc: np.ufunc, inputs: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """`np.add(a, b, dtype=d)` computes in d: the inputs cast to it (Dask's tensordot sums chunks so).

    Only where the ufunc has a d -> d loop (arithmetic); a comparison's dtype= and the like
    keep going to NumPy's fallback.
    """
    rest = dict(kwargs)
    dtype = rest.pop("dtype")
    if dtype is None:
        return inputs, rest
    dt = np.dtype(dtype)
    if f"{dt.char * ufunc.nin}->{dt.char * ufunc.nout}" not in ufunc.types or any(
        isinstance(x, (Array, np.ndarray, np.generic)) and not np.can_cast(x.dtype, dt, "same_kind")
        for x in inputs
    ):
        return inputs, kwargs  # NumPy's own rules (and errors) decide
    cast = tuple(
        x.astype(dt)
        if isinstance(x, Array) and x.dtype != dt
        else np.asarray(x, dtype=dt)
        if isinstance(x, (np.ndarray, np.generic))
        else x
        for x in inputs
    )
    return cast, rest


def install_array_function(namespace: ModuleType) -> None:
    """Route NumPy's functions on lazy arrays (`np.mean(x)`) to the same names in `namespace`.

    The `lazygraph` package passes itself once imported, so that no module below it imports it back.
    """

    global _namespace
    _namespace = namespace

    def __array_function__(self: Array, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        impl = _lookup(namespace, func)
        if impl is None or not fallback.accepts(impl, kwargs):
            # a function (or keyword) lazygraph lacks: NumPy's, on the evaluated arguments
            return fallback.array_function(func, args, kwargs)
        return impl(*args, **kwargs)

    Array.__array_function__ = __array_function__
    fallback.install(namespace)


def _lookup(namespace: ModuleType, func: Any) -> Any:
    """lazygraph's own function for NumPy's `func` (`np.linalg.norm` -> `lg.linalg.norm`), or None."""
    home: Any = namespace
    sub = (getattr(func, "__module__", None) or "").split(".")[1:2]
    if sub in (["linalg"], ["fft"]):
        home = namespace.__dict__.get(sub[0])
    if isinstance(home, ModuleType):  # its own names, not the module's NumPy fallbacks (__getattr__)
        impl = home.__dict__.get(func.__name__)
    else:
        impl = getattr(home, func.__name__, None)
    if impl is None or not callable(impl) or isinstance(impl, (type, fallback.FallbackUfunc)):
        return None
    return impl


_install()
