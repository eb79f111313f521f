"""Elementwise operators: NumPy ufuncs and a few composite pointwise functions.

Shape rule: broadcasting. Dtype rule: NumPy's own, found by `dtype_by_example`, so
integer, boolean and weak Python-scalar promotion match NumPy 2 exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ops.base import Op, broadcast_shapes, defvjp, dtype_by_example, register, type_error
from ops.node import Node


class Elementwise(Op):
    """A pointwise function of `arity` broadcast operands."""

    kind = "elementwise"

    def __init__(self, name: str, fn: Callable, arity: int, dtype_fn: Callable | None = None):
        super().__init__(name)
        self.fn = fn
        self.arity = arity
        self.dtype_fn = dtype_fn or fn

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Broadcast shapes; NumPy's result dtype."""
        if len(inputs) != self.arity:
            raise TypeError(f"{self.name}: expected {self.arity} operands, got {len(inputs)}")
        # NumPy resolves the loop (dtypes) before it broadcasts: a TypeError wins.
        dtype = dtype_by_example(self.name, self.dtype_fn, inputs, **attrs)
        shape = broadcast_shapes(self.name, inputs)
        return shape, dtype, attrs

    def kernel(self, *args: Any, **attrs: Any) -> Any:
        """Apply the NumPy function."""
        return self.fn(*args, **attrs)


def _float_dtype(x: np.ndarray) -> np.dtype:
    # The dtype NumPy's transcendental ufuncs produce for x (int -> float64, bool -> float16).
    return np.exp(np.zeros((), dtype=x.dtype)).dtype


def _sigmoid(x: Any) -> np.ndarray:
    x = np.asarray(x)
    t = _float_dtype(x)
    xf = x.astype(t, copy=False)
    # exp(-|x|) never overflows, so both branches are finite.
    e = np.exp(-np.abs(xf))
    return np.where(xf >= 0, 1 / (1 + e), e / (1 + e)).astype(t, copy=False)


_erf_scalar = np.frompyfunc(math.erf, 1, 1)


def _erf(x: Any) -> np.ndarray:
    x = np.asarray(x)
    t = _float_dtype(x)
    if t.kind == "c":
        raise TypeError("erf is not defined for complex input")
    # math.erf is correctly rounded in double precision; NumPy has no erf of its own.
    return np.asarray(_erf_scalar(x.astype(np.float64)), dtype=np.float64).astype(t)


def _cast(x: Any, dtype: np.dtype) -> np.ndarray:
    return np.asarray(x).astype(dtype)


class Cast(Elementwise):
    """Conversion to another dtype (NumPy's `astype`, unsafe casting)."""

    def __init__(self) -> None:
        super().__init__("astype", _cast, 1)

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Same shape; the requested dtype."""
        try:
            dtype = np.dtype(attrs["dtype"])
        except TypeError as e:
            raise type_error(self.name, f"invalid dtype {attrs['dtype']!r}: {e}") from None
        return inputs[0].shape, dtype, {"dtype": dtype}


BINARY = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.true_divide,
    "floor_divide": np.floor_divide,
    "remainder": np.remainder,
    "pow": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "atan2": np.arctan2,
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
    "bitwise_left_shift": np.left_shift,
    "bitwise_right_shift": np.right_shift,
}

UNARY = {
    "negative": np.negative,
    "positive": np.positive,
    "abs": np.absolute,
    "exp": np.exp,
    "expm1": np.expm1,
    "log": np.log,
    "log1p": np.log1p,
    "log2": np.log2,
    "log10": np.log10,
    "sqrt": np.sqrt,
    "square": np.square,
    "reciprocal": np.reciprocal,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "sign": np.sign,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "isnan": np.isnan,
    "isfinite": np.isfinite,
    "isinf": np.isinf,
    "logical_not": np.logical_not,
    "bitwise_invert": np.invert,
}

# JIT descriptions (jit/ renders them into fused C and CUDA kernels): per operator, the C
# expression for each loop-dtype kind ("f" float, "i" signed, "u" unsigned, "b" bool; a key may
# list several) and a relative cost (an add is 1) that fusion weighs against storing a value.
# Operands {0}..{2} are plain variables already in the loop dtype (C type {T}, {bits} wide), so a
# template may name them twice. A kind with no template (int power: NumPy raises on negative
# exponents) stays with the NumPy kernel. Loop dtypes are NumPy's own (ufunc.resolve_dtypes);
# where/clip/astype/sigmoid/erf/round compute in the output dtype.
# NumPy's maximum propagates NaN, and of two equal values (+0 and -0) returns the second
_NAN_MAX = "(({0}) > ({1}) || ({0}) != ({0})) ? ({0}) : ({1})"
_NAN_MIN = "(({0}) < ({1}) || ({0}) != ({0})) ? ({0}) : ({1})"
_SIGN = "(({0}) > 0 ? ({T})1 : (({0}) < 0 ? ({T})-1 : ({0})))"  # sign(nan) is nan, sign(0) is 0
_F = "f"
JIT_EXPR: dict[str, tuple[dict[str, str], float]] = {
    "add": ({"fiub": "{0} + {1}"}, 1),
    "subtract": ({"fiu": "{0} - {1}"}, 1),
    "multiply": ({"fiub": "{0} * {1}"}, 1),
    "divide": ({_F: "{0} / {1}"}, 4),
    "floor_divide": ({"fiu": "lg_floordiv_{t}({0}, {1})"}, 8),
    "remainder": ({"fiu": "lg_remainder_{t}({0}, {1})"}, 8),
    "pow": ({_F: "pow({0}, {1})"}, 16),
    "maximum": ({"fiub": _NAN_MAX}, 1),
    "minimum": ({"fiub": _NAN_MIN}, 1),
    "atan2": ({_F: "atan2({0}, {1})"}, 12),
    "equal": ({"fiub": "{0} == {1}"}, 1),
    "not_equal": ({"fiub": "{0} != {1}"}, 1),
    "less": ({"fiub": "{0} < {1}"}, 1),
    "less_equal": ({"fiub": "{0} <= {1}"}, 1),
    "greater": ({"fiub": "{0} > {1}"}, 1),
    "greater_equal": ({"fiub": "{0} >= {1}"}, 1),
    "logical_and": ({"fiub": "({0} != 0) & ({1} != 0)"}, 1),
    "logical_or": ({"fiub": "({0} != 0) | ({1} != 0)"}, 1),
    "logical_xor": ({"fiub": "({0} != 0) != ({1} != 0)"}, 1),
    "bitwise_and": ({"iub": "{0} & {1}"}, 1),
    "bitwise_or": ({"iub": "{0} | {1}"}, 1),
    "bitwise_xor": ({"iub": "{0} ^ {1}"}, 1),
    "bitwise_left_shift": ({"iu": "lg_shl_{t}({0}, {1})"}, 2),
    "bitwise_right_shift": ({"iu": "lg_shr_{t}({0}, {1})"}, 2),
    "negative": ({"fiu": "-{0}"}, 1),
    "positive": ({"fiu": "{0}"}, 0),
    "abs": ({_F: "fabs({0})", "i": "({0} < 0 ? -{0} : {0})", "ub": "{0}"}, 1),
    "exp": ({_F: "exp({0})"}, 8),
    "expm1": ({_F: "expm1({0})"}, 10),
    "log": ({_F: "log({0})"}, 8),
    "log1p": ({_F: "log1p({0})"}, 10),
    "log2": ({_F: "log2({0})"}, 8),
    "log10": ({_F: "log10({0})"}, 8),
    "sqrt": ({_F: "sqrt({0})"}, 4),
    "square": ({"fiu": "{0} * {0}", "b": "{0}"}, 1),
    "reciprocal": ({_F: "({T})1 / {0}"}, 4),
    "sin": ({_F: "sin({0})"}, 10),
    "cos": ({_F: "cos({0})"}, 10),
    "tan": ({_F: "tan({0})"}, 12),
    "asin": ({_F: "asin({0})"}, 12),
    "acos": ({_F: "acos({0})"}, 12),
    "atan": ({_F: "atan({0})"}, 12),
    "sinh": ({_F: "sinh({0})"}, 12),
    "cosh": ({_F: "cosh({0})"}, 12),
    "tanh": ({_F: "tanh({0})"}, 10),
    "sign": ({"fi": _SIGN, "u": "({0} > 0)"}, 1),
    "floor": ({_F: "floor({0})", "iub": "{0}"}, 1),
    "ceil": ({_F: "ceil({0})", "iub": "{0}"}, 1),
    "trunc": ({_F: "trunc({0})", "iub": "{0}"}, 1),
    "isnan": ({_F: "({0} != {0})", "iub": "0"}, 1),
    "isfinite": ({_F: "({0} - {0} == 0)", "iub": "1"}, 1),
    "isinf": ({_F: "(fabs({0}) == ({T})INFINITY)", "iub": "0"}, 1),
    "logical_not": ({"fiub": "!{0}"}, 1),
    "bitwise_invert": ({"iu": "~{0}", "b": "!{0}"}, 1),
    "sigmoid": ({_F: "lg_sigmoid({0})"}, 12),
    "erf": ({_F: "erf({0})"}, 12),
    "round": ({_F: "lg_round({0}, {decimals})"}, 4),
    "where": ({"fiub": "{0} ? {1} : {2}"}, 1),
    "clip": ({"fiub": "lg_clip({0}, {1}, {2})"}, 2),
    "astype": ({"fiub": "({T}){0}"}, 1),
}


def _jit(op: Elementwise) -> None:
    """Attach the operator's JIT description (templates per dtype kind, cost)."""
    op.jit_expr, op.jit_cost = JIT_EXPR[op.name]


for _name, _fn in BINARY.items():
    _jit(register(Elementwise(_name, _fn, 2)))
for _name, _fn in UNARY.items():
    _jit(register(Elementwise(_name, _fn, 1)))

_jit(register(Elementwise("sigmoid", _sigmoid, 1, dtype_fn=np.exp)))
_jit(register(Elementwise("erf", _erf, 1, dtype_fn=_erf)))
_jit(register(Elementwise("round", np.round, 1)))
_jit(register(Elementwise("where", np.where, 3)))
_jit(register(Elementwise("clip", np.clip, 3)))  # both bounds: NumPy promotes the three operands together
_jit(register(Cast()))


# ---------------------------------------------------------------------------------------
# Gradients (see Op.vjp): F is the recording namespace, g the output's cotangent.

_LN2, _LN10, _TWO_OVER_SQRT_PI = math.log(2.0), math.log(10.0), 2.0 / math.sqrt(math.pi)


def _unary(*names: str) -> Callable:
    """Register d(out)/d(x) rules written as fn(F, g, x, out) -> cotangent of x."""

    def attach(fn: Callable) -> Callable:
        def rule(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
            return (fn(F, g, xs[0], out),)

        defvjp(*names)(rule)
        return fn

    return attach


_unary("negative")(lambda F, g, x, out: -g)
_unary("positive")(lambda F, g, x, out: g)
_unary("abs")(lambda F, g, x, out: g * F.sign(x))
_unary("exp")(lambda F, g, x, out: g * out)
_unary("expm1")(lambda F, g, x, out: g * (out + 1))
_unary("log")(lambda F, g, x, out: g / x)
_unary("log1p")(lambda F, g, x, out: g / (x + 1))
_unary("log2")(lambda F, g, x, out: g / (x * _LN2))
_unary("log10")(lambda F, g, x, out: g / (x * _LN10))
_unary("sqrt")(lambda F, g, x, out: g * 0.5 / out)
_unary("square")(lambda F, g, x, out: g * 2 * x)
_unary("reciprocal")(lambda F, g, x, out: -g * out * out)
_unary("sin")(lambda F, g, x, out: g * F.cos(x))
_unary("cos")(lambda F, g, x, out: -g * F.sin(x))
_unary("tan")(lambda F, g, x, out: g * (1 + out * out))
_unary("asin")(lambda F, g, x, out: g / F.sqrt(1 - x * x))
_unary("acos")(lambda F, g, x, out: -g / F.sqrt(1 - x * x))
_unary("atan")(lambda F, g, x, out: g / (1 + x * x))
_unary("sinh")(lambda F, g, x, out: g * F.cosh(x))
_unary("cosh")(lambda F, g, x, out: g * F.sinh(x))
_unary("tanh")(lambda F, g, x, out: g * (1 - out * out))
_unary("sigmoid")(lambda F, g, x, out: g * out * (1 - out))
_unary("erf")(lambda F, g, x, out: g * _TWO_OVER_SQRT_PI * F.exp(-x * x))
# Piecewise-constant functions: zero almost everywhere (PyTorch's convention).
_unary("sign", "floor", "ceil", "trunc", "round")(lambda F, g, x, out: F.zeros_like(g))


@defvjp("add")
def _add_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    return g, g


@defvjp("subtract")
def _subtract_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    return g, -g


@defvjp("multiply")
def _multiply_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x, y = xs
    return g * y, g * x


@defvjp("divide")
def _divide_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x, y = xs
    gx = g / y
    return gx, -gx * out


@defvjp("pow")
def _pow_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x, y = xs
    # y * x**(y-1) is 0 * inf at x = 0, y = 0; the derivative there is 0.
    gx = F.where(y == 0, 0.0, g * y * x ** (y - 1))
    # d/dy = out * log(x): defined for x > 0; x = 0 contributes 0 (the limit for y > 0).
    gy = g * out * F.log(F.where(x > 0, x, 1.0)) if y.dtype.kind == "f" else None
    return gx, gy


def _ties(F: Any, g: Any, x: Any, y: Any, x_wins: Any) -> tuple:
    # Ties share the cotangent equally, so the rule is symmetric (PyTorch's convention).
    # `where` with weak scalars keeps the cotangent's dtype (no float64 masks).
    tie = x == y
    half = g * 0.5
    gx = F.where(x_wins, g, F.where(tie, half, 0.0))
    gy = F.where(x_wins | tie, F.where(tie, half, 0.0), g)
    return gx, gy


@defvjp("maximum")
def _maximum_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x, y = xs
    return _ties(F, g, x, y, x > y)


@defvjp("minimum")
def _minimum_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x, y = xs
    return _ties(F, g, x, y, x < y)


@defvjp("atan2")
def _atan2_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    y, x = xs
    r = g / (x * x + y * y)
    return r * x, -r * y


@defvjp("remainder")
def _remainder_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x, y = xs
    return g, -g * F.floor_divide(x, y)


@defvjp("floor_divide")
def _floor_divide_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    return F.zeros_like(g), F.zeros_like(g)


@defvjp("where")
def _where_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    c = xs[0]
    return None, F.where(c, g, 0.0), F.where(c, 0.0, g)


@defvjp("clip")
def _clip_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x, lo, hi = xs
    # np.clip is minimum(maximum(x, lo), hi): the upper bound wins where the bounds cross.
    to_hi = F.maximum(x, lo) > hi
    from_x = x >= lo
    return F.where(~to_hi & from_x, g, 0.0), F.where(~to_hi & ~from_x, g, 0.0), F.where(to_hi, g, 0.0)


@defvjp("astype")
def _astype_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x = xs[0]
    return (g.astype(x.dtype) if x.dtype.kind == "f" else None,)
