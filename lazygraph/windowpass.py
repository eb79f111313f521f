"""Compiled window kernels in the evaluation path: the `jit_window` pass and its steps.

The pass replaces max pooling and its gradient (jit/window.py), and in training the
convolution, its weight gradient and its input gradient (jit/conv.py: im2col chunks that
stay in cache, each multiplied by BLAS), by New nodes built by the `jit_window`
constructor: the operator's name, attributes and shape as expressions over P, so a cache
hit rebuilds the same step. It runs before library substitution, which would otherwise
keep one whole column matrix for the forward and the weight gradient (`share_columns`):
rebuilding chunks costs less than writing and re-reading it. A convolution without a
weight gradient (inference) stays with the library pass and its epilogue fusion.

Each step runs its compiled kernel, or the operator's NumPy kernel where that does not
apply: shapes it does not cover (decided per launch, so no size guards), arrays under
LAZYGRAPH_JIT_MIN_SIZE elements, LAZYGRAPH_JIT=0, no C compiler. It takes the
executor's planned buffer through `out=` like a fused region (lazygraph/memplan.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from cache.graph import Graph, QNode
from cache.recipe import Recipe, RecipeError, register_constructor
from jit import conv, kernel, window
from lazygraph.jitpass import min_size
from ops.base import REGISTRY
from optimizer.registry import PASSES, register_pass, unregister_pass

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


def _lowerable(g: Graph) -> list[QNode]:
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
            ok = _float_alike(q) and pair in grads
        else:
            ok = _float_alike(q)
        if ok:
            out.append(q)
    return out


def _condition(g: Graph) -> bool:
    return kernel.enabled() and window.available() and bool(_lowerable(g))


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


def _build_window(recipe: Recipe, artifacts: dict) -> Callable:
    """The compiled kernel where it applies, else the operator's own kernel."""
    name = str(recipe.op)
    compiled = KERNELS.get(name)
    if compiled is None or name not in REGISTRY:
        raise RecipeError(f"no compiled window kernel for {name!r}")
    reference = REGISTRY[name].kernel

    def run(*args: Any, out: np.ndarray | None = None, **attrs: Any) -> np.ndarray:
        if kernel.enabled() and window.available() and max(np.size(a) for a in args) >= min_size():
            v = compiled(*args, out=out, **attrs)
            if v is not None:
                return v
        v = np.asarray(reference(*args, **attrs))
        if out is not None:
            np.copyto(out, v)
            return out
        return v

    return run


register_constructor("jit_window", _build_window)


def install() -> None:
    """Register the pass (steps it made can always be rebuilt from cached plans)."""
    if "jit_window" not in PASSES:
        register_pass("jit_window", PRIORITY, _condition)(jit_window)


def uninstall() -> None:
    """Remove the pass (plans already cached keep their window steps)."""
    unregister_pass("jit_window")


install()  # on by default: LAZYGRAPH_JIT=0 turns it off per evaluation
