"""The search's graphs: immutable-node term graphs that rewrites copy, edit and compare.

An `SGraph` is what the superoptimizer's search explores: nodes by integer id (inputs,
weights, Python-scalar leaves, constants and operator applications), the output ids, and
`replaced` (old id -> the id now computing the same value), which is how the pass later maps
the best graph back onto Q with one `Graph.substitute`. Nodes are immutable and shared between
graphs; a rewrite copies the two dicts, adds the target's nodes (shapes and dtypes from the
operators' own `infer`, so a rewrite that does not type-check is simply not applicable) and
redirects the consumers of the source's outputs. `add` normalizes as it builds (a slice of a
slice is one slice, adjacent slices concatenated back are the slice they came from, a concat
inside a concat on the same axis is flattened), and `hashcons` merges equal nodes, so the
graph key (a Merkle hash of the outputs) identifies graphs up to these identities.

`slice` (one axis, start, stop) is the piece of a split; it is registered as an operator
("slice_axis", made by this pass only) whose kernel returns a NumPy view, so it is free.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from cache.key import Uncacheable, canon
from ops.base import REGISTRY, Op
from ops.node import Node
from ops.views import View
from optimizer.superopt.pseudo import SliceOp  # noqa: F401  (re-exported; registers slice_axis)

LEAVES = ("input", "weight", "scalar", "const")
FREE = frozenset(("view", "slice_axis"))  # no work: NumPy views


class SNode:
    """One node: an operator application or a leaf (`src`: the Q node it stands for, or -1)."""

    __slots__ = ("op", "inputs", "attrs", "shape", "dtype", "src", "value", "leaf", "_sig")

    def __init__(
        self,
        op: str,
        inputs: tuple[int, ...],
        attrs: dict,
        shape: tuple[int, ...],
        dtype: np.dtype,
        src: int = -1,
        value: Any = None,
    ) -> None:
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        self.shape = shape
        self.dtype = dtype
        self.src = src
        self.value = value  # a scalar's or constant's value
        self.leaf = op in LEAVES  # inputs, weights, scalars and constants
        self._sig: tuple | None = None

    @property
    def sig(self) -> tuple:
        """(op, attributes, shape, dtype) in hashable form, computed once (nodes are immutable)."""
        if self._sig is None:
            self._sig = (self.op, frozen(self.attrs), self.shape, self.dtype.str)
        return self._sig

    def with_inputs(self, inputs: tuple[int, ...]) -> SNode:
        """The same operation reading other (equivalent) inputs."""
        n = SNode(self.op, inputs, self.attrs, self.shape, self.dtype, self.src, self.value)
        n._sig = self._sig
        return n

    def __repr__(self) -> str:
        return f"<{self.op}{list(self.inputs)} {self.dtype}{list(self.shape)}>"


class RewriteError(ValueError):
    """A target that does not type-check here: the rewrite is not applicable."""


#: view_of_slice's answers: `hashcons` asks again for every view of a slice in every
#: rewritten graph (BERT's MCTS: 366 asks, 0.17 s of a 0.7 s search, nearly all repeats)
_COMPOSED: dict[tuple, View | None] = {}


def view_of_slice(view: View, piece: tuple[int, ...], whole: tuple[int, ...], cut: dict) -> View | None:
    """A view of a slice as one view of the sliced array, when that is a strided view (else None).

    Views index their input as a C-contiguous buffer, so a view of a slice would copy the
    slice first; composed, it reads the whole array in place.
    """
    key = (view, tuple(piece), tuple(whole), cut["axis"], cut["start"])
    got = _COMPOSED.get(key, key)
    if got is key:
        if len(_COMPOSED) > 4096:
            _COMPOSED.clear()
        got = _COMPOSED[key] = _compose(view, piece, whole, cut)
    return got


def _compose(view: View, piece: tuple[int, ...], whole: tuple[int, ...], cut: dict) -> View | None:
    size = math.prod(view.shape)
    if size == 0 or size > 1 << 22 or not view.shape:
        return None
    pos = np.full(view.shape, view.offset, dtype=np.int64)
    for k, (d, st) in enumerate(zip(view.shape, view.strides)):
        shape = [1] * len(view.shape)
        shape[k] = d
        pos = pos + (np.arange(d, dtype=np.int64) * st).reshape(shape)
    idx = list(np.unravel_index(pos, piece))
    idx[cut["axis"]] = idx[cut["axis"]] + cut["start"]
    lin = np.ravel_multi_index(tuple(idx), whole)
    origin = int(lin.flat[0])
    strides = []
    for k, d in enumerate(view.shape):
        step = [0] * len(view.shape)
        step[k] = 1 if d > 1 else 0
        strides.append(int(lin[tuple(step)]) - origin if d > 1 else 0)
    want = np.full(view.shape, origin, dtype=np.int64)
    for k, (d, st) in enumerate(zip(view.shape, strides)):
        shape = [1] * len(view.shape)
        shape[k] = d
        want = want + (np.arange(d, dtype=np.int64) * st).reshape(shape)
    if not np.array_equal(want, lin):
        return None
    return View(tuple(view.shape), tuple(strides), origin)


def _fake(n: SNode) -> Node:
    """A recorded-node stand-in for `infer` (scalars stay weak, as in recording)."""
    if n.op == "scalar":
        return Node(REGISTRY["scalar"], (), {}, (), n.dtype, buffer=n.value)
    return Node(REGISTRY["buffer"], (), {}, n.shape, n.dtype)


def frozen(attrs: dict) -> tuple:
    """Attributes in a hashable, order-independent form."""
    try:
        return tuple(sorted((k, canon(v)) for k, v in attrs.items()))
    except Uncacheable:
        return tuple(sorted((k, repr(v)) for k, v in attrs.items()))


class SGraph:
    """A term graph under rewriting: nodes, outputs, replaced ids, rules applied so far."""

    def __init__(self) -> None:
        self.nodes: dict[int, SNode] = {}
        self.outputs: list[int] = []
        self.replaced: dict[int, int] = {}
        self.applied: list[str] = []
        self.value_guards: set[int] = set()  # ids of scalar leaves whose values a rule read
        self.next_id = 0
        self._key: str | None = None
        self._order: list[int] | None = None
        self.focus: int | None = None  # the node a rule just made (rules chaining on it read this)

    # -- building ----------------------------------------------------------------------------

    def leaf(self, kind: str, shape: Sequence[int], dtype: Any, src: int = -1, value: Any = None) -> int:
        """Add an input, weight, scalar or constant leaf."""
        if kind not in LEAVES:
            raise ValueError(f"not a leaf kind: {kind}")
        dt = np.dtype(dtype)
        return self._put(SNode(kind, (), {}, tuple(shape), dt, src, value))

    def raw(self, op: str, inputs: Sequence[int], attrs: dict, shape: tuple, dtype: Any, src: int) -> int:
        """Add a node as recorded (conversion from Q: no inference, no normalization)."""
        return self._put(SNode(op, tuple(inputs), dict(attrs), tuple(shape), np.dtype(dtype), src))

    def add(self, op: str, inputs: Sequence[int], attrs: dict | None = None) -> int:
        """Add an operator application (type-checked by the operator's `infer`; normalized)."""
        attrs = dict(attrs or {})
        ins = tuple(inputs)
        if op == "slice_axis":
            got = self._simplify_slice(ins[0], attrs)
            if got is not None:
                return got
        if op == "concat":
            got = self._simplify_concat(ins, attrs)
            if isinstance(got, int):
                return got
            ins = got
        opdef = REGISTRY.get(op)
        if opdef is None:
            raise RewriteError(f"unknown operator {op}")
        if opdef.kind == "elementwise" and ins and all(self.nodes[i].op in ("scalar", "const") for i in ins):
            return self._fold(opdef, ins, attrs)
        try:
            shape, dtype, attrs = opdef.infer(tuple(_fake(self.nodes[i]) for i in ins), attrs)
        except (ValueError, TypeError, IndexError, KeyError) as e:
            raise RewriteError(str(e)) from None
        return self._put(SNode(op, ins, dict(attrs), tuple(shape), np.dtype(dtype)))

    def _fold(self, opdef: Op, ins: tuple[int, ...], attrs: dict) -> int:
        """An elementwise op of scalars is a scalar (weak if every operand is a Python scalar)."""
        args = [self.nodes[i] for i in ins]
        vals = [a.value if a.op == "scalar" else np.asarray(a.value, a.dtype) for a in args]
        try:
            with np.errstate(all="ignore"):
                v = np.asarray(opdef.kernel(*vals, **attrs))
        except (ValueError, TypeError, ArithmeticError) as e:
            raise RewriteError(str(e)) from None
        if all(a.op == "scalar" for a in args):
            return self.leaf("scalar", (), v.dtype, value=v.item())
        return self.leaf("const", (), v.dtype, value=v.item())

    def _put(self, n: SNode) -> int:
        i = self.next_id
        self.next_id += 1
        self.nodes[i] = n
        self._key = self._order = None
        return i

    def _simplify_slice(self, x: int, attrs: dict) -> int | None:
        """A whole-axis slice is its input; a slice of a slice is one slice."""
        n = self.nodes[x]
        axis, start, stop = int(attrs["axis"]), int(attrs["start"]), int(attrs["stop"])
        if start == 0 and stop == n.shape[axis]:
            return x
        if n.op == "slice_axis" and n.attrs["axis"] == axis:
            base = n.attrs["start"]
            return self.add(
                "slice_axis", [n.inputs[0]], {"axis": axis, "start": base + start, "stop": base + stop}
            )
        return None

    def _simplify_concat(self, ins: tuple[int, ...], attrs: dict) -> int | tuple[int, ...]:
        """Flatten nested concats on one axis; adjacent slices of one array rejoin into one slice."""
        first = self.nodes[ins[0]]
        axis = int(attrs.get("axis", 0))
        if axis < 0:
            axis += len(first.shape)
        flat: list[int] = []
        for i in ins:
            n = self.nodes[i]
            if n.op == "concat" and n.attrs.get("axis") == axis:
                flat.extend(n.inputs)
            else:
                flat.append(i)
        merged: list[int] = []
        for i in flat:
            n = self.nodes[i]
            if merged:
                p = self.nodes[merged[-1]]
                if (
                    n.op == "slice_axis"
                    and p.op == "slice_axis"
                    and n.attrs["axis"] == axis == p.attrs["axis"]
                    and n.inputs == p.inputs
                    and n.attrs["start"] == p.attrs["stop"]
                ):
                    a = {"axis": axis, "start": p.attrs["start"], "stop": n.attrs["stop"]}
                    merged[-1] = self.add("slice_axis", [n.inputs[0]], a)
                    continue
            merged.append(i)
        if len(merged) == 1:
            return merged[0]
        attrs["axis"] = axis
        return tuple(merged)

    # -- editing -----------------------------------------------------------------------------

    def copy(self) -> SGraph:
        """A graph sharing the (immutable) nodes."""
        c = SGraph.__new__(SGraph)
        c.nodes = dict(self.nodes)
        c.outputs = list(self.outputs)
        c.replaced = dict(self.replaced)
        c.applied = list(self.applied)
        c.value_guards = set(self.value_guards)
        c.next_id = self.next_id
        c._key = None
        c._order = None
        c.focus = None
        return c

    def redirect(self, mapping: dict[int, int]) -> None:
        """Every reader of an old id reads its new id instead (the old node dies)."""
        if not mapping:
            return
        for i, n in list(self.nodes.items()):
            if any(c in mapping for c in n.inputs):
                self.nodes[i] = n.with_inputs(tuple(mapping.get(c, c) for c in n.inputs))
        self.outputs = [mapping.get(o, o) for o in self.outputs]
        self.replaced.update(mapping)
        self._key = self._order = None

    def prune(self) -> None:
        """Drop nodes no output depends on."""
        live = self.reachable()
        for i in [i for i in self.nodes if i not in live]:
            del self.nodes[i]
        if self._order is not None:
            self._order = [i for i in self._order if i in live]  # still inputs-first

    def reachable(self) -> set[int]:
        """Ids the outputs depend on."""
        live: set[int] = set()
        stack = list(self.outputs)
        while stack:
            i = stack.pop()
            if i not in live:
                live.add(i)
                stack.extend(self.nodes[i].inputs)
        return live

    def topo(self) -> list[int] | None:
        """Live ids inputs-first, or None when the graph has a cycle (remembered until an edit)."""
        if self._order is not None:
            return self._order
        state: dict[int, int] = {}
        order: list[int] = []
        for root in self.outputs:
            if root in state:
                continue
            stack = [(root, iter(self.nodes[root].inputs))]
            state[root] = 1
            while stack:
                i, it = stack[-1]
                for c in it:
                    s = state.get(c)
                    if s == 1:
                        return None  # c is on the current path
                    if s is None:
                        state[c] = 1
                        stack.append((c, iter(self.nodes[c].inputs)))
                        break
                else:
                    stack.pop()
                    state[i] = 2
                    order.append(i)
        self._order = order
        return order

    def hashcons(self, order: list[int]) -> None:
        """Merge nodes computing the same operation on the same inputs (CSE)."""
        table: dict[tuple, int] = {}
        mapping: dict[int, int] = {}
        for i in order:
            n = self.nodes[i]
            if n.leaf:
                continue
            ins = tuple(mapping.get(c, c) for c in n.inputs)
            simpler = self._normal(n, ins)
            if simpler is not None:
                mapping[i] = simpler
                continue
            sig = (n.sig, ins)
            prev = table.get(sig)
            if prev is None:
                table[sig] = i
                if ins != n.inputs:
                    self.nodes[i] = n.with_inputs(ins)
            else:
                mapping[i] = prev
        if mapping:
            self.redirect(mapping)
            self.prune()

    def _normal(self, n: SNode, ins: tuple[int, ...]) -> int | None:
        """The normalized replacement of a slice, view or concat whose inputs changed (None: keep it)."""
        if n.op == "slice_axis":
            return self._simplify_slice(ins[0], dict(n.attrs))
        if n.op == "view" and self.nodes[ins[0]].op == "slice_axis":
            piece = self.nodes[ins[0]]
            base = piece.inputs[0]
            view = view_of_slice(n.attrs["view"], piece.shape, self.nodes[base].shape, piece.attrs)
            if view is not None:  # one view of the whole: no copy of the piece first
                return self.add("view", [base], {"view": view})
        if n.op == "concat":
            got = self._simplify_concat(ins, dict(n.attrs))
            if isinstance(got, int):
                return got
            if got != ins:
                return self.add("concat", got, {"axis": n.attrs["axis"]})
        return None

    # -- reading -----------------------------------------------------------------------------

    def key(self) -> str:
        """Merkle hash of the outputs: equal graphs (up to node ids) have equal keys."""
        if self._key is not None:
            return self._key
        h: dict[int, int] = {}
        for i in self.topo() or []:
            n = self.nodes[i]
            if n.leaf:
                h[i] = hash((n.op, n.src, n.sig, repr(n.value) if n.op == "const" else i))
            else:
                h[i] = hash((n.sig, tuple(h[c] for c in n.inputs)))
        self._key = repr(tuple(h.get(o) for o in self.outputs))
        return self._key

    def consumers(self, live: Iterable[int] | None = None) -> dict[int, list[int]]:
        """Readers of each id (live nodes only)."""
        out: dict[int, list[int]] = {}
        for i in live if live is not None else self.reachable():
            for c in self.nodes[i].inputs:
                out.setdefault(c, []).append(i)
        return out

    def constant_ids(self, order: list[int]) -> set[int]:
        """Nodes computed from weights, scalars and constants only (folded once, then free)."""
        const: set[int] = set()
        for i in order:
            n = self.nodes[i]
            if n.op in ("weight", "scalar", "const") or (not n.leaf and all(c in const for c in n.inputs)):
                const.add(i)
        return const

    def op_count(self, order: list[int] | None = None) -> int:
        """Operator nodes the outputs depend on (slices and views are free: not counted)."""
        ids = order if order is not None else self.reachable()
        return sum(1 for i in ids if not self.nodes[i].leaf and self.nodes[i].op not in FREE)

    def evaluate(self, feeds: dict[int, np.ndarray]) -> list[np.ndarray]:
        """Output values with the reference kernels (`feeds`: a value for each input/weight id)."""
        vals: dict[int, Any] = {}
        for i in self.topo() or []:
            n = self.nodes[i]
            if n.op in ("input", "weight"):
                vals[i] = feeds[i]
            elif n.op == "scalar":
                vals[i] = n.value
            elif n.op == "const":
                vals[i] = np.asarray(n.value, dtype=n.dtype)
            else:
                vals[i] = REGISTRY[n.op].kernel(*[vals[c] for c in n.inputs], **n.attrs)
        return [np.asarray(vals[o]) for o in self.outputs]

    def lines(self) -> list[str]:
        """A readable listing (tests and debugging)."""
        out = []
        for i in self.topo() or []:
            n = self.nodes[i]
            args = ", ".join(f"%{c}" for c in n.inputs)
            out.append(f"%{i} = {n.op}({args}) {n.dtype}{list(n.shape)}")
        out.append("return " + ", ".join(f"%{o}" for o in self.outputs))
        return out
