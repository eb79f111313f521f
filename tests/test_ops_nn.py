"""ops.nn checked directly through the op objects: infer agrees with the kernel's output,
kernels agree with naive loop references (and torch when it is installed), and bad
arguments fail at record time with the op's name."""

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ops.nn  # noqa: F401  (registers the ops)
from ops.base import REGISTRY
from ops.node import Node

FAST = settings(max_examples=60, deadline=None)


class _Leaf:
    name = "buffer"


_LEAF = _Leaf()


def leaf(a) -> Node:
    a = np.asarray(a)
    return Node(_LEAF, (), {}, a.shape, a.dtype, buffer=a)


def run(name: str, *arrays, **attrs):
    """infer then kernel; checks inferred shape/dtype and that inputs are not mutated."""
    op = REGISTRY[name]
    arrays = tuple(np.asarray(a) for a in arrays)
    shape, dtype, norm = op.infer(tuple(leaf(a) for a in arrays), attrs)
    before = [a.copy() for a in arrays]
    out = op.kernel(*arrays, **norm)
    assert out.shape == shape, (name, out.shape, shape)
    assert out.dtype == dtype, (name, out.dtype, dtype)
    for a, b in zip(arrays, before):
        np.testing.assert_array_equal(a, b)
    return out, norm


def infer(name: str, *arrays, **attrs):
    return REGISTRY[name].infer(tuple(leaf(np.asarray(a)) for a in arrays), attrs)


# ---------------------------------------------------------------------------------------
# softmax family


def naive_softmax(x, axis):
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


moderate = hnp.arrays(
    np.float64,
    hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5),
    elements=st.floats(-20, 20),
)


@FAST
@given(moderate, st.integers(-3, 2), st.sampled_from([0.0, 1000.0, -1000.0]))
def test_softmax_family_matches_formulas(x, axis, offset):
    assume(-x.ndim <= axis < x.ndim)
    ref_sm = naive_softmax(x, axis)
    with np.errstate(divide="ignore"):  # empty axes: log(0)
        ref_lse_keep = np.log(np.exp(x).sum(axis=axis, keepdims=True))
    # Shifting by a large constant must not change softmax and shift logsumexp exactly.
    sm, norm = run("softmax", x + offset, axis=axis)
    assert norm == {"axis": axis % x.ndim}
    np.testing.assert_allclose(sm, ref_sm, rtol=1e-9, atol=1e-12)
    lsm, _ = run("log_softmax", x + offset, axis=axis)
    np.testing.assert_allclose(lsm, x - ref_lse_keep, rtol=1e-9, atol=1e-9)
    lse, _ = run("logsumexp", x + offset, axis=axis)
    np.testing.assert_allclose(lse, np.squeeze(ref_lse_keep, axis) + offset, rtol=1e-9, atol=1e-9)
    assert np.all(np.isfinite(sm)) and np.all(np.isfinite(lsm))


@FAST
@given(moderate, st.data())
def test_logsumexp_axes_keepdims(x, data):
    axes = data.draw(
        st.sampled_from(
            [None] + [c for r in range(x.ndim + 1) for c in itertools.combinations(range(x.ndim), r)]
        )
    )
    keepdims = data.draw(st.booleans())
    out, norm = run("logsumexp", x, axis=axes, keepdims=keepdims)
    with np.errstate(divide="ignore"):
        ref = np.log(np.exp(x).sum(axis=axes, keepdims=keepdims))
    np.testing.assert_allclose(out, ref, rtol=1e-9, atol=1e-9)
    assert isinstance(norm["axis"], tuple)


def test_softmax_dtypes():
    for dt, want in [
        (np.int32, np.float64),
        (np.float32, np.float32),
        (np.float16, np.float16),
        (bool, np.float16),
    ]:
        x = np.arange(6).reshape(2, 3).astype(dt)
        for name in ("softmax", "log_softmax", "logsumexp"):
            _, dtype, _ = infer(name, x)
            assert dtype == want, (name, dt)
            run(name, x)
    big = np.array([1000.0, 1000.0], dtype=np.float32)
    np.testing.assert_allclose(run("softmax", big)[0], [0.5, 0.5])
    np.testing.assert_allclose(run("logsumexp", big)[0], 1000 + np.log(2), rtol=1e-6)
    np.testing.assert_allclose(
        run("logsumexp", np.array([60000.0, 60000.0], np.float16))[0], 60000, rtol=1e-3
    )


def test_softmax_infinities_and_empty():
    x = np.array([[-np.inf, -np.inf], [0.0, -np.inf], [np.inf, 1.0]])
    lse = run("logsumexp", x, axis=1)[0]
    np.testing.assert_array_equal(lse, [-np.inf, 0.0, np.inf])
    sm = run("softmax", x, axis=1)[0]
    assert np.isnan(sm[0]).all() and np.isnan(sm[2]).all()  # torch gives nan there too
    np.testing.assert_array_equal(sm[1], [1.0, 0.0])
    lsm = run("log_softmax", x, axis=1)[0]
    np.testing.assert_array_equal(lsm[1], [0.0, -np.inf])
    # Empty reductions are log(0) = -inf; empty softmax is just empty.
    np.testing.assert_array_equal(run("logsumexp", np.zeros((3, 0)), axis=1)[0], [-np.inf] * 3)
    assert run("logsumexp", np.zeros((0,)))[0] == -np.inf
    assert run("logsumexp", np.zeros((0, 4)), axis=1)[0].shape == (0,)
    assert run("softmax", np.zeros((3, 0)), axis=1)[0].shape == (3, 0)
    assert run("log_softmax", np.zeros((0, 3)), axis=0)[0].shape == (0, 3)


def test_softmax_vs_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 4, 5)) * 30
    x[0, 0] = -np.inf
    x[1, 1, 2] = -np.inf
    for axis in (0, 1, -1):
        t = torch.from_numpy(x)
        np.testing.assert_allclose(
            run("softmax", x, axis=axis)[0], torch.softmax(t, axis).numpy(), equal_nan=True
        )
        np.testing.assert_allclose(
            run("log_softmax", x, axis=axis)[0],
            torch.log_softmax(t, axis).numpy(),
            equal_nan=True,
            atol=1e-13,  # x - logsumexp(x) cancels to ~1e-10 where one value dominates
        )
        np.testing.assert_allclose(
            run("logsumexp", x, axis=axis)[0], torch.logsumexp(t, axis).numpy(), equal_nan=True
        )


def test_softmax_errors():
    with pytest.raises(np.exceptions.AxisError, match="^softmax:"):
        infer("softmax", np.zeros((2, 3)), axis=2)
    with pytest.raises(TypeError, match="^log_softmax:"):
        infer("log_softmax", np.zeros((2, 3)), axis=(0, 1))
    with pytest.raises(TypeError, match="^logsumexp:.*complex"):
        infer("logsumexp", np.zeros(3, complex))
    with pytest.raises(TypeError, match="^softmax:"):
        infer("softmax", np.array(["a", "b"]))
    with pytest.raises(ValueError, match="^logsumexp: repeated axis"):
        infer("logsumexp", np.zeros((2, 3)), axis=(1, -1))
    with pytest.raises(TypeError, match="^softmax: unexpected attribute"):
        infer("softmax", np.zeros(3), dim=0)


# ---------------------------------------------------------------------------------------
# one_hot


@FAST
@given(
    hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
    st.integers(1, 6),
    st.sampled_from([np.int8, np.uint8, np.int64, np.uint64]),
    st.sampled_from([None, np.float32, np.int64, bool]),
    st.data(),
)
def test_one_hot(shape, n, ldt, dt, data):
    x = data.draw(hnp.arrays(ldt, shape, elements=st.integers(0, n - 1)))
    attrs = {"num_classes": n} if dt is None else {"num_classes": n, "dtype": dt}
    out, _ = run("one_hot", x, **attrs)
    np.testing.assert_array_equal(out, np.eye(n)[x.astype(np.int64)])
    assert out.dtype == np.dtype(dt or np.float64)


def test_one_hot_errors():
    op = REGISTRY["one_hot"]
    for bad in (np.array([0, 3]), np.array([-1, 0]), np.array([[5]], np.uint64)):
        with pytest.raises(IndexError, match="^one_hot: label"):
            run("one_hot", bad, num_classes=3)
    _, _, norm = infer("one_hot", np.array([1]), num_classes=3)
    with pytest.raises(IndexError):
        op.kernel(np.array([3]), **norm)
    with pytest.raises(TypeError, match="^one_hot: labels must have an integer dtype"):
        infer("one_hot", np.zeros(3), num_classes=3)
    with pytest.raises(TypeError, match="^one_hot:"):
        infer("one_hot", np.zeros(3, bool), num_classes=3)
    for n in (0, -2):
        with pytest.raises(ValueError, match="^one_hot: num_classes must be positive"):
            infer("one_hot", np.zeros(3, int), num_classes=n)
    with pytest.raises(TypeError, match="^one_hot:"):
        infer("one_hot", np.zeros(3, int), num_classes=2.0)
    with pytest.raises(TypeError, match="^one_hot: missing"):
        infer("one_hot", np.zeros(3, int))


# ---------------------------------------------------------------------------------------
# conv2d


def out_len(n, k, s, p, d):
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def naive_conv(x, w, b, s, p, d, g):
    N, C, H, W = x.shape
    n_out, Cg, kh, kw = w.shape
    xp = np.zeros((N, C, H + 2 * p[0], W + 2 * p[1]), x.dtype)
    xp[:, :, p[0] : p[0] + H, p[1] : p[1] + W] = x
    Ho, Wo = out_len(H, kh, s[0], p[0], d[0]), out_len(W, kw, s[1], p[1], d[1])
    dt = np.result_type(x, w) if b is None else np.result_type(x, w, b)
    out = np.zeros((N, n_out, Ho, Wo), dt)
    for n in range(N):
        for o in range(n_out):
            grp = o // (n_out // g)
            for i in range(Ho):
                for j in range(Wo):
                    acc = 0
                    for c in range(Cg):
                        for a in range(kh):
                            for e in range(kw):
                                acc += (
                                    xp[n, grp * Cg + c, i * s[0] + a * d[0], j * s[1] + e * d[1]]
                                    * w[o, c, a, e]
                                )
                    out[n, o, i, j] = acc + (b[o] if b is not None else 0)
    return out


@st.composite
def conv_cases(draw):
    g = draw(st.integers(1, 3))
    cpg, opg = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    s = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    p = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    H = max(1, d[0] * (kh - 1) + 1 - 2 * p[0]) + draw(st.integers(0, 4))
    W = max(1, d[1] * (kw - 1) + 1 - 2 * p[1]) + draw(st.integers(0, 4))
    N = draw(st.sampled_from([0, 1, 2]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.normal(size=(N, g * cpg, H, W))
    w = rng.normal(size=(g * opg, cpg, kh, kw))
    b = rng.normal(size=(g * opg,)) if draw(st.booleans()) else None
    # Exercise both the int and the pair spelling of each attribute.
    attrs = {
        "stride": s[0] if s[0] == s[1] else s,
        "padding": list(p),
        "dilation": d,
        "groups": g,
    }
    return x, w, b, attrs, (s, p, d, g)


@settings(max_examples=80, deadline=None)
@given(conv_cases())
def test_conv2d_vs_naive(case):
    x, w, b, attrs, (s, p, d, g) = case
    args = (x, w) if b is None else (x, w, b)
    out, norm = run("conv2d", *args, **attrs)
    assert norm == {"stride": s, "padding": p, "dilation": d, "groups": g}
    np.testing.assert_allclose(out, naive_conv(x, w, b, s, p, d, g), rtol=1e-10, atol=1e-10)


@settings(max_examples=40, deadline=None)
@given(conv_cases())
def test_conv2d_vs_torch(case):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x, w, b, attrs, (s, p, d, g) = case
    assume(x.shape[0] > 0 and x.shape[1] > 0 and w.shape[0] > 0)
    args = (x, w) if b is None else (x, w, b)
    out, _ = run("conv2d", *args, **attrs)
    tb = None if b is None else torch.from_numpy(b)
    ref = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), tb, stride=s, padding=p, dilation=d, groups=g)
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-10, atol=1e-10)


def test_conv2d_dtypes_exact():
    rng = np.random.default_rng(1)
    x = rng.integers(-5, 5, size=(2, 4, 6, 5)).astype(np.int16)
    w = rng.integers(-5, 5, size=(6, 2, 3, 2)).astype(np.int8)
    b = rng.integers(-5, 5, size=(6,)).astype(np.int32)
    out, _ = run("conv2d", x, w, b, groups=2, stride=(2, 1), padding=1)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, naive_conv(x, w, b, (2, 1), (1, 1), (1, 1), 2))
    out, _ = run("conv2d", x.astype(np.float32), w, groups=2)
    assert out.dtype == np.float32
    out, _ = run("conv2d", x > 0, w > 0, groups=2)
    assert out.dtype == bool
    np.testing.assert_array_equal(out, naive_conv(x > 0, w > 0, None, (1, 1), (0, 0), (1, 1), 2))
    # Zero channels contract over nothing: zeros (plus bias).
    out, _ = run("conv2d", np.zeros((2, 0, 4, 4)), np.zeros((3, 0, 2, 2)), np.ones(3))
    np.testing.assert_array_equal(out, np.ones((2, 3, 3, 3)))


def test_conv2d_errors():
    x, w = np.zeros((1, 4, 5, 5)), np.zeros((6, 2, 3, 3))
    cases = [
        ((np.zeros((4, 5, 5)), w), {}, ValueError, "input must be 4-D"),
        ((x, np.zeros((6, 2, 3))), {}, ValueError, "weight must be 4-D"),
        ((x, w), {}, ValueError, "channels per group"),
        ((x, w), {"groups": 3}, ValueError, "groups=3 must divide"),
        ((x, np.zeros((5, 2, 3, 3))), {"groups": 2}, ValueError, "must divide"),
        ((x, w), {"groups": 0}, ValueError, "groups must be positive"),
        ((x, w, np.zeros(5)), {"groups": 2}, ValueError, "bias must have shape"),
        ((x, np.zeros((6, 2, 7, 3))), {"groups": 2}, ValueError, "larger than the padded input"),
        ((x, np.zeros((6, 2, 3, 3))), {"groups": 2, "dilation": 3}, ValueError, "larger than"),
        ((x, w), {"groups": 2, "stride": 0}, ValueError, "stride must be positive"),
        ((x, w), {"groups": 2, "dilation": (1, 0)}, ValueError, "dilation must be positive"),
        ((x, w), {"groups": 2, "padding": -1}, ValueError, "padding must be non-negative"),
        ((x, w), {"groups": 2, "padding": (1, 2, 3)}, ValueError, "pair"),
        ((x, w), {"groups": 2, "stride": 1.5}, TypeError, "stride must be an integer"),
        ((x, w), {"groups": 2, "stride": True}, TypeError, "stride must be an integer"),
        ((x, np.zeros((6, 2, 0, 3))), {"groups": 2}, ValueError, "kernel size"),
        ((x,), {}, TypeError, "expected inputs"),
        ((x, w.astype(str)), {"groups": 2}, TypeError, "unsupported dtype"),
        ((x, w), {"groups": 2, "pad": 1}, TypeError, "unexpected attribute"),
    ]
    for arrays, attrs, exc, msg in cases:
        with pytest.raises(exc, match=f"^conv2d: .*{msg}"):
            infer("conv2d", *arrays, **attrs)
    # Padding makes a kernel larger than the raw input legal.
    assert infer("conv2d", x, np.zeros((6, 2, 7, 7)), groups=2, padding=1)[0] == (1, 6, 1, 1)


# ---------------------------------------------------------------------------------------
# pooling


def naive_pool(x, mode, k, s, p, d=(1, 1), include_pad=True):
    N, C, H, W = x.shape
    Ho, Wo = out_len(H, k[0], s[0], p[0], d[0]), out_len(W, k[1], s[1], p[1], d[1])
    out = np.zeros((N, C, Ho, Wo), x.dtype if mode == "max" else np.float64)
    for n, c, i, j in itertools.product(range(N), range(C), range(Ho), range(Wo)):
        vals = []
        for a, e in itertools.product(range(k[0]), range(k[1])):
            r, q = i * s[0] - p[0] + a * d[0], j * s[1] - p[1] + e * d[1]
            if 0 <= r < H and 0 <= q < W:
                vals.append(x[n, c, r, q])
        if mode == "max":
            out[n, c, i, j] = max(vals) if vals else -np.inf
        else:
            out[n, c, i, j] = sum(vals) / (k[0] * k[1] if include_pad else len(vals))
    return out


@st.composite
def pool_cases(draw, dilation):
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    s = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    p = (draw(st.integers(0, k[0] // 2)), draw(st.integers(0, k[1] // 2)))
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) if dilation else (1, 1)
    H = max(1, d[0] * (k[0] - 1) + 1 - 2 * p[0]) + draw(st.integers(0, 4))
    W = max(1, d[1] * (k[1] - 1) + 1 - 2 * p[1]) + draw(st.integers(0, 4))
    N, C = draw(st.sampled_from([0, 1, 2])), draw(st.integers(0, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.normal(size=(N, C, H, W))
    stride = draw(st.sampled_from([None, s]))
    return x, k, (k if stride is None else s), p, d, stride


@FAST
@given(pool_cases(dilation=True))
def test_max_pool2d(case):
    x, k, s, p, d, stride = case
    out, norm = run("max_pool2d", x, kernel_size=k, stride=stride, padding=p, dilation=d)
    assert norm == {"kernel_size": k, "stride": s, "padding": p, "dilation": d}
    np.testing.assert_array_equal(out, naive_pool(x, "max", k, s, p, d))
    xi = np.round(x * 10).astype(np.int16)
    outi, _ = run("max_pool2d", xi, kernel_size=k, stride=stride, padding=p, dilation=d)
    ref = naive_pool(xi.astype(np.float64), "max", k, s, p, d)
    # A dilated window can hold only padding: -inf for floats, the dtype's minimum for ints.
    np.testing.assert_array_equal(outi, np.where(np.isinf(ref), np.iinfo(np.int16).min, ref))
    torch = pytest.importorskip("torch")
    if x.shape[0] and x.shape[1]:
        ref = torch.nn.functional.max_pool2d(torch.from_numpy(x), k, s, p, d)
        np.testing.assert_array_equal(out, ref.numpy())


@FAST
@given(pool_cases(dilation=False), st.booleans())
def test_avg_pool2d(case, include_pad):
    x, k, s, p, _, stride = case
    out, norm = run("avg_pool2d", x, kernel_size=k, stride=stride, padding=p, count_include_pad=include_pad)
    assert norm == {"kernel_size": k, "stride": s, "padding": p, "count_include_pad": include_pad}
    np.testing.assert_allclose(
        out, naive_pool(x, "avg", k, s, p, include_pad=include_pad), rtol=1e-12, atol=1e-12
    )
    torch = pytest.importorskip("torch")
    if x.shape[0] and x.shape[1]:
        ref = torch.nn.functional.avg_pool2d(torch.from_numpy(x), k, s, p, count_include_pad=include_pad)
        np.testing.assert_allclose(out, ref.numpy(), rtol=1e-12, atol=1e-12)


def test_pool_dtypes():
    x = np.arange(2 * 3 * 5 * 4).reshape(2, 3, 5, 4)
    for dt, avg in [
        (np.int32, np.float64),
        (np.uint8, np.float64),
        (np.float32, np.float32),
        (np.float16, np.float16),
        (bool, np.float64),
    ]:
        xs = (x % 7).astype(dt)
        assert infer("max_pool2d", xs, kernel_size=2)[1] == np.dtype(dt)
        assert infer("avg_pool2d", xs, kernel_size=2)[1] == avg
        out, _ = run("max_pool2d", xs, kernel_size=3, stride=2, padding=1)
        np.testing.assert_array_equal(out, naive_pool(xs, "max", (3, 3), (2, 2), (1, 1)))
        out, _ = run("avg_pool2d", xs, kernel_size=(3, 2), padding=(1, 0), count_include_pad=False)
        ref = naive_pool(xs.astype(np.float64), "avg", (3, 2), (3, 2), (1, 0), include_pad=False)
        np.testing.assert_allclose(out, ref, rtol={np.float16: 1e-3, np.float32: 1e-6}.get(dt, 1e-12))
    # Unsigned and bool max pooling must not pad with a value that can win (0 is the min).
    np.testing.assert_array_equal(
        run("max_pool2d", np.zeros((1, 1, 2, 2), np.uint8), kernel_size=3, padding=1)[0], 0
    )
    nan = np.ones((1, 1, 2, 2))
    nan[0, 0, 0, 0] = np.nan
    assert np.isnan(run("max_pool2d", nan, kernel_size=2)[0]).all()  # nan propagates as in torch


def test_pool_errors():
    x = np.zeros((1, 2, 5, 5))
    cases = [
        ("max_pool2d", np.zeros((2, 5, 5)), {"kernel_size": 2}, ValueError, "input must be 4-D"),
        ("avg_pool2d", x, {}, TypeError, "missing required attribute kernel_size"),
        ("max_pool2d", x, {"kernel_size": 0}, ValueError, "kernel_size must be positive"),
        ("max_pool2d", x, {"kernel_size": 2, "stride": 0}, ValueError, "stride must be positive"),
        ("max_pool2d", x, {"kernel_size": 3, "dilation": 0}, ValueError, "dilation must be positive"),
        ("avg_pool2d", x, {"kernel_size": 2, "padding": -1}, ValueError, "padding must be non-negative"),
        ("max_pool2d", x, {"kernel_size": 3, "padding": 2}, ValueError, "at most half the kernel"),
        ("avg_pool2d", x, {"kernel_size": (4, 2), "padding": (2, 2)}, ValueError, "at most half the kernel"),
        ("max_pool2d", x, {"kernel_size": 6}, ValueError, "larger than the padded input"),
        ("max_pool2d", x, {"kernel_size": 3, "dilation": 3}, ValueError, "larger than the padded input"),
        ("avg_pool2d", np.zeros((1, 2, 0, 5)), {"kernel_size": 2, "padding": 1}, ValueError, "non-zero"),
        ("max_pool2d", x.astype(complex), {"kernel_size": 2}, TypeError, "unsupported dtype"),
        ("avg_pool2d", x.astype(str), {"kernel_size": 2}, TypeError, ""),
        ("avg_pool2d", x, {"kernel_size": 2, "dilation": 2}, TypeError, "unexpected attribute"),
    ]
    for name, arr, attrs, exc, msg in cases:
        with pytest.raises(exc, match=f"^{name}: .*{msg}"):
            infer(name, arr, **attrs)
    # Padding of exactly half the kernel is allowed, as in torch.
    assert infer("max_pool2d", x, kernel_size=(4, 2), padding=(2, 1))[0] == (1, 2, 2, 3)


def naive_max_pool_grad(g, x, k, s, p, d):
    """Each window's cotangent to its first maximum in row-major order (the first nan if any)."""
    N, C, H, W = x.shape
    out = np.zeros(x.shape, g.dtype)
    for n, c, i, j in itertools.product(range(N), range(C), range(g.shape[2]), range(g.shape[3])):
        best = None
        for a, e in itertools.product(range(k[0]), range(k[1])):
            r, q = i * s[0] - p[0] + a * d[0], j * s[1] - p[1] + e * d[1]
            if not (0 <= r < H and 0 <= q < W):
                continue
            v = x[n, c, r, q]
            if best is None or (not np.isnan(x[best]) and (np.isnan(v) or v > x[best])):
                best = (n, c, r, q)
        if best is not None:
            out[best] += g[n, c, i, j]
    return out


@FAST
@given(pool_cases(dilation=True), st.booleans(), st.integers(0, 2**31))
def test_max_pool2d_grad_routes_to_first_maximum(case, with_nan, seed):
    x, k, s, p, d, stride = case
    x = np.round(x)  # many ties: every tied window must route to its first maximum only
    rng = np.random.default_rng(seed)
    if with_nan and x.size:
        x.flat[rng.integers(0, x.size, size=max(1, x.size // 7))] = np.nan
    y, attrs = run("max_pool2d", x, kernel_size=k, stride=stride, padding=p, dilation=d)
    g = rng.standard_normal(y.shape)
    out, _ = run("max_pool2d_grad", g, x, **attrs)
    np.testing.assert_allclose(out, naive_max_pool_grad(g, x, k, s, p, d), rtol=1e-12, atol=1e-12)
    # float32 (the training dtype) routes the same way
    out32, _ = run("max_pool2d_grad", g.astype(np.float32), x.astype(np.float32), **attrs)
    np.testing.assert_allclose(out32, out, rtol=1e-5, atol=1e-5)


def test_max_pool2d_grad_relu_ties_tiled():
    # ReLU output pooled 2x2: windows of zeros tie everywhere; the gradient keeps its sum.
    rng = np.random.default_rng(1)
    x = np.maximum(rng.standard_normal((3, 4, 9, 8)), 0).astype(np.float32)
    g = rng.standard_normal((3, 4, 4, 4)).astype(np.float32)
    out, _ = run("max_pool2d_grad", g, x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1))
    ref = naive_max_pool_grad(g, x, (2, 2), (2, 2), (0, 0), (1, 1))
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_allclose(out.sum(), g.sum(), rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(conv_cases(), st.sampled_from([1, 5, 13]))
def test_conv2d_in_chunks_of_images(case, rows):
    # The one-group forward streams im2col a few images at a time; tiny chunks (down to one
    # image per GEMM, and a ragged last chunk) must give the same values.
    import ops.conv

    x, w, b, attrs, (s, p, d, g) = case
    x = np.concatenate([x] * 3) if x.shape[0] else x  # several images, an odd count
    args = (x, w) if b is None else (x, w, b)
    saved = ops.conv.CHUNK_ROWS
    ops.conv.CHUNK_ROWS = rows
    try:
        out, _ = run("conv2d", *args, **attrs)
    finally:
        ops.conv.CHUNK_ROWS = saved
    np.testing.assert_allclose(out, naive_conv(x, w, b, s, p, d, g), rtol=1e-10, atol=1e-10)
