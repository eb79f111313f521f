"""The superoptimizer's further elementwise operators: tanh, sigmoid, exp and subtract.

The recurrent cells (NasRNN, LSTM gates) and attention's softmax apply these to the results
of matmuls; with them in the vocabulary the generator finds the rules that move them across
concat, split and transpose (merging two matmuls that feed two tanh into one matmul and one
tanh) and the ones that distribute matmul and multiply over a difference.

In the fingerprint ring a unary function is an integer polynomial of its own (TASO's trick
for relu): exact, non-linear and distinct per function, so only equalities that hold for
*any* elementwise function are found, and those are what the axioms give z3 (each function
commutes with concat and transpose; nothing else is assumed about it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from optimizer.superopt.vocab import PRIME, TS, OpSpec, Site, _merge, declare


def _unary_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    return [ins[0]] if ins[0].shape else None


def _same_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    x, y = ins
    if x.shape != y.shape or not x.shape:
        return None
    return [TS(x.shape, tuple(_merge(a, b) for a, b in zip(x.splits, y.splits)))]


def _raise_unary(site: Site) -> list:
    """One non-scalar operand of the result's shape and dtype (no broadcasting, no cast)."""
    if len(site.args) != 1 or not site.shape:
        return []
    (x,) = site.args
    ok = site.shape_of(x) == site.shape and site.dtype_of(x) == site.dtype and not site.is_scalar(x)
    return [((), [x], 0)] if ok else []


def _raise_sub(site: Site) -> list:
    """Two same-shape non-scalar operands with the result's shape."""
    if len(site.args) != 2 or not site.shape:
        return []
    x, y = site.args
    ok = site.shape_of(x) == site.shape_of(y) == site.shape
    return [((), [x, y], 0)] if ok and not site.is_scalar(x) and not site.is_scalar(y) else []


def _unary_compute(fn: Callable[[np.ndarray], np.ndarray], k: int, c: int) -> Callable:
    """Real values through `fn`; in the exact ring the stand-in a*a + k*a + c (mod PRIME)."""

    def compute(p: tuple, xs: list, i: list[TS], o: list[TS], R: Any) -> list[np.ndarray]:
        a = xs[0]
        if getattr(R, "exact", False):
            return [np.mod(a * a + k * a + c, PRIME)]
        return [np.asarray(fn(np.asarray(a)))]

    return compute


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-a))


# (term, lazygraph operator, real function, stand-in coefficients: distinct from relu's 3, 5)
_UNARY = (
    ("tanh", "tanh", np.tanh, 7, 11),
    ("sigmoid", "sigmoid", _sigmoid, 13, 17),
    ("exp", "exp", np.exp, 19, 23),
)

for _name, _op, _fn, _k, _c in _UNARY:
    declare(
        OpSpec(
            _name,
            1,
            _unary_infer,
            _unary_compute(_fn, _k, _c),
            lower=lambda p, i, o, _op=_op: (_op, {}),
            doc=f"elementwise {_op}",
            raises={_op: _raise_unary},
        )
    )

declare(
    OpSpec(
        "sub",
        2,
        _same_infer,
        lambda p, xs, i, o, R: [R.norm(xs[0] - xs[1])],
        lower=lambda p, i, o: ("subtract", {}),
        doc="elementwise difference of two same-shape tensors",
        raises={"subtract": _raise_sub},
    )
)
