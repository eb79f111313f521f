"""Bad input fails at record time, at the user's line, with a message naming the op and shapes.

Every case checks (via `expect_error`): the exception type (NumPy's), that the message
contains the operator's name and the operands' shapes (or the axis / index involved),
that nothing was evaluated (`lg.debug.evaluation_stats()["evaluations"]` unchanged), that
no traceback entry lies in the engine, and that the innermost traceback entry in this
test file is the line that made the call. Data-dependent failures can only surface at an
evaluation point; those must still name the operator.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from _support import evaluations

import lazygraph as lg

HERE = Path(__file__).resolve()


def arr(*shape, dtype=np.float64):
    """A lazy array of the given shape with values 0, 1, 2, ..."""
    size = int(np.prod(shape, dtype=np.int64))
    return lg.asarray(np.arange(size).reshape(shape).astype(dtype))


def innermost_test_entry(excinfo):
    """The innermost traceback entry that lies in this test file."""
    entries = [e for e in excinfo.traceback if Path(str(e.path)).resolve() == HERE]
    assert entries, "no traceback entry in the test file"
    return entries[-1]


def expect_error(fn, exc_type, *words):
    """Call fn (a one-line lambda making one lazygraph call) and check how it fails."""
    before = evaluations()
    with pytest.raises(exc_type) as excinfo:
        fn()
    assert evaluations() == before, "the error was raised by an evaluation, not at record time"
    msg = str(excinfo.value)
    for w in words:
        assert w in msg, f"{w!r} not in the message: {msg!r}"
    for entry in excinfo.traceback:
        assert "engine" not in Path(str(entry.path)).parts, f"raised during evaluation: {msg}"
    entry = innermost_test_entry(excinfo)
    assert entry.lineno + 1 == fn.__code__.co_firstlineno, (
        f"innermost test-file frame is line {entry.lineno + 1}, the call is on line {fn.__code__.co_firstlineno}"
    )
    return excinfo.value


def test_broadcast_error_is_raised_on_the_users_line():
    x, y = arr(3, 4), arr(5)
    before = evaluations()
    with pytest.raises(ValueError) as excinfo:
        line = sys._getframe().f_lineno + 1
        z = x + y  # noqa: F841
    assert evaluations() == before
    msg = str(excinfo.value)
    assert "add" in msg and "(3,4)" in msg and "(5,)" in msg
    assert innermost_test_entry(excinfo).lineno + 1 == line


# -- broadcasting and linear algebra ------------------------------------------------------


@pytest.mark.parametrize(
    "fn, words",
    [
        (lambda: arr(3, 4) + arr(5), ("add", "(3,4)", "(5,)")),
        (lambda: lg.add(arr(3, 4), arr(5)), ("add", "(3,4)", "(5,)")),
        (lambda: arr(2, 3) * arr(4, 1, 2), ("multiply", "(2,3)", "(4,1,2)")),
        (lambda: lg.where(arr(2, 1) > 0, arr(3), arr(4)), ("where", "(3,)", "(4,)")),
        (lambda: lg.maximum(arr(2), arr(3, 3)), ("maximum", "(2,)", "(3,3)")),
    ],
)
def test_incompatible_broadcast(fn, words):
    expect_error(fn, ValueError, *words)


@pytest.mark.parametrize(
    "fn, words",
    [
        (lambda: arr(3, 4) @ arr(5, 2), ("matmul", "(3,4)", "(5,2)")),
        (lambda: lg.matmul(arr(3), arr(4)), ("matmul", "(3,)", "(4,)")),
        (lambda: lg.matmul(arr(2, 2, 3), arr(3, 3, 1)), ("matmul",)),
        (lambda: lg.matmul(arr(), arr(3)), ("matmul", "0-d")),
        (lambda: lg.einsum("ij,jk->ik", arr(2, 3), arr(4, 4)), ("einsum", "(2,3)", "(4,4)")),
    ],
)
def test_contraction_mismatch(fn, words):
    expect_error(fn, ValueError, *words)


def test_batch_mismatch_names_batch_shapes():
    err = expect_error(lambda: lg.matmul(arr(2, 2, 3), arr(3, 3, 1)), ValueError, "matmul")
    assert "(2,)" in str(err) and "(3,)" in str(err)


# -- axes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn, words",
    [
        (lambda: arr(3, 4).sum(axis=2), ("sum", "axis 2", "dimension 2")),
        (lambda: lg.mean(arr(3, 4), axis=(0, -3)), ("mean", "axis -3", "dimension 2")),
        (lambda: lg.max(arr(3, 4), axis=5), ("max", "axis 5")),
        (lambda: lg.argmax(arr(3, 4), axis=5), ("argmax", "axis 5")),
        (lambda: lg.cumsum(arr(3, 4), axis=-3), ("cumsum", "axis -3")),
        (lambda: lg.permute_dims(arr(2, 3), (0, 2)), ("permute_dims", "axis 2")),
        (lambda: lg.swapaxes(arr(2, 3), 0, 2), ("swapaxes", "axis 2")),
        (lambda: lg.moveaxis(arr(2, 3), 0, 5), ("moveaxis", "axis 5")),
        (lambda: lg.concat([arr(2, 3), arr(2, 3)], axis=2), ("concat", "axis 2")),
        (lambda: lg.stack([arr(2, 3), arr(2, 3)], axis=3), ("stack", "axis 3")),
        (lambda: lg.squeeze(arr(2, 1), axis=2), ("squeeze", "axis 2")),
        (lambda: lg.expand_dims(arr(2, 3), axis=3), ("expand_dims", "axis 3")),
        (lambda: lg.flip(arr(2, 3), axis=2), ("flip", "axis 2")),
    ],
)
def test_axis_out_of_bounds(fn, words):
    # np.exceptions.AxisError is both a ValueError and an IndexError, as in NumPy.
    err = expect_error(fn, np.exceptions.AxisError, *words)
    assert isinstance(err, ValueError) and isinstance(err, IndexError)


@pytest.mark.parametrize(
    "fn, words",
    [
        (lambda: arr(2, 3, 4).transpose(0, 1), ("permute_dims", "(0, 1)", "(2,3,4)")),
        (lambda: lg.permute_dims(arr(2, 3), (0, 0)), ("permute_dims", "(0, 0)", "(2,3)")),
        (lambda: lg.max(arr(3, 4), axis=(1, 1)), ("max", "repeated axis")),
        (lambda: lg.expand_dims(arr(2, 3), axis=(0, 0)), ("expand_dims", "repeated axis")),
        (lambda: lg.squeeze(arr(2, 1), axis=0), ("squeeze", "axis 0", "(2,1)")),
        (lambda: lg.max(arr(0, 3), axis=0), ("max", "zero-size", "(0,3)")),
        (lambda: lg.argmin(arr(0)), ("argmin", "empty")),
    ],
)
def test_bad_axes(fn, words):
    expect_error(fn, ValueError, *words)


# -- shapes of joins, reshapes, pads and splits -------------------------------------------


@pytest.mark.parametrize(
    "fn, words",
    [
        (lambda: arr(3, 4).reshape(5, 2), ("reshape", "size 12", "(5,2)")),
        (lambda: lg.reshape(arr(3, 4), (-1, 5)), ("reshape", "size 12")),
        (lambda: arr(3, 4).reshape(-1, -1), ("reshape", "-1")),
        (lambda: lg.concat([arr(2, 3), arr(2, 4)], axis=0), ("concat", "(2,3)", "(2,4)")),
        (lambda: lg.concat([arr(2, 3), arr(3)]), ("concat", "(2,3)", "(3,)")),
        (lambda: lg.concat([arr(), arr()]), ("concat", "zero-dimensional")),
        (lambda: lg.stack([arr(2, 3), arr(3, 2)]), ("stack", "(2,3)", "(3,2)")),
        (lambda: lg.pad(arr(3, 4), ((1, -1), (0, 0))), ("pad", "negative", "-1")),
        (lambda: lg.pad(arr(3, 4), -2), ("pad", "negative")),
        (lambda: lg.split(arr(7), 3), ("split", "equal division", "7", "3")),
        (lambda: lg.split(arr(2, 5), 2, axis=1), ("split", "equal division", "5", "axis 1")),
    ],
)
def test_shape_mismatch(fn, words):
    expect_error(fn, ValueError, *words)


@pytest.mark.parametrize(
    "fn, words",
    [
        (lambda: lg.einsum("ij,jk->il", arr(2, 3), arr(3, 4)), ("einsum", "'l'")),
        (lambda: lg.einsum("i1,jk->ik", arr(2, 3), arr(3, 4)), ("einsum", "'1'")),
        (lambda: lg.einsum("ij,jk,kl->il", arr(2, 3), arr(3, 4)), ("einsum", "3", "2 operands")),
        (lambda: lg.einsum("ijk->i", arr(2, 3)), ("einsum", "'ijk'", "(2,3)")),
    ],
)
def test_einsum_bad_subscripts(fn, words):
    expect_error(fn, ValueError, *words)


# -- dtypes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn, words",
    [
        (lambda: arr(3) & arr(3), ("bitwise_and", "float64")),
        (lambda: arr(3) | 1, ("bitwise_or", "float64")),
        (
            lambda: lg.bitwise_xor(arr(2, dtype=np.float32), arr(2, dtype=np.int32)),
            ("bitwise_xor", "float32"),
        ),
        (lambda: ~arr(3), ("bitwise_invert", "float64")),
        (lambda: arr(3, dtype=np.int64) << 1.5, ("bitwise_left_shift", "float")),
        (lambda: lg.asarray(np.ones(3, bool)) - lg.asarray(np.ones(3, bool)), ("subtract", "bool")),
        (lambda: -lg.asarray(np.ones(3, bool)), ("negative", "bool")),
    ],
)
def test_unsupported_dtypes(fn, words):
    expect_error(fn, TypeError, *words)


def test_inplace_int_plus_float_is_a_same_kind_error():
    x = arr(3, dtype=np.int64)
    before = evaluations()
    with pytest.raises(TypeError) as excinfo:
        line = sys._getframe().f_lineno + 1
        x += 1.5
    assert evaluations() == before
    msg = str(excinfo.value)
    assert "add" in msg and "same_kind" in msg and "float64" in msg and "int64" in msg
    assert innermost_test_entry(excinfo).lineno + 1 == line
    # the failed write changed nothing
    np.testing.assert_array_equal(x.numpy(), np.arange(3))


@pytest.mark.parametrize(
    "fn, words",
    [
        (lambda: arr(3, dtype=np.int32).__iadd__(arr(3)), ("add", "same_kind", "int32")),
        (lambda: lg.asarray(np.ones(3, bool)).__imul__(2), ("multiply", "same_kind", "bool")),
        (lambda: lg.add(arr(3, dtype=np.int64), 0.5, out=arr(3, dtype=np.int64)), ("add", "cast", "int64")),
        (lambda: np.add(arr(3, dtype=np.int64), 0.5, out=arr(3, dtype=np.int64)), ("add", "cast", "int64")),
    ],
)
def test_inplace_casting(fn, words):
    expect_error(fn, TypeError, *words)


@pytest.mark.parametrize(
    "fn, words",
    [
        (lambda: lg.asarray(np.zeros(3, np.int8)) + 1000, ("add", "1000", "int8")),
        (lambda: lg.asarray(np.zeros(3, np.uint8)) - (-1), ("subtract", "-1", "uint8")),
        (lambda: lg.asarray(np.zeros(3, np.int8)).__iadd__(300), ("add", "300", "int8")),
    ],
)
def test_python_int_out_of_range_overflows(fn, words):
    # NumPy 2 (NEP 50): a Python int that does not fit the array's dtype is an error.
    expect_error(fn, OverflowError, *words)


# -- operands that are not arrays ---------------------------------------------------------------


@pytest.mark.parametrize(
    "fn, words",
    [
        (lambda: arr(3) + "abc", ("add", "str")),
        (lambda: "abc" - arr(3), ("subtract", "str")),
        (lambda: lg.multiply(arr(3), {"a": 1}), ("multiply", "dict")),
        (lambda: lg.add(arr(3), None), ("add", "NoneType")),
        (lambda: lg.exp("x"), ("exp", "str")),
        (lambda: lg.matmul(arr(2, 2), {"a": 1}), ("matmul", "dict")),
    ],
)
def test_non_array_operands(fn, words):
    expect_error(fn, TypeError, *words)


# -- writes -----------------------------------------------------------------------------------------


def test_writes_to_broadcast_views_are_refused():
    base = arr(3)
    b = lg.broadcast_to(base, (2, 3))
    expect_error(lambda: b.__setitem__(0, 1.0), ValueError, "setitem", "read-only")
    expect_error(lambda: b.__iadd__(1.0), ValueError, "add", "read-only")
    expect_error(lambda: lg.add(base, 1, out=b), ValueError, "add", "read-only")
    expect_error(lambda: b[1:].__setitem__(Ellipsis, 0.0), ValueError, "read-only")  # a view of it too
    # NumPy reports the read-only target before anything wrong with the index
    for bad in (np.zeros((0, 3), bool), 7, np.array([9]), "x"):
        expect_error(lambda bad=bad: b.__setitem__(bad, 1.0), ValueError, "setitem", "read-only")
    np.testing.assert_array_equal(base.numpy(), np.arange(3.0))


@pytest.mark.parametrize(
    "fn, words",
    [
        (lambda: arr(3, 4).__setitem__(slice(None), arr(3)), ("setitem", "(3,)", "(3,4)")),
        (lambda: arr(3, 4).__setitem__(0, arr(5)), ("setitem", "(5,)", "(4,)")),
        (lambda: arr(3, 4).__setitem__(np.array([0, 1]), arr(3, 4)), ("setitem", "(3,4)", "(2,4)")),
        (lambda: arr(3, 4).__setitem__((slice(None), 0), arr(2, 3)), ("setitem", "(2,3)", "(3,)")),
    ],
)
def test_setitem_value_not_broadcastable(fn, words):
    expect_error(fn, ValueError, *words)


def test_inplace_result_must_fit_the_target():
    expect_error(lambda: arr(3).__iadd__(arr(2, 3)), ValueError, "add", "(3,)", "(2,3)")


# -- indexing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn, words",
    [
        (lambda: arr(3, 4)[3], ("getitem", "index 3", "axis 0", "size 3")),
        (lambda: arr(3, 4)[:, -5], ("getitem", "index -5", "axis 1", "size 4")),
        (lambda: arr(3, 4)[np.array([0, 3])], ("getitem", "index 3", "size 3")),
        (lambda: arr(3, 4)[[0, -4]], ("getitem", "index -4", "size 3")),
        (lambda: arr(3, 4)[:, np.array([4])], ("getitem", "index 4", "axis 1", "size 4")),
        (lambda: arr(3, 4).__setitem__(5, 0.0), ("setitem", "index 5", "size 3")),
        (lambda: arr(3, 4).__setitem__(np.array([1, 7]), 0.0), ("setitem", "index 7", "size 3")),
    ],
)
def test_static_index_out_of_range(fn, words):
    expect_error(fn, IndexError, *words)


@pytest.mark.parametrize(
    "fn, words",
    [
        (lambda: arr(3, 4)[0, 1, 2], ("getitem", "too many indices", "2-dimensional", "3")),
        (lambda: arr()[0], ("getitem", "too many indices", "0-dimensional")),
        (lambda: arr(3, 4)[np.ones((3, 4, 1), bool)], ("getitem", "too many indices")),
        (lambda: arr(3, 4)[..., 0, ...], ("getitem", "single ellipsis")),
        (lambda: arr(3)[np.array([0.5])], ("getitem", "float64")),
        (lambda: arr(3)[1.0], ("getitem", "float")),
        (lambda: arr(3)[0.5:], ("getitem", "slice")),
    ],
)
def test_bad_index_items(fn, words):
    expect_error(fn, IndexError, *words)


@pytest.mark.parametrize(
    "fn, words",
    [
        (lambda: arr(3, 4)[np.array([True, False])], ("getitem", "boolean index", "axis 0", "3", "2")),
        (lambda: arr(3, 4)[np.ones((3, 3), bool)], ("getitem", "boolean index", "axis 1", "4", "3")),
        (lambda: arr(3, 4).__setitem__(np.array([True] * 4), 0.0), ("setitem", "boolean index", "4")),
    ],
)
def test_boolean_mask_shape_mismatch(fn, words):
    expect_error(fn, IndexError, *words)


def test_failed_statement_leaves_the_program_unchanged():
    x = arr(2, 3)
    y = x * 2
    for bad in (lambda: x.__iadd__(arr(4)), lambda: x.__setitem__(0, arr(5)), lambda: x.__setitem__(9, 1.0)):
        with pytest.raises((ValueError, IndexError)):
            bad()
    np.testing.assert_array_equal(x.numpy(), np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(y.numpy(), 2 * np.arange(6.0).reshape(2, 3))


# -- data-dependent failures: only at the evaluation point -------------------------------------------


def test_lazy_index_out_of_range_fails_at_evaluation_naming_gather():
    x = arr(3, 4)
    idx = lg.asarray(np.array([7]))
    before = evaluations()
    y = x[idx]  # the index values are data: nothing can be checked yet
    assert evaluations() == before
    assert y.shape == (1, 4)
    with pytest.raises(IndexError) as excinfo:
        line = sys._getframe().f_lineno + 1
        y.numpy()
    msg = str(excinfo.value)
    assert "gather" in msg and "7" in msg and "(3, 4)" in msg.replace("(3,4)", "(3, 4)")
    bare = str(excinfo.value.__cause__) if excinfo.value.__cause__ is not None else None
    assert msg != bare and not msg.startswith("index 7"), "a bare NumPy message"
    assert innermost_test_entry(excinfo).lineno + 1 == line


def test_computed_index_out_of_range_fails_at_evaluation():
    x = arr(3)
    idx = lg.asarray(np.array([0, 1])) * 5  # [0, 5]: known only when run
    y = x[idx] + 1
    with pytest.raises(IndexError, match="gather"):
        lg.eval(y)
    # the failed evaluation did not poison the graph: other arrays still evaluate
    np.testing.assert_array_equal((x + 1).numpy(), np.arange(3.0) + 1)
