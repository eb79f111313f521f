"""Elementwise operators: NumPy ufuncs and a few composite pointwise functions.

Shape rule: broadcasting. Dtype rule: NumPy's own, found by `dtype_by_example`, so
integer, boolean and weak Python-scalar promotion match NumPy 2 exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ops.base import defvjp, drops_imaginary, type_error
from ops.declare import Elementwise, declare, declare_elementwise
from ops.namespace import from_host, namespace, to_host
from ops.node import Node


def _float_dtype(x: np.ndarray) -> np.dtype:
    # The dtype NumPy's transcendental ufuncs produce for x (int -> float64, bool -> float16).
    return np.exp(np.zeros((), dtype=x.dtype)).dtype


def _sigmoid(x: Any) -> Any:
    x = namespace(x).asarray(x)
    t = _float_dtype(x)
    xf = x.astype(t, copy=False)
    # exp(-|x|) never overflows, so both branches are finite.
    e = np.exp(-np.abs(xf))
    return np.where(xf >= 0, 1 / (1 + e), e / (1 + e)).astype(t, copy=False)


_erf_scalar = np.frompyfunc(math.erf, 1, 1)


def _erf(x: Any) -> Any:
    x = namespace(x).asarray(x)
    t = _float_dtype(x)
    if t.kind == "c":
        raise TypeError("erf is not defined for complex input")
    # math.erf is correctly rounded in double precision; neither NumPy nor CuPy's namespace has
    # an erf, so the reference takes it per element on the host: an explicit round trip.
    host = np.asarray(_erf_scalar(to_host(x).astype(np.float64)), dtype=np.float64).astype(t)
    return from_host(host, like=x)


def _cast(x: Any, dtype: np.dtype) -> Any:
    a = namespace(x).asarray(x)
    if drops_imaginary(a.dtype, dtype):
        a = a.real  # the value NumPy's cast takes, without its warning (said at the user's line)
    return a.astype(dtype)


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


# Declarations. Per operator: the NumPy reference (which also gives NumPy's dtype rule), the C
# expression per loop-dtype kind ("f" float, "i" signed, "u" unsigned, "b" bool; a key may list
# several) with its relative cost (an add is 1; fusion weighs it against storing a value), and
# the z3 specification over reals (Z is the z3 module: ops/ does not import it). Operands {0}..{2}
# of a template are plain variables already in the loop dtype (C type {T}, {bits} wide), so a
# template may name them twice. A kind with no template (int power: NumPy raises on negative
# exponents) stays with the NumPy kernel. Loop dtypes are NumPy's own (ufunc.resolve_dtypes)
# unless `jit_loop` says otherwise. Kind "c" is complex (jit/complex_c.py: a struct, so its
# templates call lg_* helpers); an operator without a key naming "c" keeps complex operands on
# NumPy's kernels (jit/fusion.py), as does a conversion from complex unless a key names both "c"
# and the result's kind (real and imag; astype to a real type warns in NumPy, so it stays there).
# NumPy's maximum propagates NaN, and of two equal values (+0 and -0) returns the second
_NAN_MAX = "(({0}) > ({1}) || ({0}) != ({0})) ? ({0}) : ({1})"
_NAN_MIN = "(({0}) < ({1}) || ({0}) != ({0})) ? ({0}) : ({1})"
_SIGN = "(({0}) > 0 ? ({T})1 : (({0}) < 0 ? ({T})-1 : ({0})))"  # sign(nan) is nan, sign(0) is 0
_F = "f"


def _fn(name: str) -> Callable:
    """The z3 specification of a function real arithmetic cannot spell: an uninterpreted one."""
    return lambda Z, *xs: Z.Function(name, *([Z.RealSort()] * (len(xs) + 1)))(*xs)


def _max(Z: Any, a: Any, b: Any) -> Any:
    return Z.If(a >= b, a, b)


def _min(Z: Any, a: Any, b: Any) -> Any:
    return Z.If(a <= b, a, b)


_BINARY_DECLS: tuple[tuple, ...] = (
    # name, reference, JIT templates, JIT cost, z3 specification
    ("add", np.add, {"fiub": "{0} + {1}", "c": "lg_add_{t}({0}, {1})"}, 1, lambda Z, a, b: a + b),
    ("subtract", np.subtract, {"fiu": "{0} - {1}", "c": "lg_sub_{t}({0}, {1})"}, 1, lambda Z, a, b: a - b),
    ("multiply", np.multiply, {"fiub": "{0} * {1}", "c": "lg_mul_{t}({0}, {1})"}, 1, lambda Z, a, b: a * b),
    ("divide", np.true_divide, {_F: "{0} / {1}", "c": "lg_div_{t}({0}, {1})"}, 4, lambda Z, a, b: a / b),
    ("floor_divide", np.floor_divide, {"fiu": "lg_floordiv_{t}({0}, {1})"}, 8, None),
    ("remainder", np.remainder, {"fiu": "lg_remainder_{t}({0}, {1})"}, 8, None),
    # C's fmod is NumPy's float loop; integer fmod by zero (0, with a warning) stays with NumPy
    ("fmod", np.fmod, {_F: "fmod({0}, {1})"}, 8, None),
    # NumPy's power takes a square root for an exponent of 0.5 (sqrt(-0) is -0, sqrt(-inf) nan,
    # where pow gives +0 and +inf); 2 and -1 it squares and inverts, which pow rounds alike
    (
        "pow",
        np.power,
        {_F: "(({1}) == 2 ? ({0}) * ({0}) : ({1}) == 0.5 ? sqrt({0}) : pow({0}, {1}))"},
        16,
        _fn("pow"),
    ),
    ("maximum", np.maximum, {"fiub": _NAN_MAX}, 1, _max),
    ("minimum", np.minimum, {"fiub": _NAN_MIN}, 1, _min),
    ("atan2", np.arctan2, {_F: "atan2({0}, {1})"}, 12, _fn("atan2")),
    ("equal", np.equal, {"fiub": "{0} == {1}", "c": "lg_eq_{t}({0}, {1})"}, 1, None),
    ("not_equal", np.not_equal, {"fiub": "{0} != {1}", "c": "lg_ne_{t}({0}, {1})"}, 1, None),
    ("less", np.less, {"fiub": "{0} < {1}"}, 1, None),
    ("less_equal", np.less_equal, {"fiub": "{0} <= {1}"}, 1, None),
    ("greater", np.greater, {"fiub": "{0} > {1}"}, 1, None),
    ("greater_equal", np.greater_equal, {"fiub": "{0} >= {1}"}, 1, None),
    ("logical_and", np.logical_and, {"fiub": "({0} != 0) & ({1} != 0)"}, 1, None),
    ("logical_or", np.logical_or, {"fiub": "({0} != 0) | ({1} != 0)"}, 1, None),
    ("logical_xor", np.logical_xor, {"fiub": "({0} != 0) != ({1} != 0)"}, 1, None),
    ("bitwise_and", np.bitwise_and, {"iub": "{0} & {1}"}, 1, None),
    ("bitwise_or", np.bitwise_or, {"iub": "{0} | {1}"}, 1, None),
    ("bitwise_xor", np.bitwise_xor, {"iub": "{0} ^ {1}"}, 1, None),
    ("bitwise_left_shift", np.left_shift, {"iu": "lg_shl_{t}({0}, {1})"}, 2, None),
    ("bitwise_right_shift", np.right_shift, {"iu": "lg_shr_{t}({0}, {1})"}, 2, None),
    # NumPy's kernels (no C template): logaddexp's branches for equal and infinite operands,
    # nextafter's step in the loop dtype itself (float16 has no C nextafter)
    ("logaddexp", np.logaddexp, None, 20, _fn("logaddexp")),
    ("nextafter", np.nextafter, None, 2, None),
    ("copysign", np.copysign, {_F: "copysign({0}, {1})"}, 1, None),
)

_UNARY_DECLS: tuple[tuple, ...] = (
    ("negative", np.negative, {"iu": "-{0}", _F: "lg_fneg({0})", "c": "lg_neg_{t}({0})"}, 1, lambda Z, x: -x),
    ("positive", np.positive, {"fiuc": "{0}"}, 0, lambda Z, x: x),
    (
        "abs",
        np.absolute,
        {_F: "fabs({0})", "i": "({0} < 0 ? -{0} : {0})", "ub": "{0}", "c": "lg_abs_{t}({0})"},
        1,
        lambda Z, x: Z.If(x >= 0, x, -x),
    ),
    ("exp", np.exp, {_F: "exp({0})"}, 8, _fn("exp")),
    ("expm1", np.expm1, {_F: "expm1({0})"}, 10, lambda Z, x: _fn("exp")(Z, x) - 1),
    ("log", np.log, {_F: "log({0})"}, 8, _fn("log")),
    ("log1p", np.log1p, {_F: "log1p({0})"}, 10, lambda Z, x: _fn("log")(Z, x + 1)),
    ("log2", np.log2, {_F: "log2({0})"}, 8, _fn("log2")),
    ("log10", np.log10, {_F: "log10({0})"}, 8, _fn("log10")),
    ("sqrt", np.sqrt, {_F: "sqrt({0})"}, 4, _fn("sqrt")),
    ("square", np.square, {"fiu": "{0} * {0}", "b": "{0}", "c": "lg_sq_{t}({0})"}, 1, lambda Z, x: x * x),
    ("reciprocal", np.reciprocal, {_F: "({T})1 / {0}"}, 4, lambda Z, x: 1 / x),
    ("sin", np.sin, {_F: "sin({0})"}, 10, _fn("sin")),
    ("cos", np.cos, {_F: "cos({0})"}, 10, _fn("cos")),
    ("tan", np.tan, {_F: "tan({0})"}, 12, _fn("tan")),
    ("asin", np.arcsin, {_F: "asin({0})"}, 12, _fn("asin")),
    ("acos", np.arccos, {_F: "acos({0})"}, 12, _fn("acos")),
    ("atan", np.arctan, {_F: "atan({0})"}, 12, _fn("atan")),
    ("sinh", np.sinh, {_F: "sinh({0})"}, 12, _fn("sinh")),
    ("cosh", np.cosh, {_F: "cosh({0})"}, 12, _fn("cosh")),
    ("tanh", np.tanh, {_F: "tanh({0})"}, 10, _fn("tanh")),
    ("asinh", np.arcsinh, {_F: "asinh({0})"}, 14, _fn("asinh")),
    ("acosh", np.arccosh, {_F: "acosh({0})"}, 14, _fn("acosh")),
    ("atanh", np.arctanh, {_F: "atanh({0})"}, 14, _fn("atanh")),
    ("sign", np.sign, {"fi": _SIGN, "u": "({0} > 0)"}, 1, lambda Z, x: Z.If(x > 0, 1, Z.If(x < 0, -1, 0))),
    ("floor", np.floor, {_F: "floor({0})", "iub": "{0}"}, 1, _fn("floor")),
    ("ceil", np.ceil, {_F: "ceil({0})", "iub": "{0}"}, 1, _fn("ceil")),
    ("trunc", np.trunc, {_F: "trunc({0})", "iub": "{0}"}, 1, _fn("trunc")),
    ("signbit", np.signbit, {_F: "(signbit({0}) != 0)"}, 1, None),
    ("isnan", np.isnan, {_F: "({0} != {0})", "iub": "0"}, 1, None),
    ("isfinite", np.isfinite, {_F: "({0} - {0} == 0)", "iub": "1"}, 1, None),
    ("isinf", np.isinf, {_F: "(fabs({0}) == ({T})INFINITY)", "iub": "0"}, 1, None),
    ("logical_not", np.logical_not, {"fiub": "!{0}"}, 1, None),
    ("bitwise_invert", np.invert, {"iu": "~{0}", "b": "!{0}"}, 1, None),
)


def _written(result: Any, out: Any) -> Any:
    """`result` returned, or copied into a ufunc-style `out=` (an array or a 1-tuple) and that returned."""
    if out is None:
        return result
    target = out[0] if isinstance(out, tuple) else out
    np.copyto(target, result, casting="same_kind")
    return target


def expm1_std(x: Any, out: Any = None) -> Any:
    """NumPy's expm1 with the Array API's complex special values (exp(z) - 1 at zero and non-finite z)."""
    res = np.expm1(x)
    if res.dtype.kind == "c":
        xp = namespace(x)
        x = xp.asarray(x)
        fix = ~np.isfinite(x) | (x == 0)
        if fix.any():
            res = xp.array(res, copy=True)
            with np.errstate(all="ignore"):
                # exp's special values are the standard's; minus 1 keeps the imaginary part's sign
                np.copyto(res, np.exp(x) - 1, where=fix)
    return _written(res, out)


def tanh_std(x: Any, out: Any = None) -> Any:
    """NumPy's tanh with the Array API's complex values at infinite real parts: +-1 + 0j signed as imag(x).

    C99 (NumPy) signs that zero as sin(2 imag(x)); the standard as imag(x) itself.
    """
    res = np.tanh(x)
    if res.dtype.kind == "c":
        xp = namespace(x)
        x = xp.asarray(x)
        fix = np.isinf(x.real) & np.isfinite(x.imag)
        if fix.any():
            res = xp.array(res, copy=True)
            val = np.empty_like(res)
            val.real, val.imag = np.sign(x.real), np.copysign(0.0, x.imag)
            np.copyto(res, val, where=fix)
    return _written(res, out)


# operators whose reference is the ufunc plus the Array API's special values (same dtype rule)
_STANDARD = {"expm1": expm1_std, "tanh": tanh_std}

for _name, _fn_, _tpl, _cost, _z3 in _BINARY_DECLS:
    declare_elementwise(_name, _STANDARD.get(_name, _fn_), 2, dtype_fn=_fn_, jit=_tpl, jit_cost=_cost, z3=_z3)
for _name, _fn_, _tpl, _cost, _z3 in _UNARY_DECLS:
    declare_elementwise(_name, _STANDARD.get(_name, _fn_), 1, dtype_fn=_fn_, jit=_tpl, jit_cost=_cost, z3=_z3)

#: name -> NumPy ufunc of the plain ufunc operators (the front end's namespace is built from them)
BINARY: dict[str, Callable] = {d[0]: d[1] for d in _BINARY_DECLS}
UNARY: dict[str, Callable] = {d[0]: d[1] for d in _UNARY_DECLS}

# sigmoid, erf, round, clip compute in the output dtype; where's condition keeps its own.
declare_elementwise(
    "sigmoid",
    _sigmoid,
    1,
    dtype_fn=np.exp,
    jit={_F: "lg_sigmoid({0})"},
    jit_cost=12,
    jit_loop="out",
    z3=lambda Z, x: 1 / (1 + _fn("exp")(Z, -x)),
)
declare_elementwise(
    "erf", _erf, 1, dtype_fn=_erf, jit={_F: "erf({0})"}, jit_cost=12, jit_loop="out", z3=_fn("erf")
)
declare_elementwise("round", np.round, 1, jit={_F: "lg_round({0}, {decimals})"}, jit_cost=4, jit_loop="out")
declare_elementwise(
    "where",
    np.where,
    3,
    jit={"fiubc": "{0} ? {1} : {2}"},
    jit_cost=1,
    jit_loop="select",
    z3=lambda Z, c, x, y: Z.If(c != 0, x, y),
)
# both bounds: NumPy promotes the three operands together
declare_elementwise(
    "clip",
    np.clip,
    3,
    jit={"fiub": "lg_clip({0}, {1}, {2})"},
    jit_cost=2,
    jit_loop="out",
    z3=lambda Z, x, lo, hi: _min(Z, _max(Z, x, lo), hi),
)
declare(Cast(), jit_expr={"fiub": "({T}){0}", "c": "lg_cvt_{t}({0})"}, jit_cost=1, jit_loop="convert")


# ---------------------------------------------------------------------------------------
# Gradients (see Op.vjp): F is the recording namespace, g the output's cotangent.

_LN2, _LN10, _TWO_OVER_SQRT_PI = math.log(2.0), math.log(10.0), 2.0 / math.sqrt(math.pi)


def _holomorphic(F: Any, rule: Callable, g: Any, operands: Any, out: Any) -> Any:
    """A rule written g * f'(x) for real x, for complex values: g * conj(f'(x)) (PyTorch's convention).

    Rules are linear in g, so conj(rule(conj(g))) is that; on real values it is the rule itself.
    """
    if g.dtype.kind != "c" and out.dtype.kind != "c":
        return rule(F, g, operands, out)
    res = rule(F, F.conj(g), operands, out)
    return tuple(None if r is None else F.conj(r) for r in res) if isinstance(res, tuple) else F.conj(res)


def _unary(*names: str) -> Callable:
    """Register d(out)/d(x) rules written as fn(F, g, x, out) -> cotangent of x (holomorphic: see above)."""

    def attach(fn: Callable) -> Callable:
        def rule(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
            return (_holomorphic(F, fn, g, xs[0], out),)

        defvjp(*names)(rule)
        return fn

    return attach


_unary("negative")(lambda F, g, x, out: -g)
_unary("positive")(lambda F, g, x, out: g)
# |z| is not holomorphic: g * sign(z) = g z / |z| is the rule for complex z as it stands
defvjp("abs")(lambda F, g, xs, out, attrs: (g * F.sign(xs[0]),))
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
_unary("asinh")(lambda F, g, x, out: g / F.sqrt(x * x + 1))
_unary("acosh")(lambda F, g, x, out: g / (F.sqrt(x - 1) * F.sqrt(x + 1)))
_unary("atanh")(lambda F, g, x, out: g / (1 - x * x))
_unary("sigmoid")(lambda F, g, x, out: g * out * (1 - out))
_unary("erf")(lambda F, g, x, out: g * _TWO_OVER_SQRT_PI * F.exp(-x * x))
# Piecewise-constant functions: zero almost everywhere (PyTorch's convention).
_unary("sign", "floor", "ceil", "trunc", "round")(lambda F, g, x, out: F.zeros_like(g))


@defvjp("add")
def _add_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    return g, g


@defvjp("subtract")
def _subtract_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict, needs: tuple = (True, True)) -> tuple:
    return g, -g if needs[1] else None


def _multiply_rule(F: Any, g: Any, xs: list, out: Any) -> tuple:
    x, y = xs
    return g * y, g * x


@defvjp("multiply")
def _multiply_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict, needs: tuple = (True, True)) -> tuple:
    if all(needs) or out.dtype.kind == "c" or g.dtype.kind == "c":
        return _holomorphic(F, _multiply_rule, g, xs, out)
    x, y = xs
    return g * y if needs[0] else None, g * x if needs[1] else None


def _divide_rule(F: Any, g: Any, xs: list, out: Any) -> tuple:
    x, y = xs
    gx = g / y
    return gx, -gx * out


@defvjp("divide")
def _divide_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict, needs: tuple = (True, True)) -> tuple:
    if needs[1] or out.dtype.kind == "c" or g.dtype.kind == "c":
        return _holomorphic(F, _divide_rule, g, xs, out)
    return g / xs[1], None


def _complex_pow_rule(F: Any, g: Any, xs: list, out: Any) -> tuple:
    x, y = xs
    gx = F.where(y == 0, 0.0, g * y * x ** (y - 1))
    gy = g * out * F.log(F.where(x == 0, 1.0, x)) if y.dtype.kind in "fc" else None
    return gx, gy


@defvjp("pow")
def _pow_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x, y = xs
    if out.dtype.kind == "c":
        return _holomorphic(F, _complex_pow_rule, g, xs, out)
    # y * x**(y-1) is 0 * inf at x = 0, y = 0; the derivative there is 0.
    gx = F.where(y == 0, 0.0, g * y * x ** (y - 1))
    # d/dy = out * log(x): defined for x > 0; x = 0 contributes 0 (the limit for y > 0).
    gy = g * out * F.log(F.where(x > 0, x, 1.0)) if y.dtype.kind == "f" else None
    return gx, gy


def _ties(F: Any, g: Any, x: Any, y: Any, x_wins: Any, needs: tuple) -> tuple:
    # Ties share the cotangent equally, so the rule is symmetric (PyTorch's convention).
    # `where` with weak scalars keeps the cotangent's dtype (no float64 masks).
    tie = x == y
    tied = F.where(tie, g * 0.5, 0.0)
    gx = F.where(x_wins, g, tied) if needs[0] else None
    gy = F.where(x_wins | tie, tied, g) if needs[1] else None
    return gx, gy


@defvjp("maximum")
def _maximum_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict, needs: tuple = (True, True)) -> tuple:
    x, y = xs
    return _ties(F, g, x, y, x > y, needs)


@defvjp("minimum")
def _minimum_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict, needs: tuple = (True, True)) -> tuple:
    x, y = xs
    return _ties(F, g, x, y, x < y, needs)


@defvjp("atan2")
def _atan2_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    y, x = xs
    r = g / (x * x + y * y)
    return r * x, -r * y


@defvjp("logaddexp")
def _logaddexp_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x, y = xs
    # d/dx log(e^x + e^y) = e^(x - out): the operands' softmax weights
    return g * F.exp(x - out), g * F.exp(y - out)


@defvjp("copysign")
def _copysign_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x, _ = xs
    # |x| with another sign: +-1 times x's own slope; the sign source is piecewise constant
    return F.where(F.signbit(x) == F.signbit(out), g, -g), None


@defvjp("remainder")
def _remainder_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x, y = xs
    return g, -g * F.floor_divide(x, y)


@defvjp("fmod")
def _fmod_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    x, y = xs
    return g, -g * F.trunc(F.divide(x, y))


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
