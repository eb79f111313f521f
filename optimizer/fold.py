"""Constant folding and memoized constants: the `fold` pass and its `memo` steps.

A node is constant when everything it reads is a Python scalar, an input-less creation op
(full, arange, eye, linspace) or a static buffer: model state, which inference and frozen
layers read far more often than they write. Static is a storage mark carried by each value
the storage holds (`Node.static`) and written into the leaf's key token, so which leaves are
constant is structure, decided once per cached transformation: parameters (trainable or
frozen), module buffers (`register_buffer`), grad leaves and arrays marked with
`lg.mark_static`. A data batch is a new, unmarked buffer each step and is never folded (its
forward pass stays in fusion and library steps). The pass replaces each maximal constant
subgraph that feeds non-constant work (or is requested) by one `memo` step that runs the
subgraph's reference kernels and remembers the result with the key it was computed for: the
scalars' values, the recovered attributes (sizes) and each buffer's version. It runs after
the superoptimizer, so weights it concatenates are one such subgraph.

Versions: lazygraph never writes a held buffer in place. A write to an array (`w -= lr * g`,
`w[...] = v`, `w += 1`, `out=`) records a new value, which evaluation realizes as a new
read-only buffer, so a buffer object is one version of its storage; the memo holds a weak
reference to each input's memory owner (a view, such as `w.T` of evaluated weights, counts as
its owner plus its window), and a value is reused only while every input is that very object.
Scalars are data, not structure: the same cached Q serves `x * 2` and `x * 3`, the key holds
the value. Literal-only subgraphs are therefore computed once (the first time those literals
are seen) rather than per evaluation, without guards that would make a new cache variant per
value.

Static buffers written every step (trained parameters, BatchNorm's running statistics,
optimizer state) miss every time: after a few misses with no hit, a memo step stops retaining
values (it retries now and then), so training pays no memory for it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from cache.graph import Graph, QNode
from cache.key import Uncacheable, canon
from cache.recipe import Expr, Recipe
from ops.base import REGISTRY, Op, register
from ops.node import postorder
from optimizer.registry import register_pass

#: hits, misses and stored values over this process (the pass report reads these)
MEMO_STATS = {"hits": 0, "misses": 0, "stored": 0}
_GIVE_UP = 3  # misses without any hit before a step stops retaining values
_RETRY = 16  # then it retains one value in this many calls


class MemoOp(Op):
    """The operator of memo steps (they are built by the `memo` constructor, never recorded)."""

    kind = "other"

    def __init__(self) -> None:
        super().__init__("memo")

    def infer(self, inputs: tuple, attrs: dict) -> tuple:
        """Memo nodes are never recorded by users."""
        raise TypeError("memo: made by the fold pass only")

    def kernel(self, *args: Any, **attrs: Any) -> Any:
        """Memo steps run through their constructor (`build_memo`)."""
        raise TypeError("memo: made by the fold pass only")


if "memo" not in REGISTRY:
    register(MemoOp())


def _constant_nodes(g: Graph) -> set[int]:
    """Ids of the nodes whose value depends only on literals and static buffers (model state)."""
    const: set[int] = set()
    tokens = g.tokens
    for n in g.nodes:
        if n.leaf:
            if n.scalar or tokens[n.src][4] is True:  # the key's static flag: decided by structure
                const.add(id(n))
        elif n.op is not None and n.op.name != "memo" and (n.recipe is None or n.recipe.ctor == "op"):
            if all(id(c) in const for c in n.inputs):
                const.add(id(n))
    return const


def _boundaries(g: Graph, const: set[int]) -> list[QNode]:
    """Constant compute nodes that non-constant work or an output reads (views looked through)."""
    wanted: dict[int, QNode] = {}

    def want(n: QNode) -> None:
        while not n.leaf and n.op.kind == "view" and n.inputs:
            n = n.inputs[0]  # a view is free: memoize what it looks at
        if not n.leaf:
            wanted[id(n)] = n

    for n in g.nodes:
        if id(n) in const or n.leaf:
            continue
        for c in n.inputs:
            if id(c) in const:
                want(c)
    for o in g.outputs:
        if id(o) in const:
            want(o)
    return [n for n in g.nodes if id(n) in wanted]


def _region(root: QNode) -> tuple[list[QNode], list[QNode]]:
    """(leaves, interior nodes inputs-first) of the subgraph computing root."""
    nodes = postorder([root], lambda n: not n.leaf)
    return [n for n in nodes if n.leaf], [n for n in nodes if not n.leaf]


@register_pass("fold", priority=150, condition=lambda g: any(n.scalar or n.leaf for n in g.nodes))
def fold(g: Graph) -> bool:
    """Replace maximal constant subgraphs by memo steps (computed once per version of their inputs)."""
    const = _constant_nodes(g)
    if not any(id(n) in const and not n.leaf for n in g.nodes):
        return False
    mapping: dict[int, QNode] = {}
    for root in _boundaries(g, const):
        leaves, order = _region(root)
        if len(order) == 1 and not root.inputs:
            continue  # a lone full/arange: making it costs no more than reusing it
        slot = {id(x): ("i", k) for k, x in enumerate(leaves)}
        program: list[list] = []
        attrs: dict[str, Expr] = {}
        for j, n in enumerate(order):
            slot[id(n)] = ("n", j)
            names = sorted(n.attrs)
            for name in names:
                attrs[f"{j}:{name}"] = g.attr_expr(n, name)
            program.append([n.op.name, [list(slot[id(c)]) for c in n.inputs], names])
        new = g.new("memo", leaves, attrs, g.shape_expr(root), root.dtype, ctor="memo", data=program)
        mapping[id(root)] = new
    if not mapping:
        return False
    g.substitute(mapping)
    g.artifacts["fold"] = g.artifacts.get("fold", 0) + len(mapping)
    return True


def _memory_root(v: Any) -> Any:
    """The object owning v's memory (views chain through `.base`, as_strided's through a holder)."""
    while True:
        base = getattr(v, "base", None)
        if base is None:
            return v
        v = base


def _input_key(v: Any) -> tuple:
    """What identifies an input's value: a scalar's value, a buffer's identity (its version).

    A view (`w.T` of evaluated weights is a fresh NumPy view per recording) is its memory's
    owner plus the window onto it, so the same window of the same version still hits.
    """
    if isinstance(v, np.ndarray):
        if v.base is None:
            return ("b", id(v))
        root = _memory_root(v)
        return ("v", id(root), v.__array_interface__["data"][0], v.shape, v.strides)
    return ("s", canon(v))


def _owners(inputs: tuple) -> list:
    """The objects whose identity the key holds: each array input's memory owner."""
    return [_memory_root(v) for v in inputs if isinstance(v, np.ndarray)]


def build_memo(recipe: Recipe, artifacts: dict) -> Callable:
    """The memo step: run the subgraph's kernels, reuse the last value while its key holds."""
    program = []
    for name, refs, attr_names in recipe.data:
        program.append((REGISTRY[name].kernel, [(r[0], int(r[1])) for r in refs], list(attr_names)))
    # Each intermediate is dropped after its last reader: a folded chain of thousands of
    # steps holds a few values at a time, not all of them (memory, and time lost to paging).
    last_use = [0] * len(program)
    for j, (_, refs_, _) in enumerate(program):
        for kind, i in refs_:
            if kind == "n":
                last_use[i] = j
    release: list[list[int]] = [[] for _ in program]
    for i, j in enumerate(last_use[:-1]):
        if j > i:
            release[j].append(i)
    # "memo" is one (key, refs, value) tuple, read and replaced whole: threads running the same
    # cached plan at once never pair one run's key with another's value (the counts only steer
    # retention, so a lost update there is harmless)
    state: dict[str, Any] = {"memo": (None, (), None), "hits": 0, "misses": 0, "calls": 0}

    def run(*inputs: Any, **attrs: Any) -> np.ndarray:
        try:
            key = (tuple(_input_key(v) for v in inputs), canon(tuple(sorted(attrs.items()))))
        except Uncacheable:
            key = None
        held_key, held_refs, held_value = state["memo"]
        if key is not None and key == held_key:
            if all(r() is v for r, v in zip(held_refs, _owners(inputs))):
                state["hits"] += 1
                MEMO_STATS["hits"] += 1
                return held_value
        state["misses"] += 1
        state["calls"] += 1
        MEMO_STATS["misses"] += 1
        vals: list[Any] = []
        for j, (kernel, refs_, names) in enumerate(program):
            args = [inputs[i] if kind == "i" else vals[i] for kind, i in refs_]
            vals.append(np.asarray(kernel(*args, **{a: attrs[f"{j}:{a}"] for a in names})))
            del args
            for i in release[j]:
                vals[i] = None
        value = vals[-1]
        retain = state["hits"] > 0 or state["misses"] <= _GIVE_UP or state["calls"] % _RETRY == 0
        if key is not None and retain:
            if value.flags.writeable:
                value = value.copy() if value.base is not None else value
                value.flags.writeable = False  # shared across evaluations: never written
            try:
                refs = tuple(weakref.ref(v) for v in _owners(inputs))
            except TypeError:  # memory owned by an object without weak references: not kept
                key = None
        if key is not None and retain:
            state["memo"] = (key, refs, value)
            MEMO_STATS["stored"] += 1
        else:
            state["memo"] = (None, (), None)
        return value

    return run
