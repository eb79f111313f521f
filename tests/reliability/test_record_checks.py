"""Bad input is rejected at record time, where NumPy rejects it: shapes whose size overflows,
negative dimensions, and in-place writes whose dtype NumPy will not cast (and nothing that
NumPy accepts: setitem casts unsafely, an element read by integers is an immutable scalar)."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import lazygraph as lg

BIG = 2**40


def _outcome(fn, module):
    """('ok', value) or ('raise', exception type) for fn(module); lazy results are evaluated."""
    try:
        r = fn(module)
    except Exception as e:  # noqa: BLE001 - the type is the outcome
        return "raise", type(e)
    if isinstance(r, lg.Array):
        r = r.numpy()
    return "ok", r


def _same_kind_of_error(ours: type, numpy_type: type) -> bool:
    # NumPy's UFuncTypeError is a TypeError; ours names the op in a plain TypeError
    base = next(t for t in (TypeError, ValueError, IndexError, OverflowError) if issubclass(numpy_type, t))
    return issubclass(ours, base)


# -- shapes -----------------------------------------------------------------------------------------

OVERFLOW = {
    "zeros": lambda m: m.zeros((BIG, BIG)),
    "ones": lambda m: m.ones((BIG, BIG)),
    "empty": lambda m: m.empty((BIG, BIG)),
    "full": lambda m: m.full((BIG, BIG), 2.0),
    "zeros with an empty axis": lambda m: m.zeros((0, BIG, BIG)),
    "zeros int8 past intp": lambda m: m.zeros((2**63,), dtype=np.int8),
    "float64 bytes past intp": lambda m: m.zeros((2**61,)),
    "eye": lambda m: m.eye(BIG),
    "arange": lambda m: m.arange(0, 2**62, 1),
    "linspace": lambda m: m.linspace(0.0, 1.0, 2**62),
    "broadcast_to": lambda m: m.broadcast_to(m.zeros(1), (BIG, BIG)),
    "outer product": lambda m: (
        m.broadcast_to(m.zeros(1, dtype=np.int8), (BIG, 1))
        * m.broadcast_to(m.zeros(1, dtype=np.int8), (1, BIG))
    ),
    "matmul": lambda m: m.broadcast_to(m.zeros(1), (BIG, 1)) @ m.broadcast_to(m.zeros(1), (1, BIG)),
    "concat": lambda m: m.concatenate([m.broadcast_to(m.zeros(1), (2**61,))] * 4),
    "reshape": lambda m: m.zeros(4).reshape(BIG, BIG),
}


@pytest.mark.parametrize("case", sorted(OVERFLOW))
def test_overflowing_shapes_raise_at_record_time(case: str) -> None:
    kind, np_err = _outcome(OVERFLOW[case], np)
    assert kind == "raise" and issubclass(np_err, ValueError)
    with pytest.raises(ValueError) as err:
        OVERFLOW[case](lg)  # recording alone raises: nothing is evaluated
    if case != "reshape":  # reshape names the size mismatch, as NumPy does
        assert "array is too big" in str(err.value)
        assert str(BIG) in str(err.value) or "shape" in str(err.value)


def test_the_error_names_the_op_and_shape() -> None:
    with pytest.raises(ValueError, match=r"full: array is too big.*\(1099511627776,1099511627776\)"):
        lg.zeros((BIG, BIG))
    with pytest.raises(ValueError, match=r"broadcast_to: array is too big"):
        lg.broadcast_to(lg.zeros(3), (BIG, BIG, 3))
    with pytest.raises(ValueError, match=r"multiply: array is too big"):
        lg.zeros((BIG, 1)) * lg.zeros((1, BIG))


def test_sizes_numpy_can_describe_are_recorded() -> None:
    # past memory but within intp: NumPy fails only when allocating; recording is fine
    assert lg.zeros((2**62,), dtype=np.int8).shape == (2**62,)
    assert (
        lg.broadcast_to(lg.zeros(1), (2**28, 2**28)).shape
        == np.broadcast_to(np.zeros(1), (2**28, 2**28)).shape
    )
    assert lg.zeros((0, 5)).shape == (0, 5)


NEGATIVE = {
    "zeros": lambda m: m.zeros((3, -1)),
    "ones": lambda m: m.ones(-2),
    "empty": lambda m: m.empty((2, -3)),
    "full": lambda m: m.full((-2,), 1.0),
    "zeros after an empty axis": lambda m: m.zeros((0, -1)),
    "broadcast_to": lambda m: m.broadcast_to(m.zeros(1), (-1,)),
    "reshape two unknowns": lambda m: m.zeros(4).reshape(-1, -1),
    "linspace": lambda m: m.linspace(0, 1, -3),
}


@pytest.mark.parametrize("case", sorted(NEGATIVE))
def test_negative_dimensions_raise_at_record_time(case: str) -> None:
    kind, np_err = _outcome(NEGATIVE[case], np)
    assert kind == "raise" and issubclass(np_err, ValueError)
    with pytest.raises(ValueError):
        NEGATIVE[case](lg)


# -- dtypes of in-place writes ------------------------------------------------------------------------

DTYPES = [
    np.bool_,
    np.int8,
    np.uint8,
    np.int32,
    np.int64,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
]
INPLACE = ["+=", "-=", "*=", "/=", "//=", "**=", "|="]


def _inplace_case(target, value, op: str):
    def run(m):
        a = m.ones(3, dtype=target)
        b = m.asarray(np.full(3, 2, dtype=value)) if m is lg else np.full(3, 2, dtype=value)
        ns = {"a": a, "b": b}
        exec(f"a {op} b", ns)  # noqa: S102 - the statement under test
        return ns["a"]

    return run


def assert_same_outcome(got: tuple, want: tuple, where: str, dtype: bool = True) -> None:
    """lazygraph's `_outcome` is NumPy's: the same kind of error, or the same values (and dtype)."""
    assert got[0] == want[0], f"{where}: NumPy {want}, lazygraph {got}"
    if want[0] == "raise":
        assert _same_kind_of_error(got[1], want[1]), where
    else:
        if dtype:
            assert got[1].dtype == want[1].dtype, where
        np.testing.assert_array_equal(got[1], want[1], err_msg=where)


@pytest.mark.parametrize("op", INPLACE)
def test_inplace_operators_follow_numpy_casting(op: str) -> None:
    for target, value in itertools.product(DTYPES, DTYPES):
        case = _inplace_case(target, value, op)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = _outcome(case, np)
            got = _outcome(case, lg)
        assert_same_outcome(got, want, f"{np.dtype(target)} {op} {np.dtype(value)}")


def test_inplace_dtype_errors_come_at_the_users_line() -> None:
    a = lg.zeros(3, dtype=np.int64)
    with pytest.raises(TypeError, match="cannot cast output from float64 to int64"):
        a += 1.5
    with pytest.raises(TypeError, match="complex128 to float64"):
        b = lg.zeros(3)
        b *= 1j
    with pytest.raises(TypeError, match="cannot cast output"):
        lg.add(a, 1.5, out=a)
    np.testing.assert_array_equal(a.numpy(), [0, 0, 0])  # nothing was recorded


SETITEM_VALUES = [1.5, -1, 300, 2**70, float("nan"), 1j, True, np.float64(2.7), np.complex128(2 + 1j)]
KEYS = [Ellipsis, 0, slice(0, 2), [0, 2]]


def test_setitem_follows_numpy_casting() -> None:
    """setitem casts unsafely (`a[...] = 1.5` into integers is allowed), checks Python scalars
    as NumPy does (300 into int8, nan into int, 1j into float raise), and drops the imaginary part
    of complex arrays with NumPy's warning."""
    for target, key, value in itertools.product(DTYPES, KEYS, SETITEM_VALUES + [np.array([1 + 2j, 3j, 4])]):
        if isinstance(value, np.ndarray) and key == 0:
            value = value[0]

        def case(m, target=target, key=key, value=value):
            a = m.zeros(3, dtype=target)
            v = value[: len(np.zeros(3)[key])] if isinstance(value, np.ndarray) and value.ndim else value
            a[key] = v
            return a

        with warnings.catch_warnings(record=True) as np_warned:
            warnings.simplefilter("always")
            want = _outcome(case, np)
        with warnings.catch_warnings(record=True) as lg_warned:
            warnings.simplefilter("always")
            got = _outcome(case, lg)
        where = f"{np.dtype(target)}[{key!r}] = {value!r}"
        assert_same_outcome(got, want, where, dtype=False)
        complex_np = [w for w in np_warned if issubclass(w.category, np.exceptions.ComplexWarning)]
        complex_lg = [w for w in lg_warned if issubclass(w.category, np.exceptions.ComplexWarning)]
        assert len(complex_lg) == len(complex_np), where


def test_complex_warning_is_given_at_the_write() -> None:
    a = lg.zeros(3)
    with pytest.warns(np.exceptions.ComplexWarning) as record:
        a[:2] = np.array([1 + 1j, 2 + 2j])
    assert record[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # evaluation warns no second time
        np.testing.assert_array_equal(a.numpy(), [1.0, 2.0, 0.0])


def test_an_element_read_by_integers_is_a_scalar() -> None:
    """NumPy's `a[0] += 1.5` on integers reads a scalar, adds (promoting) and stores back."""
    for m in (np, lg):
        a = m.zeros((2, 2), dtype=np.int64)
        a[0, 1] += 1.5
        s = a[1, 1]
        s += 2.5  # rebinds s; a is unchanged
        np.testing.assert_array_equal(np.asarray(a), [[0, 1], [0, 0]])
        assert float(s) == 2.5
