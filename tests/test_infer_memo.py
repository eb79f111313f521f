"""`record`'s memo of shape and dtype rules gives the rule's own answers, errors and warnings."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import lazygraph as lg
from lazygraph import infer_memo
from ops.base import Op
from ops.creation import BUFFER, SCALAR
from ops.node import Node


class _Counting(Op):
    """A rule that counts its calls, warns when asked to and refuses a negative `k`."""

    def __init__(self) -> None:
        super().__init__("counting")
        self.calls = 0

    def infer(self, inputs, attrs):
        self.calls += 1
        if attrs.get("k", 0) < 0:
            raise ValueError("counting: k must be non-negative")
        if attrs.get("warn"):
            warnings.warn("counting: asked to warn", RuntimeWarning, stacklevel=2)
        return (
            inputs[0].shape,
            np.result_type(inputs[0].dtype, type(attrs.get("k", 0))),
            {"k": attrs.get("k", 0)},
        )


def _leaf(shape, dtype="float32") -> Node:
    return Node(BUFFER, (), {}, shape, np.dtype(dtype), buffer=np.zeros(shape, dtype))


def test_a_signature_is_asked_twice_then_remembered_with_fresh_attributes():
    op = _Counting()
    a, b = _leaf((2, 3)), _leaf((2, 3))
    first = infer_memo.infer(op, (a,), {"k": 2})  # first sight: asked, not remembered
    second = infer_memo.infer(op, (b,), {"k": 2})  # second: asked, watched and remembered
    third = infer_memo.infer(op, (a,), {"k": 2})
    assert op.calls == 2 and first == second == third and second[2] is not third[2]
    third[2]["k"] = 99  # a node's attributes are its own
    assert infer_memo.infer(op, (a,), {"k": 2})[2] == {"k": 2}
    for _ in range(3):
        infer_memo.infer(op, (_leaf((3, 2)),), {"k": 2})  # another shape
        infer_memo.infer(op, (_leaf((2, 3), "float64"),), {"k": 2})  # another dtype
    assert op.calls == 6


def test_attribute_types_are_part_of_the_signature():
    op = _Counting()
    a = _leaf((4,), "int8")
    for _ in range(3):
        as_int = infer_memo.infer(op, (a,), {"k": 1})
        as_float = infer_memo.infer(op, (a,), {"k": 1.0})  # 1 == 1.0, but promotes otherwise
        assert as_int[1] != as_float[1]
    assert op.calls == 4


def test_errors_warnings_scalars_and_unhashable_attributes_ask_every_time():
    op = _Counting()
    a = _leaf((2,))
    for _ in range(3):  # past the second sight, where a signature that answers is remembered
        with pytest.raises(ValueError, match="non-negative"):
            infer_memo.infer(op, (a,), {"k": -1})
    for _ in range(3):
        with pytest.warns(RuntimeWarning, match="asked to warn"):
            infer_memo.infer(op, (a,), {"warn": True})
    scalar = Node(SCALAR, (), {}, (), np.dtype(np.int64), buffer=3)
    infer_memo.infer(op, (scalar,), {})
    infer_memo.infer(op, (scalar,), {})
    infer_memo.infer(op, (a,), {"k": 0, "axes": [0]})
    infer_memo.infer(op, (a,), {"k": 0, "axes": [0]})
    assert op.calls == 10


def test_recorded_operators_keep_numpys_answers_and_errors():
    x = lg.asarray(np.arange(24.0).reshape(2, 3, 4))
    for _ in range(2):  # the second time from the memo
        np.testing.assert_array_equal(
            x.sum(axis=(0, 2)).numpy(), np.arange(24.0).reshape(2, 3, 4).sum(axis=(0, 2))
        )
        np.testing.assert_array_equal(
            x.max(axis=-1, keepdims=True).numpy(),
            np.arange(24.0).reshape(2, 3, 4).max(axis=-1, keepdims=True),
        )
        with pytest.raises(Exception, match="axis"):
            x.sum(axis=3)


def test_a_python_float_counts_by_its_type_and_an_int_by_its_value():
    op = _Counting()
    a = _leaf((2,))
    for v in (1.5, -0.0, float("nan"), 1e300):  # any float: one signature
        infer_memo.infer(op, (a, Node(SCALAR, (), {}, (), np.dtype(np.float64), buffer=v)), {})
    assert op.calls == 2  # asked twice, then remembered
    for v in (1, 300, 1):  # ints: NumPy's answer depends on the value (int8 + 300 fails)
        infer_memo.infer(op, (a, Node(SCALAR, (), {}, (), np.dtype(np.int64), buffer=v)), {})
    assert op.calls == 5
    # the memo gives NumPy's answers for a weak float beside integer and float arrays
    i8 = lg.asarray(np.arange(4, dtype=np.int8))
    cond = lg.asarray(np.array([True, False, True, False]))
    for _ in range(3):
        assert (
            lg.where(cond, i8, 2.5).dtype
            == np.where(np.asarray(cond), np.arange(4, dtype=np.int8), 2.5).dtype
        )
        assert lg.where(cond, i8 * 1.0, True).dtype == np.float64
