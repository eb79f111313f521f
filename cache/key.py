"""Structural keys: what a graph computes, without its data or its exact sizes.

One iterative depth-first walk from the requested roots numbers every node reachable
through unevaluated nodes (inputs before consumers; that order is the schedule too) and
emits one token per node:

- interior node: (op name, dtype, shape class, abstracted attributes, input slots)
- held buffer:   ("<B>", dtype, shape/stride class, device, first leaf sharing its memory)
- Python scalar: ("<S>", Python type)

The shape class keeps the rank and which extents are 0 or 1 (and, for buffers, which
strides are 0), never the other sizes. Attributes an operator declares size-like
(`Op.size_attrs`) keep only their form. The key is the tuple of tokens plus the root
slots; lookups compare it whole, so equal hashes alone never select a transformation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ops.node import Node
from ops.views import View

Key = tuple
LEAF_BUFFER = "<B>"
LEAF_SCALAR = "<S>"


class Uncacheable(Exception):
    """An attribute whose value cannot be written into a key (e.g. an arbitrary object)."""


_PY_SCALARS = (bool, int, float, complex)
_dtype_str: dict[np.dtype, str] = {}
_shape_cls: dict[tuple, tuple] = {}


def dtype_str(dtype: np.dtype) -> str:
    """dtype.str, memoized (the attribute builds a new string on every access)."""
    s = _dtype_str.get(dtype)
    if s is None:
        s = _dtype_str[dtype] = dtype.str
    return s


def shape_class(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Per dimension 0, 1 or 2 (meaning: any other extent); memoized per shape."""
    c = _shape_cls.get(shape)
    if c is None:
        if len(_shape_cls) > 65536:  # shapes of a long run with many sizes: start over
            _shape_cls.clear()
        c = _shape_cls[shape] = tuple([d if d < 2 else 2 for d in shape])
    return c


def _leaf_class(buf: np.ndarray) -> tuple[int, ...]:
    # 3 marks a broadcast axis (stride 0, extent > 1): the same element read many times.
    cls = shape_class(buf.shape)
    if 2 in cls and 0 in buf.strides:
        return tuple(3 if c == 2 and s == 0 else c for c, s in zip(cls, buf.strides))
    return cls


def _memory_root(buf: Any) -> Any:
    """The object owning a buffer's memory (NumPy views chain through `.base`)."""
    while True:
        base = getattr(buf, "base", None)
        if base is None:
            return buf
        buf = base


def canon(value: Any) -> Any:
    """A structural attribute as a JSON-friendly, hashable value (types kept distinct)."""
    t = type(value)
    if t is str or value is None:
        return value
    if t is bool:
        return value
    if t is int:
        return ("i", value)
    if t is float:
        return ("f", repr(value))
    if t is complex:
        return ("c", repr(value))
    if t is tuple or t is list:
        return tuple(canon(v) for v in value)
    if isinstance(value, np.dtype):
        return ("dtype", value.str)
    if isinstance(value, np.generic):
        return ("np", value.dtype.str, repr(value.item()))
    if isinstance(value, np.ndarray) and value.dtype != object:
        return ("nd", value.dtype.str, value.shape, value.tobytes().hex())
    if isinstance(value, type) and issubclass(value, np.generic):
        return ("dtype", np.dtype(value).str)
    if isinstance(value, tuple):  # other named tuples
        return (t.__name__, tuple(canon(v) for v in value))
    raise Uncacheable(f"attribute value of type {t.__name__} cannot be part of a structural key")


def _view_class(view: View) -> tuple:
    # Per axis: 0 / 1 extents, 3 broadcast (stride 0), 4 reversed (negative stride), 2 other.
    out = []
    for d, s in zip(view.shape, view.strides):
        if d < 2:
            out.append(d)
        elif s == 0:
            out.append(3)
        elif s < 0:
            out.append(4)
        else:
            out.append(2)
    return ("V", tuple(out))


def abstract(value: Any) -> Any:
    """The form of a size-like attribute: rank, unit extents, Python type, index tags."""
    t = type(value)
    if value is None or t is bool or t is str:
        return value
    if t is int or isinstance(value, np.integer):
        return "#"
    if t is float:
        return "f#"
    if t is complex:
        return "c#"
    if t is View:
        return _view_class(value)
    if t is tuple or t is list:
        if value and type(value[0]) is str:  # an index template item: ("s", a, b, step), ("a", k)
            tag = value[0]
            if tag == "a":
                return ("a", value[1])
            if tag == "s":
                step = value[3]
                return ("s", None if step is None else step > 0)
            return (tag,)
        return ("T", tuple(abstract(v) for v in value))
    if isinstance(value, np.generic):
        return ("np", value.dtype.str)
    if isinstance(value, np.ndarray):
        return ("nd", value.dtype.str, value.ndim)
    return canon(value)


def attrs_key(op: Any, attrs: dict) -> tuple:
    """Attributes in key form: size-like ones abstracted, the others whole."""
    size = op.size_attrs
    return tuple((k, abstract(v) if k in size else canon(v)) for k, v in attrs.items())


class Walk:
    """One evaluation's graph: nodes by slot, their tokens, in-graph consumer counts."""

    __slots__ = ("nodes", "tokens", "consumers", "interior", "roots", "key", "cacheable")

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.tokens: list[tuple] = []
        self.consumers: list[int] = []
        self.interior: list[int] = []
        self.roots: tuple[int, ...] = ()
        self.key: Key = ()
        self.cacheable = True  # False when an attribute cannot be written into a key


def _array_leaf(node: Node, buf: Any, s: int, memory: dict[int, int]) -> tuple:
    """Token of a held buffer: dtype, unit/broadcast axes, device, first leaf sharing memory."""
    alias = memory.setdefault(id(_memory_root(buf)), s)
    if type(buf) is np.ndarray:
        return (LEAF_BUFFER, dtype_str(node.dtype), _leaf_class(buf), "cpu", alias)
    device = type(buf).__module__ + "." + type(buf).__name__  # a device array: its type is structure
    return (LEAF_BUFFER, dtype_str(node.dtype), shape_class(node.shape), device, alias)


_SCALAR_TOKENS = {t: (LEAF_SCALAR, t.__name__) for t in _PY_SCALARS}


def walk(roots: Sequence[Node]) -> Walk:
    """Number the graph behind `roots` (inputs first) and build its structural key.

    This is the hot path of every evaluation, hence the inlined lookups.
    """
    w = Walk()
    nodes, tokens, consumers, interior = w.nodes, w.tokens, w.consumers, w.interior
    slot: dict[Node, int] = {}  # -1 while a node is on the stack
    memory: dict[int, int] = {}
    dts, shp, scalar_tokens = _dtype_str, _shape_cls, _SCALAR_TOKENS
    getslot = slot.__getitem__
    root_slots = []
    for root in roots:
        s = slot.get(root)
        if s is not None:
            root_slots.append(s)
            continue
        buf = root.buffer
        if buf is not None:
            s = len(nodes)
            slot[root] = s
            nodes.append(root)
            consumers.append(0)
            tok = scalar_tokens.get(type(buf))
            tokens.append(tok if tok is not None else _array_leaf(root, buf, s, memory))
            root_slots.append(s)
            continue
        slot[root] = -1
        stack = [(root, iter(root.inputs))]
        while stack:
            node, it = stack[-1]
            for child in it:
                if child not in slot:
                    buf = child.buffer
                    if buf is None:
                        slot[child] = -1
                        stack.append((child, iter(child.inputs)))
                        break
                    s = len(nodes)
                    slot[child] = s
                    nodes.append(child)
                    consumers.append(0)
                    tok = scalar_tokens.get(type(buf))
                    tokens.append(tok if tok is not None else _array_leaf(child, buf, s, memory))
            else:
                stack.pop()
                ins = tuple(map(getslot, node.inputs))
                for c in ins:
                    consumers[c] += 1
                s = len(nodes)
                slot[node] = s
                nodes.append(node)
                consumers.append(0)
                interior.append(s)
                attrs = node.attrs
                if attrs:
                    try:
                        akey = attrs_key(node.op, attrs)
                    except Uncacheable:
                        akey = (("?", s),)
                        w.cacheable = False
                else:
                    akey = ()
                dt = dts.get(node.dtype)
                if dt is None:
                    dt = dtype_str(node.dtype)
                cls = shp.get(node.shape)
                if cls is None:
                    cls = shape_class(node.shape)
                tokens.append((node.op.name, dt, cls, akey, ins))
        root_slots.append(slot[root])
    w.roots = tuple(root_slots)
    w.key = (tuple(tokens), w.roots)
    return w


def key_hash(key: Key) -> int:
    """Hash used to find a key's bucket; buckets compare keys whole (tests force collisions)."""
    return hash(key)


def is_leaf_token(token: tuple) -> bool:
    """True for the token of a held buffer or a Python scalar."""
    return token[0] == LEAF_BUFFER or token[0] == LEAF_SCALAR


def same_value(a: Any, b: Any) -> bool:
    """Equal values that also print alike (0.0 is not -0.0; nan never matches)."""
    if type(a) is not type(b) or a != b:
        return False
    if type(a) is float:
        return math.copysign(1.0, a) == math.copysign(1.0, b)
    if type(a) is complex:
        return repr(a) == repr(b)
    return True
