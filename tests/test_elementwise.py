"""Differential tests of every elementwise operator against NumPy running the same program.

When NumPy rejects a dtype combination, lazygraph must raise while recording (before
anything is evaluated); otherwise value, dtype and shape must match.
"""

from __future__ import annotations

import math
import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import (
    arrays,
    assert_matches,
    broadcast_shapes,
    check,
    dtypes,
    py_floats_special,
    py_ints,
    py_scalars,
    reference,
    shapes,
    tolerance,
)

import lazygraph as lg

ELEMENTWISE_ERRORS = (TypeError, ValueError, OverflowError)

NP_BINARY = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
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
    "logaddexp": np.logaddexp,
    "nextafter": np.nextafter,
    "copysign": np.copysign,
}

NP_UNARY = {
    "negative": np.negative,
    "positive": np.positive,
    "abs": np.abs,
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
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "signbit": np.signbit,
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

# Python operator spellings of binary ops: (forward, in-place).
OPERATORS = {
    "add": (operator.add, operator.iadd),
    "subtract": (operator.sub, operator.isub),
    "multiply": (operator.mul, operator.imul),
    "divide": (operator.truediv, operator.itruediv),
    "floor_divide": (operator.floordiv, operator.ifloordiv),
    "remainder": (operator.mod, operator.imod),
    "pow": (operator.pow, operator.ipow),
    "bitwise_and": (operator.and_, operator.iand),
    "bitwise_or": (operator.or_, operator.ior),
    "bitwise_xor": (operator.xor, operator.ixor),
    "bitwise_left_shift": (operator.lshift, operator.ilshift),
    "bitwise_right_shift": (operator.rshift, operator.irshift),
    "equal": (operator.eq, None),
    "not_equal": (operator.ne, None),
    "less": (operator.lt, None),
    "less_equal": (operator.le, None),
    "greater": (operator.gt, None),
    "greater_equal": (operator.ge, None),
}

SHIFTS = ("bitwise_left_shift", "bitwise_right_shift")


def operand_bounds(op: str) -> tuple[dict, dict]:
    """Integer value ranges for (left, right) operands: no negative integer powers, no huge shifts."""
    if op == "pow":
        return {"lo": -3, "hi": 3}, {"lo": 0, "hi": 4}
    if op in SHIFTS:
        return {}, {"lo": 0, "hi": 7}
    return {}, {}


def right_scalars(op: str):
    """Python scalars usable as the right operand (values NumPy handles without data-dependent errors)."""
    return py_scalars | py_floats_special


def left_scalars(op: str):
    return py_scalars | py_floats_special


@st.composite
def operand_pair(draw, op: str, min_dims: int = 0):
    sa, sb = draw(broadcast_shapes(2, min_dims=min_dims))
    ka, kb = operand_bounds(op)
    special = draw(st.booleans())
    a = draw(arrays(dtypes, sa, special=special, **ka))
    b = draw(arrays(dtypes, sb, special=special, **kb))
    return a, b


# -- binary functions -----------------------------------------------------------------


@pytest.mark.parametrize("op", sorted(NP_BINARY))
@given(data=st.data())
def test_binary_function_arrays(op, data):
    a, b = data.draw(operand_pair(op))
    check(
        lambda: NP_BINARY[op](a, b), lambda: getattr(lg, op)(lg.asarray(a), lg.asarray(b)), ELEMENTWISE_ERRORS
    )


@pytest.mark.parametrize("op", sorted(NP_BINARY))
@given(data=st.data())
def test_binary_function_python_scalar(op, data):
    ka, kb = operand_bounds(op)
    x = data.draw(arrays(dtypes, shapes(), special=data.draw(st.booleans()), **kb))
    s = data.draw(right_scalars(op))
    check(lambda: NP_BINARY[op](x, s), lambda: getattr(lg, op)(lg.asarray(x), s), ELEMENTWISE_ERRORS)
    # scalar on the left: the array is now the right operand (keep exponents/shifts sane)
    y = data.draw(arrays(dtypes, shapes(), **kb))
    t = data.draw(left_scalars(op))
    check(lambda: NP_BINARY[op](t, y), lambda: getattr(lg, op)(t, lg.asarray(y)), ELEMENTWISE_ERRORS)


@pytest.mark.parametrize("op", sorted(NP_BINARY))
@given(data=st.data())
@settings(max_examples=25)
def test_binary_function_mixed_numpy_operands(op, data):
    """One operand a NumPy array (or NumPy scalar), the other lazy; results are lazy."""
    a, b = data.draw(operand_pair(op))
    check(lambda: NP_BINARY[op](a, b), lambda: getattr(lg, op)(a, lg.asarray(b)), ELEMENTWISE_ERRORS)
    check(lambda: NP_BINARY[op](a, b), lambda: getattr(lg, op)(lg.asarray(a), b), ELEMENTWISE_ERRORS)
    if a.ndim == 0:
        g = a[()]  # a NumPy scalar: a strong (not weak) operand
        check(lambda: NP_BINARY[op](g, b), lambda: getattr(lg, op)(g, lg.asarray(b)), ELEMENTWISE_ERRORS)


def test_binary_all_python_scalars():
    for op, fn in NP_BINARY.items():
        ka, kb = operand_bounds(op)
        for s, t in [(3, 2), (2.5, 2), (True, False), (3, 1.5), (-7, 2)]:
            if op == "pow" and isinstance(t, int) and t < 0:
                continue
            check(
                lambda fn=fn, s=s, t=t: fn(s, t),
                lambda op=op, s=s, t=t: getattr(lg, op)(s, t),
                ELEMENTWISE_ERRORS,
            )


# -- operators --------------------------------------------------------------------------


@pytest.mark.parametrize("op", sorted(OPERATORS))
@given(data=st.data())
def test_operator_forms(op, data):
    fwd, _ = OPERATORS[op]
    a, b = data.draw(operand_pair(op))
    la, lb = lg.asarray(a), lg.asarray(b)
    check(lambda: fwd(a, b), lambda: fwd(la, lb), ELEMENTWISE_ERRORS)
    # NumPy array on the left, lazy on the right (ndarray defers via __array_ufunc__) and v.v.
    check(lambda: fwd(a, b), lambda: fwd(a, lb), ELEMENTWISE_ERRORS)
    check(lambda: fwd(a, b), lambda: fwd(la, b), ELEMENTWISE_ERRORS)


@pytest.mark.parametrize("op", sorted(OPERATORS))
@given(data=st.data())
def test_operator_forms_python_scalars(op, data):
    fwd, _ = OPERATORS[op]
    ka, kb = operand_bounds(op)
    x = data.draw(arrays(dtypes, shapes(), **kb))
    s = data.draw(py_scalars)
    lx = lg.asarray(x)
    check(lambda: fwd(x, s), lambda: fwd(lx, s), ELEMENTWISE_ERRORS)
    # reflected: Python scalar on the left
    check(lambda: fwd(s, x), lambda: fwd(s, lx), ELEMENTWISE_ERRORS)
    if x.ndim == 0:
        g = x[()]
        check(lambda: fwd(g, x), lambda: fwd(g, lx), ELEMENTWISE_ERRORS)


@given(data=st.data())
def test_matmul_operator_forms(data):
    n, k, m = data.draw(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)))
    dt = data.draw(dtypes)
    a = data.draw(arrays(dt, (n, k)))
    b = data.draw(arrays(data.draw(dtypes), (k, m)))
    la, lb = lg.asarray(a), lg.asarray(b)
    check(lambda: a @ b, lambda: la @ lb, ELEMENTWISE_ERRORS)
    check(lambda: a @ b, lambda: a @ lb, ELEMENTWISE_ERRORS)  # __rmatmul__ via NumPy
    check(lambda: a @ b, lambda: la @ b, ELEMENTWISE_ERRORS)


@pytest.mark.parametrize(
    "fwd", [operator.neg, operator.pos, operator.abs, operator.invert], ids=["neg", "pos", "abs", "invert"]
)
@given(x=arrays(dtypes, shapes(), special=True))
def test_unary_operators(fwd, x):
    check(lambda: fwd(x), lambda: fwd(lg.asarray(x)), ELEMENTWISE_ERRORS)


def test_operators_return_lazy_and_do_not_evaluate():
    before = lg.debug.evaluation_stats()["evaluations"]
    x = lg.asarray(np.arange(6.0).reshape(2, 3))
    ys = [x + 1, 1 + x, x * x, -x, x < 2, 2 < x, np.arange(3.0) - x, x @ x.T, np.ones((3, 2)) @ x]
    assert all(isinstance(y, lg.Array) for y in ys)
    assert lg.debug.evaluation_stats()["evaluations"] == before


# -- unary functions --------------------------------------------------------------------


@pytest.mark.parametrize("op", sorted(NP_UNARY))
@given(x=arrays(dtypes, shapes(), special=True))
def test_unary_function(op, x):
    check(lambda: NP_UNARY[op](x), lambda: getattr(lg, op)(lg.asarray(x)), ELEMENTWISE_ERRORS)


@pytest.mark.parametrize("op", sorted(NP_UNARY))
@given(x=arrays(dtypes, shapes(max_dims=2)))
@settings(max_examples=15)
def test_unary_numpy_ufunc_on_lazy(op, x):
    """`np.exp(lazy)` dispatches through __array_ufunc__ and stays lazy."""
    lx = lg.asarray(x)
    check(lambda: NP_UNARY[op](x), lambda: NP_UNARY[op](lx), ELEMENTWISE_ERRORS)


@pytest.mark.parametrize("op", sorted(NP_BINARY))
@given(data=st.data())
@settings(max_examples=15)
def test_binary_numpy_ufunc_on_lazy(op, data):
    a, b = data.draw(operand_pair(op))
    la = lg.asarray(a)
    check(lambda: NP_BINARY[op](a, b), lambda: NP_BINARY[op](la, b), ELEMENTWISE_ERRORS)
    check(lambda: NP_BINARY[op](a, 1), lambda: NP_BINARY[op](la, 1), ELEMENTWISE_ERRORS)


def _float_result_dtype(x: np.ndarray) -> np.dtype:
    with np.errstate(all="ignore"):
        return np.exp(x).dtype


@given(x=arrays(dtypes, shapes(), special=True))
def test_sigmoid(x):
    t = _float_result_dtype(x)
    with np.errstate(all="ignore"):
        xf = x.astype(t)
        expected = np.asarray(1 / (1 + np.exp(-xf))).astype(t)
    got = lg.sigmoid(lg.asarray(x))
    # the lazy sigmoid is the numerically stable form; allow a few ulps against the naive one
    assert_matches(got, expected, rtol=1e-5 if t == np.float32 else None)


@given(x=arrays(dtypes, shapes(), special=True))
def test_erf(x):
    t = _float_result_dtype(x)
    flat = [math.erf(v) for v in x.astype(np.float64).ravel().tolist()]
    expected = np.asarray(flat, dtype=np.float64).reshape(x.shape).astype(t)
    assert_matches(lg.erf(lg.asarray(x)), expected)


@given(x=arrays(dtypes, shapes(), special=True), decimals=st.integers(-2, 3))
def test_round(x, decimals):
    check(lambda: np.round(x, decimals), lambda: lg.round(lg.asarray(x), decimals), ELEMENTWISE_ERRORS)
    check(lambda: np.round(x, decimals), lambda: lg.asarray(x).round(decimals), ELEMENTWISE_ERRORS)
    if decimals == 0:
        check(lambda: np.round(x), lambda: lg.round(lg.asarray(x)), ELEMENTWISE_ERRORS)


@pytest.mark.parametrize(("alias", "target"), sorted(lg.api.ALIASES.items()))
def test_aliases(alias, target):
    x = np.array([[0.25, -0.5, 3.0], [1.0, 0.0, -2.0]])
    ints = np.array([[1, 2, 3], [4, 5, 6]])
    arity = 2 if target in NP_BINARY else 1
    fn = NP_BINARY.get(target) or NP_UNARY[target]
    operand = ints if target.startswith("bitwise") or target in ("remainder",) else x
    args = (operand, operand[::-1])[:arity]
    check(lambda: fn(*args), lambda: getattr(lg, alias)(*[lg.asarray(a) for a in args]))


# -- where, clip, astype ----------------------------------------------------------------


@given(data=st.data())
def test_where(data):
    sc, sx, sy = data.draw(broadcast_shapes(3))
    cond = data.draw(arrays(st.sampled_from([np.bool_, np.bool_, np.int32, np.float64]), sc))
    x = data.draw(arrays(dtypes, sx, special=True))
    y = data.draw(arrays(dtypes, sy))
    check(lambda: np.where(cond, x, y), lambda: lg.where(lg.asarray(cond), lg.asarray(x), lg.asarray(y)))
    s = data.draw(py_scalars)
    check(
        lambda: np.where(cond, x, s), lambda: lg.where(lg.asarray(cond), lg.asarray(x), s), ELEMENTWISE_ERRORS
    )
    check(lambda: np.where(cond, s, y), lambda: lg.where(cond, s, lg.asarray(y)), ELEMENTWISE_ERRORS)


bounds = st.none() | py_ints | py_floats_special | st.booleans()


@given(data=st.data())
def test_clip(data):
    sx, slo, shi = data.draw(broadcast_shapes(3))
    x = data.draw(arrays(dtypes, sx, special=True))
    kind = data.draw(st.sampled_from(["scalars", "arrays", "mixed"]))
    if kind == "scalars":
        lo, hi = data.draw(bounds), data.draw(bounds)
    elif kind == "arrays":
        lo = data.draw(arrays(dtypes, slo))
        hi = data.draw(arrays(dtypes, shi))
    else:
        lo, hi = data.draw(arrays(dtypes, slo)), data.draw(bounds)
    lx = lg.asarray(x)
    llo = lg.asarray(lo) if isinstance(lo, np.ndarray) else lo
    lhi = lg.asarray(hi) if isinstance(hi, np.ndarray) else hi
    check(lambda: np.clip(x, lo, hi), lambda: lg.clip(lx, llo, lhi), ELEMENTWISE_ERRORS)
    check(lambda: np.clip(x, lo, hi), lambda: lx.clip(llo, lhi), ELEMENTWISE_ERRORS)


@pytest.mark.parametrize(
    ("x", "lo", "hi"),
    [
        (np.arange(-3, 3, dtype=np.int8), 0, 1000),  # out-of-range Python ints are no bound
        (np.arange(4, dtype=np.uint8), -5, 2),
        (np.arange(-3, 3, dtype=np.int8), -1000, 1.5),
        (np.arange(-3, 3, dtype=np.int8), 300, 0.0),  # the three operands promote together
        (np.arange(-3, 3, dtype=np.int8), 300, 1),
        (np.array([3, 4], np.int8), np.array([1, 2], np.uint8), np.float16(3.5)),
        (np.array([True, False]), None, None),
        (np.array([True, False]), 0, 1),
        (np.array([1.0, np.nan]), 0, np.nan),
        (np.arange(4, dtype=np.uint8), 2, 1),
    ],
)
def test_clip_cases(x, lo, hi):
    check(lambda: np.clip(x, lo, hi), lambda: lg.clip(lg.asarray(x), lo, hi), ELEMENTWISE_ERRORS)


def test_clip_none_none_is_a_copy():
    x = lg.asarray(np.arange(4.0))
    y = lg.clip(x)
    x[0] = 10.0
    np.testing.assert_array_equal(y.numpy(), np.arange(4.0))


TARGET_DTYPES = [np.bool_, np.int8, np.uint8, np.int32, np.int64, np.float16, np.float32, np.float64]


@given(x=arrays(dtypes, shapes()), target=st.sampled_from(TARGET_DTYPES))
def test_astype(x, target):
    if x.dtype.kind == "f" and np.dtype(target).kind in "iu":
        x = np.abs(x)  # negative floats to unsigned are undefined in C
    check(lambda: x.astype(target), lambda: lg.asarray(x).astype(target))
    check(lambda: x.astype(target), lambda: lg.astype(lg.asarray(x), target))


def test_astype_copy_false_returns_same_array():
    x = lg.asarray(np.arange(3))
    assert lg.astype(x, x.dtype, copy=False) is x
    y = lg.astype(x, np.float32, copy=False)
    assert y.dtype == np.float32


def test_astype_invalid_dtype_raises_at_record():
    x = lg.asarray(np.arange(3))
    with pytest.raises(TypeError):
        x.astype("not-a-dtype")


# -- in-place operators ------------------------------------------------------------------

INPLACE_OPS = sorted(op for op, (_, iop) in OPERATORS.items() if iop is not None)


@pytest.mark.parametrize("op", INPLACE_OPS)
@given(data=st.data())
def test_inplace_operators(op, data):
    _, iop = OPERATORS[op]
    if data.draw(st.booleans()):
        a, b = data.draw(operand_pair(op))
    else:
        ka, kb = operand_bounds(op)
        a = data.draw(arrays(dtypes, shapes(), **ka))
        b = data.draw(py_scalars)

    def np_program():
        t = a.copy()
        t = iop(t, b)
        return t

    expected, err = reference(np_program)
    la = lg.asarray(a)
    lb = lg.asarray(b) if isinstance(b, np.ndarray) else b
    before = lg.debug.evaluation_stats()["evaluations"]
    if err is not None:
        with pytest.raises(ELEMENTWISE_ERRORS):
            iop(la, lb)  # raised by the recording line itself
        assert lg.debug.evaluation_stats()["evaluations"] == before
        np.testing.assert_array_equal(la.numpy(), a)  # the failed write changed nothing
        return
    alias = la
    result = iop(la, lb)
    assert result is alias  # in place: same object
    assert lg.debug.evaluation_stats()["evaluations"] == before
    assert_matches(la, expected)


@given(data=st.data())
@settings(max_examples=30)
def test_inplace_through_views_updates_base(data):
    base = data.draw(
        arrays(st.sampled_from([np.int64, np.float64]), shapes(min_dims=2, max_dims=3, min_side=1))
    )
    view_kind = data.draw(st.sampled_from(["T", "step", "row"]))
    s = data.draw(st.integers(-3, 3))
    nb, lb = base.copy(), lg.asarray(base)
    if view_kind == "T":
        nv, lv = nb.T, lb.T
    elif view_kind == "step":
        nv, lv = nb[::2, ::-1], lb[::2, ::-1]
    else:
        nv, lv = nb[..., 0], lb[..., 0]
    nv *= 2
    nv += s
    lv *= 2
    lv += s
    assert_matches(lb, nb)
    assert_matches(lv, nv)


def test_inplace_matmul():
    a = np.arange(9.0).reshape(3, 3)
    na, la = a.copy(), lg.asarray(a)
    na @= a
    la @= lg.asarray(a)
    assert_matches(la, na)
    b = np.ones((3, 2))
    with pytest.raises(ValueError):
        na @= b
    with pytest.raises(ValueError):
        la @= lg.asarray(b)


def test_inplace_keeps_earlier_reads():
    x = lg.asarray(np.arange(4))
    y = x * 10
    x += 1
    np.testing.assert_array_equal(y.numpy(), np.arange(4) * 10)
    np.testing.assert_array_equal(x.numpy(), np.arange(4) + 1)


# -- out= --------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["add", "multiply", "maximum", "divide", "bitwise_and", "less", "pow"])
@given(data=st.data())
@settings(max_examples=30)
def test_binary_out(op, data):
    a, b = data.draw(operand_pair(op))
    res_shape = np.broadcast_shapes(a.shape, b.shape)
    out_shape = data.draw(st.sampled_from([res_shape, (2, *res_shape), (1, *res_shape)]))
    if data.draw(st.integers(0, 5)) == 0:
        out_shape = data.draw(shapes())  # usually incompatible
    out = data.draw(arrays(dtypes, out_shape))

    def np_program():
        o = out.copy()
        r = NP_BINARY[op](a, b, out=o)
        assert r is o
        return o

    expected, err = reference(np_program)
    lo = lg.asarray(out)
    if err is not None:
        with pytest.raises(ELEMENTWISE_ERRORS):
            getattr(lg, op)(lg.asarray(a), lg.asarray(b), out=lo)
        return
    r = getattr(lg, op)(lg.asarray(a), lg.asarray(b), out=lo)
    assert r is lo
    # the value is computed in the inputs' dtype and then cast to out's: a float32 power may
    # differ from NumPy's by float32's rounding (libm's powf against NumPy's SIMD loop) even
    # when out is float64
    computed = np.result_type(a, b)
    tol = tolerance(computed) if computed.kind in "fc" and expected.dtype.kind in "fc" else (None, None)
    assert_matches(lo, expected, rtol=tol[0], atol=tol[1])


@pytest.mark.parametrize("op", ["exp", "negative", "sqrt", "isnan", "floor", "bitwise_invert"])
@given(x=arrays(dtypes, shapes(max_dims=3), special=True), out_dt=dtypes)
@settings(max_examples=30)
def test_unary_out(op, x, out_dt):
    out = np.zeros(x.shape, out_dt)

    def np_program():
        o = out.copy()
        NP_UNARY[op](x, out=o)
        return o

    expected, err = reference(np_program)
    lo = lg.asarray(out)
    if err is not None:
        with pytest.raises(ELEMENTWISE_ERRORS):
            getattr(lg, op)(lg.asarray(x), out=lo)
        return
    assert getattr(lg, op)(lg.asarray(x), out=lo) is lo
    # computed in x's precision (NumPy's loop), then cast: a narrow input's last place counts
    narrow = {"float16": 1e-3, "float32": 1e-6, "complex64": 1e-6}.get(x.dtype.name)
    assert_matches(lo, expected, rtol=narrow, atol=narrow)


def test_out_writes_through_a_view():
    base = np.arange(12.0).reshape(3, 4)
    nb, lb = base.copy(), lg.asarray(base)
    np.add(nb[:, 1], 100.0, out=nb[:, 1])
    lv = lb[:, 1]
    lg.add(lv, 100.0, out=lv)
    assert_matches(lb, nb)


@given(data=st.data())
@settings(max_examples=30)
def test_numpy_ufunc_out_lazy(data):
    """`np.add(lazy, b, out=lazy)` is lazy and follows NumPy's out= casting rule."""
    op = data.draw(st.sampled_from(["add", "subtract", "multiply", "divide", "maximum"]))
    a, b = data.draw(operand_pair(op))
    res_shape = np.broadcast_shapes(a.shape, b.shape)
    out = data.draw(arrays(dtypes, res_shape))

    def np_program():
        o = out.copy()
        NP_BINARY[op](a, b, out=o)
        return o

    expected, err = reference(np_program)
    lo = lg.asarray(out)
    if err is not None:
        with pytest.raises(ELEMENTWISE_ERRORS):
            NP_BINARY[op](lg.asarray(a), b, out=lo)
        return
    r = NP_BINARY[op](lg.asarray(a), b, out=lo)
    assert r is lo
    assert_matches(lo, expected)
    lo2 = lg.asarray(out)
    r = NP_BINARY[op](lg.asarray(a), b, out=(lo2,))
    assert r is lo2
    assert_matches(lo2, expected)


def test_numpy_ufunc_returns_lazy():
    x = lg.asarray(np.linspace(-1, 1, 5))
    for y in (np.exp(x), np.add(x, 1), np.add(1, x), np.multiply(np.arange(5.0), x), np.sin(x) > 0):
        assert isinstance(y, lg.Array)
    assert_matches(np.exp(x), np.exp(np.linspace(-1, 1, 5)))
    assert_matches(np.add(np.arange(5), x), np.arange(5) + np.linspace(-1, 1, 5))
