"""A region lowered to kernel values: loads, scalars, elementwise expressions, reductions.

`build_spec` turns a region (member nodes, external inputs, outputs) into a `Spec`: the
kept axes K and reduced axes R of its domain, the arrays it reads and writes, and a value
graph the renderers print. Composite operators (softmax, log_softmax, logsumexp) and
centered reductions (var, std) become several values here; every other operator brings its
own JIT description from ops/ (`jit_expr`, `jit_reduce`). Each value has a level: 0 for
what the inputs give, and one more after each reduction it waits for, so stage s of a kernel
accumulates the reductions of level s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from jit import types
from jit.domain import Domain, NotFusable, reduced_axes_attr, template
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
    center: int = -1  # reduce: value whose squared deviations are accumulated (var, std)
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

    def elem(self, expr: str, dtype: np.dtype, *args: int) -> int:
        dt = np.dtype(dtype)
        return self.val(Val("elem", dt, tuple(args), _fmt(expr, dt, dt, {}), (dt,) * len(args)))

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
        name = node.op.name
        args = [self.of[id(c)] for c in node.inputs]
        if node.op.kind == "elementwise":
            tpl, loop = template(node)
            tdt = node.dtype if name == "astype" else loop[-1]
            expr = _fmt(tpl, tdt, node.dtype, node.attrs)
            return self.val(Val("elem", node.dtype, tuple(args), expr, loop))
        (x,) = args
        if name in ("softmax", "log_softmax", "logsumexp"):
            return self._softmax(name, node, x)
        desc = node.op.jit_reduce
        if desc.get("centered"):
            xt = self.cast(x, node.dtype)
            mean = self.reduce(
                {"combine": "add", "identity": "0", "finish": "({T})((double){acc} / (double){count})"},
                node.dtype,
                xt,
            )
            return self.reduce(desc, node.dtype, xt, center=mean, ddof=float(node.attrs.get("ddof") or 0))
        return self.reduce(desc, node.dtype, x)

    def _softmax(self, name: str, node: Node, x: int) -> int:
        work = node.dtype
        xw = self.cast(x, work)
        m = self.reduce({"combine": "max", "identity": "lowest", "finish": "{acc}"}, work, xw)
        if name == "logsumexp":
            sh = self.elem("({0} - {0} == 0) ? {0} : ({T})0", work, m)  # a non-finite max shifts by 0
        else:
            sh = self.elem("({0} == -INFINITY) ? ({T})0 : {0}", work, m)  # an all -inf row gives 0/0
        d = self.elem("{0} - {1}", work, xw, sh)
        e = self.elem("exp({0})", work, d)
        s = self.reduce({"combine": "add", "identity": "0", "finish": "{acc}"}, work, e)
        if name == "softmax":
            return self.elem("{0} / {1}", work, e, s)
        if name == "log_softmax":
            return self.elem("{0} - log({1})", work, d, s)
        return self.elem("log({0}) + {1}", work, s, sh)


def build_spec(domain: Domain, members: list[Node], inputs: list[Node], outputs: list[Node]) -> Spec:
    """Lower a region whose domain is `domain` (members in topological order)."""
    R = domain.reduce_roots() if domain.has_reduction else frozenset()
    low = _Lowering(domain, R)
    arrays: list[ArrayRef] = []
    scalars: list[np.dtype] = []
    arg_of: list[tuple[str, int]] = []
    for n in inputs:
        if n.op.name == "scalar":
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
