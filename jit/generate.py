"""A fused region's kernel source in a backend's language: A* search, render, launch shape.

One generator per source language (`Backend.language`): "c" (jit/render_c.py, OpenMP) and
"cuda" (jit/render_cuda.py). Each says which numeric and shape choices make a separate
variant of a layout (`mode`), renders the source of one variant (`render`), and gives the
launch shape of a call (`launch`). The kernel ABI they render against is jit/runtime.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from jit import astar, compile_c, render_cuda
from jit import layout as lay
from jit.ir import KernelIR, Par
from jit.layout import Layout
from jit.render_block import W as BLOCK
from jit.render_block import blocked_extent
from jit.render_c import render_c
from jit.render_order import ordered_levels
from jit.runtime import ScalarSlots
from jit.spec import Spec
from ops.settings import SETTINGS


@dataclass(frozen=True)
class Source:
    """One variant's kernel source, the search that chose its parallelism, and its parameters."""

    text: str
    result: astar.SearchResult
    explain: str  # the kernel IR's loops and the search's choice, for debug output
    scalars: ScalarSlots
    launch: Callable[[list[int]], tuple[int, int]]  # the call's ints -> (grid, block)


def _scalar_slots(spec: Spec) -> ScalarSlots:
    """Scalar parameters in the order the CUDA renderer declares them (jit/render_cuda.py)."""
    return tuple(("f" if v.dtype.kind == "f" else "i", v.index) for v in spec.values if v.kind == "scalar")


def _explain(kir: KernelIR, result: astar.SearchResult) -> str:
    return f"{kir.describe()}\nA*: {result.describe(kir)}"


def _host_launch(ints: list[int]) -> tuple[int, int]:
    return 1, 1  # OpenMP chooses the threads


class CSource:
    """C with OpenMP for the CPU backend."""

    def mode(self, layout: Layout, ints: list[int]) -> tuple[bool, bool]:
        """(fast math, block loops shorter than a block): each pair is its own binary.

        Block loops shorter than a block need a second, padded body, built only for such calls
        (no `ints`: full blocks).
        """
        short = bool(ints) and blocked_extent(len(layout.kloops), len(layout.rloops), ints) < BLOCK
        return SETTINGS.fast_math, short

    def render(self, spec: Spec, layout: Layout, mode: tuple) -> Source:
        """Search the CPU target and render C."""
        fast, short = mode
        kir = lay.build_ir(spec, layout, "cpu")
        # Float sums and products keep NumPy's order (jit/render_order.py): their reduced
        # loops run in order, so A* spreads the kept loops instead.
        ordered = ordered_levels(spec, exact=not fast)
        for lp in kir.loops:
            if lp.reduces and lp.stage in ordered:
                lp.options = (Par.SEQUENTIAL,)
        result = astar.astar(kir, astar.cpu_target(lay.dtype_lanes(spec)))
        tc = compile_c.toolchain()
        # libmvec's vector functions differ from the scalar libm in the last bit for a few inputs
        # (acosf near 0): by default only block loops call them, for every element (render_block)
        mvec = bool(tc and tc["mvec"])
        text = render_c(spec, layout, result.assignment, mvec=mvec, exact=not fast, short=short)
        return Source(text, result, _explain(kir, result), (), _host_launch)


class CudaSource:
    """CUDA C for NVRTC."""

    def mode(self, layout: Layout, ints: list[int]) -> tuple[bool]:
        """(fast math,): NVRTC's --fmad follows the numeric mode."""
        return (SETTINGS.fast_math,)

    def render(self, spec: Spec, layout: Layout, mode: tuple) -> Source:
        """Search the CUDA target and render CUDA C."""
        kir = lay.build_ir(spec, layout, "cuda")
        result = astar.astar(kir, astar.CUDA)
        text = render_cuda.render_cuda(spec, layout, result.assignment)
        assign, nloops = result.assignment, layout.nloops

        def launch(ints: list[int]) -> tuple[int, int]:
            return render_cuda.launch_config(layout, assign, ints[:nloops])

        return Source(text, result, _explain(kir, result), _scalar_slots(spec), launch)


#: source language -> its generator
GENERATORS: dict[str, CSource | CudaSource] = {"c": CSource(), "cuda": CudaSource()}
