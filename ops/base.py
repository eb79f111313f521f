"""Operator definitions: the `Op` type, the registry, and the shared shape/dtype rules.

An operator is defined once, as one `Op` instance: its name, how it validates and
normalizes attributes and infers the output shape and dtype (`infer`), and its NumPy
reference kernel (`kernel`). Later layers (gradients, JIT descriptions, z3 specs, costs)
attach to the same instance.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Sequence
from math import prod
from typing import Any

import numpy as np

from ops.node import Node

Shape = tuple[int, ...]

REGISTRY: dict[str, Op] = {}


class Op:
    """Base operator: subclasses implement `infer` and `kernel`."""

    #: coarse family used by printing, scheduling and later by fusion
    kind = "other"

    #: Attributes that hold sizes, extents, bounds or fill values: structural keys keep only
    #: their form (rank, which extents are 1, Python type), and a cache hit re-reads the new
    #: graph's values. Every other attribute is structure and enters the key whole.
    size_attrs: tuple[str, ...] = ()

    def __init__(self, name: str) -> None:
        self.name = name

    def infer(self, inputs: tuple[Node, ...], attrs: dict) -> tuple[Shape, np.dtype, dict]:
        """Validate inputs and attributes; return output shape, dtype and normalized attrs."""
        raise NotImplementedError(f"{type(self).__name__} must define infer")

    def kernel(self, *args: Any, **attrs: Any) -> Any:
        """NumPy reference implementation: the meaning of the operator."""
        raise NotImplementedError(f"{type(self).__name__} must define kernel")

    #: Reverse-mode rule, set with `defvjp`: vjp(F, g, xs, out, attrs) -> one cotangent (or None)
    #: per input. F is the array namespace doing the recording (ops/ never imports it), g the
    #: cotangent of the output, xs and out arrays standing for the inputs and the output.
    #: Cotangents may have a broadcast shape; the caller sums them back to the input's shape.
    vjp: Callable | None = None
    #: whether `vjp` takes a keyword `needs` (one bool per input: does that input want a
    #: cotangent); such a rule records only those and gives None for the others, so a
    #: backward pass does not record work it would throw away (a ReLU's scalar 0, a first
    #: layer's input, a loss's labels). Set by `defvjp` from the rule's signature.
    vjp_needs: bool = False

    # Facets every consumer reads from the record (ops/declare.py sets them in one call).
    #: JIT expression: C template per loop-dtype kind ("f", "i", "u", "b"; a key may list
    #: several) over operands {0}, {1}, ... in the loop's C type {T}; None: not fusable
    jit_expr: dict[str, str] | None = None
    #: relative per-element price of the expression (an add is 1): fusion weighs it against
    #: storing a value, the superoptimizer's cost model against memory traffic
    jit_cost: float = 8.0
    #: how a kernel picks operand dtypes: "ufunc" (NumPy's loop for `fn`), "out" (every operand
    #: in the result dtype), "select" (operand 0 as it is, the others in the result dtype) or
    #: "convert" (the operand as it is, the template chosen by the result's kind)
    jit_loop: str = "ufunc"
    #: JIT reduction: {"combine", "identity", "finish"} (see ops/reduction.py)
    jit_reduce: dict | None = None
    #: z3 specification: z3 reals of the operands (and attrs as keywords) -> the output
    z3: Callable | None = None
    #: analytic cost for the superoptimizer: (out_shape, in_shapes, attrs) -> (flops, extra bytes)
    cost: Callable | None = None
    #: composite operators: decompose(F, inputs, attrs) -> the value built from primitive
    #: operators through F (F.<op name>(*inputs, **attrs)); None for primitives
    decompose: Callable | None = None
    #: the superoptimizer's vocabulary terms this operator raises to (optimizer/superopt attaches)
    superopt: tuple = ()
    #: memo of the lean recording path (ops/declare.Elementwise keeps one); None: always `infer`
    sig_cache: dict | None = None
    #: most signatures one operator's memo holds before it starts over
    SIG_CACHE_LIMIT = 1024

    def __repr__(self) -> str:
        return f"<op {self.name}>"


def register(op: Op) -> Op:
    """Add an operator to the registry (names are unique)."""
    if op.name in REGISTRY:
        raise ValueError(f"operator {op.name!r} is already registered")
    REGISTRY[op.name] = op
    return op


def defvjp(*names: str) -> Callable:
    """Attach a gradient rule to the named operators' records (the decorator returns the rule)."""

    def attach(fn: Callable) -> Callable:
        needs = _takes_needs(fn)
        for name in names:
            REGISTRY[name].vjp = fn
            REGISTRY[name].vjp_needs = needs
        return fn

    return attach


def holomorphic(rule: Callable) -> Callable:
    """A gradient rule written for real values, made right for complex ones (PyTorch's convention).

    For a holomorphic operator (matmul, prod, inv, ...) the cotangent of a complex input is
    g * conj(f'(x)); a rule written g * f'(x) is linear in g, so conj(rule(conj(g))) is exactly
    that, and on real values the rule runs unchanged.
    """

    kw = _takes_needs(rule)

    def vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict, **needs: Any) -> Any:
        extra = needs if kw else {}
        if g.dtype.kind != "c" and out.dtype.kind != "c":
            return rule(F, g, xs, out, attrs, **extra)
        res = rule(F, F.conj(g), xs, out, attrs, **extra)
        return tuple(None if r is None else F.conj(r) for r in res)

    vjp.__doc__ = rule.__doc__
    vjp.takes_needs = kw  # type: ignore[attr-defined]
    return vjp


def _takes_needs(fn: Callable) -> bool:
    """Whether a gradient rule takes the `needs` keyword (Op.vjp_needs)."""
    flag = getattr(fn, "takes_needs", None)
    if flag is not None:
        return bool(flag)
    code = getattr(fn, "__code__", None)
    return code is not None and "needs" in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]


def unregister(name: str) -> Op:
    """Remove an operator from the registry (a test's declaration cleans up after itself)."""
    try:
        return REGISTRY.pop(name)
    except KeyError:
        raise KeyError(f"operator {name!r} is not registered") from None


# ---------------------------------------------------------------------------------------
# Errors: raised while recording, so they point at the line the user wrote.


def fmt_shape(shape: Sequence[int]) -> str:
    """Shape as NumPy prints it."""
    return "(" + ",".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


#: element counts up to here fit any dtype (itemsize <= 64) without overflowing a byte size
FAST_SIZE = sys.maxsize >> 6


def check_size(op: str, shape: Shape, dtype: np.dtype) -> None:
    """Reject at record time a shape NumPy could not allocate: a negative extent, or a byte size
    (nonzero extents times itemsize, as NumPy multiplies them) past the largest index."""
    if 0 < prod(shape) <= FAST_SIZE:
        return
    nbytes = dtype.itemsize
    for d in shape:
        if d < 0:
            raise ValueError(f"{op}: negative dimensions are not allowed (shape {fmt_shape(shape)})")
        if d:
            nbytes *= d
    if nbytes > sys.maxsize:
        raise ValueError(
            f"{op}: array is too big; `arr.size * arr.itemsize` is larger than the maximum possible "
            f"size (shape {fmt_shape(shape)}, {dtype})"
        )


def describe(nodes: Sequence[Node]) -> str:
    """Shapes and dtypes of operands, for error messages."""
    return ", ".join(f"{fmt_shape(n.shape)} {n.dtype}" for n in nodes)


def shape_error(op: str, msg: str, nodes: Sequence[Node] = ()) -> ValueError:
    """A ValueError naming the op and its operands' shapes."""
    suffix = f" (operands: {describe(nodes)})" if nodes else ""
    return ValueError(f"{op}: {msg}{suffix}")


def type_error(op: str, msg: str, nodes: Sequence[Node] = ()) -> TypeError:
    """A TypeError naming the op and its operands' dtypes."""
    suffix = f" (operands: {describe(nodes)})" if nodes else ""
    return TypeError(f"{op}: {msg}{suffix}")


# ---------------------------------------------------------------------------------------
# Shared rules.


def is_weak_scalar(node: Node) -> bool:
    """A Python scalar operand: its dtype yields to the other operands (NumPy 2, NEP 50).

    Nodes that mark their leaves themselves (the optimizer's Q nodes: no operator, a `scalar`
    flag, a stand-in `buffer` of the scalar's Python type) are read through the same test.
    """
    op = node.op
    return op.name == "scalar" if op is not None else bool(getattr(node, "scalar", False))


def broadcast_shapes(op: str, nodes: Sequence[Node]) -> Shape:
    """NumPy broadcasting of the operands' shapes, with an error naming the op."""
    shapes = [n.shape for n in nodes]
    first = shapes[0]
    for s in shapes:
        if s != first:
            break
    else:
        return first
    out = list(max(shapes, key=len))
    ndim = len(out)
    ok = True
    for s in shapes:
        off = ndim - len(s)
        for i, d in enumerate(s):
            cur = out[off + i]
            if d != cur:
                if cur == 1:
                    out[off + i] = d
                elif d != 1:
                    ok = False
    if not ok:
        raise shape_error(
            op,
            "operands could not be broadcast together with shapes " + " ".join(fmt_shape(s) for s in shapes),
        )
    return tuple(out)


def normalize_axis(op: str, axis: int, ndim: int) -> int:
    """A non-negative axis index, or an AxisError-like ValueError naming the op."""
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"{op}: axis must be an integer, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(f"{op}: axis {axis} is out of bounds for array of dimension {ndim}")
    return int(axis) % ndim if ndim else 0


def normalize_axes(op: str, axis: Any, ndim: int) -> tuple[int, ...]:
    """Axis argument (None, int or tuple) as a sorted tuple of distinct non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (list, tuple)):
        axes = tuple(normalize_axis(op, a, ndim) for a in axis)
    else:
        axes = (normalize_axis(op, axis, ndim),)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{op}: repeated axis in {axis!r}")
    return tuple(sorted(axes))


def _example(node: Node) -> Any:
    # Python scalars stay Python scalars so that NumPy applies its weak-scalar rules.
    if is_weak_scalar(node):
        return node.buffer
    # Size-0 dimensions stay 0: NumPy raises no per-element errors (x ** -1) on empty arrays.
    return np.zeros(tuple(0 if d == 0 else 1 for d in node.shape), dtype=node.dtype)


_dtype_cache: dict[tuple, np.dtype] = {}

_INT_RANGES = tuple(
    (int(np.iinfo(t).min), int(np.iinfo(t).max))
    for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64)
)


def _weak_sig(value: Any) -> Any:
    # NumPy's treatment of a Python int depends only on which integer dtypes can hold it,
    # so that (not the value) goes into the cache key.
    if type(value) is int:
        return (int, tuple(lo <= value <= hi for lo, hi in _INT_RANGES))
    return type(value)


def drops_imaginary(src: np.dtype, dst: Any) -> bool:
    """Whether NumPy's cast from `src` to `dst` keeps only the real part (and warns): complex to
    anything but complex and bool (bool takes the truth value of the whole number)."""
    return src.kind == "c" and np.dtype(dst).kind not in "cb"


def dtype_by_example(op: str, fn: Callable, inputs: Sequence[Node], **kwargs: Any) -> np.dtype:
    """Result dtype of `fn` under NumPy's own promotion rules, found on tiny stand-ins.

    Running the reference function on one-element arrays (and the real Python scalars)
    reproduces NumPy exactly, including value-based errors such as an int8 array plus
    1000; results are cached per dtype signature when no Python int is involved.
    """
    sig = tuple([_weak_sig(n.buffer) if is_weak_scalar(n) else n.dtype for n in inputs])
    # Empty stand-ins skip per-element errors (int ** -1), so they bypass the cache.
    value_dependent = False
    for n in inputs:
        if 0 in n.shape:
            value_dependent = True
            break
    key = (op, sig, tuple(sorted(kwargs.items())) if kwargs else ())
    if not value_dependent:
        try:
            return _dtype_cache[key]
        except (KeyError, TypeError):
            pass
    try:
        # Stand-in values are not the user's data: their warnings (mean of empty slice) are noise.
        # A ufunc warns only through errstate, so it skips the costlier catch_warnings.
        if type(fn) is np.ufunc:
            with np.errstate(all="ignore"):
                out = fn(*[_example(n) for n in inputs], **kwargs)
        else:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                out = fn(*(_example(n) for n in inputs), **kwargs)
    except TypeError as e:
        names = ", ".join(str(n.dtype) if not is_weak_scalar(n) else type(n.buffer).__name__ for n in inputs)
        raise type_error(op, f"not supported for input types ({names}): {e}", inputs) from None
    except OverflowError as e:
        raise OverflowError(f"{op}: {e} (operands: {describe(inputs)})") from None
    except ValueError as e:
        raise ValueError(f"{op}: {e} (operands: {describe(inputs)})") from None
    dtype = out if isinstance(out, np.dtype) else np.asarray(out).dtype  # result_type gives a dtype
    if not value_dependent:
        try:
            _dtype_cache[key] = dtype
        except TypeError:
            pass
    return dtype


def reduced_shape(shape: Shape, axes: tuple[int, ...], keepdims: bool) -> Shape:
    """Shape after reducing `axes`."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)
