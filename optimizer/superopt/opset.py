"""The superoptimizer's elementwise, matrix, concat and split operators (see vocab.py).

Each term declares how a lazygraph node raises to it (`raise_`, over a `Site`) and which
operator it lowers to; convolution, pooling, enlarge and the constants are in opset_conv.py.
Importing this module declares the whole vocabulary.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ops.views import c_strides
from optimizer.superopt import pseudo as _pseudo  # noqa: F401  (slice_axis, superopt: operators of the pass)
from optimizer.superopt.vocab import (  # noqa: F401  (re-exported: the vocabulary's one import point)
    OPS,
    PRIME,
    PROJECTIONS,
    TS,
    WORDS,
    FloatRing,
    IntRing,
    OpSpec,
    Ring,
    Site,
    _cut,
    _merge,
    declare,
    infer,
    plain,
    readings,
)

# ---------------------------------------------------------------------------------------
# Elementwise


def _same(params: tuple, ins: list[TS]) -> list[TS] | None:
    x, y = ins
    if x.shape != y.shape or not x.shape:
        return None
    return [TS(x.shape, tuple(_merge(a, b) for a, b in zip(x.splits, y.splits)))]


def _unary(params: tuple, ins: list[TS]) -> list[TS] | None:
    return [ins[0]] if ins[0].shape else None


def _smul_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    x, s = ins
    return [x] if s.shape == () else None


def _same_tensors(site: Site) -> bool:
    """Two same-shape non-scalar operands with the result's shape (add, mul)."""
    if len(site.args) != 2 or not site.shape:
        return False
    x, y = site.args
    return (
        site.shape_of(x) == site.shape_of(y) == site.shape and not site.is_scalar(x) and not site.is_scalar(y)
    )


def _raise_add(site: Site) -> list:
    return [((), list(site.args), 0)] if _same_tensors(site) else []


def _raise_smul(site: Site) -> list:
    if len(site.args) != 2 or not site.shape or _same_tensors(site):
        return []
    x, y = site.args
    return [
        ((), [t, s], 0)
        for t, s in ((x, y), (y, x))
        if site.shape_of(t) == site.shape and site.shape_of(s) == () and site.dtype_of(t) == site.dtype
    ]


def _raise_relu(site: Site) -> list:
    if len(site.args) != 2:
        return []
    x, y = site.args
    return [
        ((), [t], 0)
        for t, s in ((x, y), (y, x))
        if site.shape_of(t) == site.shape and site.dtype_of(t) == site.dtype and site.is_zero(s)
    ]


declare(
    OpSpec(
        "add",
        2,
        _same,
        lambda p, xs, i, o, R: [R.norm(xs[0] + xs[1])],
        commutative=True,
        lower=lambda p, i, o: ("add", {}),
        doc="elementwise sum of two same-shape tensors",
        raises={"add": _raise_add},
    )
)
declare(
    OpSpec(
        "mul",
        2,
        _same,
        lambda p, xs, i, o, R: [R.norm(xs[0] * xs[1])],
        commutative=True,
        lower=lambda p, i, o: ("multiply", {}),
        doc="elementwise product of two same-shape tensors",
        raises={"multiply": _raise_add},
    )
)
declare(
    OpSpec(
        "smul",
        2,
        _smul_infer,
        lambda p, xs, i, o, R: [R.norm(xs[0] * xs[1])],
        kinds=("any", "scalar"),
        lower=lambda p, i, o: ("multiply", {}),
        doc="a tensor (or scalar) times a scalar (a 0-d operand)",
        raises={"multiply": _raise_smul},
    )
)
declare(
    OpSpec(
        "relu",
        1,
        _unary,
        lambda p, xs, i, o, R: [R.relu(xs[0])],
        lower=None,  # maximum(x, 0) needs a scalar leaf: the lowering appends it (activation)
        doc="max(x, 0)",
        raises={"maximum": _raise_relu},
        activation=lambda p: True,
    )
)


# ---------------------------------------------------------------------------------------
# Matrix operators


def _transpose_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    (x,) = ins
    if len(x.shape) < 2:
        return None
    s, sp = list(x.shape), list(x.splits)
    s[-1], s[-2] = s[-2], s[-1]
    sp[-1], sp[-2] = sp[-2], sp[-1]
    return [TS(tuple(s), tuple(sp))]


def _raise_matmul(site: Site) -> list:
    ok = (
        len(site.args) == 2
        and len(site.shape_of(site.args[1])) == 2
        and len(site.shape_of(site.args[0])) >= 2
    )
    return [((), list(site.args), 0)] if ok else []


def _raise_transpose(site: Site) -> list:
    """A view swapping the last two axes of its whole (contiguous) base."""
    if len(site.args) != 1:
        return []
    bs, v = tuple(site.shape_of(site.args[0])), site.attrs["view"]
    if len(bs) < 2 or v.offset != 0:
        return []
    st, sh = list(c_strides(bs)), list(bs)
    st[-1], st[-2] = st[-2], st[-1]
    sh[-1], sh[-2] = sh[-2], sh[-1]
    return [((), list(site.args), 0)] if tuple(v.shape) == tuple(sh) and tuple(v.strides) == tuple(st) else []


def _matmul_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    x, y = ins
    if len(x.shape) < 2 or len(y.shape) != 2 or x.shape[-1] != y.shape[0]:
        return None
    return [TS(x.shape[:-1] + (y.shape[1],), x.splits[:-1] + (y.splits[1],))]


declare(
    OpSpec(
        "matmul",
        2,
        _matmul_infer,
        lambda p, xs, i, o, R: [R.norm(np.matmul(xs[0], xs[1]))],
        lower=lambda p, i, o: ("matmul", {}),
        doc="(..., m, k) @ (k, n)",
        raises={"matmul": _raise_matmul},
    )
)
declare(
    OpSpec(
        "transpose",
        1,
        _transpose_infer,
        lambda p, xs, i, o, R: [np.ascontiguousarray(np.swapaxes(xs[0], -1, -2))],
        doc="swap the last two axes (a view in lazygraph)",
        raises={"view": _raise_transpose},
    )
)


# ---------------------------------------------------------------------------------------
# concat / split


def _concat_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    (a,) = params
    x, y = ins
    if len(x.shape) != len(y.shape) or not 0 <= a < len(x.shape):
        return None
    if any(d != e for k, (d, e) in enumerate(zip(x.shape, y.shape)) if k != a):
        return None
    dx = x.shape[a]
    shape = tuple(d + e if k == a else d for k, (d, e) in enumerate(zip(x.shape, y.shape)))
    splits = tuple(
        x.splits[k] + tuple(p + dx for p in y.splits[k]) + (dx,)
        if k == a
        else _merge(x.splits[k], y.splits[k])
        for k in range(len(shape))
    )
    return [TS(shape, splits)]


def _split_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    (a,) = params
    (t,) = ins
    if not 0 <= a < len(t.shape) or not t.splits[a]:
        return None
    top = t.splits[a][-1]
    out = []
    for first in (True, False):
        shape = tuple((top if first else d - top) if k == a else d for k, d in enumerate(t.shape))
        splits = tuple(_cut(t.splits[k], top, first) if k == a else t.splits[k] for k in range(len(shape)))
        out.append(TS(shape, splits))
    return out


def _raise_concat(site: Site) -> list:
    return [((site.attrs["axis"],), list(site.args), 0)] if len(site.args) == 2 else []


def _raise_piece(site: Site) -> list:
    """A slice_axis piece (the search's graphs) starting at 0 or ending at the end: split0 / split1."""
    a = site.attrs
    full = site.shape_of(site.args[0])[a["axis"]]
    out = [((a["axis"],), list(site.args), 0)] if a["start"] == 0 else []
    return out + ([((a["axis"],), list(site.args), 1)] if a["stop"] == full else [])


def view_cut(base: tuple[int, ...], v: Any) -> tuple[int, int, int] | None:
    """(axis, start, stop) if the view is a contiguous-strided cut of its base along one axis."""
    bs = tuple(base)
    if len(v.shape) != len(bs) or tuple(v.strides) != c_strides(bs):
        return None
    diff = [k for k, (d, e) in enumerate(zip(v.shape, bs)) if d != e]
    if len(diff) != 1:
        return None
    ax = diff[0]
    step = c_strides(bs)[ax]
    if step == 0 or v.offset % step:
        return None
    start = v.offset // step
    return ax, start, start + v.shape[ax]


def _raise_cut(site: Site) -> list:
    """A view cutting its base at the last concat boundary of an axis (recorded graphs: the
    boundary is the base's split stack, which the reader knows from the term types)."""
    if len(site.args) != 1:
        return []
    base = site.args[0]
    cut = view_cut(site.shape_of(base), site.attrs["view"])
    stacks = site.splits_of(base) if cut else None
    if cut is None or stacks is None or not stacks[cut[0]]:
        return []
    ax, start, stop = cut
    top = stacks[ax][-1]
    if (start, stop) == (0, top):
        return [((ax,), [base], 0)]
    if (start, stop) == (top, site.shape_of(base)[ax]):
        return [((ax,), [base], 1)]
    return []


def _split_compute(p: tuple, xs: list, i: list[TS], o: list[TS], R: Any) -> list[np.ndarray]:
    a = p[0]
    top = o[0].shape[a]
    return [np.ascontiguousarray(part) for part in np.split(xs[0], [top], axis=a)]


declare(
    OpSpec(
        "concat",
        2,
        _concat_infer,
        lambda p, xs, i, o, R: [np.concatenate(xs, axis=p[0])],
        params=("axis",),
        choices={"axis": (0, 1)},
        lower=lambda p, i, o: ("concat", {"axis": p[0]}),
        doc="two tensors joined along an axis",
        raises={"concat": _raise_concat},
    )
)
declare(
    OpSpec(
        "split",
        1,
        _split_infer,
        _split_compute,
        params=("axis",),
        choices={"axis": (0, 1)},
        n_out=2,
        out_names=("split0", "split1"),
        doc="the two parts of a tensor cut at its last concat boundary on the axis (slicing views)",
        raises={"slice_axis": _raise_piece, "view": _raise_cut},
    )
)


# The convolution, pooling and constant operators, and tanh / sigmoid / exp / sub, are declared
# in their own modules.
from optimizer.superopt import opset_conv as _opset_conv  # noqa: E402, F401
from optimizer.superopt import opset_elem as _opset_elem  # noqa: E402, F401
