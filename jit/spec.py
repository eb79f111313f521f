"""A region lowered to kernel values: loads, scalars, elementwise expressions, reductions.

`build_spec` turns a region (member nodes, external inputs, outputs) into a `Spec`: the
kept axes K and reduced axes R of its domain, the arrays it reads and writes, and a value
graph the renderers print. Every primitive operator brings its JIT description from its
record in ops/ (`jit_expr`, `jit_loop`, `jit_reduce`); a composite (softmax, logsumexp, var,
...) is the primitive nodes its decomposition gave the domain, lowered the same way, with
the Python scalars of the decomposition as literals. Each value has a level: 0 for
what the inputs give, and one more after each reduction it waits for, so stage s of a kernel
accumulates the reductions of level s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from jit import types
from jit.domain import Domain, NotFusable, reduced_axes_attr, template, weak_compare_bounds
from ops.base import is_weak_scalar
from ops.node import Node


@dataclass
class Val:
    """One value a kernel computes (see the module docstring)."""

    kind: str  # "load" | "scalar" | "elem" | "reduce"
    dtype: np.dtype
    args: tuple[int, ...] = ()
    expr: str = ""  # elem: C template over {0}, {1}, ... (operands in `loops` dtypes)
    loops: tuple[np.dtype, ...] = ()
    index: int = -1  # load: array index; scalar: scalar index
    combine: str = ""  # reduce: add, mul, max, min, or, and
    identity: str = "0"
    finish: str = "{acc}"
    center: int = -1  # reduce: value whose squared deviations are accumulated (renderers support it)
    ddof: float = 0
    axes: frozenset[int] = field(default_factory=frozenset)
    level: int = 0


@dataclass
class ArrayRef:
    """An array the kernel reads (input) or writes (output): dtype and axis per dimension."""

    dtype: np.dtype
    roots: tuple[int, ...]
    output: bool


@dataclass
class Spec:
    """What one fused kernel computes, independent of sizes and strides."""

    K: list[int]
    R: list[int]
    arrays: list[ArrayRef]
    scalars: list[np.dtype]
    values: list[Val]
    outputs: list[tuple[int, int]]  # (value, array)
    inputs: list[Node]  # external inputs in call order
    out_nodes: list[Node]
    arg_of_input: list[tuple[str, int]]  # per input: ("array", i) or ("scalar", i)

    @property
    def stages(self) -> int:
        """Reduction stages (the final output stage not counted)."""
        return max((v.level for v in self.values if v.kind == "reduce"), default=0)

    def full(self, v: Val) -> bool:
        """True for values that vary along a reduced axis."""
        return bool(v.axes & set(self.R))


def _fmt(tpl: str, loop: np.dtype, out: np.dtype, attrs: dict) -> str:
    t = loop
    s = tpl.replace("{T}", types.ctype(t)).replace("{t}", types.suffix(t))
    s = s.replace("{bits}", str(np.dtype(t).itemsize * 8))
    if "{decimals}" in s:
        s = s.replace("{decimals}", str(int(attrs.get("decimals", 0))))
    return s


class _Lowering:
    def __init__(self, domain: Domain, R: frozenset[int]) -> None:
        self.d = domain
        self.R = R
        self.values: list[Val] = []
        self.of: dict[int, int] = {}

    def val(self, v: Val) -> int:
        if v.kind in ("elem",):
            v.axes = frozenset().union(*(self.values[a].axes for a in v.args)) if v.args else frozenset()
            v.level = max((self.values[a].level for a in v.args), default=0)
        elif v.kind == "reduce":
            v.axes = self.values[v.args[0]].axes - self.R
            lv = self.values[v.args[0]].level
            if v.center >= 0:
                lv = max(lv, self.values[v.center].level)
            v.level = lv + 1
        self.values.append(v)
        return len(self.values) - 1

    def cast(self, a: int, dtype: np.dtype) -> int:
        if self.values[a].dtype == dtype:
            return a
        return self.val(Val("elem", np.dtype(dtype), (a,), "{0}", (np.dtype(dtype),)))

    def _clamp(self, a: int, bounds: tuple[int, int]) -> int:
        lo, hi = bounds  # a loop-invariant int64 value: the compiler hoists it
        expr = f"({{0}} < {lo}LL ? {lo}LL : {{0}} > {hi}LL ? {hi}LL : {{0}})"
        return self.val(Val("elem", np.dtype(np.int64), (a,), expr, (np.dtype(np.int64),)))

    def reduce(self, desc: dict, dtype: np.dtype, arg: int, center: int = -1, ddof: float = 0) -> int:
        acc = types.acc_dtype(dtype)
        if desc["combine"] in ("or", "and"):
            arg = self.val(Val("elem", np.dtype(np.int32), (arg,), "({0} != 0)", (self.values[arg].dtype,)))
        else:
            arg = self.cast(arg, acc)
        return self.val(
            Val(
                "reduce",
                np.dtype(dtype),
                (arg,),
                combine=desc["combine"],
                identity=desc["identity"],
                finish=desc["finish"],
                center=center,
                ddof=ddof,
            )
        )

    def node(self, node: Node) -> int:
        parts = self.d.parts.get(id(node))
        if parts is not None:
            for p in parts:
                for c in p.inputs:
                    if id(c) not in self.of:  # a Python scalar of the decomposition
                        self.of[id(c)] = self.val(Val("elem", c.dtype, (), _literal(c.buffer)))
                self.of[id(p)] = self.node(p)
            return self.of[id(parts[-1])]
        args = [self.of[id(c)] for c in node.inputs]
        if node.op.kind == "elementwise":
            tpl, loop = template(node)
            bounds = weak_compare_bounds(node)
            if bounds is not None and loop and loop[0] != np.int64:
                args = [self._clamp(a, bounds) if _weak_int(c) else a for a, c in zip(args, node.inputs)]
            tdt = node.dtype if node.op.jit_loop == "convert" else loop[-1]
            expr = _fmt(tpl, tdt, node.dtype, node.attrs)
            return self.val(Val("elem", node.dtype, tuple(args), expr, loop))
        (x,) = args
        return self.reduce(node.op.jit_reduce, node.dtype, x, ddof=float(node.attrs.get("ddof") or 0))


def _weak_int(n: Node) -> bool:
    return is_weak_scalar(n) and type(n.buffer) is int


def _literal(value: bool | int | float) -> str:
    """A Python scalar as a C literal of its own type (the operand cast converts it, as NumPy does)."""
    if type(value) is bool:
        return "1" if value else "0"
    if type(value) is int:
        return f"{value}LL"
    v = float(value)
    if v != v:
        return "NAN"
    if v in (float("inf"), float("-inf")):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    return repr(v)


def build_spec(domain: Domain, members: list[Node], inputs: list[Node], outputs: list[Node]) -> Spec:
    """Lower a region whose domain is `domain` (members in topological order)."""
    R = domain.reduce_roots() if domain.has_reduction else frozenset()
    low = _Lowering(domain, R)
    arrays: list[ArrayRef] = []
    scalars: list[np.dtype] = []
    arg_of: list[tuple[str, int]] = []
    for n in inputs:
        if is_weak_scalar(n):
            low.of[id(n)] = low.val(Val("scalar", n.dtype, index=len(scalars)))
            arg_of.append(("scalar", len(scalars)))
            scalars.append(n.dtype)
            continue
        roots = domain.roots(n)
        low.of[id(n)] = low.val(
            Val("load", n.dtype, index=len(arrays), axes=frozenset(a for a in roots if a >= 0))
        )
        arg_of.append(("array", len(arrays)))
        arrays.append(ArrayRef(n.dtype, roots, False))
    for n in members:
        low.of[id(n)] = low.node(n)
    outs = []
    for n in outputs:
        v = low.cast(low.of[id(n)], n.dtype)
        outs.append((v, len(arrays)))
        arrays.append(ArrayRef(n.dtype, domain.roots(n), True))
    order: list[int] = []
    for ref in arrays[::-1] if False else sorted(arrays, key=lambda a: not a.output):
        for a in ref.roots:
            if a >= 0 and a not in order:
                order.append(a)
    K = [a for a in order if a not in R]
    Rl = [a for a in order if a in R]
    if set(Rl) != set(R):
        raise NotFusable("a reduced axis is read by no array")
    return Spec(K, Rl, arrays, scalars, low.values, outs, list(inputs), list(outputs), arg_of)


def axes_sizes(domain: Domain, spec: Spec) -> dict[int, int]:
    """Sizes of the spec's axes as recorded in the domain."""
    return {a: domain.size[a] for a in spec.K + spec.R}


def reduced_axes(node: Node) -> tuple[int, ...]:
    """Axes of the input a reduction node reduces (re-exported for fusion)."""
    return reduced_axes_attr(node)
