"""An emulated device array: a test double for CuPy's array-namespace rules, on the host.

The operators' reference kernels (ops/) are written once against the array namespace of
their inputs (ops/namespace.py), so the same kernel runs on NumPy arrays and on CuPy arrays.
Without a GPU nothing would check that a kernel keeps to the rules CuPy enforces; this type
does, on every CI run (tests/test_array_namespace.py replays every operator's kernel on it):

- `np.<ufunc>(x)` and `np.<function>(x)` dispatch to it (NEP 13 `__array_ufunc__`, NEP 18
  `__array_function__`): the wrapped host arrays go to NumPy and every array result comes
  back wrapped, as CuPy's own functions return CuPy arrays. NumPy scalars that NumPy returns
  (a full reduction, `x[0]`) come back as 0-d arrays, as in CuPy.
- Implicit conversion to a host array raises TypeError as CuPy does: `np.asarray(x)`,
  `np.array(x)`, `float`-less buffer access. Host arrays (`np.ndarray`) passed to a ufunc,
  a function, an index or an assignment next to a device array raise TypeError too, as CuPy's
  "Unsupported type <class 'numpy.ndarray'>" does: an array a kernel made with `np.zeros(...)`
  (always on the host) is caught where it meets the inputs.
- `__array_namespace__()` gives a module-like namespace mirroring NumPy's (`xp.zeros`,
  `xp.asarray`, `xp.linalg.*`, `xp.fft.*`, ufuncs with their methods) whose functions create
  device arrays, plus CuPy's explicit transfers `xp.asnumpy(x)` and `x.get()`.
  `xp.asarray(host)` is the explicit transfer in the other direction, as in CuPy.
- Explicit host syncs CuPy allows on a size-1 array stay allowed: `bool`, `int`, `float`,
  `complex`, `.item()`, `.tolist()`.

What it does not emulate: which NumPy functions CuPy lacks (it mirrors all of NumPy's, except
`frompyfunc`/`vectorize` and object dtypes, which no device has), CuPy's refusal of Python
lists as array arguments, asynchronous execution and CuPy's own rounding. It is a check of
where arrays live, not of CuPy's coverage.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from jit.backend import count_allocation

#: the device whose allocations these arrays count
NAME = "cuda-emulated"

#: NumPy functions no device namespace has (host Python objects per element)
_NO_DEVICE = frozenset({"frompyfunc", "vectorize", "fromfile", "load", "save", "loadtxt", "savetxt"})
#: ndarray attributes that hand out host memory (CuPy's `.data` is a device pointer; the rest
#: CuPy's arrays lack)
_HOST_ONLY = frozenset(
    {"ctypes", "data", "tofile", "dump", "dumps", "setflags", "__array_interface__", "__array_struct__"}
)
#: functions that take host data on purpose: the explicit host -> device transfer
_TRANSFERS = frozenset({"asarray", "array", "asanyarray", "ascontiguousarray"})


def _host_error(where: str) -> TypeError:
    return TypeError(
        f"{where}: a host array (numpy.ndarray) met an emulated device array; "
        "transfer it explicitly with xp.asarray(host) (CuPy: Unsupported type <class 'numpy.ndarray'>)"
    )


def unwrap(value: Any, where: str, allow_host: bool = False) -> Any:
    """The host data behind device arrays in an argument (nested in tuples, lists and dicts)."""
    if isinstance(value, EmulatedDeviceArray):
        return value._data
    if isinstance(value, np.ndarray):
        if not allow_host:
            raise _host_error(where)
        return value
    if isinstance(value, (tuple, list)):
        items = [unwrap(v, where, allow_host) for v in value]
        return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
    if isinstance(value, dict):
        return {k: unwrap(v, where, allow_host) for k, v in value.items()}
    if isinstance(value, np.dtype) and value.kind == "O" or value is object:
        raise TypeError(f"{where}: object dtype has no device equivalent")
    return value


def wrap(value: Any, seen: set | None = None) -> Any:
    """Device arrays for every array (and NumPy scalar) in a result, as CuPy returns them.

    `seen`: ids of the host arrays behind the call's operands; an array in the result that owns
    its memory and is none of them is fresh device memory, counted (`jit.backend.allocations`).
    """
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "O":
            raise TypeError("object dtype has no device equivalent")
        if seen is not None and value.base is None and id(value) not in seen:
            count_allocation(NAME, value.nbytes)
        return EmulatedDeviceArray(value)
    if isinstance(value, np.generic):
        if seen is not None:
            count_allocation(NAME, value.nbytes)
        return EmulatedDeviceArray(np.asarray(value))
    if isinstance(value, tuple):
        items = [wrap(v, seen) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [wrap(v, seen) for v in value]
    return value


def _ids(value: Any, acc: set) -> set:
    """The ids of the host arrays in an unwrapped argument (what a result may hand back)."""
    if isinstance(value, np.ndarray):
        acc.add(id(value))
    elif isinstance(value, (tuple, list)):
        for v in value:
            _ids(v, acc)
    elif isinstance(value, dict):
        for v in value.values():
            _ids(v, acc)
    return acc


def _given_out(kwargs: dict) -> Any:
    """The device array(s) a call was told to write into (`out=`), returned as CuPy returns them."""
    out = kwargs.get("out")
    if isinstance(out, tuple) and len(out) == 1:
        out = out[0]
    return out if isinstance(out, EmulatedDeviceArray) else None


def _device_call(fn: Callable, where: str, allow_host: bool = False, holder: Any = None) -> Callable:
    """`fn` taking and returning device arrays (host arrays refused unless a transfer).

    `holder`: the host array whose method `fn` is (a result that is it is not fresh memory)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        a, k = unwrap(args, where, allow_host), unwrap(kwargs, where, allow_host)
        result = fn(*a, **k)
        given = _given_out(kwargs)
        return given if given is not None else wrap(result, _ids(k, _ids(a, {id(holder)})))

    call.__name__ = getattr(fn, "__name__", where)
    call.__doc__ = getattr(fn, "__doc__", None)
    return call


class EmulatedDeviceArray(NDArrayOperatorsMixin):
    """A host ndarray posing as device memory: NumPy's values, CuPy's rules (module docstring)."""

    __slots__ = ("_data", "_base")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, data: np.ndarray, base: EmulatedDeviceArray | None = None) -> None:
        if not isinstance(data, np.ndarray):
            raise TypeError(f"EmulatedDeviceArray wraps a numpy.ndarray, got {type(data).__name__}")
        self._data = data
        self._base = base

    def _view(self, value: Any) -> Any:
        """`value` (a result of this array's own method or index) with this array as its base
        where it is a view of it, as CuPy's `.base` names the array owning the memory."""
        if type(value) is EmulatedDeviceArray and value._data.base is not None:
            if np.may_share_memory(value._data, self._data):
                value._base = self._base if self._base is not None else self
        return value

    @property
    def base(self) -> EmulatedDeviceArray | None:
        """The device array whose memory this view reads (None: it owns its memory, or the view
        was made by a function rather than by this array's index or methods)."""
        return self._base

    # --- the dispatch protocols
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        where = f"{ufunc.__name__}.{method}" if method != "__call__" else ufunc.__name__
        a, k = unwrap(inputs, where), unwrap(kwargs, where)
        result = getattr(ufunc, method)(*a, **k)
        if method == "at":
            return None
        given = _given_out(kwargs)
        return given if given is not None else wrap(result, _ids(k, _ids(a, set())))

    def __array_function__(self, func: Callable, types_: tuple, args: tuple, kwargs: dict) -> Any:
        where = getattr(func, "__name__", "function")
        if where in _NO_DEVICE:
            return NotImplemented
        a, k = unwrap(args, where), unwrap(kwargs, where)
        result = func(*a, **k)
        given = _given_out(kwargs)
        return given if given is not None else wrap(result, _ids(k, _ids(a, set())))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise TypeError(
            "Implicit conversion to a NumPy array is not allowed (emulated device array, as CuPy). "
            "Please use .get() or xp.asnumpy(x) to construct a NumPy array explicitly."
        )

    def __array_namespace__(self, api_version: str | None = None) -> Any:
        return emulated_namespace

    # --- attributes
    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def size(self) -> int:
        return self._data.size

    @property
    def flags(self) -> types.SimpleNamespace:
        """CuPy's flags: contiguity and ownership only (device memory has no `writeable`)."""
        f = self._data.flags
        return types.SimpleNamespace(
            c_contiguous=f.c_contiguous, f_contiguous=f.f_contiguous, owndata=self._base is None
        )

    @property
    def T(self) -> EmulatedDeviceArray:  # noqa: N802 - ndarray's name
        return self._view(EmulatedDeviceArray(self._data.T))

    @property
    def real(self) -> EmulatedDeviceArray:
        return EmulatedDeviceArray(self._data.real)

    @real.setter
    def real(self, value: Any) -> None:
        self._data.real = unwrap(value, "real")

    @property
    def imag(self) -> EmulatedDeviceArray:
        return EmulatedDeviceArray(self._data.imag)

    @imag.setter
    def imag(self, value: Any) -> None:
        self._data.imag = unwrap(value, "imag")

    def __getattr__(self, name: str) -> Any:
        # every other ndarray method and attribute, on device arrays (CuPy's ndarray has them)
        if name.startswith("__") or name in _HOST_ONLY:
            raise AttributeError(f"emulated device array has no {name!r} (host memory)")
        attr = getattr(self._data, name)
        if callable(attr):
            call = _device_call(attr, f"ndarray.{name}", holder=self._data)
            return lambda *a, **k: self._view(call(*a, **k))  # reshape, view, ...: views of self
        return wrap(attr)

    # --- explicit host transfers and syncs (allowed in CuPy)
    def get(self) -> np.ndarray:
        """The explicit device -> host copy (CuPy's ndarray.get)."""
        return self._data.copy()

    def item(self, *args: Any) -> Any:
        return self._data.item(*args)

    def tolist(self) -> Any:
        return self._data.tolist()

    def __bool__(self) -> bool:
        return bool(self._data)

    def __int__(self) -> int:
        return int(self._data)

    def __float__(self) -> float:
        return float(self._data)

    def __complex__(self) -> complex:
        return complex(self._data)

    # --- container protocol
    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self):  # noqa: ANN204
        for i in range(len(self._data)):
            yield self[i]

    def __getitem__(self, key: Any) -> Any:
        k = unwrap(key, "__getitem__")
        return self._view(wrap(self._data[k], _ids(k, {id(self._data)})))

    def __setitem__(self, key: Any, value: Any) -> None:
        self._data[unwrap(key, "__setitem__")] = unwrap(value, "__setitem__")

    def __repr__(self) -> str:
        return f"EmulatedDeviceArray({self._data!r})"


class _Ufunc:
    """A NumPy ufunc whose calls and methods take and return device arrays."""

    def __init__(self, ufunc: np.ufunc) -> None:
        self._ufunc = ufunc
        self.__name__ = ufunc.__name__
        for method in ("reduce", "accumulate", "reduceat", "outer", "at"):
            setattr(self, method, _device_call(getattr(ufunc, method), f"{ufunc.__name__}.{method}"))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        a, k = unwrap(args, self.__name__), unwrap(kwargs, self.__name__)
        result = self._ufunc(*a, **k)
        given = _given_out(kwargs)
        return given if given is not None else wrap(result, _ids(k, _ids(a, set())))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ufunc, name)  # nin, nout, identity, types, ...


class EmulatedNamespace:
    """NumPy's namespace (or a submodule's) creating and returning emulated device arrays."""

    def __init__(self, module: types.ModuleType) -> None:
        self._module = module
        self.__name__ = "emulated:" + module.__name__

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in _NO_DEVICE:
            raise AttributeError(f"the emulated device namespace has no {name!r} (no device runs it)")
        attr = getattr(self._module, name)
        if name == "ndarray":
            out: Any = EmulatedDeviceArray
        elif isinstance(attr, types.ModuleType):
            out = EmulatedNamespace(attr)
        elif isinstance(attr, np.ufunc):
            out = _Ufunc(attr)
        elif isinstance(attr, type) or not callable(attr):
            out = attr  # dtypes, scalar types, finfo, constants: the same on every device
        else:
            out = _device_call(attr, name, allow_host=name in _TRANSFERS)
        setattr(self, name, out)  # later lookups skip __getattr__
        return out

    @staticmethod
    def asnumpy(x: Any) -> np.ndarray:
        """The explicit device -> host copy (CuPy's cupy.asnumpy)."""
        return x.get() if isinstance(x, EmulatedDeviceArray) else np.asarray(x)

    def __repr__(self) -> str:
        return f"<{self.__name__}>"


#: the namespace every emulated device array reports
emulated_namespace = EmulatedNamespace(np)


def to_device(value: Any) -> Any:
    """Host arrays (and NumPy scalars) in a value, nested in tuples and lists, as device arrays."""
    return wrap(value)
