"""The executable program: a transformation graph's steps as a loop of kernel calls.

A `Program` is built once per cache variant (compile.py) and shared by every hit. Its values
live in slots (one per Q node of the transformation graph): the leaves are bound from P', and
each step calls its kernel on input slots and stores its outputs. A `Kernel` is what a step
runs, whatever made it (an operator's reference kernel, a fused region, a window kernel, a
library call, a memo): `run(*inputs, out=None, **attrs)` returns the value, or a tuple of
`n_out` values for a step that computes several at once (a fused region with several
outputs is one step); `writer(attrs, dtype)` declares whether the first output can be
written into a given buffer (the callable to call with `out=`, or None: it allocates), and
`in_place` whether the step can write through its dying first input (`assign`). The memory
planner (memory.py) reads those declarations; it never tests operator or constructor names.

`run` is the hot path (a cache hit): bind, loop, free each value after its last reader,
follow the learnt buffer `Layout`. `run_observed` is the same loop with the hooks a caller
asks for once per run: the `Meter` (memory accounting) and a per-step trace (LAZYGRAPH_DEBUG=2).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from math import prod
from sys import getrefcount
from typing import Any

import numpy as np

from cache.recipe import Recipe, RecipeError, compile_expr
from cache.tgraph import TransformationGraph
from jit import backend
from lazygraph import txn
from lazygraph.engine import device_run
from lazygraph.engine.inplace import _assign_in_place  # noqa: F401  (tests import it here)
from lazygraph.engine.kernels import FunctionKernel, Kernel, OpKernel  # noqa: F401  (imported from here)
from lazygraph.engine.meter import Layout, Meter, owner
from lazygraph.engine.runerrors import EvaluationError, _further, _kernel_error, _mismatch  # noqa: F401
from ops.base import REGISTRY
from ops.declare import Elementwise
from ops.node import Node
from ops.reduction import Reduction, Scan
from ops.views import mostly_overwritten

#: values up to this size are allocated by a lean run rather than taken from the layout's
#: freed buffers (measured: pooling a 256 KiB value still cost more than allocating it; 64 KiB
#: bounds the extra memory a lean run can hold at once to 64 KiB a step)
LEAN_REUSE_BYTES = 1 << 16
#: operator kernels that only call `op.fn(*inputs, **attrs)`: a lean step calls `op.fn` itself
_FORWARDING = (Elementwise.kernel, Reduction.kernel, Scan.kernel)


class Step:
    """One kernel call: inputs and output slots, and how its attributes/shape/dtype are recovered."""

    __slots__ = ("kernel", "ins", "outs", "src", "recipe", "recover", "more", "dies", "name")

    def __init__(
        self, kernel: Kernel, ins: tuple, outs: tuple, src: int, recipe: Recipe | None, name: str, more: Any
    ) -> None:
        self.kernel = kernel
        self.ins = ins
        self.outs = outs  # slot of each output (one for most steps)
        self.src = src  # P slot whose operator/attributes/shape this step re-reads, or -1
        self.recipe = recipe
        self.recover = recipe.compile() if recipe is not None else None
        #: per further output: (slot, shape on P', dtype); None for a single-output step
        self.more = more
        self.dies: tuple[int, ...] = ()
        self.name = name


class Program:
    """A transformation graph made executable (built once per cache variant, reused on every hit)."""

    __slots__ = (
        "tgraph",
        "size",
        "leaves",
        "steps",
        "pmap",
        "program",
        "pos",
        "first_value",
        "n_values",
        "inplace",
        "leaf_last",
        "leaf_write",
        "layouts",
        "memory",
        "device",
        "hot",
    )

    def __init__(self, tg: TransformationGraph, tokens: tuple, kernel_for: Callable[[Recipe, dict], Kernel]):
        self.tgraph = tg
        self.size = len(tg.nodes)
        self.pmap = tg.pmap
        self.leaves = [(q, n[1]) for q, n in enumerate(tg.nodes) if n[0] == "leaf"]
        further = tg.further_outputs()
        be = backend.active()  # the device of the graph being built (evaluate.py: `running`)
        #: the device backend whose arrays the values are (device_run.py), None: host memory;
        #: chosen once here, so the host loop has no per-step device branch
        self.device = None if backend.host_memory(be) else be
        by_q: dict[int, Step] = {}
        for q, n in enumerate(tg.nodes):
            if n[0] == "copy":
                op = copy_op(tokens[n[1]][0])
                by_q[q] = Step(OpKernel(op), n[2], (q,), n[1], None, op.name, None)
            elif n[0] == "new":
                recipe: Recipe = n[1]
                kernel = kernel_for(recipe, tg.artifacts)
                rest = further.get(q, [])
                if kernel.n_out != 1 + len(rest):
                    raise RecipeError(
                        f"{recipe.label}: its kernel computes {kernel.n_out} values, the graph uses {1 + len(rest)}"
                    )
                more = (
                    tuple((r, compile_expr(tg.nodes[r][3]), np.dtype(tg.nodes[r][4])) for r in rest) or None
                )
                by_q[q] = Step(kernel, n[2], (q, *rest), -1, recipe, recipe.label, more)
        self.steps = [by_q[q] for q in tg.order]
        if self.device is not None:
            device_run.adapt(self.device, self.steps)
        #: keep set -> the buffer layout learnt for it (see meter.py)
        self.layouts: dict[frozenset, Layout] = {}
        #: the last metered run: (predicted peak, measured peak, buffers reused, in-place writes)
        self.memory: tuple[int, int, int, int] | None = None
        self._liveness()

    def reorder(self, order: list[int]) -> None:
        """Run the steps in another topological order (Q indices of the steps), e.g. the planner's."""
        self.tgraph.validate_order(order)
        by_q = {s.outs[0]: s for s in self.steps}
        self.tgraph.order = list(order)
        self.steps = [by_q[q] for q in order]
        self._liveness()

    def _liveness(self) -> None:
        """Each value dies after its last reader (the caller's `keep` set overrides at run time).

        A value nobody reads is never freed (it is an output). An in-place step whose base
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
        self.pos = {q: i for i, s in enumerate(self.steps) for q in s.outs}
        self.first_value = []
        n = 0
        for s in self.steps:
            self.first_value.append(n)
            n += len(s.outs)
        self.n_values = n
        self.inplace = []
        leaf_p = dict(self.leaves)
        #: per leaf slot, its last reading step (-1: none), for txn.may_overwrite
        self.leaf_last = {q: last.get(q, -1) for q in leaf_p}
        #: per step: (leaf slot, P slot) when it writes into an evaluated base it reads last
        self.leaf_write = []
        for i, (s, d) in enumerate(zip(self.steps, dies)):
            s.dies = tuple(d)
            base = s.ins[0] if s.ins else -1
            writes = s.kernel.in_place is not None and s.src >= 0 and base not in s.ins[1:]
            self.inplace.append(writes and base in self.pos and base in d)
            last_read = writes and base in leaf_p and last[base] == i
            self.leaf_write.append((base, leaf_p[base]) if last_read else None)
        self.refresh()

    def refresh(self) -> None:
        """Rebuild the loop's tuples after steps (or their kernels) changed; forget learnt layouts."""
        self.program = [
            (s.kernel.run, s.ins, s.outs[0], s.src, s.recover, s.dies, s.more) for s in self.steps
        ]
        self.layouts = {}  # a layout names the steps that write into its buffers
        #: the last `plan`: the hit path's keep-dependent work, done once per keep set and layout
        self.hot: tuple | None = None

    def plan(self, keep: set[int]) -> tuple:
        """(P keep, Q keep slots, their frozenset, the learnt layout, lean loop or None) for `keep`.

        Memoized for the last keep set (a loop evaluates the same outputs each time) and
        rebuilt when a layout is learnt or replaced for it; `refresh` forgets it.
        """
        hot = self.hot
        if hot is not None and hot[0] == keep and self.layouts.get(hot[2]) is hot[3]:
            return hot
        pmap = self.pmap
        keepq = {q for q in (pmap[p] for p in keep) if q >= 0}
        fkeep = frozenset(keepq)
        layout = self.layouts.get(fkeep)
        hot = self.hot = (frozenset(keep), keepq, fkeep, layout, self._lean(keepq, layout))
        return hot

    def _lean(self, keep: set[int], layout: Layout | None) -> list | None:
        """`_run`'s steps for `run_lean` when none needs more than a call (None otherwise).

        A lean step writes into no evaluated buffer or dying input; a step with several outputs
        (a fused region) stores its further values as `run` does (`_further`, same checks). An
        operator whose kernel only forwards to its NumPy function calls that function directly.
        A step the layout writes into a freed buffer allocates instead while its value is at
        most `LEAN_REUSE_BYTES` (pooling costs more than allocating that); a larger one ends
        the lean run (`run_lean` returns None) and this plan's runs take `run` from then on.
        """
        if self.device is not None or layout is None:
            return None
        lean = []
        for i, (fn, ins, out, src, recover, dies, more) in enumerate(self.program):
            if self.leaf_write[i] is not None or (self.inplace[i] and ins[0] not in keep):
                return None
            kernel = self.steps[i].kernel
            if type(kernel) is OpKernel and type(kernel.op).kernel in _FORWARDING:
                fn = kernel.op.fn
            pooled = layout.take[i] >= 0
            live = tuple(d for d in dies if d not in keep)
            lean.append((fn, ins, len(ins), out, src, recover, live, more, i, pooled))
        return lean

    def run_lean(self, nodes: list[Node], lean: list) -> list[Any] | None:
        """`run` for a plan whose steps are plain calls (`_lean`): the same checks, fewer branches.

        None when a value the layout pools is larger than small (nothing was written: the
        caller runs `run`, and the plan drops its lean steps).
        """
        vals: list[Any] = [None] * self.size
        for q, p in self.leaves:
            vals[q] = nodes[p].buffer
        for fn, ins, n, out, src, recover, dies, more, i, pooled in lean:
            if recover is None:
                node = nodes[src]
                attrs, shape, dtype = node.attrs, node.shape, node.dtype
            else:
                attrs, shape, dtype = recover(nodes)
            if pooled and prod(shape) * dtype.itemsize > LEAN_REUSE_BYTES:
                hot = self.hot
                if hot is not None and hot[4] is lean:
                    self.hot = (*hot[:4], None)
                return None
            try:
                if attrs:
                    v = fn(*[vals[k] for k in ins], **attrs)
                elif n == 2:
                    v = fn(vals[ins[0]], vals[ins[1]])
                elif n == 1:
                    v = fn(vals[ins[0]])
                else:
                    v = fn(*[vals[k] for k in ins])
            except Exception as e:
                raise _kernel_error(e, nodes, self.steps[i], vals) from e
            if more is not None:
                v = _further(v, more, vals, nodes, self.steps[i])
            if type(v) is not np.ndarray:
                v = np.asarray(v)
            if v.shape != shape or v.dtype != dtype:
                raise _mismatch(nodes, self.steps[i], v, shape, dtype)
            vals[out] = v
            for d in dies:
                vals[d] = None
        return vals

    def run(self, nodes: list[Node], keep: set[int], layout: Layout | None = None) -> list[Any]:
        """Bind P''s leaves, run every step, and return the values by Q slot (the hot path).

        `keep` are Q slots whose values must survive (memoized P nodes); the others are
        freed after their last reader. `layout` says which freed buffers later steps write
        into (`out=`). A device program's values are device arrays (device_run.py).
        """
        if self.device is not None:
            return device_run.run(self, self.device, nodes, keep, None, None, _kernel_error, _mismatch)
        vals: list[Any] = [None] * self.size
        for q, p in self.leaves:
            vals[q] = nodes[p].buffer
        take = give = pool = into = None
        if layout is not None:
            take, give, into, pool = layout.take, layout.give, layout.into, [None] * layout.nbuf
        inplace, leaf_write, log = self.inplace, self.leaf_write, []
        try:
            self._run(nodes, keep, vals, inplace, leaf_write, log, take, give, into, pool)
        except BaseException:
            txn.undo(log)  # a failed run leaves the evaluated buffers it wrote into as they were
            raise
        if log:
            txn.forget(log)
        return vals

    def _run(
        self,
        nodes: list[Node],
        keep: set[int],
        vals: list,
        inplace: list,
        leaf_write: list,
        log: list,
        take: Any,
        give: Any,
        into: Any,
        pool: Any,
    ) -> None:
        """`run`'s loop (its caller undoes the writes into evaluated buffers when it fails)."""
        for i, (fn, ins, out, src, recover, dies, more) in enumerate(self.program):
            if recover is None:
                node = nodes[src]
                attrs, shape, dtype = node.attrs, node.shape, node.dtype
            else:
                attrs, shape, dtype = recover(nodes)
            try:
                v = None
                if inplace[i] and ins[0] not in keep:
                    v = self.steps[i].kernel.in_place(vals, ins, dtype, attrs)
                elif leaf_write[i] is not None:
                    v = self._leaf_write(i, nodes, vals, dtype, attrs, log)
                if v is not None:
                    pass
                elif take is not None and take[i] >= 0:
                    o = pool[take[i]]
                    if o is not None:
                        pool[take[i]] = None
                        n = prod(shape)
                        if o.dtype == dtype and o.size >= n:
                            dest = o if o.shape == shape else o.reshape(-1)[:n].reshape(shape)
                            v = into[i](*[vals[k] for k in ins], out=dest, **attrs)
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
                raise _kernel_error(e, nodes, self.steps[i], vals) from e
            if more is not None:
                v = _further(v, more, vals, nodes, self.steps[i])
            if type(v) is not np.ndarray:
                v = np.asarray(v)
            if v.shape != shape or v.dtype != dtype:
                raise _mismatch(nodes, self.steps[i], v, shape, dtype)
            vals[out] = v
            grabbed = None
            if give is not None and give[i]:
                # the owners of buffers a later step writes into, taken before their last holder drops
                grabbed = [(owner(vals[s]), b) for s, b in give[i] if type(vals[s]) is np.ndarray]
            for d in dies:
                if d not in keep:
                    vals[d] = None
            while grabbed:
                o, b = grabbed.pop()
                # pooled only when nothing else holds the buffer (a view, a memo, the user)
                if getrefcount(o) == 2 and o.base is None and o.flags.writeable and o.flags.c_contiguous:
                    pool[b] = o
                del o

    def _leaf_write(
        self, i: int, nodes: list[Node], vals: list, dtype: np.dtype, attrs: dict, log: list
    ) -> Any:
        """Step i's write into the evaluated buffer it reads last, when nothing else can read its
        old value (txn.may_overwrite); the region is saved first so a failed run can undo it.
        None: the step copies the buffer."""
        q, p = self.leaf_write[i]
        view = attrs.get("view")
        if view is None or attrs.get("index") is not None or getattr(vals[q], "dtype", None) != dtype:
            return None
        if self.steps[i].name == "assign" and mostly_overwritten(view, vals[q].shape) is not None:
            # the copy writes only what stays outside the box (Assign.kernel): cheaper than
            # saving the box for undo and writing it (the stencil's u[1:-1, 1:-1] = ...)
            return None
        if not txn.may_overwrite(nodes, p, q, vals, i, self.leaf_last):  # (holds no reference)
            return None
        base = vals[q]
        txn.overwrite(nodes[p], base, view, log)
        vals[q] = None  # the buffer is now held once: the run's next write into it goes in place
        step = self.steps[i]
        return step.kernel.in_place(vals, step.ins, dtype, attrs, base)

    def run_observed(
        self,
        nodes: list[Node],
        keep: set[int],
        layout: Layout | None,
        meter: Meter | None,
        trace: Callable[[str, tuple, np.dtype, float], None] | None,
    ) -> list[Any]:
        """`run` with hooks: `meter` counts the buffers the run holds, `trace` sees each step.

        `trace(name, shape, dtype, seconds)` is called after every step; the meter also records
        each value's bytes, aliasing and dtype (what the planner learns a layout from), and the
        buffers reused and in-place writes of this run.
        """
        if self.device is not None:
            return device_run.run(self, self.device, nodes, keep, meter, trace, _kernel_error, _mismatch)
        vals: list[Any] = [None] * self.size
        for q, p in self.leaves:
            vals[q] = nodes[p].buffer
        if meter is not None:
            meter.start(self, vals)
        take = give = pool = into = None
        if layout is not None:
            take, give, into, pool = layout.take, layout.give, layout.into, [None] * layout.nbuf
        log: list = []
        try:
            reused, written = self._run_observed(nodes, keep, vals, take, give, into, pool, meter, trace, log)
        except BaseException:
            txn.undo(log)  # as `run`
            raise
        if log:
            txn.forget(log)
        if meter is not None:
            meter.reused, meter.inplace = reused, written
        return vals

    def _run_observed(
        self,
        nodes: list[Node],
        keep: set[int],
        vals: list,
        take: Any,
        give: Any,
        into: Any,
        pool: Any,
        meter: Meter | None,
        trace: Callable | None,
        log: list,
    ) -> tuple[int, int]:
        """`run_observed`'s loop; returns (buffers reused, in-place writes)."""
        inplace, first_value, leaf_write = self.inplace, self.first_value, self.leaf_write
        reused = written = 0
        for i, step in enumerate(self.steps):
            fn, ins, out, src, recover, dies, more = self.program[i]
            if recover is None:
                node = nodes[src]
                attrs, shape, dtype = node.attrs, node.shape, node.dtype
            else:
                attrs, shape, dtype = recover(nodes)
            t = time.perf_counter()
            try:
                v = None
                if inplace[i] and ins[0] not in keep:
                    v = step.kernel.in_place(vals, ins, dtype, attrs)
                    written += v is not None
                elif leaf_write[i] is not None:
                    v = self._leaf_write(i, nodes, vals, dtype, attrs, log)
                    written += v is not None
                if v is not None:
                    pass
                elif take is not None and take[i] >= 0:
                    o = pool[take[i]]
                    if o is not None:
                        pool[take[i]] = None
                        if meter is not None:
                            meter.took(o)
                        n = prod(shape)
                        if o.dtype == dtype and o.size >= n:
                            dest = o if o.shape == shape else o.reshape(-1)[:n].reshape(shape)
                            v = into[i](*[vals[k] for k in ins], out=dest, **attrs)
                            reused += 1
                        o = dest = None
                if v is None:
                    v = fn(*[vals[k] for k in ins], **attrs)
            except Exception as e:
                raise _kernel_error(e, nodes, step, vals) from e
            if more is not None:
                v = _further(v, more, vals, nodes, step)
            if type(v) is not np.ndarray:
                v = np.asarray(v)
            if v.shape != shape or v.dtype != dtype:
                raise _mismatch(nodes, step, v, shape, dtype)
            vals[out] = v
            if meter is not None:
                k = first_value[i]
                meter.value(k, v, ins, out, shape, dtype)
                for j, (slot, _, dt) in enumerate(more or (), 1):
                    meter.value(k + j, vals[slot], ins, slot, vals[slot].shape, dt)
            if trace is not None:
                trace(nodes[src].op.name if src >= 0 else step.name, shape, dtype, time.perf_counter() - t)
            grabbed = None
            if give is not None and give[i]:
                grabbed = [(owner(vals[s]), b) for s, b in give[i] if type(vals[s]) is np.ndarray]
            for d in dies:
                if d not in keep:
                    if meter is not None:
                        meter.drop(d)
                    vals[d] = None
            while grabbed:
                o, b = grabbed.pop()
                if getrefcount(o) == 2 and o.base is None and o.flags.writeable and o.flags.c_contiguous:
                    pool[b] = o
                    if meter is not None:
                        meter.pooled(o)
                del o
        return reused, written


def copy_op(opname: str) -> Any:
    """The registered operator for a copy node (unknown names are stale entries)."""
    op = REGISTRY.get(opname)
    if op is None:
        raise RecipeError(f"unknown operator {opname!r}")
    return op
