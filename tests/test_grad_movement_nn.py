"""Gradients through views, writes, indexing, joins and the neural-network operators."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import lazygraph as lg
from tests.gradcheck import check_grad
from tests.test_grad_ops import grad_settings, seeds, spaced, values


@grad_settings
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4), seed=seeds, data=st.data())
def test_basic_slices(shape: tuple, seed: int, data) -> None:
    key = tuple(
        data.draw(
            st.one_of(
                st.integers(-d, d - 1),
                st.builds(
                    slice,
                    st.none() | st.integers(-d, d),
                    st.none() | st.integers(-d, d),
                    st.sampled_from([None, 1, 2, -1, -2]),
                ),
            )
        )
        for d in shape
    )
    check_grad(lambda a: a[key] * 1.5, values(shape, seed))


def test_views() -> None:
    x = values((2, 3, 4), 0)
    check_grad(lambda a: a.T, x)
    check_grad(lambda a: lg.swapaxes(a, 0, 2)[1:, ::-1], x)
    check_grad(lambda a: lg.broadcast_to(a[:, :1, :], (5, 2, 3, 4)), x)
    check_grad(lambda a: lg.expand_dims(a, 1).reshape(6, 4), x)
    check_grad(lambda a: lg.flip(a, axis=(0, 2)), x)
    check_grad(lambda a: a.T.reshape(-1), x)  # a copying reshape
    check_grad(lambda a: lg.squeeze(a[:1, :, 2:3]), x)
    check_grad(lambda a: lg.moveaxis(a, 0, -1)[..., None], x)


def test_broadcast_view_sums_its_cotangent() -> None:
    x = lg.asarray(np.array([1.0, 2.0]), requires_grad=True)
    (g,) = lg.grad((lg.broadcast_to(x, (3, 2)) * lg.asarray(np.arange(6.0).reshape(3, 2))).sum(), [x])
    np.testing.assert_array_equal(g.numpy(), [0 + 2 + 4, 1 + 3 + 5])


def test_gather_with_repeats_accumulates() -> None:
    x = values((4, 3), 0)
    idx = np.array([0, 2, 0, 3])
    check_grad(lambda a: a[idx], x)
    check_grad(lambda a: a[:, [2, 2, 0]], x)
    check_grad(lambda a: a[idx[:, None], np.array([[0, 1]])], x)
    check_grad(lambda a: a[1:, None, [1, 0]], x)
    check_grad(lambda a: a[a > 0.0], x)  # a mask is evaluated, then gathers


def test_setitem_basic_and_advanced() -> None:
    x, v = values((4, 3), 0), values((2, 3), 1)

    def basic(a, b):
        y = a * 1.0
        y[1:3] = b
        return y * a

    def advanced(a, b):
        y = a * 2.0
        y[[3, 0]] = b
        return y

    def scalar_row(a, b):
        y = a + 0.0
        y[0, ::2] = b[0, 0]
        return y

    def broadcast_value(a, b):
        y = a + 0.0
        y[:, 1] = b[:1, 0]
        return y

    for fn in (basic, advanced, scalar_row, broadcast_value):
        check_grad(fn, x, v)


def test_inplace_ops_and_views_of_written_arrays() -> None:
    x, w = values((3, 4), 0), values((4,), 1)

    def f(a, b):
        y = a * 2.0
        y += b
        y *= a
        v = y[:, 1:]
        v -= 1.0
        return y.sum(axis=0) + v.mean()

    check_grad(f, x, w)


def test_out_parameter_write() -> None:
    def f(a, b):
        y = lg.zeros((3,))
        lg.multiply(a, b, out=y)
        return y

    check_grad(f, values((3,), 0), values((3,), 1))


def test_concat_stack_split() -> None:
    a, b = values((2, 3), 0), values((1, 3), 1)
    check_grad(lambda x, y: lg.concat([x, y, x], axis=0), a, b)
    check_grad(lambda x, y: lg.stack([x, x * y], axis=1), a, np.broadcast_to(b, (2, 3)).copy())
    check_grad(lambda x: lg.split(x, 3, axis=1)[1] * lg.split(x, 3, axis=1)[2], a)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric", "wrap"])
def test_pad(mode: str) -> None:
    check_grad(lambda x: lg.pad(x, ((1, 2), (2, 1)), mode=mode), values((3, 3), 0))


# -- neural-network operators ------------------------------------------------------------


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@grad_settings
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=3), seed=seeds, data=st.data())
def test_softmax_family(name: str, shape: tuple, seed: int, data) -> None:
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    check_grad(lambda a: getattr(lg, name)(a, axis=axis), values(shape, seed))


@grad_settings
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3), seed=seeds, keep=st.booleans())
def test_logsumexp(shape: tuple, seed: int, keep: bool) -> None:
    check_grad(lambda a: lg.logsumexp(a, axis=-1, keepdims=keep), values(shape, seed))
    check_grad(lambda a: lg.logsumexp(a), values(shape, seed))


conv_cases = st.fixed_dictionaries(
    {
        "n": st.integers(0, 2),
        "groups": st.sampled_from([1, 2]),
        "cpg": st.integers(1, 2),
        "opg": st.integers(1, 2),
        "h": st.integers(3, 6),
        "w": st.integers(3, 6),
        "k": st.tuples(st.integers(1, 3), st.integers(1, 3)),
        "stride": st.tuples(st.integers(1, 2), st.integers(1, 2)),
        "padding": st.tuples(st.integers(0, 2), st.integers(0, 1)),
        "dilation": st.tuples(st.integers(1, 2), st.integers(1, 1)),
        "bias": st.booleans(),
    }
)


@settings(max_examples=max(6, settings().max_examples // 3), deadline=None)
@given(case=conv_cases, seed=seeds)
def test_conv2d(case: dict, seed: int) -> None:
    g = case["groups"]
    c, o = g * case["cpg"], g * case["opg"]
    kh, kw = case["k"]
    eff = (case["dilation"][0] * (kh - 1) + 1, case["dilation"][1] * (kw - 1) + 1)
    if eff[0] > case["h"] + 2 * case["padding"][0] or eff[1] > case["w"] + 2 * case["padding"][1]:
        return
    x = values((case["n"], c, case["h"], case["w"]), seed)
    w = values((o, case["cpg"], kh, kw), seed + 1)
    kw_args = dict(stride=case["stride"], padding=case["padding"], dilation=case["dilation"], groups=g)
    if case["bias"]:
        check_grad(lambda a, b, bb: lg.conv2d(a, b, bb, **kw_args), x, w, values((o,), seed + 2))
    else:
        check_grad(lambda a, b: lg.conv2d(a, b, **kw_args), x, w)


@settings(max_examples=max(6, settings().max_examples // 3), deadline=None)
@given(
    n=st.integers(0, 2),
    hw=st.tuples(st.integers(2, 6), st.integers(2, 6)),
    k=st.integers(1, 3),
    stride=st.integers(1, 3),
    pad=st.integers(0, 1),
    dil=st.integers(1, 2),
    seed=seeds,
)
def test_max_pool2d(n: int, hw: tuple, k: int, stride: int, pad: int, dil: int, seed: int) -> None:
    if pad > k // 2 or dil * (k - 1) + 1 > min(hw) + 2 * pad:
        return
    x = spaced((n, 2) + hw, seed)
    check_grad(lambda a: lg.max_pool2d(a, kernel_size=k, stride=stride, padding=pad, dilation=dil), x)


@settings(max_examples=max(6, settings().max_examples // 3), deadline=None)
@given(
    n=st.integers(0, 2),
    hw=st.tuples(st.integers(2, 6), st.integers(2, 6)),
    k=st.integers(1, 3),
    stride=st.integers(1, 3),
    pad=st.integers(0, 1),
    include=st.booleans(),
    seed=seeds,
)
def test_avg_pool2d(n: int, hw: tuple, k: int, stride: int, pad: int, include: bool, seed: int) -> None:
    if pad > k // 2 or k > min(hw) + 2 * pad:
        return
    x = values((n, 2) + hw, seed)
    check_grad(
        lambda a: lg.avg_pool2d(a, kernel_size=k, stride=stride, padding=pad, count_include_pad=include), x
    )


def test_max_pool_overlapping_windows_route_to_first_max() -> None:
    x = lg.asarray(np.array([[[[1.0, 3.0, 3.0, 0.0]]]]), requires_grad=True)
    (g,) = lg.grad(lg.max_pool2d(x, kernel_size=(1, 2), stride=1).sum(), [x])
    np.testing.assert_array_equal(g.numpy(), [[[[0.0, 2.0, 1.0, 0.0]]]])


@pytest.mark.parametrize("k", [1, 2, 3])
def test_tiled_pooling_with_a_ragged_border(k: int) -> None:
    x = spaced((2, 3, 7, 5), 3)
    check_grad(lambda a: lg.max_pool2d(a, kernel_size=k), x)
    check_grad(lambda a: lg.avg_pool2d(a, kernel_size=k), x)


def test_tiled_max_pool_ties_go_to_the_first_element() -> None:
    x = lg.asarray(np.zeros((1, 1, 2, 4)), requires_grad=True)  # e.g. after a ReLU
    (g,) = lg.grad(lg.max_pool2d(x, kernel_size=2).sum(), [x])
    np.testing.assert_array_equal(g.numpy(), [[[[1, 0, 1, 0], [0, 0, 0, 0]]]])
