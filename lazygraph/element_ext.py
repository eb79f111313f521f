"""The element loops' common case in C: `a[i]`, `a[i] = v`, `s op= v`, `float(s)` of an evaluated buffer.

The Python direct paths (lazygraph/elements.py, lazygraph/direct.py) cost about 0.5-0.7 µs an
element operation, NumPy's 0.04-0.1 µs: three Python calls, each with a dozen attribute reads
and type checks. No Python code gets near NumPy there, so the same checks run in a small
CPython extension whose functions are installed as the methods themselves (method
descriptors on `Array` and `Scalar`). Each does exactly the proof its Python counterpart does
(the same fields, the same reference counts) and, where any check fails or NumPy raises, calls
that counterpart, which takes the general path and raises errors in lazygraph's words. So the
extension changes speed only: tests run the same programs with it on and off.

Built with the system compiler against `Python.h` and NumPy's headers (only its inline field
accessors: no NumPy C API table is imported), stored in the kernel cache beside the JIT's
launcher (jit/extension.py: verified by its SHA-256, imported from a private copy). The
build starts in a background thread at the first direct element read or write, so a program
without element loops never pays for it, and one with them runs the Python paths until the
extension is installed; a compile (not a stored binary) first waits for the program to pause,
as the background optimizer does. `LAZYGRAPH_ELEMENT_EXT=0` keeps the Python paths.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import numpy as np

from lazygraph.element_source import SOURCE

MODULE = "_lazygraph_elements"
STORE_DIR = "elements"  # in the kernel cache, beside the JIT's launcher (jit/launch.py)
#: the build waits until no other thread ran Python for QUIET_S seconds, or PATIENCE_S seconds
QUIET_S = 0.01
PATIENCE_S = 0.1


_lock = threading.Lock()
_state: dict[str, Any] = {"started": False, "methods": None, "error": None, "on": True}


def _build() -> Any:
    """The extension module: from the kernel store, or compiled now and stored (jit/extension.py)."""
    from jit import background, extension

    def when_idle() -> None:
        # the compiler takes the other core for ~1 s: start it when the program pauses (a loop's
        # first call ended), as the background optimizer does (engine/tiered.py), or after PATIENCE_S
        background.await_idle(PATIENCE_S, QUIET_S)

    flags = [f"-I{np.get_include()}"]
    depends = f"numpy {np.__version__}"  # its headers' inline field accessors
    return extension.load(MODULE, SOURCE, STORE_DIR, flags, "element extension C", None, depends, when_idle)


def _config() -> dict[str, Any]:
    """What the extension reads once: the classes, the type sets, and the Python paths it defers to."""
    from lazygraph import direct, writes
    from lazygraph.array import _FALLIBLE, Array, Scalar, Storage
    from lazygraph.recorders import binary_recorder
    from ops import views
    from ops.base import REGISTRY
    from ops.node import HOST, Node
    from ops.views import materialize

    cfg: dict[str, Any] = {
        "Array": Array,
        "Scalar": Scalar,
        "Storage": Storage,
        "Held": direct._Held,
        "Node": Node,
        "ndarray": np.ndarray,
        "float64": np.float64,
        "HOST": HOST,
        "INT_KEYS": frozenset(direct._INT_KEYS),
        "DIRECT_VALUES": frozenset(direct._DIRECT_VALUES),
        "NP_SCALARS": frozenset(direct._NP_SCALARS),
        # float(s) of these equals float(s.item()) (elements._held's conversion)
        "REAL_SCALARS": frozenset(np.dtype(c).type for c in "?bhilqBHILQefd"),
        "COMPLEX_VALUES": frozenset(direct._COMPLEX_VALUES),
        "held_scalar": direct._held_scalar,
        **PYTHON,
    }
    for op, dunder in zip(IOPS, ("iadd", "isub", "imul", "itruediv"), strict=True):
        cfg[op] = binary_recorder(op)
        opdef = REGISTRY[op]
        ok = opdef in writes.FUSABLE and opdef not in _FALLIBLE  # as direct._direct_inplace asks
        cfg[f"ufunc_{op}"] = opdef.fn if ok else None
        cfg[f"name_{op}"] = op
        PYTHON.setdefault(f"arr_{dunder}", Array.__dict__[f"__{dunder}__"])
        cfg[f"arr_{dunder}"] = PYTHON[f"arr_{dunder}"]
    PYTHON.setdefault("arr_float", Array.__dict__["__float__"])
    cfg["arr_float"] = PYTHON["arr_float"]
    cfg["materialize"] = materialize
    # materialize's memo of how each (view, base shape) is built: ("i", index) is `base[index]`
    cfg["recipes"] = views._RECIPES
    cfg["kind_index"] = sys.intern("i")
    cfg["region_max"] = direct.DIRECT_REGION_MAX
    return cfg


#: the operators whose `s op= v` the extension runs (their NumPy scalar arithmetic is PyNumber_*)
IOPS = ("add", "subtract", "multiply", "divide")


def _load() -> None:
    try:
        mod = _build()
        methods = (*mod.configure(_config()), mod.writable)
    except Exception as e:  # no compiler, no headers, a failed build: the Python paths stay
        _state["error"] = str(e).splitlines()[0] if str(e) else type(e).__name__
        return
    with _lock:
        _state["methods"] = methods
        if _state["on"]:
            _install(methods)


def _install(methods: tuple[dict, dict, type, Any]) -> None:
    from lazygraph import direct
    from lazygraph.array import Array, Scalar

    array_methods, scalar_methods, base, writable = methods
    if _based(Array, base):
        # the base's slots run `a[i]`, `a[i] = v` and the in-place operators: drop the methods
        # that would shadow them (a method in the class dict costs a lookup and a bound call)
        for cls, names in ((Array, (*array_methods, "__float__")), (Scalar, (*IDUNDERS, "__float__"))):
            for name in names:
                if name in cls.__dict__:
                    delattr(cls, name)
    else:
        for cls, table in zip((Array, Scalar), (array_methods, scalar_methods), strict=True):
            for name, fn in table.items():
                setattr(cls, name, fn)
    PYTHON.setdefault("writable", direct._writable)
    direct._writable = writable  # the proof of direct writes of regions (`_direct_inplace`) too


#: the in-place operators the extension runs for Scalar (`s op= v`) and Array (`region op= v`)
IDUNDERS = ("__iadd__", "__isub__", "__imul__", "__itruediv__")


def _based(cls: type, base: type) -> bool:
    """Make `base` (no fields of its own: object's layout) the base of `cls`; False where Python refuses."""
    if cls.__bases__ == (base,):
        return True
    if cls.__bases__ != (object,):
        return False
    try:
        cls.__bases__ = (base,)
    except TypeError:
        return False
    return True


def _python_methods() -> None:
    """Put the Python paths back on the classes."""
    from lazygraph import direct
    from lazygraph.array import Array, Scalar

    if "writable" in PYTHON:
        direct._writable = PYTHON["writable"]
    Array.__getitem__ = PYTHON["getitem"]
    Array.__setitem__ = PYTHON["setitem"]
    Scalar.__float__ = PYTHON["float"]
    if "arr_float" in PYTHON:
        Array.__float__ = PYTHON["arr_float"]
    for dunder in ("iadd", "isub", "imul", "itruediv"):
        setattr(Scalar, f"__{dunder}__", PYTHON[dunder])
        if f"arr_{dunder}" in PYTHON:
            setattr(Array, f"__{dunder}__", PYTHON[f"arr_{dunder}"])


#: the Python paths the extension defers to (lazygraph/elements.py registers them, as it sits
#: above this module): getitem, setitem, float, and iadd/isub/imul/itruediv (`scalar_inplace`)
PYTHON: dict[str, Any] = {}


def register(methods: dict[str, Any]) -> None:
    """Record the Python paths (lazygraph/elements.py calls this once its methods exist)."""
    PYTHON.update(methods)


def want() -> None:
    """Start building the extension in the background (the direct paths call this at their first use)."""
    if _state["started"]:
        return
    with _lock:
        if _state["started"]:
            return
        _state["started"] = True
        if os.environ.get("LAZYGRAPH_ELEMENT_EXT", "1") == "0":
            _state["error"] = "LAZYGRAPH_ELEMENT_EXT=0"
            return
        threading.Thread(target=_load, name="lazygraph-element-ext", daemon=True).start()


def prepare(timeout: float = 120.0) -> bool:
    """Build (or load) and install the extension now; True when it is installed (tests, benchmarks)."""
    want()
    for t in threading.enumerate():
        if t.name == "lazygraph-element-ext":
            t.join(timeout)
    return _state["methods"] is not None and _state["on"]


def use_extension(on: bool) -> None:
    """Run element operations through the extension (True, once built) or the Python paths."""
    with _lock:
        _state["on"] = on
        if on and _state["methods"] is not None:
            _install(_state["methods"])
        elif not on:
            _python_methods()


def status() -> str:
    """'extension', 'python (<why>)' or 'not built yet' (for docs, benchmarks and tests)."""
    if _state["methods"] is not None:
        return "extension" if _state["on"] else "python (use_extension(False))"
    if _state["error"] is not None:
        return f"python ({_state['error']})"
    return "not built yet"
