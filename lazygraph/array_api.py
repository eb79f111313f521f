"""The Python array API standard's inspection surface: namespace info, dtype functions, DLPack.

`lg.__array_namespace_info__()` says what this build supports; `isdtype`, `can_cast`, `finfo`,
`iinfo` and `result_type` answer dtype questions without touching data; `__dlpack__` and
`from_dlpack` exchange buffers with other libraries. Importing this module also gives `Array` the
standard's methods `to_device`, `__array_namespace__`, `__dlpack__` and `__dlpack_device__`.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from lazygraph.array import Array, Device, check_device, constant, from_node
from lazygraph.device import canonical, default_device, devices
from ops.base import fmt_shape
from ops.creation import BUFFER
from ops.node import Node

__array_api_version__ = "2024.12"

#: the versions of the standard `__array_namespace__(api_version=)` accepts
SUPPORTED_VERSIONS = ("2021.12", "2022.12", "2023.12", "2024.12")

#: the standard's dtypes by name, in its order (every one of them exists here)
_DTYPES = {
    name: np.dtype(name)
    for name in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
}

#: the standard's kinds -> NumPy dtype kind letters they cover
_KINDS = {
    "bool": "b",
    "signed integer": "i",
    "unsigned integer": "u",
    "integral": "iu",
    "real floating": "f",
    "complex floating": "c",
    "numeric": "iufc",
}


def _dtype_of(x: Any, name: str) -> np.dtype:
    """A dtype from a dtype, a type, or an array (lazy or NumPy)."""
    if isinstance(x, (Array, np.ndarray)):
        return x.dtype
    try:
        return np.dtype(x)
    except TypeError:
        raise TypeError(f"{name}: expected a dtype or an array, got {type(x).__name__}") from None


def isdtype(dtype: Any, kind: Any) -> bool:
    """Whether `dtype` is of `kind`: a dtype, a kind name ("integral", "real floating", ...) or a tuple of them."""
    dt = _dtype_of(dtype, "isdtype")
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for k in kinds:
        if isinstance(k, str):
            if k not in _KINDS:
                raise ValueError(
                    f"isdtype: unknown kind {k!r}; expected one of {', '.join(map(repr, _KINDS))}"
                )
            if dt.kind in _KINDS[k]:
                return True
        elif isinstance(k, tuple):
            raise TypeError("isdtype: a tuple of kinds may not nest another tuple")
        elif dt == _dtype_of(k, "isdtype"):
            return True
    return False


def can_cast(from_: Any, to: Any, casting: str = "safe") -> bool:
    """Whether `from_` (a dtype or an array) converts to `to` under the casting rule (type promotion, not values)."""
    return bool(np.can_cast(_dtype_of(from_, "can_cast"), _dtype_of(to, "can_cast"), casting))


def result_type(*arrays_and_dtypes: Any) -> np.dtype:
    """The dtype the standard's promotion gives these arrays, dtypes and Python scalars (weak scalars)."""
    if not arrays_and_dtypes:
        raise ValueError("result_type: at least one array or dtype is required")
    return np.result_type(*(x.dtype if isinstance(x, Array) else x for x in arrays_and_dtypes))


def broadcast_shapes(*shapes: Any) -> tuple[int, ...]:
    """The shape these shapes broadcast to (NumPy's rule; an error names the shapes that clash)."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError as e:
        raise ValueError(f"broadcast_shapes: {e}") from None


class finfo:  # noqa: N801 - NumPy's and the standard's name
    """Limits of a floating dtype, with the standard's fields as Python floats (NumPy's others pass through)."""

    def __init__(self, type: Any) -> None:  # noqa: A002 - the standard's parameter name
        dt = _dtype_of(type, "finfo")
        if dt.kind not in "fc":
            raise ValueError(f"finfo: {dt} is not a floating dtype (use iinfo for integers)")
        self._np = np.finfo(dt)
        self.bits = int(self._np.bits)
        self.eps = float(self._np.eps)
        self.max = float(self._np.max)
        self.min = float(self._np.min)
        self.smallest_normal = float(self._np.smallest_normal)
        self.dtype = self._np.dtype  # the real dtype (float32 for complex64)

    def __getattr__(self, name: str) -> Any:  # tiny, resolution, precision, ...
        if name == "_np":
            raise AttributeError(name)
        return getattr(self._np, name)

    def __repr__(self) -> str:
        return f"finfo(bits={self.bits}, eps={self.eps}, max={self.max}, min={self.min}, dtype={self.dtype})"


class iinfo:  # noqa: N801 - NumPy's and the standard's name
    """Limits of an integer dtype, with the standard's fields as Python ints."""

    def __init__(self, type: Any) -> None:  # noqa: A002 - the standard's parameter name
        dt = _dtype_of(type, "iinfo")
        if dt.kind not in "iu":
            raise ValueError(f"iinfo: {dt} is not an integer dtype (use finfo for floating ones)")
        info = np.iinfo(dt)
        self.bits, self.max, self.min, self.dtype = int(info.bits), int(info.max), int(info.min), info.dtype
        self.kind = info.kind

    def __repr__(self) -> str:
        return f"iinfo(bits={self.bits}, max={self.max}, min={self.min}, dtype={self.dtype})"


class Info:
    """What `__array_namespace_info__()` returns: this build's capabilities, devices and dtypes."""

    __module__ = "lazygraph"

    def capabilities(self) -> dict[str, Any]:
        """Boolean-mask indexing and value-dependent shapes work (they are evaluation points)."""
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 64}

    def default_device(self) -> Device:
        """Where arrays are created when no device is given."""
        return default_device()

    def devices(self) -> list[Device]:
        """The devices arrays can be placed on."""
        return devices()

    def default_dtypes(self, *, device: Any = None) -> dict[str, np.dtype]:
        """The dtypes creation functions choose: NumPy's (float64, complex128, int64)."""
        check_device(device)
        return {
            "real floating": np.dtype(np.float64),
            "complex floating": np.dtype(np.complex128),
            "integral": np.dtype(np.int64),
            "indexing": np.dtype(np.int64),
        }

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, np.dtype]:
        """The supported dtypes by name, optionally only those of a kind (as `isdtype` takes it)."""
        check_device(device)
        if kind is None:
            return dict(_DTYPES)
        return {name: dt for name, dt in _DTYPES.items() if isdtype(dt, kind)}


_INFO = Info()


def __array_namespace_info__() -> Info:
    """The array API's inspection object for this namespace."""
    return _INFO


# -- DLPack ---------------------------------------------------------------------------


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Array:
    """A lazy array from any DLPack exporter (a CPU tensor of another library, a NumPy array).

    The data is copied once into a private leaf, as `asarray` does, unless `copy=False`: then
    the leaf is the producer's memory itself (see `_shared_leaf`).
    """
    dev = check_device(device)
    if isinstance(x, Array):
        if device is not None and x.device != dev:
            return x.to(dev)  # a transfer: a copy in any case
        if copy is False:
            return x
        return from_node(x.node)  # lazy values are immutable: sharing the node is a copy
    if not hasattr(x, "__dlpack__"):
        raise TypeError(
            f"from_dlpack: {type(x).__name__} does not export DLPack (no __dlpack__); use asarray"
        )
    if copy is False:
        return from_node(_shared_leaf(x, dev))
    kwargs = {} if device is None else {"device": "cpu"}
    try:
        value = np.from_dlpack(x, **kwargs)
    except (TypeError, BufferError, RuntimeError) as e:
        raise type(e)(f"from_dlpack: {e}") from None
    return from_node(constant(value, device=dev))


def _shared_leaf(x: Any, dev: Any) -> Node:
    """A leaf over the producer's own memory (from_dlpack with copy=False: no copy, or BufferError).

    lazygraph never writes into it (the leaf is a read-only view). The producer still can: a
    lazy value reads the memory when it is evaluated, so a change made through the producer
    before then is seen, and values already evaluated keep what they read (as JAX's shared
    arrays, changing it while lazy values depend on it is the caller's responsibility).
    """
    if dev != canonical("cpu"):
        raise BufferError(f"from_dlpack: copy=False onto {dev} needs a transfer, which is a copy")
    try:
        value = np.from_dlpack(x, copy=False)
    except (TypeError, BufferError, RuntimeError, ValueError) as e:
        raise BufferError(f"from_dlpack: copy=False: {e}") from None
    if not value.flags.c_contiguous:
        raise BufferError(
            f"from_dlpack: copy=False needs C-contiguous data for a lazygraph leaf; this "
            f"{fmt_shape(value.shape)} array is strided (pass copy=None to copy it)"
        )
    shared = value.view()
    shared.flags.writeable = False
    node = Node(BUFFER, (), {}, shared.shape, shared.dtype, buffer=shared)
    node.device = canonical(dev)
    return node


def _to_device(self: Array, device: Any, /, *, stream: Any = None) -> Array:
    """The array on `device`: itself where it is, else an evaluated copy (lazygraph/device.py)."""
    if stream is not None:
        raise ValueError("to_device: streams are not supported; transfers complete before returning")
    return self.to(device)


def _array_namespace(self: Array, /, *, api_version: str | None = None) -> Any:
    """The namespace whose functions work on this array: `lazygraph` itself."""
    if api_version is not None and api_version not in SUPPORTED_VERSIONS:
        raise ValueError(
            f"__array_namespace__: unsupported api_version {api_version!r}; "
            f"supported: {', '.join(SUPPORTED_VERSIONS)}"
        )
    return sys.modules[__package__]


def _dlpack(
    self: Array,
    /,
    *,
    stream: Any = None,
    max_version: tuple[int, int] | None = None,
    dl_device: tuple[int, int] | None = None,
    copy: bool | None = None,
) -> Any:
    """Evaluate and export the value as a DLPack capsule (an evaluation point).

    The value is read-only; a consumer of DLPack 1.0 or later is told so. An older consumer
    cannot be, so it gets a private copy when `copy` allows one (None or True), else BufferError.
    """
    value = self._value()
    if stream is not None:
        raise BufferError("__dlpack__: streams apply to GPU devices; this array is on the CPU")
    legacy = max_version is None or tuple(max_version) < (1, 0)
    if legacy and not value.flags.writeable and not copy:
        if copy is False:
            raise BufferError(
                "__dlpack__: copy=False with a DLPack consumer older than 1.0 cannot work: the "
                "array's buffer is read-only and that version of the protocol cannot say so; "
                "pass max_version=(1, 0) or allow a copy"
            )
        value, copy = np.array(value, copy=True), None  # the consumer may write into its own copy
    kwargs: dict[str, Any] = {"copy": copy}
    if max_version is not None:
        kwargs["max_version"] = tuple(max_version)
    if dl_device is not None:
        kwargs["dl_device"] = tuple(dl_device)
    return value.__dlpack__(**kwargs)


def _dlpack_device(self: Array, /) -> tuple[Any, int]:
    """Evaluate and name the device the value's buffer is on (DLPack's device type, id)."""
    return self._value().__dlpack_device__()


Array.to_device = _to_device
Array.__array_namespace__ = _array_namespace
Array.__dlpack__ = _dlpack
Array.__dlpack_device__ = _dlpack_device

__all__ = [
    "__array_api_version__",
    "__array_namespace_info__",
    "broadcast_shapes",
    "can_cast",
    "finfo",
    "from_dlpack",
    "iinfo",
    "isdtype",
    "result_type",
    "take",
]


# -- indexing -------------------------------------------------------------------------


def take(
    x: Any, indices: Any, /, axis: int | None = None, out: Array | None = None, mode: str = "raise"
) -> Array:
    """Elements of `x` at `indices` along `axis` (the flattened array when None), recorded as a gather.

    The result's shape is x's with that axis replaced by the indices' shape. `mode="wrap"` or
    `"clip"` maps out-of-range indices into range first; with "raise" an index out of range fails
    at evaluation, naming the line that recorded it.
    """
    x = x if isinstance(x, Array) else from_node(constant(x))
    if axis is None:
        x, axis = x.reshape(-1), 0
    if x.ndim == 0:
        raise ValueError(f"take: cannot take from a 0-d array along axis {axis}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"take: axis {axis} is out of bounds for an array of dimension {x.ndim}")
    axis %= x.ndim
    if not isinstance(indices, Array):
        indices = np.asarray(indices)
        # an empty list is float64 to NumPy's asarray; take reads it as no indices
        indices = from_node(constant(indices, np.intp if indices.size == 0 else None))
    idx = indices
    if idx.dtype.kind not in "iu":
        raise IndexError(f"take: indices must be integers, got {idx.dtype}")
    n = x.shape[axis]
    if mode == "wrap":
        idx = idx % n if n else idx
    elif mode == "clip":
        idx = idx.clip(0, max(n - 1, 0))
    elif mode != "raise":
        raise ValueError(f"take: mode must be 'raise', 'wrap' or 'clip', got {mode!r}")
    result = x[(slice(None),) * axis + (idx,)]
    if out is None:
        return result
    if not isinstance(out, Array) or out.shape != result.shape:
        raise ValueError(f"take: out must be a lazygraph Array of shape {result.shape}")
    out[...] = result
    return out
