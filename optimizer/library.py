"""Library substitution: a GEMM or convolution and its elementwise epilogue as one step.

`matmul -> add(bias) -> maximum(., 0)` and `conv2d(bias) -> maximum(., 0)` become one
`library` step: the CPU backend's GEMM (NumPy's BLAS-backed matmul) or exact conv2d (the
reference's im2col + GEMM) writes a fresh buffer, and the backend's epilogue adds the bias and
applies the ReLU in place on it, so no intermediate arrays are allocated and the values are
bit-for-bit the reference's (the same operations in the same order). Transposed operands
reach matmul as strided views, which NumPy hands to BLAS as a transpose flag: the layout, not
a copy.

Matched only where each fused intermediate has no other reader (autograd keeps some alive
for the backward pass). That the bias broadcasts without growing the product, and that the
ReLU's scalar is 0, are checked on P and recorded as guards.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import ops.conv  # noqa: F401  (registers the shared-columns operators)
from cache.graph import Graph, QNode
from cache.key import canon
from cache.recipe import Expr, Recipe
from jit import backend
from ops.base import REGISTRY, Op, register
from optimizer.registry import register_pass

_PRODUCERS = ("matmul", "conv2d")


class LibraryOp(Op):
    """The operator of library steps (built by the `library` constructor, never recorded)."""

    kind = "other"

    def __init__(self) -> None:
        super().__init__("library")

    def infer(self, inputs: tuple, attrs: dict) -> tuple:
        """Library nodes are never recorded by users."""
        raise TypeError("library: made by the library pass only")

    def kernel(self, *args: Any, **attrs: Any) -> Any:
        """Library steps run through their constructor (`build_library`)."""
        raise TypeError("library: made by the library pass only")


if "library" not in REGISTRY:
    register(LibraryOp())


def _plain(n: QNode, name: str) -> bool:
    return (
        not n.leaf and n.op is not None and n.op.name == name and (n.recipe is None or n.recipe.ctor == "op")
    )


def _relu_of(g: Graph, n: QNode) -> QNode | None:
    """The scalar-0 leaf if n is maximum(x, 0) with a Python scalar 0 (either side)."""
    if not _plain(n, "maximum") or len(n.inputs) != 2:
        return None
    for s in n.inputs:
        if s.scalar and type(g.value(s)) in (int, float) and canon(g.value(s)) == canon(type(g.value(s))(0)):
            return s
    return None


def _candidates(g: Graph) -> bool:
    return any(_plain(n, p) for n in g.nodes for p in _PRODUCERS)


def _dims(*parts: tuple[QNode, int]) -> Expr:
    """The shape made of the given (node, axis) sizes, as an expression over P's slots."""
    return ("tuple", *(("dim", n.src, axis) for n, axis in parts))


def share_columns(g: Graph) -> int:
    """conv2d and its weight gradient reading one im2col of x (computed once) instead of two.

    Training records conv2d(x, w) and conv2d_grad_weight(g, x, w) with the same attributes:
    both contract the same window matrix of x, the largest array of the step. Applies to
    one group, float x, w and output of one dtype, and more than one input channel (a
    single channel's columns are cheap to rebuild, and its forward prefers the other GEMM
    orientation); all of that is structure (dtypes, attributes, unit extents), so no guards.
    """
    grads: dict[tuple[int, int], list[QNode]] = {}
    for n in g.nodes:
        if _plain(n, "conv2d_grad_weight"):
            grads.setdefault((id(n.inputs[1]), id(n.inputs[2])), []).append(n)
    mapping: dict[int, QNode] = {}
    for conv in list(g.nodes):
        if not _plain(conv, "conv2d") or conv.src < 0:
            continue
        x, w = conv.inputs[:2]
        mine = [
            gw for gw in grads.get((id(x), id(w)), []) if gw.attrs == conv.attrs and gw.dtype == conv.dtype
        ]
        if (
            not mine
            or conv.attrs["groups"] != 1
            or x.shape[1] == 1
            or conv.dtype.kind != "f"
            or x.dtype != conv.dtype
            or w.dtype != conv.dtype
            or any(gw.inputs[0].dtype != conv.dtype for gw in mine)
            or x.src < 0
            or w.src < 0
        ):
            continue
        win = {k: g.attr_expr(conv, k) for k in ("stride", "padding", "dilation")}
        shape = _dims((conv, 0), (conv, 2), (conv, 3), (w, 2), (w, 3), (x, 1))
        cols = g.new("conv2d_im2col", [x, w], win, shape, conv.dtype)
        mapping[id(conv)] = g.new(
            "conv2d_from_cols", [cols, *conv.inputs[1:]], {}, g.shape_expr(conv), conv.dtype
        )
        for gw in mine:
            mapping[id(gw)] = g.new(
                "conv2d_grad_weight_from_cols", [gw.inputs[0], cols], {}, g.shape_expr(gw), gw.dtype
            )
        fired = g.artifacts.setdefault("library", {})
        fired["conv2d+shared_im2col"] = fired.get("conv2d+shared_im2col", 0) + 1
    if mapping:
        g.substitute(mapping)
    return len(mapping)


@register_pass("library", priority=100, condition=_candidates)
def library(g: Graph) -> bool:
    """Fuse matmul + bias (+ ReLU) and conv2d (+ ReLU) into single library steps."""
    shared = share_columns(g)
    users = g.users()
    consumers: dict[int, list[QNode]] = {}
    for n in g.nodes:
        for c in n.inputs:
            consumers.setdefault(id(c), []).append(n)
    mapping: dict[int, QNode] = {}
    for prod in list(g.nodes):
        if not any(_plain(prod, p) for p in _PRODUCERS) or prod.dtype.kind != "f" or id(prod) in mapping:
            continue
        if prod.src in g.held:  # a live array holds the product (a gradient): it is computed as is
            continue
        name = prod.op.name
        end, bias, relu_scalar = prod, None, None
        guards = []
        nxt = consumers.get(id(end), [])
        if name == "matmul" and users.get(id(end)) == 1 and len(nxt) == 1 and _plain(nxt[0], "add"):
            add = nxt[0]
            other = add.inputs[1] if add.inputs[0] is end else add.inputs[0]
            if other is not end and not other.scalar and add.shape == end.shape and add.dtype == end.dtype:
                if other.dtype == end.dtype:
                    bias, end = other, add
                    guards.append(("eq", g.shape_expr(add), g.shape_expr(prod)))
        nxt = consumers.get(id(end), [])
        if users.get(id(end)) == 1 and len(nxt) == 1:
            s = _relu_of(g, nxt[0])
            if s is not None and nxt[0].dtype == end.dtype:
                relu_scalar, end = s, nxt[0]
                guards.append(("eq", ("value", s.src), ("const", g.value(s))))
        if end is prod:
            continue
        for gd in guards:
            g.guard(gd)
        attrs = {k: g.attr_expr(prod, k) for k in prod.attrs}
        inputs = list(prod.inputs) + ([bias] if bias is not None else [])
        data = {
            "producer": name,
            "n_in": len(prod.inputs),
            "bias": bias is not None,
            "relu": relu_scalar is not None,
        }
        new = g.new("library", inputs, attrs, g.shape_expr(end), end.dtype, ctor="library", data=data)
        mapping[id(end)] = new
        fired = g.artifacts.setdefault("library", {})
        label = name + ("+bias" if bias is not None else "") + ("+relu" if relu_scalar is not None else "")
        fired[label] = fired.get(label, 0) + 1
    if mapping:
        g.substitute(mapping)
    return bool(mapping) or shared > 0


def build_library(recipe: Recipe, artifacts: dict) -> Callable:
    """The producer as a library call of the graph's device (GEMM: into `out=` if given), then its epilogue in place.

    The device is the backend the evaluation runs with (jit/backend: `active`). Where its memory
    is not the host's, the engine runs its own form of the step on device arrays instead.
    """
    d = recipe.data
    producer = str(d["producer"])
    be = backend.active()
    call = be.library(producer)
    if call is None:
        raise KeyError(f"library: no library call for {producer!r}")
    n_in, bias, relu = int(d["n_in"]), bool(d["bias"]), bool(d["relu"])
    if not backend.host_memory(be):
        # a device program replaces this step with its device form before it runs
        # (lazygraph/engine/device_run.py: DeviceLibraryKernel), on the device's arrays
        return _device_only(producer, be.name)

    def run(*inputs: Any, out: np.ndarray | None = None, **attrs: Any) -> np.ndarray:
        if producer == "matmul":
            # out: a planned buffer (the engine's layout; never shares memory with an input):
            # the GEMM writes into it and the epilogue runs there in place
            v = be.gemm(*inputs[:n_in], out=out)
        elif out is not None:
            raise TypeError(f"library: {producer} steps allocate their output")
        else:
            v = call(*inputs[:n_in], exact=True, **attrs)  # exact: the reference kernel's bits
        if not v.flags.writeable or any(
            isinstance(x, np.ndarray) and np.may_share_memory(v, x) for x in inputs
        ):
            v = v.copy()  # never write into memory an input (another value) may share
        return be.epilogue(v, inputs[n_in] if bias else None, relu)

    return run


def _device_only(producer: str, device: str) -> Callable:
    def run(*inputs: Any, out: Any = None, **attrs: Any) -> Any:
        raise RuntimeError(
            f"library: the {producer} step of a {device} program runs as the device's library "
            "kernel (lazygraph/engine/device_run.py), not on host arrays"
        )

    return run
