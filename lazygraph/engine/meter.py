"""Memory accounting for one run of a program, and the buffer layout a run follows.

`Meter` is the measurement, a hook the program's observed run calls (program.py): it counts
the bytes of the buffers a run holds, as the run allocates and frees them (a buffer is the NumPy array that owns the memory, so a view or an
in-place write adds nothing, and a buffer is released when no value of the run refers to it
any more; buffers the user already held, the leaves, are not counted). It also records what
the planner needs to predict the next runs, per value the run computes (a step with several outputs has
several; they are numbered in run order, `Program.first_value`): its bytes (shape x itemsize)
and which input's buffer it shares, if any (a view; `reshape` and a few kernels decide that by
the data layout, so it is observed rather than assumed).

`Layout` is plain data made from a metered run by the planner (memory.py): which planned
buffer each step may write its first output into (`take`, through the kernel's `out=`) and
which buffers are kept for a later step when their last value dies (`give`), plus the
predicted peak bytes.
"""

from __future__ import annotations

import weakref
from math import prod
from typing import Any

import numpy as np

#: Meter.aliases entry for an output that shares a leaf's memory (allocates nothing)
LEAF_ALIAS = -2


def _ref(o: Any) -> weakref.ref | None:
    """A weak reference to a buffer (None for a type that takes none: not checked then)."""
    try:
        return weakref.ref(o)
    except TypeError:
        return None


def owner(a: np.ndarray) -> np.ndarray:
    """The array that owns a's memory (a itself unless a is a view)."""
    b = a.base
    while type(b) is np.ndarray:
        a = b
        b = a.base
    return a


class Layout:
    """Where a run's outputs go: planned buffers reused through `out=`, and the peak it predicts."""

    __slots__ = ("key", "take", "give", "nbuf", "predicted", "reuses", "into")

    def __init__(
        self,
        key: tuple,
        take: list[int],
        give: list[list[tuple[int, int]]],
        nbuf: int,
        predicted: int,
        into: list[Any],
    ) -> None:
        self.key = key  # (value bytes, value aliases, value dtypes) the layout was planned for
        self.take = take  # step -> planned buffer it writes into when it holds one, else -1
        self.into = into  # step -> the kernel called with out= when it takes a buffer (else None)
        self.give = give  # step -> (slot, buffer): after the step, keep the slot's buffer for reuse
        self.nbuf = nbuf
        self.predicted = predicted  # predicted peak bytes of a run with this layout
        self.reuses = sum(1 for b in take if b >= 0)


class Meter:
    """Allocate/free accounting of the buffers one run holds (see the module docstring)."""

    __slots__ = (
        "held",
        "idle",
        "peak",
        "owners",
        "slot_owner",
        "leaf_ids",
        "sizes",
        "aliases",
        "dtypes",
        "reused",
        "inplace",
    )

    def start(self, program: Any, vals: list) -> None:
        """Begin a run of `program` whose leaves are bound in `vals`."""
        self.held = 0  # bytes of buffers the run's values refer to
        self.idle = 0  # bytes of freed buffers kept for a later step
        self.peak = 0
        self.owners: dict[int, list] = {}  # id(buffer) -> [values referring to it, bytes, weak ref]
        self.slot_owner = [0] * program.size
        self.leaf_ids = {id(owner(vals[q])) for q, _ in program.leaves if type(vals[q]) is np.ndarray}
        n = program.n_values
        self.sizes = [0] * n
        self.aliases = [-1] * n
        self.dtypes = [""] * n
        self.reused = self.inplace = 0

    def value(self, i: int, v: np.ndarray, ins: tuple, out: int, shape: tuple, dtype: np.dtype) -> None:
        """Value i (of a step reading `ins`) was stored in slot `out`: count its buffer if it is new."""
        self.sizes[i] = prod(shape) * dtype.itemsize
        self.dtypes[i] = dtype.str
        o = owner(v)
        oid = id(o)
        if oid in self.leaf_ids:
            self.aliases[i] = LEAF_ALIAS
        else:
            e = self.owners.get(oid)
            if e is not None and e[2] is not None and e[2]() is not o:
                # a counted buffer died without a drop (a slot written over, say) and its id came
                # back for this one: it is released now, and this one is new (else the peak
                # would depend on where the allocator puts buffers)
                self.held -= e[1]
                e = None
            if e is None:
                self.owners[oid] = [1, o.nbytes, _ref(o)]
                self.held += o.nbytes
            else:
                e[0] += 1
                slot_owner = self.slot_owner
                self.aliases[i] = next((k for k, q in enumerate(ins) if slot_owner[q] == oid), -1)
            self.slot_owner[out] = oid
        live = self.held + self.idle
        if live > self.peak:
            self.peak = live

    def took(self, buf: np.ndarray) -> None:
        """A step writes into an idle pooled buffer: it is counted again when its value is stored."""
        self.idle -= buf.nbytes

    def pooled(self, buf: np.ndarray) -> None:
        """A freed buffer is kept idle for a later step."""
        self.idle += buf.nbytes

    def drop(self, slot: int) -> None:
        """The run let go of a slot's value: its buffer is released with its last value."""
        oid = self.slot_owner[slot]
        if oid:
            self.slot_owner[slot] = 0
            e = self.owners[oid]
            e[0] -= 1
            if e[0] == 0:
                self.held -= e[1]
                del self.owners[oid]
