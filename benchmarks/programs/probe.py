"""NumPy-backed stand-ins for what lazygraph lacks, so a program runs past its first missing function.

`run.py --probe` installs them (in its own process only, nothing is written anywhere) to find
wrong values and behaviour behind the missing functions: each stand-in evaluates its lazy
arguments, calls NumPy and hands the result back through `asarray`; the in-place ones
(`fill_diagonal`, `ufunc.at`) write the result back into their first argument.
"""

from __future__ import annotations

import types
from typing import Any

import numpy

# dotted names whose NumPy function modifies its first argument in place
IN_PLACE = {"fill_diagonal", "add.at", "subtract.at", "maximum.at", "minimum.at", "multiply.at"}
# Array attributes given stand-ins when missing: properties, then methods
PROPERTIES = ("real", "imag")
METHODS = ("argsort", "sort", "nonzero", "conj", "repeat", "take", "searchsorted", "ptp")

USED: set[str] = set()


def _to_numpy(x: Any, lazy: type) -> Any:
    if isinstance(x, lazy):
        return numpy.array(numpy.asarray(x))  # a writable copy
    if isinstance(x, (list, tuple)):
        return type(x)(_to_numpy(v, lazy) for v in x)
    return x


def _to_lazy(x: Any, lg: Any) -> Any:
    if isinstance(x, (numpy.ndarray, numpy.generic)):
        return lg.asarray(x)
    if isinstance(x, tuple):
        return (
            type(x)(*(_to_lazy(v, lg) for v in x))
            if hasattr(x, "_fields")
            else tuple(_to_lazy(v, lg) for v in x)
        )
    if isinstance(x, list):
        return [_to_lazy(v, lg) for v in x]
    return x


def _stand_in(lg: Any, dotted: str) -> Any:
    target: Any = numpy
    for part in dotted.split("."):
        target = getattr(target, part)

    def fallback(*args: Any, **kwargs: Any) -> Any:
        USED.add("np." + dotted)
        nargs = [_to_numpy(a, lg.Array) for a in args]
        nkwargs = {k: _to_numpy(v, lg.Array) for k, v in kwargs.items()}
        out = target(*nargs, **nkwargs)
        if dotted in IN_PLACE:
            args[0][...] = lg.asarray(nargs[0])
            return None
        return _to_lazy(out, lg)

    fallback.__name__ = dotted.rsplit(".", 1)[-1]
    return fallback


def install(lg: Any, names: list[str]) -> list[str]:
    """Give `lg` a NumPy-backed stand-in for every missing `np.<dotted>` name and Array attribute."""
    installed = []
    for name in names:
        parts = name.split(".")[1:]
        obj = lg
        for i, part in enumerate(parts):
            if i == len(parts) - 1:
                if not hasattr(obj, part):
                    setattr(obj, part, _stand_in(lg, ".".join(parts)))
                    installed.append(name)
            else:
                if not hasattr(obj, part):
                    setattr(obj, part, types.SimpleNamespace())
                obj = getattr(obj, part)

    def prop(attr: str) -> property:
        def get(self: Any) -> Any:
            USED.add(f"Array.{attr}")
            return lg.asarray(getattr(numpy.asarray(self), attr))

        return property(get)

    def method(attr: str) -> Any:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            USED.add(f"Array.{attr}")
            return _to_lazy(getattr(numpy.array(numpy.asarray(self)), attr)(*args, **kwargs), lg)

        return call

    for attr in PROPERTIES:
        if not hasattr(lg.Array, attr):
            setattr(lg.Array, attr, prop(attr))
            installed.append(f"Array.{attr}")
    for attr in METHODS:
        if not hasattr(lg.Array, attr):
            setattr(lg.Array, attr, method(attr))
            installed.append(f"Array.{attr}")
    return installed
