"""Window lowering: pooling and training convolutions in Q become compiled window steps.

The pass replaces max pooling and its gradient (jit/window.py), and in training the
convolution, its weight gradient and its input gradient (jit/conv.py: im2col chunks that
stay in cache, each multiplied by BLAS), by New nodes built by the `jit_window`
constructor: the operator's name, attributes and shape as expressions over P, so a cache
hit rebuilds the same step. It runs before library substitution, which would otherwise
keep one whole column matrix for the forward and the weight gradient (`share_columns`):
rebuilding chunks costs less than writing and re-reading it. A convolution without a
weight gradient (inference) stays with the library pass and its epilogue fusion, unless
jit/conv_simd.py's kernel covers it (float32, AVX-512 or AVX2, output channels a multiple of 16 or 8):
that kernel beats the library's GEMM even with the epilogue left to an elementwise pass.

Each step runs its compiled kernel, or the operator's NumPy kernel where that does not
apply: shapes it does not cover (decided per launch, so no size guards), arrays under
LAZYGRAPH_JIT_MIN_SIZE elements, LAZYGRAPH_JIT=0, no C compiler. It takes the
planner's buffer through `out=` like a fused region (memory.py). compile.py installs the pass.

On a device, every pooling (max and average), pooling gradient, convolution and convolution
gradient becomes a window step, inference convolutions included, and the step is the device
backend's library call at every size (on the CUDA devices: jit/window_cuda.py's kernels, or
cuDNN).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from cache.graph import Graph, QNode
from cache.recipe import Recipe, RecipeError
from jit import backend, conv, conv_simd, window
from jit.backend import Backend
from jit.blas_quiet import park_blas_workers
from lazygraph.engine.program import Kernel
from ops.base import REGISTRY
from ops.conv import pointwise
from ops.settings import SETTINGS
from optimizer.registry import Pass

#: after constant folding (150), before library substitution (100)
PRIORITY = 110

#: operator -> compiled implementation: the operator's kernel signature plus `out=`; the
#: convolutions return None at sizes they do not cover
KERNELS: dict[str, Callable] = {**window.KERNELS, **conv.KERNELS}


def _plain(q: QNode) -> bool:
    return not q.leaf and q.op is not None and (q.recipe is None or q.recipe.ctor == "op")


def _float_alike(q: QNode) -> bool:
    """One float dtype for the output and every input, and one group."""
    return (
        q.dtype.kind == "f"
        and q.dtype.itemsize in (4, 8)
        and all(c.dtype == q.dtype for c in q.inputs)
        and q.attrs.get("groups") == 1
    )


def _simd_inference(q: QNode) -> bool:
    """An inference convolution jit/conv_simd.py covers (not pointwise).

    Its kernel ran the CNN's second layer in 49 ms against 120 ms for the library's GEMM
    with the ReLU epilogue, so losing the epilogue (a separate elementwise pass) still pays.
    """
    w = q.inputs[1]
    if len(w.shape) != 4 or pointwise(tuple(w.shape[2:]), tuple(q.attrs.get("padding", (0, 0)))):
        return False
    return conv_simd.applies(q.dtype, tuple(int(v) for v in w.shape))


#: on a device (not the CPU) every one of these is a window step: the device backend's
#: library call (jit/window_cuda.py's kernels on the CUDA devices), whatever its size or use
DEVICE_OPS = frozenset(KERNELS) | {"avg_pool2d", "avg_pool2d_grad"}


def _lowerable(g: Graph) -> list[QNode]:
    if backend.active_name() != "cpu":
        return [q for q in g.nodes if _plain(q) and q.op.name in DEVICE_OPS]
    grads: set[tuple[int, int, tuple]] = set()
    for q in g.nodes:
        if _plain(q) and q.op.name == "conv2d_grad_weight":
            grads.add((id(q.inputs[1]), id(q.inputs[2]), tuple(sorted(q.attrs.items()))))
    out = []
    for q in g.nodes:
        if not _plain(q) or q.op.name not in KERNELS:
            continue
        name = q.op.name
        if name in window.KERNELS:
            ok = window.supported(name, [c.dtype for c in q.inputs]) and q.dtype == q.inputs[0].dtype
        elif name == "conv2d":
            pair = (id(q.inputs[0]), id(q.inputs[1]), tuple(sorted(q.attrs.items())))
            ok = _float_alike(q) and (pair in grads or _simd_inference(q))
        else:
            ok = _float_alike(q)
        if ok:
            out.append(q)
    return out


def _condition(g: Graph) -> bool:
    # a device's window steps are its library calls: they need no C compiler
    host = backend.active_name() == "cpu"
    return SETTINGS.jit and (window.available() or not host) and bool(_lowerable(g))


def jit_window(g: Graph) -> bool:
    """Replace window operators that have a compiled kernel by `jit_window` steps."""
    mapping = {}
    fired = g.artifacts.setdefault("rules", {})
    for q in _lowerable(g):
        attrs = {k: g.attr_expr(q, k) for k in q.attrs}
        mapping[id(q)] = g.new(q.op.name, list(q.inputs), attrs, g.shape_expr(q), q.dtype, ctor="jit_window")
        label = f"jit_window:{q.op.name}"
        fired[label] = fired.get(label, 0) + 1
    if mapping:
        g.substitute(mapping)
    return bool(mapping)


#: the lowering pass compile.py installs
PASS = Pass("jit_window", PRIORITY, jit_window, _condition)


class WindowKernel(Kernel):
    """A window operator's step: its compiled kernel where it applies, else the NumPy kernel.

    On a device (`device`: its backend; None on the CPU) the step is the backend's library call,
    at every size, on the device arrays the engine keeps there (program.py).
    """

    __slots__ = ("compiled", "reference", "device", "op_name")

    def __init__(
        self, compiled: Callable, reference: Callable, device: Backend | None = None, op: str = ""
    ) -> None:
        self.compiled = compiled
        self.reference = reference
        self.device = device
        self.op_name = op  # not `op`: the planner reads a kernel's `op` as an operator

    def run(self, *args: Any, out: np.ndarray | None = None, **attrs: Any) -> np.ndarray:
        """The operator's value (into `out` when given)."""
        if self.device is not None:
            return backend.library_call(self.device, self.op_name, args, out, attrs)
        if SETTINGS.jit and window.available() and max(np.size(a) for a in args) >= SETTINGS.jit_min_size:
            # the compiled kernels are OpenMP loops: OpenBLAS's workers, still spinning after
            # the dense layers' matmuls, would take a core from them (jit/blas_quiet.py)
            park_blas_workers()
            v = self.compiled(*args, out=out, **attrs)
            if v is not None:
                return v
        v = np.asarray(self.reference(*args, **attrs))
        if out is not None:
            np.copyto(out, v)
            return out
        return v

    def writer(self, attrs: dict | None, dtype: np.dtype) -> Callable:
        """Both paths write where they are pointed."""
        return self.run


def build_window(recipe: Recipe, artifacts: dict) -> WindowKernel:
    """The `jit_window` constructor: the operator's compiled kernel, with its own as the fallback."""
    name = str(recipe.op)
    compiled = KERNELS.get(name)
    be = backend.active()  # the device of the graph being built (jit/backend: `running`)
    device = be.name != "cpu"
    if name not in REGISTRY or (compiled is None and not (device and name in DEVICE_OPS)):
        raise RecipeError(f"no compiled window kernel for {name!r}")
    ref = REGISTRY[name].kernel
    return WindowKernel(compiled or ref, ref, be if device else None, name)
