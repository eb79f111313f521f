"""Regions and their compiled kernels: the callable the executor (or a benchmark) runs.

`Region` is a fusable subgraph: member nodes in topological order, the external inputs
they read (arrays or Python scalars) and the members whose values leave the region.
`compile_region` returns a `FusedKernel` shared by every region with the same structure
(operators, attributes, dtypes, connections, which dimensions are 1 — never sizes or
values); calling it with the inputs' values returns the outputs. Each distinct layout of
the arguments (coalesced loops, unit strides) is searched (A*), rendered and compiled once;
later calls only pack arguments and launch.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from jit import astar, compile_c, nvrtc, render_cuda, types
from jit import layout as lay
from jit.domain import Domain, NotFusable
from jit.ir import Par
from jit.layout import Layout
from jit.render_block import W as BLOCK
from jit.render_block import blocked_extent
from jit.render_c import render_c
from jit.render_order import ordered_levels
from jit.spec import Spec, build_spec
from ops import settings
from ops.node import Node


def enabled() -> bool:
    """False when LAZYGRAPH_JIT=0 turns fused kernels off."""
    return os.environ.get("LAZYGRAPH_JIT", "1").strip().lower() not in ("0", "false", "off", "no")


def debug_level() -> int:
    """LAZYGRAPH_DEBUG as an int (the JIT prints kernels at 3)."""
    return settings.debug_level()


def log(msg: str) -> None:
    """One debug message on stderr."""
    print(f"[lazygraph] {msg}", file=sys.stderr)


@dataclass
class Region:
    """A fusable subgraph (see the module docstring)."""

    nodes: list[Node]
    inputs: list[Node]
    outputs: list[Node]
    domain: Domain = field(repr=False, default=None)  # type: ignore[assignment]


def make_region(nodes: list[Node], outputs: list[Node]) -> Region:
    """A region from members in topological order; raises NotFusable when they are not one kernel."""
    d = Domain()
    for n in nodes:
        d.add(n)
    members = {id(n) for n in nodes}
    inputs: list[Node] = []
    seen: set[int] = set()
    for n in nodes:
        for c in n.inputs:
            if id(c) not in members and id(c) not in seen:
                seen.add(id(c))
                inputs.append(c)
    for o in outputs:
        if id(o) not in members:
            raise NotFusable("an output is not a member of the region")
    return Region(list(nodes), inputs, list(outputs), d)


def signature(region: Region) -> tuple:
    """Structure of a region: equal signatures compute the same function of their inputs."""
    idx: dict[int, int] = {}
    parts: list[Any] = []
    for n in region.inputs:
        idx[id(n)] = len(idx)
        if n.op.name == "scalar":
            parts.append(("scalar", str(n.dtype), type(n.buffer).__name__))
        else:
            parts.append(("array", str(n.dtype), tuple(d == 1 for d in n.shape)))
    for n in region.nodes:
        idx[id(n)] = len(idx)
        attrs = tuple(sorted((k, repr(v)) for k, v in n.attrs.items()))
        ins = tuple(idx[id(c)] for c in n.inputs)
        parts.append((n.op.name, str(n.dtype), attrs, ins, tuple(d == 1 for d in n.shape)))
    parts.append(tuple(idx[id(o)] for o in region.outputs))
    return tuple(parts)


_warned = False


def _warn_no_compiler() -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            "lazygraph: no C compiler found ($CC, cc, gcc, clang); fused regions run op by op on NumPy",
            RuntimeWarning,
            stacklevel=3,
        )


class FusedKernel:
    """One region structure's kernels, one per argument layout (see the module docstring)."""

    def __init__(self, region: Region) -> None:
        self.spec: Spec = build_spec(region.domain, region.nodes, region.inputs, region.outputs)
        # No references to graph nodes are kept (they would keep whole graphs alive): the
        # NumPy fallback replays (operator, attributes, input slots) instead.
        self.in_dtypes = [n.dtype for n in region.inputs]
        self.spec.inputs = []
        self.spec.out_nodes = []
        slot = {id(n): i for i, n in enumerate(region.inputs)}
        self.program = []
        for n in region.nodes:
            self.program.append((n.op, n.attrs, tuple(slot[id(c)] for c in n.inputs)))
            slot[id(n)] = len(slot)
        self.out_slots = [slot[id(o)] for o in region.outputs]
        self.names = [n.op.name for n in region.nodes]
        # keyed by layout, numeric mode (LAZYGRAPH_FAST_MATH may change between calls) and
        # whether block loops may be shorter than a block (render_block.blocked_extent)
        self.variants: dict[tuple[Layout, bool, bool], tuple[Any, astar.SearchResult, str]] = {}
        self.cuda_variants: dict[Layout, tuple[str, astar.SearchResult]] = {}
        self.cuda_fns: dict[tuple[Layout, bool], Any] = {}
        # threads share kernels: one builds a layout's variant while the others wait for it
        self._lock = threading.Lock()

    # -- sizes, outputs, layout -----------------------------------------------------------
    def _sizes(self, arrays: list[np.ndarray]) -> dict[int, int]:
        sizes: dict[int, int] = {}
        for ref, arr in zip(self.spec.arrays, arrays):
            for dim, root in enumerate(ref.roots):
                if root >= 0:
                    sizes[root] = arr.shape[dim]
        return sizes

    def __call__(self, *values: Any, out: np.ndarray | None = None) -> list[np.ndarray]:
        """Run the kernel on the inputs' values (arrays and scalars, in `Region.inputs` order).

        `out` receives the first output (the executor's planned buffer); it must have the
        output's shape and dtype and share no memory with an input the kernel reads.
        """
        spec = self.spec
        arrays: list[np.ndarray] = []
        fs = [0.0] * len(spec.scalars)  # scalar k is read from fs[k] (floats) or is[k]
        is_ = [0] * len(spec.scalars)
        for (kind, k), v, dt in zip(spec.arg_of_input, values, self.in_dtypes):
            if kind == "scalar":
                if dt.kind == "f":
                    fs[k] = float(v)
                else:
                    iv = int(v)
                    is_[k] = iv - (1 << 64) if iv >= 1 << 63 else iv
            else:
                arrays.append(np.asarray(v))
        sizes = self._sizes(arrays)
        if out is not None and any(np.may_share_memory(out, a) for a in arrays):
            raise ValueError("jit region: out= shares memory with an input the kernel reads")
        outs = []
        for _, ai in spec.outputs:
            ref = spec.arrays[ai]
            shp = tuple(1 if r < 0 else sizes[r] for r in ref.roots)
            if out is not None and not outs:
                _check_out(out, shp, ref.dtype)
                outs.append(out)
            else:
                outs.append(np.empty(shp, dtype=ref.dtype))
        if any(sizes[a] == 0 for a in spec.K) or not compile_c.available():
            if not compile_c.available():
                _warn_no_compiler()
                return self.fallback(values, out)
            return outs  # a kept axis of size 0: every output is empty
        allarr = arrays + outs
        strides = lay.axis_strides(spec, allarr)
        layout = lay.make_layout(spec, sizes, strides)
        fast = compile_c.fast_math()
        args = lay.loop_args(spec, layout, sizes, strides)
        # block loops shorter than a block need a second, padded body: built only for such calls
        short = blocked_extent(len(layout.kloops), len(layout.rloops), args) < BLOCK
        fn = self.variants.get((layout, fast, short))
        if fn is None:
            with self._lock:
                fn = self.variants.get((layout, fast, short)) or self._build(layout, fast, short)
        dims = np.asarray(args, dtype=np.int64)
        ptrs = (ctypes.c_void_p * max(1, len(allarr)))(*[a.ctypes.data for a in allarr])
        fsa = np.asarray(fs or [0.0], dtype=np.float64)
        isa = np.asarray(is_ or [0], dtype=np.int64)
        fn[0](ptrs, dims.ctypes.data, fsa.ctypes.data, isa.ctypes.data)
        return outs

    def _build(self, layout: Layout, fast: bool, short: bool) -> tuple[Any, astar.SearchResult, str]:
        spec = self.spec
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
        source = render_c(spec, layout, result.assignment, mvec=mvec, exact=not fast, short=short)
        if debug_level() >= 3:
            log(
                f"JIT kernel ({len(self.names)} ops: {', '.join(self.names)})\n{kir.describe()}\n"
                f"A*: {result.describe(kir)}\n{compile_c.numbered(source)}"
            )
        fn = compile_c.build(source)
        entry = (fn, result, source)
        self.variants[(layout, fast, short)] = entry
        return entry

    # -- CUDA -----------------------------------------------------------------------------
    def cuda_source(self, layout: Layout) -> tuple[str, astar.SearchResult]:
        """CUDA source and A* result for a layout (the same IR, searched for the GPU)."""
        entry = self.cuda_variants.get(layout)
        if entry is not None:
            return entry
        with self._lock:
            entry = self.cuda_variants.get(layout)
            if entry is not None:
                return entry
            kir = lay.build_ir(self.spec, layout, "cuda")
            result = astar.astar(kir, astar.CUDA)
            source = render_cuda.render_cuda(self.spec, layout, result.assignment)
            if debug_level() >= 3:
                log(
                    f"CUDA kernel ({', '.join(self.names)})\nA*: {result.describe(kir)}\n{compile_c.numbered(source)}"
                )
            entry = (source, result)
            self.cuda_variants[layout] = entry
        return entry

    def layout_for(self, arrays: list[Any]) -> tuple[Layout, dict[int, int], list[dict[int, int]]]:
        """Layout, axis sizes and strides for input arrays plus output arrays of the right shapes."""
        sizes = self._sizes(arrays)
        outs = []
        for _, ai in self.spec.outputs:
            ref = self.spec.arrays[ai]
            outs.append(np.empty(tuple(1 if r < 0 else sizes[r] for r in ref.roots), dtype=ref.dtype))
        strides = lay.axis_strides(self.spec, arrays + outs)
        return lay.make_layout(self.spec, sizes, strides), sizes, strides

    def run_cuda(self, *values: Any) -> list[Any]:
        """Run on the GPU with CuPy arrays (compiled by NVRTC, loaded by RawModule)."""
        import cupy

        spec = self.spec
        arrays = []
        fs = [0.0] * len(spec.scalars)
        is_ = [0] * len(spec.scalars)
        for (kind, k), v, dt in zip(spec.arg_of_input, values, self.in_dtypes):
            if kind == "scalar":
                if dt.kind == "f":
                    fs[k] = float(v)
                else:
                    is_[k] = int(v)
            else:
                arrays.append(cupy.asarray(v))
        sizes = self._sizes(arrays)
        outs = []
        for _, ai in spec.outputs:
            ref = spec.arrays[ai]
            outs.append(cupy.empty(tuple(1 if r < 0 else sizes[r] for r in ref.roots), dtype=ref.dtype))
        if any(sizes[a] == 0 for a in spec.K):
            return outs
        allarr = arrays + outs
        strides = lay.axis_strides(spec, allarr)
        layout = lay.make_layout(spec, sizes, strides)
        source, result = self.cuda_source(layout)
        mode = (layout, compile_c.fast_math())  # NVRTC's --fmad follows the numeric mode
        fn = self.cuda_fns.get(mode)
        if fn is None:
            with self._lock:
                fn = self.cuda_fns.get(mode)
                if fn is None:
                    data, kind = nvrtc.compile_cuda(source)
                    fn = _load_cuda(data, kind)
                    self.cuda_fns[mode] = fn
        ints = lay.loop_args(spec, layout, sizes, strides)
        extents = ints[: layout.nloops]
        grid, block = render_cuda.launch_config(layout, result.assignment, extents)
        args = allarr + [np.int64(i) for i in ints] + render_cuda.scalar_args(spec, fs, is_)
        fn((grid,), (block,), tuple(args))
        return outs

    def fallback(self, values: tuple, out: np.ndarray | None = None) -> list[np.ndarray]:
        """The region op by op with the NumPy reference kernels (the first output copied to `out`)."""
        env: list[Any] = list(values)
        with np.errstate(all="ignore"):
            for op, attrs, ins in self.program:
                env.append(np.asarray(op.kernel(*(env[i] for i in ins), **attrs)))
        outs = [np.asarray(env[i]) for i in self.out_slots]
        if out is not None:
            _check_out(out, outs[0].shape, outs[0].dtype)
            np.copyto(out, outs[0])
            outs[0] = out
        return outs


def _check_out(out: np.ndarray, shape: tuple, dtype: np.dtype) -> None:
    """A given output buffer must be a writeable array of the output's shape and dtype."""
    if type(out) is not np.ndarray or out.shape != shape or out.dtype != dtype or not out.flags.writeable:
        got = f"{getattr(out, 'shape', None)} {getattr(out, 'dtype', type(out).__name__)}"
        raise ValueError(f"jit region: out= is {got}, the output is {shape} {np.dtype(dtype)}")


def _load_cuda(data: bytes, kind: str) -> Any:
    """The kernel function of a PTX or CUBIN image, through CuPy's RawModule."""
    import tempfile

    import cupy

    with tempfile.NamedTemporaryFile(suffix=f".{kind}", delete=False) as f:
        f.write(data)
        path = f.name
    try:
        module = cupy.RawModule(path=path)
        return module.get_function("lg_kernel")
    finally:
        os.unlink(path)


_kernels: dict[tuple, FusedKernel] = {}
_kernels_lock = threading.Lock()


def compile_region(region: Region) -> FusedKernel:
    """The kernel for `region`'s structure (built once per structure, whichever thread asks)."""
    sig = signature(region)
    k = _kernels.get(sig)
    if k is None:
        with _kernels_lock:
            k = _kernels.get(sig)
            if k is None:
                k = _kernels[sig] = FusedKernel(region)
    return k


def kernel_count() -> int:
    """Distinct region structures compiled in this process."""
    return len(_kernels)


def dtype_ok(node: Node) -> bool:
    """True when fused kernels support the node's dtype."""
    return types.supported(node.dtype)
