"""Run a recorded graph with fused kernels: the JIT on its own, without the engine.

`run_graph(order, roots)` fuses the unevaluated nodes into regions, compiles each region
(once per structure) and runs regions and the remaining nodes in a runnable order; nodes
outside regions use their NumPy reference kernels. Tests and benchmarks use it directly on
graphs recorded with lazygraph.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jit.fusion import find_regions, units
from jit.kernel import Region, compile_region
from ops.node import Node


def run_graph(order: Sequence[Node], roots: Sequence[Node], min_size: int = 0) -> list[np.ndarray]:
    """Values of `roots`; `order` is a topological order of the unevaluated nodes."""
    regions = find_regions(order, roots, min_size)
    vals: dict[int, np.ndarray] = {}

    def value(c: Node) -> object:
        return c.buffer if c.buffer is not None else vals[id(c)]

    with np.errstate(all="ignore"):
        for u in units(order, regions):
            if isinstance(u, Region):
                outs = compile_region(u)(*(value(c) for c in u.inputs))
                for o, v in zip(u.outputs, outs):
                    vals[id(o)] = v
            else:
                vals[id(u)] = np.asarray(u.op.kernel(*(value(c) for c in u.inputs), **u.attrs))
    return [np.asarray(value(r)) for r in roots]


def count_regions(order: Sequence[Node], roots: Sequence[Node], min_size: int = 0) -> list[list[str]]:
    """Operator names per region (for tests and debug output)."""
    return [[n.op.name for n in r.nodes] for r in find_regions(order, roots, min_size)]
