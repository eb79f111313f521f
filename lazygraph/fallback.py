"""NumPy functions lazygraph does not implement, run on evaluated arguments: interop never dead-ends.

`np.some_function(x)` on a lazy array (through `__array_function__`), a ufunc method
(`np.add.at(x, i, v)`, `np.maximum.accumulate(x)`, through `__array_ufunc__`), and a NumPy name
the `lg` namespace lacks (`lg.unravel_index`, `lg.maximum.accumulate`) all land here:

- every lazy argument is evaluated (an evaluation point: one graph for all of them), NumPy's
  function runs on the values, and its result comes back as new lazy arrays (element-wise for
  tuples and lists; Python scalars and other objects as NumPy returns them);
- a function that writes into its argument (`np.add.at`, `np.fill_diagonal`, `np.copyto`,
  `np.put`, `np.place`, `np.putmask`, `np.put_along_axis`, `out=`) runs on a writable copy of
  the argument's value, which is then assigned back into the lazy array as a recorded write,
  so views and aliasing behave as in NumPy;
- the first call of each function warns once, naming it (`LazygraphFallbackWarning`); silence it
  with `warnings` filters, `LAZYGRAPH_FALLBACK_WARNINGS=0` or `lg.settings.update(fallback_warnings=False)`.

A result is a constant to lazygraph: it is not fused, not cached as part of a graph, never a
view of an argument, and not differentiable (grad() through it is an error naming the function).
"""

from __future__ import annotations

import inspect
import threading
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from lazygraph import txn
from lazygraph.array import Array, from_node
from lazygraph.device import host_value, of, on_device
from lazygraph.engine import evaluate as evaluation
from lazygraph.gradmode import is_grad_enabled
from ops.base import Op
from ops.node import HOST, Node
from ops.settings import SETTINGS


class LazygraphFallbackWarning(UserWarning):
    """A NumPy function ran eagerly on evaluated lazy arrays because lazygraph lacks it."""


#: functions that write into an argument: name -> (position, keyword) of that argument
INPLACE: dict[str, tuple[int, str]] = {
    "fill_diagonal": (0, "a"),
    "copyto": (0, "dst"),
    "put": (0, "a"),
    "place": (0, "arr"),
    "putmask": (0, "a"),
    "put_along_axis": (0, "arr"),
}
#: ufunc methods lazygraph routes here; `at` writes into its first operand
UFUNC_METHODS = ("reduce", "accumulate", "reduceat", "outer", "at")

_warned: set[str] = set()
_lock = threading.Lock()


class NumpyCall(Op):
    """The record of a value NumPy computed eagerly from lazy arrays (never recorded, never run).

    A result computed from arrays that require grad keeps them as inputs, so that
    differentiating through it fails with this name instead of giving a silent zero.
    """

    kind = "other"

    def kernel(self, *args: Any, **attrs: Any) -> Any:
        """Never called: the node always holds its value."""
        raise RuntimeError(f"{self.name}: a NumPy fallback's value is computed when it is made")


def qualname(func: Any) -> str:
    """`numpy.roll`, `numpy.linalg.norm`, `numpy.add.at`: how messages name a NumPy function."""
    if isinstance(func, np.ufunc):
        return f"numpy.{func.__name__}"
    module = getattr(func, "__module__", None) or "numpy"
    if not module.startswith("numpy") or module.split(".")[1:2] not in ([], ["linalg"], ["fft"]):
        module = "numpy"  # private implementation modules: the public name is numpy.<name>
    return f"{module}.{getattr(func, '__name__', repr(func))}"


def warn_once(name: str) -> None:
    """Warn the first time `name` falls back to NumPy in this process (unless silenced)."""
    if name in _warned or not SETTINGS.fallback_warnings:
        return
    with _lock:
        if name in _warned:
            return
        _warned.add(name)
    txn.warn_user(
        f"lazygraph cannot record this call of {name} (the function, ufunc method or a keyword "
        "is not implemented lazily): NumPy ran it on the evaluated arguments (an evaluation point) "
        "and its result is a new lazy array (not fused, not differentiable). Silence with "
        "LAZYGRAPH_FALLBACK_WARNINGS=0, lg.settings.update(fallback_warnings=False) or a "
        "warnings filter on lg.LazygraphFallbackWarning",
        LazygraphFallbackWarning,
    )


def reset_warnings() -> None:
    """Forget which functions have warned (each warns once again; for tests)."""
    with _lock:
        _warned.clear()


# -- arguments in, results out ------------------------------------------------------------


def _lazy_in(obj: Any, found: list[Array]) -> None:
    if isinstance(obj, Array):
        found.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _lazy_in(o, found)
    elif isinstance(obj, dict):
        for o in obj.values():
            _lazy_in(o, found)


def _to_numpy(obj: Any, values: dict[int, np.ndarray]) -> Any:
    if isinstance(obj, Array):
        return values[id(obj)]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_to_numpy(o, values) for o in obj)
    if isinstance(obj, list):
        return [_to_numpy(o, values) for o in obj]
    if isinstance(obj, dict):
        return {k: _to_numpy(o, values) for k, o in obj.items()}
    return obj


def _wrap(obj: Any, passed: dict[int, Any], make: Callable[[np.ndarray], Array]) -> Any:
    if id(obj) in passed:  # an argument NumPy returned (out=, a NumPy array the caller owns)
        return passed[id(obj)]
    if isinstance(obj, np.ndarray) and obj.dtype != object:
        return make(obj)
    if isinstance(obj, np.generic) and np.dtype(type(obj)).kind in "biufc":
        return make(np.asarray(obj))
    if isinstance(obj, tuple):
        items = [_wrap(o, passed, make) for o in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, list):
        return [_wrap(o, passed, make) for o in obj]
    return obj


def _outs(kwargs: dict) -> tuple:
    out = kwargs.get("out")
    return out if isinstance(out, tuple) else ()


def call(func: Callable, args: tuple, kwargs: dict, name: str | None = None, writes: tuple = ()) -> Any:
    """Run NumPy's `func` on the evaluated lazy arguments; lazy results; writes recorded back.

    `writes` lists (position, keyword) of arguments the function writes into (see INPLACE);
    `out=` arguments are always written back.
    """
    name = name or qualname(func)
    warn_once(name)
    found: list[Array] = []
    _lazy_in((args, kwargs), found)
    pending = [a.node for a in found if a.node.buffer is None]
    if pending:
        evaluation.evaluate(pending)  # one graph for every argument
    values = {id(a): host_value(a.node) for a in found}  # device values: a counted copy back
    args, kwargs = list(args), dict(kwargs)
    targets: dict[int, Array] = {}  # id of the writable copy handed to NumPy -> the lazy array

    def writable(x: Array) -> np.ndarray:
        copy = np.array(values[id(x)], copy=True)
        targets[id(copy)] = x
        return copy

    for pos, key in writes:
        if pos < len(args) and isinstance(args[pos], Array):
            args[pos] = writable(args[pos])
        elif isinstance(kwargs.get(key), Array):
            kwargs[key] = writable(kwargs[key])
    out = kwargs.get("out")
    if isinstance(out, Array):
        kwargs["out"] = writable(out)
    elif isinstance(out, tuple) and any(isinstance(o, Array) for o in out):
        kwargs["out"] = tuple(writable(o) if isinstance(o, Array) else o for o in out)
    np_args = tuple(_to_numpy(a, values) for a in args)
    np_kwargs = {k: _to_numpy(v, values) for k, v in kwargs.items()}
    result = func(*np_args, **np_kwargs)
    copies = {id(c): c for c in (*np_args, *np_kwargs.values(), *_outs(np_kwargs))}
    for cid, lazy in targets.items():
        lazy[...] = copies[cid]  # a recorded write: views of the array see it, earlier reads do not
    passed: dict[int, Any] = dict(targets)
    for a in (*args, *kwargs.values(), *_outs(kwargs)):
        if isinstance(a, np.ndarray) and id(a) not in targets:
            passed[id(a)] = a  # the caller's own NumPy array (out=): returned as it is
    tracked = tuple(a.node for a in found if a.node.requires_grad) if is_grad_enabled() else ()
    devices = {of(a.node) for a in found}
    dev = devices.pop() if len(devices) == 1 else HOST  # NumPy's result returns where its inputs live
    return _wrap(result, passed, lambda v: _result(v, name, tracked, dev))


def _result(value: np.ndarray, name: str, tracked: tuple[Node, ...], dev: str = HOST) -> Array:
    value = np.array(value, copy=True, order="C")
    value.flags.writeable = False
    if tracked and value.dtype.kind == "f":
        op = NumpyCall(f"{name} (a NumPy fallback, not differentiable)")
        node = Node(op, tracked, {}, value.shape, value.dtype, buffer=value)
        node.requires_grad = True
    else:
        from ops.creation import BUFFER

        node = Node(BUFFER, (), {}, value.shape, value.dtype, buffer=value)
    if dev != HOST:
        node.buffer = on_device(value, dev)
        node.device = dev
    return from_node(node)


# -- entry points ------------------------------------------------------------------------


def array_function(func: Callable, args: tuple, kwargs: dict) -> Any:
    """`__array_function__` for a NumPy function lazygraph lacks."""
    return call(func, args, kwargs, writes=(INPLACE[func.__name__],) if func.__name__ in INPLACE else ())


def array_ufunc(ufunc: np.ufunc, method: str, inputs: tuple, kwargs: dict) -> Any:
    """`__array_ufunc__` for a ufunc or ufunc method lazygraph does not record itself."""
    name = f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
    return call(
        getattr(ufunc, method), inputs, kwargs, name=name, writes=((0, ""),) if method == "at" else ()
    )


_SIGNATURES: dict[Any, inspect.Signature | None] = {}


def accepts(impl: Callable, kwargs: dict) -> bool:
    """Whether lazygraph's `impl` takes these keywords (else NumPy's function runs instead)."""
    if not kwargs:
        return True
    sig = _SIGNATURES.get(impl, False)
    if sig is False:
        try:
            sig = inspect.signature(impl)
        except (TypeError, ValueError):
            sig = None
        _SIGNATURES[impl] = sig
    if sig is None:
        return True
    params = sig.parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return True
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return set(kwargs) <= names


def _ufunc_method(ufunc: np.ufunc, method: str) -> Callable:
    def run(*inputs: Any, **kwargs: Any) -> Any:
        return array_ufunc(ufunc, method, inputs, kwargs)

    run.__name__ = run.__qualname__ = f"{ufunc.__name__}.{method}"
    run.__doc__ = f"NumPy's {ufunc.__name__}.{method} on evaluated arguments (lazygraph has no lazy one)."
    return run


def add_ufunc_methods(fn: Any, ufunc: np.ufunc) -> None:
    """Give lazygraph's elementwise function `fn` NumPy's ufunc methods and attributes it lacks."""
    for method in UFUNC_METHODS:
        if not hasattr(fn, method):
            setattr(fn, method, _ufunc_method(ufunc, method))
    for attr in ("nin", "nout", "nargs", "identity", "ntypes", "types", "signature"):
        if not hasattr(fn, attr):
            setattr(fn, attr, getattr(ufunc, attr))


class FallbackUfunc:
    """A NumPy ufunc lazygraph lacks, as the `lg` namespace offers it: calls and methods fall back."""

    def __init__(self, ufunc: np.ufunc) -> None:
        self.ufunc = ufunc
        self.__name__ = ufunc.__name__
        self.__doc__ = ufunc.__doc__
        add_ufunc_methods(self, ufunc)

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        return array_ufunc(self.ufunc, "__call__", inputs, kwargs)

    def __repr__(self) -> str:
        return f"<lazygraph fallback for ufunc {self.ufunc.__name__!r}>"


def _namespace_function(func: Callable) -> Callable:
    name = qualname(func)
    writes = (INPLACE[func.__name__],) if func.__name__ in INPLACE else ()

    def run(*args: Any, **kwargs: Any) -> Any:
        return call(func, args, kwargs, name=name, writes=writes)

    run.__name__ = run.__qualname__ = func.__name__
    run.__doc__ = f"{name} on evaluated arguments (lazygraph has no lazy version; warns once)."
    run.__wrapped__ = func
    return run


_NAMESPACE_CACHE: dict[str, Any] = {}


def module_getattr(name: str) -> Any:
    """`lg.<name>` for a NumPy function lazygraph lacks: NumPy's, run on evaluated arguments.

    Only functions and ufuncs of NumPy's main namespace are offered; types, constants, modules
    and private names stay missing (AttributeError), so `hasattr(lg, name)` stays honest for them.
    """
    hit = _NAMESPACE_CACHE.get(name)
    if hit is not None:
        return hit
    obj = None if name.startswith("_") else getattr(np, name, None)
    if isinstance(obj, np.ufunc):
        hit = FallbackUfunc(obj)
    elif callable(obj) and not isinstance(obj, (type, types.ModuleType)) and hasattr(obj, "__name__"):
        hit = _namespace_function(obj)
    if hit is None:
        raise AttributeError(f"module 'lazygraph' has no attribute {name!r}")
    _NAMESPACE_CACHE[name] = hit
    return hit


def install(namespace: types.ModuleType) -> None:
    """Give the namespace's elementwise functions NumPy's ufunc methods (`lg.add.at`, ...)."""
    for name in dir(namespace):
        ufunc = getattr(np, name, None)
        fn = getattr(namespace, name, None)
        if isinstance(ufunc, np.ufunc) and callable(fn) and not isinstance(fn, (type, np.ufunc)):
            try:
                add_ufunc_methods(fn, ufunc)
            except (AttributeError, TypeError):  # a builtin or slotted callable: leave it
                pass
