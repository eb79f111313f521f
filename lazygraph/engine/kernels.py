"""What a program's step runs: the `Kernel` protocol and its plain forms (program.py).

A `Kernel` is what a step runs, whatever made it (an operator's reference kernel, a fused
region, a window kernel, a library call, a memo): `run(*inputs, out=None, **attrs)` returns
the value, or a tuple of `n_out` values for a step that computes several at once;
`writer(attrs, dtype)` declares whether the first output can be written into a given buffer
(the callable to call with `out=`, or None: it allocates), and `in_place` whether the step
can write through its dying first input (`assign`). The memory planner (memory.py) reads
those declarations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from lazygraph.engine.inplace import IN_PLACE


class Kernel:
    """What a step runs (see the module docstring); subclasses set `run` and may declare writes."""

    n_out = 1
    #: (values, ins, dtype, attrs) -> the value written through the dying first input, or None
    in_place: Callable | None = None

    def run(self, *inputs: Any, out: np.ndarray | None = None, **attrs: Any) -> Any:
        """Compute the step's value(s) from its inputs (into `out` when given)."""
        raise NotImplementedError

    def writer(self, attrs: dict | None, dtype: np.dtype) -> Callable | None:
        """The callable writing the first output into a given buffer (`out=`), or None.

        `attrs` are the step's attributes when known before it runs (None: only at run time).
        """
        return None


class OpKernel(Kernel):
    """A registered operator's reference kernel (copy steps, and New nodes of plain operators)."""

    __slots__ = ("op", "run", "in_place")

    def __init__(self, op: Any) -> None:
        self.op = op
        self.run = op.kernel
        # assign and update can write the new elements through their base when nothing else holds it
        self.in_place = IN_PLACE.get(op.name)

    def writer(self, attrs: dict | None, dtype: np.dtype) -> Callable | None:
        """A NumPy ufunc under the kernel writes float results into `out=` (nothing else does)."""
        fn = getattr(self.op, "fn", None)
        if attrs is None or attrs or dtype.kind not in "fc":
            return None
        return fn if isinstance(fn, np.ufunc) and fn.nout == 1 else None


class FunctionKernel(Kernel):
    """A constructor's plain callable (one value); `writes`: it takes `out=` for its value."""

    __slots__ = ("run", "writes")

    def __init__(self, run: Callable, writes: bool = False) -> None:
        self.run = run
        self.writes = writes

    def writer(self, attrs: dict | None, dtype: np.dtype) -> Callable | None:
        """The callable itself when it writes where it is pointed."""
        return self.run if self.writes else None
