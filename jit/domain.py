"""The iteration domain of a fusable region: which loop axis each array dimension walks.

Every dimension of every node in a region (and of its external inputs) is mapped to a
domain axis, or to -1 for a unit dimension that broadcasting stretches. Broadcasting and
reductions relate the axes; a union-find merges axes that must be the same loop. A region
is one kernel when all its reductions reduce the same axes R: the kernel then loops over
the kept axes K outside and, per stage, over R inside. `Domain` grows one node at a time
(fusion asks whether a node may join) and rolls back when a node does not fit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jit import types
from ops.base import is_weak_scalar
from ops.declare import expand
from ops.node import Node

#: per-element price of storing a value and reading it back (write + read of one element),
#: in the units of the operators' `jit_cost` (an add is 1); recomputing more than this is
#: worse than a region boundary
STORE_COST = 16.0


class NotFusable(Exception):
    """A node cannot join a region (the message says why)."""


def _ufunc_loop(node: Node) -> tuple[np.dtype, ...] | None:
    """NumPy's loop dtypes for the operands of an elementwise node (the record's `jit_loop`), or None."""
    op = node.op
    out = node.dtype
    loop = op.jit_loop
    if loop == "select":
        return (node.inputs[0].dtype,) + (out,) * (len(node.inputs) - 1)
    if loop == "out":
        return (out,) * len(node.inputs)
    if loop == "convert":
        return (node.inputs[0].dtype,)
    fn = getattr(op, "fn", None)
    if not isinstance(fn, np.ufunc):
        return None
    sig = []
    for n in node.inputs:
        if is_weak_scalar(n) and type(n.buffer) is not bool:
            sig.append(type(n.buffer))  # a weak Python int or float
        else:
            sig.append(n.dtype)  # a Python bool promotes exactly like a bool array
    weak_int = any(s is int for s in sig)
    try:
        loop = fn.resolve_dtypes(tuple(sig) + (None,) * fn.nout)
    except (TypeError, ValueError):
        return None
    ins = tuple(np.dtype(d) for d in loop[: fn.nin])
    if len(set(ins)) != 1:
        return None  # mixed int64/uint64 comparison loops have no single C type
    if weak_int and loop[-1] == np.bool_ and ins[0].kind in "iu":
        # NumPy compares Python ints by value (int8 < 1000 is True): compare in a type that
        # holds the array's range plus one on each side; weak_compare_bounds clamps the int.
        if ins[0] == np.uint64:
            return None
        wide = np.int16 if ins[0].itemsize == 1 else np.int32 if ins[0].itemsize == 2 else np.int64
        return (np.dtype(wide),) * fn.nin
    return ins


def weak_compare_bounds(node: Node) -> tuple[int, int] | None:
    """(lo, hi) to clamp a Python int compared with a 1- or 2-byte integer array, else None.

    Clamping the int to the array dtype's range widened by one keeps every comparison's
    answer and lets the loop compare in int16/int32 instead of int64 (a uint8 grid compared
    with 3 widened each vector 8x).
    """
    fn = getattr(node.op, "fn", None)
    if node.dtype != np.bool_ or not isinstance(fn, np.ufunc) or node.op.jit_loop != "ufunc":
        return None
    arrays = [n.dtype for n in node.inputs if not is_weak_scalar(n)]
    if not arrays or any(d.kind not in "iu" or d.itemsize > 2 for d in arrays):
        return None
    if not any(is_weak_scalar(n) and type(n.buffer) is int for n in node.inputs):
        return None
    info = [np.iinfo(d) for d in arrays]
    return min(int(i.min) for i in info) - 1, max(int(i.max) for i in info) + 1


def template(node: Node) -> tuple[str, tuple[np.dtype, ...]]:
    """The C template and operand loop dtypes of an elementwise node (raises NotFusable)."""
    table = node.op.jit_expr
    if table is None:
        raise NotFusable(f"{node.op.name} has no JIT description")
    loop = _ufunc_loop(node)
    if loop is None:
        raise NotFusable(f"{node.op.name}: no single loop dtype for these operands")
    if node.op.jit_loop == "convert":
        src, dst = node.inputs[0].dtype, node.dtype
        if src.kind == "f" and dst.kind in "iu":
            raise NotFusable(
                f"{node.op.name}: float to integer conversion of out-of-range values differs from NumPy"
            )
        kind = dst.kind
    elif node.op.jit_loop == "select":
        kind = node.dtype.kind
    else:
        kind = loop[-1].kind if loop else node.dtype.kind
    for dt in (*loop, node.dtype):
        if not types.supported(dt):
            raise NotFusable(f"{node.op.name}: dtype {dt} is not handled by fused kernels")
    for kinds, tpl in table.items():
        if kind in kinds:
            return tpl, loop
    raise NotFusable(f"{node.op.name}: no JIT template for dtype kind {kind!r}")


def reduced_axes_attr(node: Node) -> tuple[int, ...]:
    """The axes (of the input) a reducing node reduces."""
    axis = node.attrs.get("axis")
    if isinstance(axis, int):
        return (axis,)
    return tuple(axis)


def check_node(node: Node) -> None:
    """Raise NotFusable unless the JIT can compute this node inside a kernel."""
    kind = node.op.kind
    name = node.op.name
    if not types.supported(node.dtype):
        raise NotFusable(f"{name}: dtype {node.dtype} is not handled by fused kernels")
    for n in node.inputs:
        if not types.supported(n.dtype):
            raise NotFusable(f"{name}: input dtype {n.dtype} is not handled by fused kernels")
    if node.op.decompose is not None:
        pass  # its primitive parts are checked as the domain adds them
    elif kind == "elementwise":
        template(node)
    elif kind == "reduction" and node.op.jit_reduce:
        pass
    else:
        raise NotFusable(f"{name} ({kind}) is not fusable")


class Domain:
    """Axis mapping of a growing region (see the module docstring)."""

    def __init__(self, expanded: dict[int, Any] | None = None) -> None:
        #: id(composite node) -> its decomposition's parts (or why it has none), shared by the
        #: domains of one fusion search so that each composite is expanded once, not per trial join
        self.expanded: dict[int, Any] = {} if expanded is None else expanded
        self.parent: dict[int, int] = {}
        self.size: dict[int, int] = {}
        self.amap: dict[int, tuple[int, ...]] = {}  # id(node) -> axis per dimension (-1: unit)
        self.members: dict[int, Node] = {}
        self.level: dict[int, int] = {}  # reductions deepen the level (stage) of what follows
        self.subcost: dict[int, float] = {}  # price of recomputing a value per element
        self.reduce: list[int] = []  # axes all reductions reduce (raw ids)
        self.has_reduction = False
        self.merged = False  # an add() unified two axes members use (members must be rechecked)
        self.used: set[int] = set()  # representatives of axes some member or its input indexes
        self.multi: list[Node] = []  # members with two or more axes, and reductions
        self.axes_seen: set[int] = set()
        self.reducers: list[Node] = []
        self.parts: dict[int, list[Node]] = {}  # id(composite member) -> its primitive nodes
        self._next = 0

    # -- union-find -------------------------------------------------------------------
    def find(self, a: int) -> int:
        """Representative axis of `a`."""
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def _new_axis(self, size: int) -> int:
        a = self._next
        self._next += 1
        self.parent[a] = a
        self.size[a] = size
        return a

    def _union(self, a: int, b: int) -> int:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            if self.size[ra] != self.size[rb]:
                raise NotFusable("axes of different sizes would have to be one loop")
            self.parent[rb] = ra
            # Only two axes that earlier members already index can give one of them a
            # diagonal; a fresh axis (a new input's) joining one cannot, and then no member
            # needs rechecking (rechecking all of them per add is quadratic in region size).
            if ra in self.used and rb in self.used:
                self.merged = True
            elif rb in self.used:
                self.used.add(ra)
        return ra

    def roots(self, node: Node) -> tuple[int, ...]:
        """The node's axes as representatives (-1 for unit dimensions)."""
        return tuple(-1 if a < 0 else self.find(a) for a in self.amap[id(node)])

    def reduce_roots(self) -> frozenset[int]:
        """The representatives of the reduced axes R."""
        return frozenset(self.find(a) for a in self.reduce)

    def copy(self) -> Domain:
        """An independent copy (a trial join works on one)."""
        d = Domain.__new__(Domain)
        d.parent = dict(self.parent)
        d.size = dict(self.size)
        d.amap = dict(self.amap)
        d.members = dict(self.members)
        d.level = dict(self.level)
        d.subcost = dict(self.subcost)
        d.reduce = list(self.reduce)
        d.has_reduction = self.has_reduction
        d.merged = self.merged
        d.used = set(self.used)
        d.multi = list(self.multi)
        d.axes_seen = set(self.axes_seen)
        d.reducers = list(self.reducers)
        d.parts = dict(self.parts)
        d.expanded = self.expanded
        d._next = self._next
        return d

    # -- growing ----------------------------------------------------------------------
    def axes_of(self, node: Node) -> tuple[int, ...]:
        """Axes of a node already seen, or fresh axes for a new external input."""
        m = self.amap.get(id(node))
        if m is None:
            m = tuple(-1 if d == 1 else self._new_axis(d) for d in node.shape)
            self.amap[id(node)] = m
            self.level.setdefault(id(node), 0)
        return m

    def add(self, node: Node) -> None:
        """Map `node` into the domain; raise NotFusable (state then undefined: use a copy)."""
        check_node(node)
        if node.op.decompose is not None:
            self._add_composite(node)
            return
        name = node.op.name
        if node.op.kind == "elementwise":
            out = self._broadcast(node)
            level = max((self.level.get(id(c), 0) for c in node.inputs), default=0)
            red: tuple[int, ...] = ()
        else:
            (x,) = node.inputs
            xm = self.axes_of(x)
            axes = reduced_axes_attr(node)
            red = tuple(xm[a] for a in axes if xm[a] >= 0)
            if not red:
                raise NotFusable(f"{name}: reduces only unit dimensions")
            if node.attrs.get("keepdims"):
                out = tuple(-1 if i in axes else a for i, a in enumerate(xm))
            else:
                out = tuple(a for i, a in enumerate(xm) if i not in axes)
            level = self.level.get(id(x), 0) + 1
        self.amap[id(node)] = out
        self.members[id(node)] = node
        self.level[id(node)] = level
        if red:
            if self.has_reduction:
                mine = frozenset(self.find(a) for a in red)
                if mine != self.reduce_roots() or len(mine) != len(red):
                    raise NotFusable(f"{name}: reduces other axes than the region's reductions")
            else:
                self.reduce = list(red)
                self.has_reduction = True
        self._check(node)
        self._price(node)

    def _add_composite(self, node: Node) -> None:
        """A composite joins as its decomposition's primitive nodes; it stands for the last one."""
        parts = self.expanded.get(id(node))
        if parts is None:
            try:
                parts = expand(node)
            except (TypeError, ValueError) as e:
                parts = f"{node.op.name}: no decomposition for these operands ({e})"
            self.expanded[id(node)] = parts
        if isinstance(parts, str):
            raise NotFusable(parts)
        for p in parts:
            self.add(p)
        last = id(parts[-1])
        self.amap[id(node)] = self.amap[last]
        self.level[id(node)] = self.level[last]
        self.subcost[id(node)] = self.subcost[last]
        self.members[id(node)] = node
        self.parts[id(node)] = parts

    def _broadcast(self, node: Node) -> tuple[int, ...]:
        nd = len(node.shape)
        out: list[int] = []
        maps = [(c, self.axes_of(c)) for c in node.inputs]
        for j in range(nd):
            axis = -1
            for _c, m in maps:
                k = j - (nd - len(m))
                if k < 0 or m[k] < 0:
                    continue
                axis = m[k] if axis < 0 else self._union(axis, m[k])
            if axis < 0 and node.shape[j] != 1:
                axis = self._new_axis(node.shape[j])
            out.append(axis)
        return tuple(out)

    def _check(self, node: Node) -> None:
        r = self.reduce_roots()
        # Only a union of two axes can make an earlier member read a diagonal or keep a
        # reduced axis, and only members indexing two axes or reducing can be hurt by one.
        others = [*self.multi, node] if self.merged else [node]
        self.merged = False
        if node.op.kind != "elementwise" or sum(1 for d in node.shape if d != 1) >= 2:
            self.multi.append(node)
        for n in others:
            roots = [a for a in self.roots(n) if a >= 0]
            if len(set(roots)) != len(roots):
                raise NotFusable(f"{n.op.name}: one loop would index two dimensions (a diagonal)")
            if n.op.kind == "reduction" and set(roots) & r:
                raise NotFusable(f"{n.op.name}: keeps an axis the region reduces")
        for c in node.inputs:
            if id(c) not in self.members:
                roots = [a for a in self.roots(c) if a >= 0]
                if len(set(roots)) != len(roots):
                    raise NotFusable("an input would be read along a diagonal")
        for m in (node, *node.inputs):
            axes = [a for a in self.amap[id(m)] if a >= 0]
            self.axes_seen.update(axes)
            self.used.update(self.find(a) for a in axes)
        if node.op.kind != "elementwise":
            self.reducers.append(node)
        if self.reducers:
            # Every reduction must be indexed by every kept loop; one that is not would be
            # recomputed in full for each iteration of the loops it does not vary along.
            kept = {self.find(a) for a in self.axes_seen} - r
            for red in self.reducers:
                if not kept <= {a for a in self.roots(red) if a >= 0}:
                    raise NotFusable(
                        f"{red.op.name}: would be recomputed along loops its result does not vary on"
                    )

    def full(self, node: Node) -> bool:
        """True when the node varies along a reduced axis (computed inside the R loops)."""
        r = self.reduce_roots()
        return any(a in r for a in self.roots(node) if a >= 0)

    def _price(self, node: Node) -> None:
        """Refuse to recompute an expensive shared value in a later stage (store it instead)."""
        own = float(node.op.jit_cost)
        total = own
        lv = self.level[id(node)]
        for c in node.inputs:
            if id(c) not in self.members:
                continue
            sub = self.subcost.get(id(c), 0.0)  # reductions are 0: a per-row value, not recomputed
            total += sub
            if node.op.kind == "elementwise" and self.full(c) and self.level[id(c)] < lv and sub > STORE_COST:
                raise NotFusable(
                    f"{node.op.name}: recomputing {c.op.name} in a later stage costs {sub:g} > "
                    f"storing it ({STORE_COST:g})"
                )
        self.subcost[id(node)] = 0.0 if node.op.kind != "elementwise" else total


def try_join(domain: Domain, node: Node) -> Domain | None:
    """A copy of `domain` with `node` added, or None when it does not fit."""
    d = domain.copy()
    try:
        d.add(node)
    except NotFusable:
        return None
    return d


def describe(domain: Domain) -> dict[str, Any]:
    """Axis sizes, reduced axes and member count (for debugging output)."""
    roots = sorted({domain.find(a) for a in domain.parent})
    return {
        "axes": {a: domain.size[a] for a in roots},
        "reduce": sorted(domain.reduce_roots()),
        "members": len(domain.members),
    }
