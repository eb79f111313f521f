"""Shared by run.py and tests/test_programs.py: evaluate a program's outputs and compare them to NumPy's."""

from __future__ import annotations

import ast
import inspect
import traceback
from types import ModuleType
from typing import Any

import numpy

# (rtol, atol) by the expected dtype's kind and item size; integers and booleans compare exactly.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-3),
    "float32": (1e-4, 1e-6),
    "float64": (1e-5, 1e-8),
    "complex64": (1e-4, 1e-6),
    "complex128": (1e-5, 1e-8),
}


def to_numpy(ns: Any, outputs: dict[str, Any]) -> dict[str, numpy.ndarray]:
    """Every output as a NumPy array; lazy arrays are evaluated together through `ns.eval` where it exists."""
    lazy_type = getattr(ns, "Array", None)
    lazy = {k: v for k, v in outputs.items() if lazy_type is not None and isinstance(v, lazy_type)}
    values: dict[str, Any] = {}
    if lazy and hasattr(ns, "eval"):
        evaluated = ns.eval(*lazy.values())
        if len(lazy) == 1 and not isinstance(evaluated, (list, tuple)):
            evaluated = [evaluated]
        values.update(zip(lazy, evaluated))
    for key, value in outputs.items():
        values.setdefault(key, value)
    return {k: numpy.asarray(values[k]) for k in outputs}


def compare(expected: dict[str, numpy.ndarray], actual: dict[str, numpy.ndarray]) -> str | None:
    """None if every output matches (same keys, shapes, dtypes, values within tolerance), else why not."""
    missing = [k for k in expected if k not in actual]
    if missing:
        return f"outputs missing: {', '.join(missing)}"
    for key, e in expected.items():
        a = actual[key]
        if a.shape != e.shape:
            return f"{key}: shape {a.shape} != NumPy's {e.shape}"
        if a.dtype != e.dtype:
            return f"{key}: dtype {a.dtype} != NumPy's {e.dtype}"
        if e.dtype.name in TOLERANCES:
            rtol, atol = TOLERANCES[e.dtype.name]
            ok = numpy.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
        elif e.dtype.kind in "biuUS":
            ok = numpy.asarray(a == e)
        else:
            return f"{key}: cannot compare dtype {e.dtype}"
        if not ok.all():
            bad = numpy.argwhere(~ok) if ok.ndim else [()]
            first = tuple(int(i) for i in bad[0])
            where = f" at {list(first)}" if first else ""
            return (
                f"{key}: {int((~ok).sum())} of {ok.size} values differ; first{where}: "
                f"{a[first]!r} vs NumPy's {e[first]!r}"
            )
    return None


def describe_error(exc: BaseException, module: ModuleType | None = None) -> str:
    """`Type: first line of the message`, plus the program line that raised it when it is known."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    if module is not None and getattr(module, "__file__", None):
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == module.__file__]
        if frames:
            text += f" [{module.__name__.rsplit('.', 1)[-1]}.py:{frames[-1].lineno}]"
    return text


def namespace_names(module: ModuleType) -> list[str]:
    """Every dotted `np.<name>` chain the program's source uses, e.g. `np.linalg.eigh`, `np.add.at`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        chain: list[str] = []
        cur: ast.AST = node
        while isinstance(cur, ast.Attribute):
            chain.append(cur.attr)
            cur = cur.value
        if chain and isinstance(cur, ast.Name) and cur.id == "np":
            found.add("np." + ".".join(reversed(chain)))
    # keep only the longest chains (np.linalg.eigh, not also np.linalg)
    return sorted(n for n in found if not any(o.startswith(n + ".") for o in found))


def missing_names(module: ModuleType, ns: Any) -> list[str]:
    """The `np.<name>` chains of a program that `ns` does not have (a static scan; methods are not seen)."""
    missing = []
    for name in namespace_names(module):
        obj: Any = ns
        for part in name.split(".")[1:]:
            if not hasattr(obj, part):
                missing.append(name)
                break
            obj = getattr(obj, part)
    return missing
