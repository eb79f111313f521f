"""The array namespace of a kernel's inputs: one reference kernel for every device.

A reference kernel is written once, against `xp = namespace(*inputs)`: NumPy for host arrays
and scalars, CuPy for CuPy arrays, the `__array_namespace__()` of any other array type (the
emulated device array of jit/backend/emulated_array.py in the tests). The rules a kernel
keeps so that it runs where its inputs live:

- never convert an input to NumPy (`np.asarray(x)` raises on a CuPy array); `np.<ufunc>(x)`
  and most `np.<function>(x)` on an input are fine: they dispatch to the input's type;
- create arrays through the namespace (`xp.zeros(...)`, `xp.asarray(constant)`), never with a
  bare `np.zeros(...)`, which always makes a host array;
- where a kernel genuinely needs the host (a Python loop per element), say so with
  `to_host(x)` and `from_host(result, like=x)`: the transfer is explicit, and on NumPy free.

Why not array-api-compat's `array_namespace`: it returns the strict Array API namespace,
which lacks what the reference kernels are written in (ufunc methods `reduceat`/`at`,
`np.linalg.eig`, `np.fft.hfft`, `take_along_axis` variants, NumPy's dtype rules for Python
scalars); CuPy mirrors NumPy's full API, so the namespace a kernel wants is NumPy's or
CuPy's module itself. Nothing is imported for it: a CuPy array's module is already loaded.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

_SCALARS = (bool, int, float, complex, np.generic, np.ndarray, type(None), str, slice)


def namespace(*values: Any) -> Any:
    """The array namespace of the values (NumPy unless one is a device array): what `xp` is."""
    for v in values:
        if isinstance(v, _SCALARS):
            continue
        if isinstance(v, (tuple, list)):
            xp = namespace(*v)
            if xp is not np:
                return xp
            continue
        module = type(v).__module__
        if module.startswith("cupy"):
            return sys.modules["cupy"]  # CuPy's own module: NumPy's full API on the device
        get = getattr(v, "__array_namespace__", None)
        if get is not None:
            return get()
    return np


def asarray_like(x: Any, like: Any, dtype: Any = None) -> Any:
    """`x` (host data or an array) as an array of `like`'s namespace: device-side constants."""
    return namespace(like).asarray(x, dtype=dtype)


def to_host(x: Any) -> np.ndarray:
    """The explicit device -> host copy a host-only step needs (no copy for NumPy arrays)."""
    if isinstance(x, (np.ndarray, np.generic)) or not hasattr(x, "shape"):
        return np.asarray(x)
    xp = namespace(x)
    asnumpy = getattr(xp, "asnumpy", None)
    return asnumpy(x) if asnumpy is not None else x.get()


def from_host(x: Any, like: Any) -> Any:
    """A host result moved next to `like` (the way back after `to_host`; NumPy: unchanged)."""
    xp = namespace(like)
    return x if xp is np else xp.asarray(x)


def strided_view(base: Any, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> Any:
    """A view of `base`'s logical C order (element strides and offset) in its own namespace.

    The device form of ops/views.materialize's strided recipe: a C-contiguous copy (or the base
    itself) and the namespace's `as_strided` (CuPy has `cupy.lib.stride_tricks.as_strided`).
    """
    xp = namespace(base)
    if not all(shape):
        return xp.empty(shape, dtype=base.dtype)
    flat = xp.ascontiguousarray(base).reshape(-1)
    item = flat.dtype.itemsize
    return as_strided(flat[offset:], shape, tuple(s * item for s in strides), writeable=True)


def as_strided(x: Any, shape: tuple[int, ...], strides: tuple[int, ...], writeable: bool = False) -> Any:
    """`as_strided` (byte strides) in `x`'s namespace: NumPy's read-only unless asked, CuPy's plain.

    numpy.lib.stride_tricks.as_strided does not dispatch on its input, and CuPy's has no
    `writeable` flag (device memory has none), hence one helper.
    """
    if isinstance(x, np.ndarray):
        return np.lib.stride_tricks.as_strided(x, shape, strides, writeable=writeable)
    return namespace(x).lib.stride_tricks.as_strided(x, shape, strides)


def max_keepdims(x: Any, axis: int | tuple[int, ...] | None) -> Any:
    """`max(x, axis, keepdims=True)` that is -inf over an empty axis: NumPy's `initial=-np.inf`,
    which CuPy's `max` does not take (the softmax family's shift)."""
    ndim = len(x.shape)
    axes = tuple(range(ndim)) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    axes = tuple(a % ndim for a in axes) if ndim else ()
    if any(x.shape[a] == 0 for a in axes):
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        return namespace(x).full(shape, -np.inf, dtype=x.dtype)
    return np.max(x, axis=axis, keepdims=True)


def is_device(x: Any) -> bool:
    """Whether `x` is an array of a device namespace (CuPy, the emulated device), not NumPy's."""
    return hasattr(x, "shape") and not isinstance(x, _SCALARS)


def on_host(fn: Any, *args: Any, **kw: Any) -> Any:
    """`fn` over host copies of the device arrays among `args`, its array results moved back to
    that device: for the few functions a device namespace lacks or computes unlike NumPy (each
    caller says which). Two copies, but NumPy's values; without a device operand, just `fn`."""
    like = next((a for a in args if is_device(a)), None)
    if like is None:
        return fn(*args, **kw)
    out = fn(*(to_host(a) if is_device(a) else a for a in args), **kw)
    return _back(out, like)


def _back(out: Any, like: Any) -> Any:
    if isinstance(out, tuple):
        return tuple(_back(o, like) for o in out)
    if isinstance(out, (np.ndarray, np.generic)):
        return from_host(np.asarray(out), like)
    return out
