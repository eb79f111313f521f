"""Linear algebra: matmul with batch broadcasting and two-or-more operand einsum."""

from __future__ import annotations

from math import prod
from typing import Any

import numpy as np

from ops.base import Op, defvjp, dtype_by_example, fmt_shape, holomorphic, register, shape_error
from ops.declare import declare
from ops.node import Node


def _result_dtype(*xs: Any) -> np.dtype:
    return np.result_type(*xs)


class MatMul(Op):
    """`a @ b` with NumPy's 1-D promotion and broadcast batch dimensions."""

    kind = "contraction"
    #: the NumPy ufunc the kernel applies: the engine may call it with `out=` (a planned buffer)
    fn = np.matmul

    def __init__(self) -> None:
        super().__init__("matmul")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Batch-broadcast shape; inner dimensions must agree."""
        a, b = inputs
        for i, n in enumerate(inputs):
            if n.ndim == 0:
                raise shape_error("matmul", f"operand {i} is 0-d; matmul needs at least 1 dimension", inputs)
        sa = (1,) + a.shape if a.ndim == 1 else a.shape
        sb = b.shape + (1,) if b.ndim == 1 else b.shape
        if sa[-1] != sb[-2]:
            raise shape_error(
                "matmul",
                f"inner dimensions differ: {fmt_shape(a.shape)} @ {fmt_shape(b.shape)} "
                f"({sa[-1]} != {sb[-2]})",
            )
        try:
            batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
        except ValueError:
            raise shape_error(
                "matmul",
                f"batch dimensions {fmt_shape(sa[:-2])} and {fmt_shape(sb[:-2])} do not broadcast",
            ) from None
        shape = batch + (sa[-2],) * (a.ndim > 1) + (sb[-1],) * (b.ndim > 1)
        dtype = dtype_by_example("matmul", np.matmul, inputs)
        return shape, dtype, {}

    def kernel(self, a: Any, b: Any) -> Any:
        """np.matmul (BLAS for floating point)."""
        return np.matmul(a, b)


def parse_einsum(subscripts: str, shapes: list[tuple[int, ...]]) -> tuple[list[str], str, dict]:
    """Expand '...' and implicit output; returns per-operand labels, output labels, sizes.

    Ellipsis dimensions get private labels (upper-case letters are user labels too, so the
    expansion uses characters that are not valid einsum labels and maps them back later).
    """
    spec = subscripts.replace(" ", "")
    if "->" in spec:
        lhs, out = spec.split("->")
        explicit = True
    else:
        lhs, out, explicit = spec, "", False
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"einsum: {len(terms)} subscript terms for {len(shapes)} operands")
    ell_nd = 0
    for t, s in zip(terms, shapes):
        if "..." in t:
            ell_nd = max(ell_nd, len(s) - (len(t) - 3))
    ell = [chr(0x100 + i) for i in range(ell_nd)]
    labels: list[str] = []
    sizes: dict[str, int] = {}
    for t, s in zip(terms, shapes):
        if "..." in t:
            n = len(s) - (len(t) - 3)
            if n < 0:
                raise ValueError(f"einsum: term {t!r} has more labels than operand dimensions {fmt_shape(s)}")
            t = t.replace("...", "".join(ell[ell_nd - n :]))
        if len(t) != len(s):
            raise ValueError(f"einsum: term {t!r} does not match operand shape {fmt_shape(s)}")
        here: dict[str, int] = {}
        for ch, d in zip(t, s):
            if not (ch.isalpha() or ord(ch) >= 0x100):
                raise ValueError(f"einsum: invalid subscript {ch!r}")
            if here.setdefault(ch, d) != d:
                raise ValueError(
                    f"einsum: dimensions in single operand for collapsing index {ch!r} don't match "
                    f"({here[ch]} != {d})"
                )
            if ch in sizes and sizes[ch] != d:
                if 1 in (sizes[ch], d):  # as NumPy, size-1 dimensions broadcast for any label
                    sizes[ch] = d if sizes[ch] == 1 else sizes[ch]  # (1 yields, also to 0)
                    continue
                raise ValueError(
                    f"einsum: dimension {ch!r} has size {sizes[ch]} in one operand and {d} in another "
                    f"(subscripts {subscripts!r}, shapes {', '.join(fmt_shape(x) for x in shapes)})"
                )
            sizes.setdefault(ch, d)
        labels.append(t)
    if explicit:
        out = out.replace("...", "".join(ell))
        for ch in out:
            if ch not in sizes:
                raise ValueError(f"einsum: output label {ch!r} does not appear in the inputs")
    else:
        counts: dict[str, int] = {}
        for t in labels:
            for ch in t:
                counts[ch] = counts.get(ch, 0) + 1
        out = "".join(ell) + "".join(sorted(c for c, k in counts.items() if k == 1 and ord(c) < 0x100))
    return labels, out, sizes


class Einsum(Op):
    """Einstein summation over any number of operands (contractions, outer products)."""

    kind = "contraction"

    def __init__(self) -> None:
        super().__init__("einsum")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Shape from the subscripts; dtype as NumPy's result_type of the operands."""
        sub = attrs["subscripts"]
        try:
            _, out, sizes = parse_einsum(sub, [n.shape for n in inputs])
        except ValueError as e:
            raise shape_error("einsum", str(e).removeprefix("einsum: "), inputs) from None
        dtype = dtype_by_example("einsum", _result_dtype, inputs)
        return tuple(sizes[c] for c in out), dtype, {"subscripts": sub}

    def kernel(self, *xs: Any, subscripts: str) -> Any:
        """np.einsum with contraction-order optimization (BLAS where it applies)."""
        labels, _, sizes = parse_einsum(subscripts, [np.shape(x) for x in xs])
        # NumPy's optimized path mishandles a size-1 dimension broadcast against a longer one
        # (np.einsum("ij,jk->ik", [[True, True]], [[1]], optimize=True) gives [[1]], not [[2]])
        broadcast = any(d == 1 != sizes[c] for t, x in zip(labels, xs) for c, d in zip(t, np.shape(x)))
        return np.einsum(subscripts, *xs, optimize=len(xs) > 1 and not broadcast)


def _matmul_cost(out: tuple, ins: list[tuple], attrs: dict) -> tuple[float, float]:
    """2 flops per output element per contracted element; no traffic beyond operands and result."""
    k = ins[0][-1] if ins[0] else 1
    return 2.0 * float(prod(out)) * k, 0.0


declare(MatMul(), cost=_matmul_cost)
register(Einsum())


# ---------------------------------------------------------------------------------------
# Gradients (see Op.vjp).


def _transposed(x: Any) -> bool:
    """Whether x is recorded as a transposed view of a row-major matrix (or batch of them)."""
    node = x.node
    if node.op.name != "view" or x.ndim < 2:
        return False
    strides = node.attrs["view"].strides
    return strides[-2] == 1 and strides[-1] == x.shape[-2] and x.shape[-2] > 1


@defvjp("matmul")
@holomorphic
def _matmul_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict, needs: tuple = (True, True)) -> tuple:
    a, b = xs
    # Promote 1-D operands as matmul does, differentiate the matrix product, then drop the
    # promoted axes again; the caller sums broadcast batch axes away.
    a2 = a.reshape(1, a.shape[0]) if a.ndim == 1 else a
    b2 = b.reshape(b.shape[0], 1) if b.ndim == 1 else b
    g2 = g
    if a.ndim == 1:
        g2 = F.expand_dims(g2, -2 if b.ndim > 1 else 0)
    if b.ndim == 1:
        g2 = F.expand_dims(g2, -1)
    # An operand that is a transposed view (`x @ w.T`, as nn.Linear records it) gets its
    # cotangent as the transpose of a product in its base's orientation: the gradient then
    # lands in the base's layout, so a kept `w.grad` and the optimizer update read one product
    # (computed the other way round, the graph needed it in both layouts: two GEMMs).
    ga = gb = None
    if needs[1]:
        if _transposed(b2):
            gb = F.matrix_transpose(F.matrix_transpose(g2) @ a2)
        else:
            gb = F.matrix_transpose(a2) @ g2
        if b.ndim == 1:
            gb = F.squeeze(gb, axis=-1)
    if needs[0]:
        if _transposed(a2):
            ga = F.matrix_transpose(b2 @ F.matrix_transpose(g2))
        else:
            ga = g2 @ F.matrix_transpose(b2)
        if a.ndim == 1:
            ga = F.squeeze(ga, axis=-2)
    return ga, gb


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@defvjp("einsum")
@holomorphic
def _einsum_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    labels, out_labels, _ = parse_einsum(attrs["subscripts"], [x.shape for x in xs])
    names = {c: _LETTERS[i] for i, c in enumerate(dict.fromkeys("".join(labels) + out_labels))}

    def spell(t: str) -> str:
        return "".join(names[c] for c in t)

    grads = []
    for i, x in enumerate(xs):
        mine = labels[i]
        if len(set(mine)) != len(mine):
            raise TypeError(
                f"grad: einsum gradient for an operand with a repeated subscript ({attrs['subscripts']!r}) "
                "is not supported"
            )
        others = [labels[j] for j in range(len(xs)) if j != i]
        available = set(out_labels).union(*others) if others else set(out_labels)
        target = "".join(c for c in mine if c in available)
        spec = ",".join(spell(t) for t in [out_labels, *others]) + "->" + spell(target)
        r = F.einsum(spec, g, *[xs[j] for j in range(len(xs)) if j != i])
        if target != mine:  # labels summed only within this operand: put them back as size 1
            dims = iter(r.shape)
            r = r.reshape(tuple(next(dims) if c in available else 1 for c in mine))
        # Size-1 axes broadcast back over the operand (a label summed only here, or one that
        # is 1 in the other operands); larger ones are summed away by the caller.
        full = tuple(e if d == 1 else d for d, e in zip(r.shape, x.shape, strict=True))
        if full != r.shape:
            r = F.broadcast_to(r, full)
        grads.append(r)
    return tuple(grads)
