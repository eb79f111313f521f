"""Recovery information: small expressions over the new graph P', and New-node recipes.

A cached transformation must rebuild every size-dependent value from the graph it is
replayed on. Expressions are plain tuples (lists once written as JSON), so they can be
stored on disk and never execute code; they compile once into closures over P''s nodes:

    ("const", v)          a JSON value                ("attr", p, name)  P'[p].attrs[name]
    ("shape", p)          P'[p].shape                 ("dim", p, axis)   P'[p].shape[axis]
    ("value", p)          the value of leaf p         ("dtype", "<f4")   a dtype
    ("contiguous", e)     the whole-buffer View of shape e
    ("window", p)         where leaf p's buffer lies: (address, strides, shape)
    ("transposed", e)     the View swapping the last two axes of a whole base of shape e
    ("swapped", e)        shape e with its last two axes swapped
    ("tuple", e, ...)     a tuple of values

A guard is ("eq", e1, e2): the two values must be the same (in key form, so 0.0 is not
-0.0). A New node's recipe names a constructor and gives its attributes, shape and dtype
as expressions; the engine (lazygraph/engine/compile.py) turns constructor names into
kernels, and a stored recipe naming one it does not know is a RecipeError there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from cache.key import canon
from ops.base import REGISTRY
from ops.node import Node
from ops.views import View, contiguous, permute_view

Expr = tuple
Nodes = list[Node]


class RecipeError(ValueError):
    """A stored expression, guard or recipe that does not make sense (corrupt or stale)."""


def compile_expr(e: Any) -> Callable[[Nodes], Any]:
    """A closure computing the expression's value on P''s nodes."""
    if not isinstance(e, (tuple, list)) or not e:
        raise RecipeError(f"not an expression: {e!r}")
    tag = e[0]
    if tag == "const" and len(e) == 2:
        v = e[1]
        return lambda nodes: v
    if tag == "attr" and len(e) == 3:
        p, name = _slot(e[1]), str(e[2])
        return lambda nodes: nodes[p].attrs[name]
    if tag == "shape" and len(e) == 2:
        p = _slot(e[1])
        return lambda nodes: nodes[p].shape
    if tag == "dim" and len(e) == 3:
        p, axis = _slot(e[1]), int(e[2])
        return lambda nodes: nodes[p].shape[axis]
    if tag == "value" and len(e) == 2:
        p = _slot(e[1])
        return lambda nodes: nodes[p].buffer
    if tag == "window" and len(e) == 2:
        p = _slot(e[1])
        return lambda nodes: buffer_window(nodes[p].buffer)
    if tag == "dtype" and len(e) == 2:
        dt = np.dtype(str(e[1]))
        return lambda nodes: dt
    if tag == "contiguous" and len(e) == 2:
        inner = compile_expr(e[1])
        return lambda nodes: contiguous(tuple(inner(nodes)))
    if tag in ("transposed", "swapped") and len(e) == 2:
        inner = compile_expr(e[1])
        if tag == "swapped":
            return lambda nodes: swap_last2(tuple(inner(nodes)))
        return lambda nodes: permute_view(contiguous(tuple(inner(nodes))), _swap_axes(len(inner(nodes))))
    if tag == "tuple":
        parts = [compile_expr(x) for x in e[1:]]
        return lambda nodes: tuple(f(nodes) for f in parts)
    raise RecipeError(f"unknown expression {e!r}")


def _swap_axes(rank: int) -> tuple[int, ...]:
    return tuple(range(rank - 2)) + (rank - 1, rank - 2) if rank >= 2 else tuple(range(rank))


def swap_last2(shape: tuple) -> tuple:
    """The shape with its last two axes swapped (what a matrix transpose gives)."""
    return tuple(shape[a] for a in _swap_axes(len(shape)))


def buffer_window(buf: Any) -> tuple:
    """Two leaves with the same window hold the same elements (the same memory)."""
    return (buf.__array_interface__["data"][0], buf.strides, buf.shape)


def _slot(v: Any) -> int:
    if type(v) is not int or v < 0:
        raise RecipeError(f"bad node slot {v!r}")
    return v


def compile_guard(g: Any) -> Callable[[Nodes], bool]:
    """A closure telling whether a guard holds on P'."""
    if not isinstance(g, (tuple, list)) or len(g) != 3 or g[0] != "eq":
        raise RecipeError(f"unknown guard {g!r}")
    a, b = compile_expr(g[1]), compile_expr(g[2])

    def check(nodes: Nodes) -> bool:
        x, y = a(nodes), b(nodes)
        return x is y or canon(x) == canon(y)

    return check


#: attribute values a guard memo may key on: equal ones are the same value (no 1 == 1.0 == True,
#: no 0.0 == -0.0); shapes are tuples of ints
_EXACT = {int, str, type(None), View}


class _ReadsValues(Exception):
    """A guard that reads a leaf's value or memory window: its outcome cannot be memoized."""


def guard_reads(
    guards: list, evaluate: Callable[[Nodes], bool] | None = None
) -> Callable[[Nodes], Any] | None:
    """What the guards read from P' (shapes, attributes) as one hashable tuple, for memoizing them.

    Guards are pure functions of what they read, so equal reads give equal outcomes. None when
    a guard reads a value or a window; the reader returns None for an attribute whose equality
    is looser than its key form (floats, bools, containers). Given `evaluate` (all the guards),
    the result is instead the memoizing check itself: one call on every hit.
    """
    shapes: list[int] = []
    attrs: list[tuple[int, str]] = []

    def collect(e: Any) -> None:
        tag = e[0]
        if tag in ("shape", "dim"):
            if e[1] not in shapes:
                shapes.append(e[1])
        elif tag == "attr":
            if (e[1], e[2]) not in attrs:
                attrs.append((e[1], e[2]))
        elif tag in ("contiguous", "transposed", "swapped"):
            collect(e[1])
        elif tag == "tuple":
            for x in e[1:]:
                collect(x)
        elif tag not in ("const", "dtype"):
            raise _ReadsValues

    try:
        for g in guards:
            collect(g[1])
            collect(g[2])
    except _ReadsValues:
        return None
    return _reader([_slot(p) for p in shapes], [(_slot(p), str(name)) for p, name in attrs], evaluate)


#: the memoizing check's text after its reads: the outcome by what was read, else all the guards
#: (the last reads' identity shortcut first: shapes and views are mostly the very objects of the
#: previous evaluation, so comparing costs pointer comparisons where hashing would walk them)
_MEMO_TAIL = """        lk = last[0]
        if k == lk[0]:
            return lk[1]
        ok = memo.get(k)
    except Exception:  # a missing attribute or an unhashable one: evaluate the guards
        return evaluate(n)
    if ok is None:
        ok = evaluate(n)
        if len(memo) >= 64:
            memo.clear()
        memo[k] = ok
    last[0] = (k, ok)  # one tuple: another thread reads a consistent pair
    return ok
"""


def _reader(
    shapes: list[int], attrs: list[tuple[int, str]], evaluate: Callable[[Nodes], bool] | None
) -> Callable[[Nodes], Any]:
    """`guard_reads`' reader, or memoizing check, as straight-line code: every hit runs it.

    The text holds only slot numbers (validated ints) and names of constants; the attribute
    names (read from disk) stay data, passed in as the constants A0, A1, ...
    """
    check = evaluate is not None
    pad = "        " if check else "    "
    lines = ["def read(n):", "    try:"] if check else ["def read(n):"]
    inexact = "return evaluate(n)" if check else "return None"
    space: dict[str, Any] = {
        "exact": _EXACT,
        "type": type,
        "evaluate": evaluate,
        "memo": {},
        "last": [(object(), None)],  # a first key equal to no reads
    }
    values = [f"n[{p}].shape" for p in shapes]
    for i, (p, name) in enumerate(attrs):
        space[f"A{i}"] = name
        lines.append(f"{pad}a{i} = n[{p}].attrs[A{i}]")
        lines.append(f"{pad}if type(a{i}) not in exact: {inexact}")
        values.append(f"a{i}")
    k = f"({', '.join(values)},)" if values else "()"
    text = "\n".join(lines) + "\n" + (f"{pad}k = {k}\n" + _MEMO_TAIL if check else f"    return {k}\n")
    exec(compile(text, "<guard reads>", "exec"), space)  # noqa: S102
    return space["read"]


def eval_expr(e: Expr, nodes: Nodes) -> Any:
    """Evaluate an expression once (at optimization time, on P)."""
    return compile_expr(e)(nodes)


class Recipe:
    """How to build a New node on P': constructor, operator, attributes, shape, dtype."""

    __slots__ = ("ctor", "op", "attrs", "shape", "dtype", "data")

    def __init__(
        self,
        ctor: str,
        op: str | None,
        attrs: dict[str, Expr],
        shape: Expr,
        dtype: str,
        data: Any = None,
    ) -> None:
        self.ctor = ctor
        self.op = op
        self.attrs = attrs
        self.shape = shape
        self.dtype = dtype
        self.data = data  # constructor-specific JSON (e.g. the id of a compiled kernel)

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {
            "ctor": self.ctor,
            "op": self.op,
            "attrs": self.attrs,
            "shape": self.shape,
            "dtype": self.dtype,
            "data": self.data,
        }

    @staticmethod
    def from_json(d: dict) -> Recipe:
        """Inverse of to_json (validated: unknown operators are errors, constructors the engine checks)."""
        if not isinstance(d, dict) or not isinstance(d.get("attrs"), dict):
            raise RecipeError("recipe must be an object with attrs")
        if not isinstance(d.get("ctor"), str):
            raise RecipeError("recipe without a constructor name")
        r = Recipe(d["ctor"], d.get("op"), d["attrs"], d["shape"], str(d["dtype"]), d.get("data"))
        r.compile()
        if r.op is not None and r.op not in REGISTRY:
            raise RecipeError(f"unknown operator {r.op!r}")
        return r

    def compile(self) -> Callable[[Nodes], tuple[dict, tuple, np.dtype]]:
        """A closure giving (attrs, shape, dtype) on P'."""
        attrs = [(k, compile_expr(e)) for k, e in self.attrs.items()]
        shape = compile_expr(self.shape)
        dtype = np.dtype(self.dtype)

        def recover(nodes: Nodes) -> tuple[dict, tuple, np.dtype]:
            return {k: f(nodes) for k, f in attrs}, tuple(shape(nodes)), dtype

        return recover

    @property
    def label(self) -> str:
        """Name for listings (`new full`, `new jit`)."""
        if self.ctor == "op" or self.op in (None, self.ctor):
            return str(self.op) if self.ctor == "op" else self.ctor
        return f"{self.ctor}:{self.op}"
