"""The superoptimizer's operator vocabulary: every operator declared once, with all it needs.

An `OpSpec` holds an operator's arity, parameters (with the values the generator enumerates),
its shape rule, its evaluation in two rings (float64 with the reference kernels of ops/, and
exact integers mod a prime for fingerprints, where relu becomes an integer polynomial as in
TASO), its z3 symbol, and how it maps to lazygraph operators (`lower`, used by convert.py;
the reverse mapping, "raise", lives in convert.py because it reads Q nodes).

Shapes travel as `TS` (shape + split stacks): a split has no explicit position in the z3
model (TASO's semantics: `split0(a, concat(a, x, y)) = x`), so every value carries, per axis,
the stack of concat boundaries it inherited; a split cuts at the top of that stack. Two terms
are equal only if their values *and* split stacks agree, which is what makes concat
associativity detectably wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

import ops  # noqa: F401  (registers the reference operators)

#: the prime of the fingerprint ring (products stay far below 2**63 before reduction)
PRIME = 16777213


class TS(NamedTuple):
    """A value's type: its shape and, per axis, the stack of concat boundaries (for split)."""

    shape: tuple[int, ...]
    splits: tuple[tuple[int, ...], ...]


def plain(shape: tuple[int, ...]) -> TS:
    """The type of an input: a shape with no split history."""
    return TS(tuple(int(d) for d in shape), tuple(() for _ in shape))


class FloatRing:
    """Real arithmetic in float64 with the reference kernels (the meaning of each operator)."""

    exact = False

    @staticmethod
    def norm(a: np.ndarray) -> np.ndarray:
        """Values are kept as they are."""
        return np.asarray(a, dtype=np.float64)

    @staticmethod
    def relu(a: np.ndarray) -> np.ndarray:
        """The real relu."""
        return np.maximum(a, 0.0)

    @staticmethod
    def scale(a: np.ndarray, num: int, den: int) -> np.ndarray:
        """a * num / den."""
        return a * (num / den)

    @staticmethod
    def random(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """Standard normal values."""
        return rng.standard_normal(shape)


class IntRing:
    """Exact integers mod PRIME: fingerprints that never suffer rounding."""

    exact = True

    @staticmethod
    def norm(a: np.ndarray) -> np.ndarray:
        """Reduce mod PRIME."""
        return np.mod(np.asarray(a, dtype=np.int64), PRIME)

    @staticmethod
    def relu(a: np.ndarray) -> np.ndarray:
        """TASO's trick: an exact stand-in for relu (elementwise, non-linear, not multiplicative)."""
        return np.mod(a * a + 3 * a + 5, PRIME)

    @staticmethod
    def scale(a: np.ndarray, num: int, den: int) -> np.ndarray:
        """a * num / den with the inverse of den mod PRIME."""
        return np.mod(a * (num * pow(den, -1, PRIME) % PRIME), PRIME)

    @staticmethod
    def random(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """Uniform residues."""
        return rng.integers(0, PRIME, size=shape, dtype=np.int64)


Ring = type[FloatRing] | type[IntRing]

#: words parameters may take, and the integers z3 sees for them
WORDS = {"none": 0, "relu": 1, "same": -1, "valid": -2}


@dataclass
class OpSpec:
    """One operator of the vocabulary (see the module docstring)."""

    name: str
    arity: int
    infer: Callable[[tuple, list[TS]], list[TS] | None]
    compute: Callable[[tuple, list[np.ndarray], list[TS], list[TS], Any], list[np.ndarray]]
    params: tuple[str, ...] = ()
    choices: dict[str, tuple] = field(default_factory=dict)  # what the generator enumerates
    n_out: int = 1
    kinds: tuple[str, ...] = ()  # "tensor", "scalar" or "any" per argument (default: tensors)
    commutative: bool = False
    constant: bool = False  # value independent of the arguments' values (shape only)
    out_names: tuple[str, ...] = ()  # names of the projections of a multi-output operator
    lower: Callable[[tuple, list[TS], list[TS]], tuple[str, dict] | None] | None = None
    doc: str = ""

    def arg_kind(self, i: int) -> str:
        """The kind an argument must have."""
        return self.kinds[i] if self.kinds else "tensor"

    def z3_extra(self, params: tuple, ins: list[TS]) -> tuple[int, ...]:
        """Integers passed to the z3 symbol before the tensor arguments."""
        out = [WORDS[p] if isinstance(p, str) else int(p) for p in params]
        if self.name == "conv2d":
            out.append(ins[0].shape[1] // ins[1].shape[1])  # groups, inferred from the shapes
        return tuple(out)


OPS: dict[str, OpSpec] = {}
#: projection name (split0, split1) -> (operator, output index)
PROJECTIONS: dict[str, tuple[str, int]] = {}


def declare(spec: OpSpec) -> OpSpec:
    """Add an operator to the vocabulary (names are unique)."""
    if spec.name in OPS:
        raise ValueError(f"superopt operator {spec.name!r} is already declared")
    OPS[spec.name] = spec
    for k, p in enumerate(spec.out_names):
        PROJECTIONS[p] = (spec.name, k)
    return spec


# ---------------------------------------------------------------------------------------
# Split stacks


def _merge(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return a if a or not b else b


def _cut(stack: tuple[int, ...], top: int, first: bool) -> tuple[int, ...]:
    rest = stack[:-1]
    return tuple(p for p in rest if p < top) if first else tuple(p - top for p in rest if p > top)


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


declare(
    OpSpec(
        "add",
        2,
        _same,
        lambda p, xs, i, o, R: [R.norm(xs[0] + xs[1])],
        commutative=True,
        lower=lambda p, i, o: ("add", {}),
        doc="elementwise sum of two same-shape tensors",
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
    )
)
declare(
    OpSpec(
        "relu",
        1,
        _unary,
        lambda p, xs, i, o, R: [R.relu(xs[0])],
        lower=None,  # maximum(x, 0) needs a scalar leaf: convert.py builds it
        doc="max(x, 0)",
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
    )
)
declare(
    OpSpec(
        "transpose",
        1,
        _transpose_infer,
        lambda p, xs, i, o, R: [np.ascontiguousarray(np.swapaxes(xs[0], -1, -2))],
        doc="swap the last two axes (a view in lazygraph)",
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
    )
)


def infer(op: str, params: tuple, ins: list[TS]) -> list[TS] | None:
    """Output types of an application, or None when the shapes or parameters don't fit."""
    spec = OPS[op]
    if len(ins) != spec.arity:
        return None
    for k, t in enumerate(ins):
        kind = spec.arg_kind(k)
        if kind != "any" and (kind == "scalar") != (t.shape == ()):
            return None
    try:
        return spec.infer(tuple(params), ins)
    except (TypeError, ValueError, IndexError, ZeroDivisionError):
        return None


# The convolution, pooling and constant operators are declared in their own module.
from optimizer.superopt import opset_conv as _opset_conv  # noqa: E402, F401
