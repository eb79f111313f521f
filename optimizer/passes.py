"""The built-in passes: identity ops, CSE and dead-code elimination (algebraic identities are
rewrite rules: optimizer/rewrite/).

Every rewrite here is exact (bit-for-bit the value the reference kernels give), so the
optimizer on or off gives identical results. Decisions that read values or sizes (a
scalar operand that is 1, a reshape to the same shape) are recorded as guards.
"""

from __future__ import annotations

from cache.graph import Graph, QNode
from cache.key import Uncacheable, canon
from cache.recipe import buffer_window
from optimizer.registry import register_pass


def _has_identity_candidates(g: Graph) -> bool:
    return any(n.op is not None and n.op.name in ("astype", "reshape", "view") for n in g.nodes)


@register_pass("identity", priority=250, condition=_has_identity_candidates)
def identity(g: Graph) -> bool:
    """Drop casts to the same dtype, reshapes to the same shape and whole-buffer views."""
    from ops.views import contiguous

    mapping: dict[int, QNode] = {}
    for n in g.nodes:
        if n.leaf or n.op is None or n.recipe is not None or len(n.inputs) != 1:
            continue
        x = n.inputs[0]
        name = n.op.name
        if name == "astype" and n.dtype == x.dtype:
            mapping[id(n)] = x  # the dtype is in the key: no guard needed
        elif name == "reshape" and n.shape == x.shape and n.dtype == x.dtype:
            g.guard(("eq", g.shape_expr(n), g.shape_expr(x)))
            mapping[id(n)] = x
        elif name == "view" and n.dtype == x.dtype and n.attrs["view"] == contiguous(x.shape):
            g.guard(("eq", g.attr_expr(n, "view"), ("contiguous", g.shape_expr(x))))
            mapping[id(n)] = x
    if mapping:
        g.substitute(mapping)
    return bool(mapping)


def _signature(n: QNode, ins: tuple) -> tuple | None:
    """What makes two nodes compute the same value (None: never merge this node)."""
    try:
        attrs = tuple((k, canon(v)) for k, v in n.attrs.items())
        data = canon(n.recipe.data) if n.recipe is not None else None
    except Uncacheable:
        return None
    return (n.name, attrs, data, n.dtype.str, n.shape, ins)


def _merge_guards(g: Graph, n: QNode, prev: QNode) -> None:
    """Equal attributes that the key does not pin down must stay equal on P'."""
    if n.recipe is None and prev.recipe is None:
        names = [k for k in n.op.size_attrs if k in n.attrs]
    else:
        names = list(n.attrs)
    for k in names:
        a, b = g.attr_expr(n, k), g.attr_expr(prev, k)
        if a != b:
            g.guard(("eq", a, b))


def _leaf_class(g: Graph, n: QNode) -> tuple | None:
    """Leaves in one class hold the same value on P (a guard keeps it so); None: only itself.

    Scalars by value (in key form: 0.0 is not -0.0); buffers only when they are the same
    window onto the same memory (x.T taken twice), never by content (too costly to compare).
    """
    if n.scalar:
        return ("<S>", canon(g.value(n)))
    tok = g.tokens[n.src]
    if tok[3] != "cpu":
        return None
    return ("<B>", tok, buffer_window(g.value(n)))


def _leaf_guard(a: QNode, b: QNode) -> tuple:
    """The guard that two leaves of one class still agree on P'."""
    what = "value" if a.scalar else "window"
    return ("eq", (what, a.src), (what, b.src))


@register_pass("cse", priority=200, condition=lambda g: len(g.nodes) > 2)
def cse(g: Graph) -> bool:
    """Common-subexpression elimination: one node per (operator, attributes, inputs).

    Leaves are never merged themselves: two operations whose inputs differ only in leaves of
    one class (equal scalars, one window) merge, with a guard on those leaves; the leaves of
    the dropped operation then die with it.
    """
    table: dict[tuple, QNode] = {}
    mapping: dict[int, QNode] = {}
    classes: dict[int, tuple | None] = {}
    for n in g.nodes:
        if n.leaf:
            classes[id(n)] = _leaf_class(g, n)
            continue
        ins = []
        for c in n.inputs:
            c = mapping.get(id(c), c)
            cls = classes.get(id(c)) if c.leaf else None
            ins.append(cls if cls is not None else id(c))
        sig = _signature(n, tuple(ins))
        if sig is None:
            continue
        prev = table.get(sig)
        if prev is None:
            table[sig] = n
            continue
        _merge_guards(g, n, prev)
        for a, b in zip(n.inputs, prev.inputs):
            a = mapping.get(id(a), a)
            if a is not b and a.leaf:
                g.guard(_leaf_guard(a, b))
        mapping[id(n)] = prev
    if mapping:
        g.substitute(mapping)
    return bool(mapping)


@register_pass("dce", priority=0)
def dce(g: Graph) -> bool:
    """Dead-code elimination: drop nodes no requested output depends on."""
    return g.remove_unreachable() > 0
