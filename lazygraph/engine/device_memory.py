"""The device loop's memory: buffer reuse and writes in place on device arrays (device_run.py).

The host loop (program.py) decides both with NumPy's reference counts and `.base`; device
arrays (CuPy's, the emulated ones) answer the same question through their backend's
`held_only(x, n, views)`: nothing refers to x's memory but the caller's n references and the
given views of it. With that:

- `take`/`pool`: the memory planner's layout (memory.py, learnt from a metered run) names the
  freed buffers later steps write into (`out=`); a buffer is pooled only when its value owned
  its memory and the run held it last, so no view, memo, leaf or user sees it change;
- `dying_base`: a write step (`assign`, `update`) whose base dies at that step writes into the
  base when the run holds it alone (a value that is a view of the base is copied first, as the
  host does, so the write still reads old values);
- `leaf_write`: a write step into an evaluated array's buffer it reads last (`u[1:-1, 1:-1] =
  f(u)` evaluated each step) writes into it when nothing outside the run can read its old value
  (the host's `txn.may_overwrite` conditions, on device arrays); the region is saved first on
  the device, and a failed run puts it back (`undo`).
"""

from __future__ import annotations

from collections import Counter
from itertools import chain
from typing import Any

from lazygraph import txn
from ops.node import Node
from ops.views import materialize, write_into


def dying_base(be: Any, vals: list, ins: tuple, dtype: Any, logged: dict) -> Any:
    """The base buffer of a write step when the run holds it alone (else None: the step copies)."""
    k = ins[0]
    if not be.is_buffer(vals[k]) or vals[k].dtype != dtype:
        return None
    n = 1 + logged.get(id(vals[k]), 0)  # an undo log's reference reads nothing
    if len(ins) > 1 and n == 1 and be.is_buffer(vals[ins[1]]) and be.may_share(vals[ins[1]], vals[k]):
        # the value is a view of the base that only its slot holds (`u[:, 0] = u[:, 1]`): a copy
        # takes its place, so this write and later readers still see old values
        if be.held_only(vals[k], 1, [vals[ins[1]]]):
            c = be.empty(tuple(vals[ins[1]].shape), vals[ins[1]].dtype)
            be.copyto(c, vals[ins[1]])
            vals[ins[1]] = c
            c = None
    return vals[k] if be.held_only(vals[k], n) else None


def leaf_write(
    be: Any,
    program: Any,
    i: int,
    nodes: list[Node],
    vals: list,
    dtype: Any,
    attrs: dict,
    log: list,
    logged: dict,
) -> Any:
    """Step i's write into the evaluated buffer it reads last, saved first for `undo` (None: copy)."""
    q, p = program.leaf_write[i]
    view = attrs.get("view")
    if view is None or attrs.get("index") is not None or getattr(vals[q], "dtype", None) != dtype:
        return None
    if not _may_overwrite(be, nodes, p, q, vals, i, program.leaf_last):
        return None
    buf = vals[q]
    node = nodes[p]
    # the region is saved for the steps after this one, which may fail; the run's last step
    # needs no copy (a write checks its operands before it stores anything)
    last = i == len(program.steps) - 1
    log.append((node, buf, view, None if last else materialize(buf, view).copy()))
    logged[id(buf)] = logged.get(id(buf), 0) + 1
    node.buffer = None  # the node gives the buffer up for the run; `undo` gives it back
    vals[q] = None  # held once now (and by the log): the run's next write into it goes in place
    del node
    step = program.steps[i]
    return step.kernel.in_place(vals, step.ins, dtype, attrs, buf)


def undo(log: list) -> None:
    """A run failed after writing into evaluated buffers: put back every saved region, newest first."""
    while log:
        node, buf, view, saved = log.pop()
        if saved is not None:
            write_into(buf, view, saved)
        node.buffer = buf


def _may_overwrite(be: Any, nodes: list[Node], p: int, q: int, vals: list, step: int, last: dict) -> bool:
    """`txn.may_overwrite` on device arrays: nothing outside this run can read the old value."""
    node = nodes[p]
    if (
        not be.is_buffer(vals[q])
        or node.buffer is not vals[q]
        or vals[q].nbytes < txn.LEAF_WRITE_MIN
        or node.users
        or node.requires_grad
        or node.static
    ):
        return False
    del node
    found = _leaf_views(be, nodes, q, vals, step, last)
    if found is None:
        return False
    slots, ps = found
    # the buffer: its node and slot; each view: its node and slot
    if not be.held_only(vals[q], 2, [vals[k] for k in slots]):
        return False
    hist = txn.history_refs()
    if hist.get(id(nodes[p])) and not txn._histories_committed(nodes, p):
        return False
    consumers = Counter(map(id, chain.from_iterable([n.inputs for n in nodes])))
    return not txn._held_outside(nodes, [p, *ps], consumers, hist)


def _leaf_views(
    be: Any, nodes: list[Node], q: int, vals: list, step: int, last: dict
) -> tuple[list[int], list[int]] | None:
    """The slots and P slots of the leaf views of `vals[q]` (None: a view is read later or held)."""
    buf = vals[q]
    slots = []
    for k, x in enumerate(vals):
        if k != q and be.is_buffer(x) and be.may_share(x, buf):
            if last.get(k, step + 1) > step:
                return None  # a step's output, or a leaf read later: it must keep the old values
            slots.append(k)
    ps = []
    for k in slots:
        lp = next((j for j, n in enumerate(nodes) if n.buffer is vals[k]), None)
        if lp is None or nodes[lp].users:
            return None
        ps.append(lp)
    return slots, ps
