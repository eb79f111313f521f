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
from ops.base import REGISTRY
from ops.window import conv2d_forward

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


# ---------------------------------------------------------------------------------------
# Convolution, pooling, enlarge


def _pads(pad: Any, k: tuple[int, int]) -> tuple[int, int] | None:
    if pad == "valid":
        return (0, 0)
    if pad == "same":
        return (k[0] // 2, k[1] // 2) if k[0] % 2 and k[1] % 2 else None
    return None


def _out(h: int, k: int, s: int, p: int) -> int:
    return (h + 2 * p - k) // s + 1


def _conv_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    stride, pad, act = params
    x, w = ins
    if len(x.shape) != 4 or len(w.shape) != 4 or w.shape[1] == 0:
        return None
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if c % cg or o % (c // cg):
        return None
    p = _pads(pad, (kh, kw))
    if p is None or h + 2 * p[0] < kh or wd + 2 * p[1] < kw:
        return None
    shape = (n, o, _out(h, kh, stride, p[0]), _out(wd, kw, stride, p[1]))
    return [TS(shape, (x.splits[0], w.splits[0], (), ()))]


def _conv_compute(p: tuple, xs: list, i: list[TS], o: list[TS], R: Any) -> list[np.ndarray]:
    stride, pad, act = p
    x, w = xs
    groups = i[0].shape[1] // i[1].shape[1]
    pads = _pads(pad, i[1].shape[2:])
    y = R.norm(conv2d_forward(x, w, None, (stride, stride), pads, (1, 1), groups))
    return [R.relu(y) if act == "relu" else y]


def _conv_lower(p: tuple, i: list[TS], o: list[TS]) -> tuple[str, dict] | None:
    stride, pad, act = p
    # the conv alone: with activation relu, the caller appends maximum(., 0) (convert.to_graph)
    return "conv2d", {
        "stride": (stride, stride),
        "padding": _pads(pad, i[1].shape[2:]),
        "dilation": (1, 1),
        "groups": i[0].shape[1] // i[1].shape[1],
    }


def _pool_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    k, stride, pad = params
    (x,) = ins
    if len(x.shape) != 4:
        return None
    p = _pads(pad, (k, k))
    if p is None or x.shape[2] + 2 * p[0] < k or x.shape[3] + 2 * p[1] < k:
        return None
    n, c, h, w = x.shape
    return [TS((n, c, _out(h, k, stride, p[0]), _out(w, k, stride, p[1])), x.splits[:2] + ((), ()))]


def _avg_compute(p: tuple, xs: list, i: list[TS], o: list[TS], R: Any) -> list[np.ndarray]:
    k, stride, pad = p
    c = i[0].shape[1]
    pads = _pads(pad, (k, k))
    ones = np.ones((c, 1, k, k), dtype=xs[0].dtype)
    total = conv2d_forward(xs[0], ones, None, (stride, stride), pads, (1, 1), c)
    return [R.scale(R.norm(total), 1, k * k)]


def _max_compute(p: tuple, xs: list, i: list[TS], o: list[TS], R: Any) -> list[np.ndarray]:
    k, stride, pad = p
    pads = _pads(pad, (k, k))
    kern = REGISTRY["max_pool2d"].kernel
    return [R.norm(kern(xs[0], kernel_size=(k, k), stride=(stride, stride), padding=pads, dilation=(1, 1)))]


def _pool_lower(name: str) -> Callable:
    def lower(p: tuple, i: list[TS], o: list[TS]) -> tuple[str, dict]:
        k, stride, pad = p
        attrs: dict[str, Any] = {
            "kernel_size": (k, k),
            "stride": (stride, stride),
            "padding": _pads(pad, (k, k)),
        }
        attrs.update({"dilation": (1, 1)} if name == "max_pool2d" else {"count_include_pad": True})
        return name, attrs

    return lower


def _enlarge_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    (k,) = params
    (w,) = ins
    if len(w.shape) != 4 or w.shape[2] > k or w.shape[3] > k or (k - w.shape[2]) % 2 or (k - w.shape[3]) % 2:
        return None
    return [TS(w.shape[:2] + (k, k), w.splits[:2] + ((), ()))]


def _enlarge_widths(w: tuple[int, ...], k: int) -> tuple:
    a, b = (k - w[2]) // 2, (k - w[3]) // 2
    return ((0, 0), (0, 0), (a, a), (b, b))


declare(
    OpSpec(
        "conv2d",
        2,
        _conv_infer,
        _conv_compute,
        params=("stride", "padding", "activation"),
        choices={"stride": (1,), "padding": ("same",), "activation": ("none", "relu")},
        lower=_conv_lower,
        doc="NCHW cross-correlation; groups = C_in / weight.shape[1]; optional fused relu",
    )
)
declare(
    OpSpec(
        "avg_pool2d",
        1,
        _pool_infer,
        _avg_compute,
        params=("kernel", "stride", "padding"),
        choices={"kernel": (3,), "stride": (1,), "padding": ("same",)},
        lower=_pool_lower("avg_pool2d"),
        doc="average pooling (zero padding counted, as a depthwise conv with the pool kernel)",
    )
)
declare(
    OpSpec(
        "max_pool2d",
        1,
        _pool_infer,
        _max_compute,
        params=("kernel", "stride", "padding"),
        choices={"kernel": (3,), "stride": (1,), "padding": ("same",)},
        lower=_pool_lower("max_pool2d"),
        doc="max pooling",
    )
)
declare(
    OpSpec(
        "enlarge",
        1,
        _enlarge_infer,
        lambda p, xs, i, o, R: [np.pad(xs[0], _enlarge_widths(i[0].shape, p[0]))],
        params=("kernel",),
        choices={"kernel": (3,)},
        lower=lambda p, i, o: ("pad", {"pad_width": _enlarge_widths(i[0].shape, p[0]), "mode": "constant"}),
        doc="a conv kernel zero-padded to a larger odd window (centered)",
    )
)


# ---------------------------------------------------------------------------------------
# Constants: their argument only gives the shape


def _ident_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    s = ins[0].shape
    return [plain((s[-1], s[-1]))] if len(s) >= 2 else None


def _ones_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    return [plain(ins[0].shape)] if ins[0].shape else None


def _pool_kernel_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    s = ins[0].shape
    return [plain((s[1], 1, params[0], params[0]))] if len(s) == 4 else None


def _conv_ident_infer(params: tuple, ins: list[TS]) -> list[TS] | None:
    s = ins[0].shape
    return [plain((s[1], s[1], 1, 1))] if len(s) == 4 else None


def _const(make: Callable[[tuple, tuple], tuple[np.ndarray, int]]) -> Callable:
    def compute(p: tuple, xs: list, i: list[TS], o: list[TS], R: Any) -> list[np.ndarray]:
        num, den = make(p, o[0].shape)
        return [R.scale(R.norm(num), 1, den) if den != 1 else R.norm(num)]

    return compute


def _pool_kernel_value(p: tuple, shape: tuple) -> tuple[np.ndarray, int]:
    return np.ones(shape, dtype=np.int64), p[0] * p[0]


def _conv_ident_value(p: tuple, shape: tuple) -> tuple[np.ndarray, int]:
    return np.eye(shape[0], dtype=np.int64).reshape(shape), 1


for _spec in (
    OpSpec(
        "ident",
        1,
        _ident_infer,
        _const(lambda p, s: (np.eye(s[0], dtype=np.int64), 1)),
        constant=True,
        doc="identity matrix n x n, n = last axis of the argument",
    ),
    OpSpec(
        "ones",
        1,
        _ones_infer,
        _const(lambda p, s: (np.ones(s, dtype=np.int64), 1)),
        constant=True,
        doc="all ones, the argument's shape",
    ),
    OpSpec(
        "pool_kernel",
        1,
        _pool_kernel_infer,
        _const(_pool_kernel_value),
        params=("kernel",),
        choices={"kernel": (3,)},
        constant=True,
        doc="(C, 1, k, k) filled with 1/k^2: avg pooling as a depthwise conv (C = argument's axis 1)",
    ),
    OpSpec(
        "conv_ident",
        1,
        _conv_ident_infer,
        _const(_conv_ident_value),
        constant=True,
        doc="(C, C, 1, 1) identity conv kernel (C = argument's axis 1)",
    ),
):
    declare(_spec)


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
