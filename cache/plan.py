"""Transformation graphs (Q placeholders) and the executable plans built from them.

A `TransformationGraph` records what optimizing P produced, in terms any P' with the same
structural key can be rebuilt from. Node q of Q is one of

    ("leaf", p)               P''s leaf p (a held buffer or a Python scalar)
    ("copy", p, inputs)       P''s node p: its operator and attributes, read from P' on replay
    ("new", recipe, inputs)   a node the passes created, rebuilt from P' with its recipe

where `inputs` are indices of earlier Q nodes, and p is a node's slot in the key's
canonical order (a compressed form of Dali's path of argument indices from the roots).
`order` lists the non-leaf Q nodes in execution order: a scheduler may choose another
topological order once per structure (`Plan.reorder`). `pmap` says which Q node holds
each P node's value (-1: none), `guards` what must hold on P' for the transformation to
apply, `artifacts` extra JSON a pass stores with the entry (e.g. compiled kernels).

A `Plan` is the transformation graph made executable: steps of (kernel callable, input
slots, output slot, slots that die after it), so a cache hit only binds P''s leaves and
runs the steps. `Step.fn` may be replaced (a JIT swaps in a compiled kernel).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from math import prod
from sys import getrefcount
from typing import Any

import numpy as np

from cache.meter import Layout, Meter, owner
from cache.recipe import CONSTRUCTORS, VALIDATORS, Recipe, RecipeError, compile_guard
from ops.base import REGISTRY
from ops.movement import write_through
from ops.node import Node


class EvaluationError(RuntimeError):
    """An operator failed on data only known at run time (e.g. an index out of range)."""


class TransformationGraph:
    """Q as recovery information over P (see the module docstring)."""

    __slots__ = ("nodes", "order", "pmap", "guards", "passes", "artifacts", "p_size")

    def __init__(
        self,
        nodes: list[tuple],
        order: list[int],
        pmap: list[int],
        guards: list,
        passes: list[str],
        p_size: int,
        artifacts: dict | None = None,
    ) -> None:
        self.nodes = nodes
        self.order = order
        self.pmap = pmap
        self.guards = guards
        self.passes = passes
        self.p_size = p_size
        self.artifacts = artifacts or {}

    def to_json(self) -> dict:
        """A JSON-ready dict (recipes as dicts)."""
        nodes = []
        for n in self.nodes:
            if n[0] == "new":
                nodes.append(["new", n[1].to_json(), list(n[2])])
            elif n[0] == "copy":
                nodes.append(["copy", n[1], list(n[2])])
            else:
                nodes.append(["leaf", n[1]])
        return {
            "nodes": nodes,
            "order": self.order,
            "pmap": self.pmap,
            "guards": self.guards,
            "passes": self.passes,
            "p_size": self.p_size,
            "artifacts": self.artifacts,
        }

    @staticmethod
    def from_json(d: dict, tokens: tuple) -> TransformationGraph:
        """Decode and validate against the key's tokens (a bad entry raises RecipeError)."""
        p_size = d["p_size"]
        if p_size != len(tokens):
            raise RecipeError("transformation graph does not match the key's node count")
        nodes: list[tuple] = []
        for q, n in enumerate(d["nodes"]):
            kind = n[0]
            if kind == "leaf":
                p = n[1]
                if type(p) is not int or not 0 <= p < p_size or not tokens[p][0].startswith("<"):
                    raise RecipeError(f"node {q}: bad leaf slot {p!r}")
                nodes.append(("leaf", p))
                continue
            ins = tuple(n[2])
            if any(type(i) is not int or not 0 <= i < q for i in ins):
                raise RecipeError(f"node {q}: inputs {ins!r} are not earlier nodes")
            if kind == "copy":
                p = n[1]
                if type(p) is not int or not 0 <= p < p_size or tokens[p][0].startswith("<"):
                    raise RecipeError(f"node {q}: bad copy slot {p!r}")
                nodes.append(("copy", p, ins))
            elif kind == "new":
                nodes.append(("new", Recipe.from_json(n[1]), ins))
            else:
                raise RecipeError(f"node {q}: unknown kind {kind!r}")
        order = [int(i) for i in d["order"]]
        pmap = [int(i) for i in d["pmap"]]
        if len(pmap) != p_size or any(not -1 <= i < len(nodes) for i in pmap):
            raise RecipeError("bad pmap")
        tg = TransformationGraph(
            nodes, order, pmap, list(d["guards"]), [str(s) for s in d["passes"]], p_size, d.get("artifacts")
        )
        tg.validate_order(order)
        for check in list(VALIDATORS.values()):  # what constructors stored must fit the key
            check(tg, tokens)
        return tg

    def validate_order(self, order: list[int]) -> None:
        """Raise unless `order` runs every non-leaf node once, after its inputs."""
        interior = [q for q, n in enumerate(self.nodes) if n[0] != "leaf"]
        if sorted(order) != interior:
            raise RecipeError("order must list every non-leaf node exactly once")
        done = {q for q, n in enumerate(self.nodes) if n[0] == "leaf"}
        for q in order:
            if any(i not in done for i in self.nodes[q][2]):
                raise RecipeError(f"order runs node {q} before one of its inputs")
            done.add(q)


class Step:
    """One kernel launch: fn(*values[ins], **attrs) -> values[out]; `dies` are freed after."""

    __slots__ = ("fn", "ins", "out", "src", "recipe", "recover", "dies", "name")

    def __init__(self, fn: Callable, ins: tuple, out: int, src: int, recipe: Recipe | None, name: str):
        self.fn = fn
        self.ins = ins
        self.out = out
        self.src = src  # P slot whose operator/attributes/shape this step re-reads, or -1
        self.recipe = recipe
        self.recover = recipe.compile() if recipe is not None else None
        self.dies: tuple[int, ...] = ()
        self.name = name


class Plan:
    """A transformation graph made executable (built once per entry, reused on every hit)."""

    __slots__ = (
        "tgraph",
        "size",
        "leaves",
        "steps",
        "guards",
        "pmap",
        "program",
        "pos",
        "inplace",
        "layouts",
        "memory",
    )

    def __init__(self, tg: TransformationGraph, tokens: tuple) -> None:
        self.tgraph = tg
        self.size = len(tg.nodes)
        self.pmap = tg.pmap
        self.guards = [compile_guard(g) for g in tg.guards]
        self.leaves = [(q, n[1]) for q, n in enumerate(tg.nodes) if n[0] == "leaf"]
        by_q: dict[int, Step] = {}
        for q, n in enumerate(tg.nodes):
            if n[0] == "copy":
                op = copy_op(tokens[n[1]][0])
                by_q[q] = Step(op.kernel, n[2], q, n[1], None, op.name)
            elif n[0] == "new":
                recipe: Recipe = n[1]
                build = CONSTRUCTORS.get(recipe.ctor)
                if build is None:
                    raise RecipeError(f"unknown constructor {recipe.ctor!r}")
                by_q[q] = Step(build(recipe, tg.artifacts), n[2], q, -1, recipe, recipe.label)
        self.steps = [by_q[q] for q in tg.order]
        #: keep set -> the buffer layout learnt for it (see cache/meter.py)
        self.layouts: dict[frozenset, Layout] = {}
        #: the last metered run: (predicted peak, measured peak, buffers reused, in-place writes)
        self.memory: tuple[int, int, int, int] | None = None
        self._liveness()

    def reorder(self, order: list[int]) -> None:
        """Run the steps in another topological order (Q indices), e.g. a scheduler's choice."""
        self.tgraph.validate_order(order)
        by_q = {s.out: s for s in self.steps}
        self.tgraph.order = list(order)
        self.steps = [by_q[q] for q in order]
        self.layouts.clear()
        self._liveness()

    def _liveness(self) -> None:
        """Each value dies after its last consumer (the caller's `keep` set overrides at run time).

        A value nobody reads is never freed (it is an output). An `assign` step whose base
        dies at that step may write into the base instead of a copy.
        """
        last: dict[int, int] = {}
        for i, s in enumerate(self.steps):
            for q in s.ins:
                last[q] = i
        dies: list[list[int]] = [[] for _ in self.steps]
        leaf_slots = {q for q, _ in self.leaves}
        for q, i in last.items():
            if q not in leaf_slots:
                dies[i].append(q)
        self.pos = {s.out: i for i, s in enumerate(self.steps)}
        self.inplace = []
        for s, d in zip(self.steps, dies):
            s.dies = tuple(d)
            base = s.ins[0] if s.ins else -1
            self.inplace.append(
                s.name == "assign" and s.src >= 0 and base in self.pos and base in d and base not in s.ins[1:]
            )
        self.recompile()

    def recompile(self) -> None:
        """Refresh the tuple program after steps (or their `fn`) changed."""
        self.program = [(s.fn, s.ins, s.out, s.src, s.recover, s.dies) for s in self.steps]
        self.layouts.clear()  # a layout names the kernels that write into its buffers

    def applies(self, nodes: list[Node]) -> bool:
        """True when every guard holds on P'."""
        for g in self.guards:
            try:
                if not g(nodes):
                    return False
            except Exception:  # a guard over values that no longer fit: not this variant
                return False
        return True

    def run(
        self,
        nodes: list[Node],
        keep: set[int],
        trace: Callable | None = None,
        layout: Layout | None = None,
        meter: Meter | None = None,
    ) -> list[Any]:
        """Bind P''s leaves, run every step, and return the values by Q slot.

        `keep` are Q slots whose values must survive (memoized P nodes); the others are
        freed after their last consumer. `trace(name, shape, dtype, seconds)` sees each step.
        `layout` says which freed buffers later steps write into (`out=`); `meter` counts the
        bytes of the buffers this run holds (allocate/free accounting, for the measured peak).
        """
        vals: list[Any] = [None] * self.size
        for q, p in self.leaves:
            vals[q] = nodes[p].buffer
        if meter is not None:
            meter.start(self, vals)
        take = give = pool = into = None
        if layout is not None:
            take, give, into, pool = layout.take, layout.give, layout.into, [None] * layout.nbuf
        inplace = self.inplace
        reused = written = 0
        for i, (fn, ins, out, src, recover, dies) in enumerate(self.program):
            if recover is None:
                node = nodes[src]
                attrs, shape, dtype = node.attrs, node.shape, node.dtype
            else:
                attrs, shape, dtype = recover(nodes)
            t = time.perf_counter() if trace is not None else 0.0
            try:
                v = None
                if inplace[i] and ins[0] not in keep:
                    v = _assign_in_place(vals, ins, dtype, attrs)
                    written += v is not None
                elif take is not None and take[i] >= 0:
                    o = pool[take[i]]
                    if o is not None:
                        pool[take[i]] = None
                        if meter is not None:
                            meter.idle -= o.nbytes
                        n = prod(shape)
                        if o.dtype == dtype and o.size >= n:
                            dest = o if o.shape == shape else o.reshape(-1)[:n].reshape(shape)
                            v = into[i](*[vals[k] for k in ins], out=dest, **attrs)
                            reused += 1
                        o = dest = None  # no stray reference: a later in-place write checks counts
                if v is None:
                    # the common arities without building an argument list
                    if len(ins) == 2:
                        v = fn(vals[ins[0]], vals[ins[1]], **attrs)
                    elif len(ins) == 1:
                        v = fn(vals[ins[0]], **attrs)
                    else:
                        v = fn(*[vals[k] for k in ins], **attrs)
            except Exception as e:
                raise _kernel_error(e, nodes, src, ins, vals, out) from e
            if type(v) is not np.ndarray:
                v = np.asarray(v)
            if v.shape != shape or v.dtype != dtype:
                name = nodes[src].op.name if src >= 0 else "new node"
                err = EvaluationError(
                    f"internal error: {name} produced {v.shape} {v.dtype}, recorded as {shape} {dtype}"
                )
                err.failed_step = (src, out)
                raise err
            vals[out] = v
            if meter is not None:
                meter.step(i, v, ins, out, shape, dtype)
            if trace is not None:
                trace(
                    nodes[src].op.name if src >= 0 else self.steps[i].name,
                    shape,
                    dtype,
                    time.perf_counter() - t,
                )
            grabbed = None
            if give is not None and give[i]:
                # the owners of buffers a later step writes into, taken before their last holder drops
                grabbed = [(owner(vals[s]), b) for s, b in give[i] if type(vals[s]) is np.ndarray]
            for d in dies:
                if d not in keep:
                    if meter is not None:
                        meter.drop(d)
                    vals[d] = None
            while grabbed:
                o, b = grabbed.pop()
                # pooled only when nothing else holds the buffer (a view, a memo, the user)
                if getrefcount(o) == 2 and o.base is None and o.flags.writeable and o.flags.c_contiguous:
                    pool[b] = o
                    if meter is not None:
                        meter.idle += o.nbytes
                del o
        if meter is not None:
            meter.reused, meter.inplace = reused, written
        return vals


def _assign_in_place(vals: list, ins: tuple, dtype: np.dtype, attrs: dict) -> np.ndarray | None:
    """`assign` writing into its dying base when nothing else holds the base (else None: copy)."""
    base = vals[ins[0]]
    # held by `vals`, `base` and getrefcount's argument only: no view, memo or user shares it
    if (
        type(base) is not np.ndarray
        or getrefcount(base) != 3
        or base.base is not None
        or base.dtype != dtype
        or not base.flags.writeable
        or not base.flags.c_contiguous
    ):
        return None
    idx = tuple(vals[k] for k in ins[2:])
    return write_through(base, vals[ins[1]], idx, attrs.get("view"), attrs.get("index"))


def _kernel_error(e: Exception, nodes: list[Node], src: int, ins: tuple, vals: list, out: int) -> Exception:
    """Name the op and its operands, keeping the exception type for the common cases.

    `failed_step` = (P slot or -1, Q slot) tells the caller which step failed, so it can
    undo the writes that depend on it and name the line that recorded it.
    """
    if src >= 0:
        node = nodes[src]
        name = node.op.name
        shapes = ", ".join(f"{tuple(n.shape)} {n.dtype}" for n in node.inputs)
    else:
        name = "new node"
        shapes = ", ".join(f"{np.shape(vals[i])}" for i in ins)
    cls = type(e) if type(e) in (IndexError, ValueError, TypeError) else EvaluationError
    err = cls(f"{name} failed at evaluation: {e} (operands: {shapes})")
    err.failed_step = (src, out)
    return err


def copy_op(opname: str) -> Any:
    """The registered operator for a copy node (unknown names are stale entries)."""
    op = REGISTRY.get(opname)
    if op is None:
        raise RecipeError(f"unknown operator {opname!r}")
    return op
