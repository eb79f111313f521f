"""Search statistics of a region's kernel: Dali's Table 1 columns, for benchmarks and tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from jit import astar
from jit import layout as lay
from jit.kernel import Region, compile_region


def search_stats(region: Region, values: list[Any], target: str = "cuda") -> dict[str, Any]:
    """Variables, heuristic calls, data-consistent solutions, space and the chosen assignment.

    `values` are the region's input values (they fix the layout: coalescing and strides).
    """
    k = compile_region(region)
    arrays = [np.asarray(v) for (kind, _), v in zip(k.spec.arg_of_input, values) if kind == "array"]
    layout, _, _ = k.layout_for(arrays)
    kir = lay.build_ir(k.spec, layout, target)
    tgt = astar.CUDA if target == "cuda" else astar.cpu_target(lay.dtype_lanes(k.spec))
    best = astar.astar(kir, tgt)
    exact, consistent = astar.exhaustive(kir, tgt)
    return {
        "variables": best.variables,
        "heuristic_calls": best.heuristic_calls,
        "consistent": consistent,
        "space": best.space,
        "cost": best.cost,
        "optimal": abs(best.cost - exact.cost) <= 1e-9 * max(1.0, exact.cost),
        "assignment": ", ".join(p.value for p in best.assignment),
        "loops": kir.describe(),
    }


#: Dali's Table 1 (variables, heuristic calls, data-consistent solutions, solution space)
DALI_TABLE1 = {
    "Softmax": (6, 143, 214, 1024),
    "LayerNorm": (7, 218, 356, 1528),
    "Add": (1, 4, 4, 4),
    "Strided Add": (2, 12, 16, 16),
}
