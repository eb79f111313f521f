"""Compiled window kernels (jit/window.py, jit/conv.py) against the NumPy reference kernels, and
the `jit_window` pass end to end: max pooling and its gradient bit-exact (NaN, -inf, ties,
overlapping windows), im2col bit-exact for every element size, the chunked convolutions close
and None exactly where they must not apply, and a small CNN trained through the pass."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import lazygraph as lg
from cache.recipe import Recipe, RecipeError
from jit import conv, window
from lazygraph.engine import ENGINE
from ops.base import REGISTRY
from ops.conv import im2col_rows

# the CPU backend's machinery: on the cpu device whatever LAZYGRAPH_DEVICE says (conftest.py)
pytestmark = pytest.mark.host_backend

POOL_DTYPES = ["float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):  # noqa: ANN001, ANN201
    """An empty cache in its own directory, the JIT on and every size compiled."""
    monkeypatch.setenv("LAZYGRAPH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LAZYGRAPH_CACHE", raising=False)
    monkeypatch.delenv("LAZYGRAPH_OPTIMIZE", raising=False)
    monkeypatch.setenv("LAZYGRAPH_JIT", "1")
    monkeypatch.setenv("LAZYGRAPH_JIT_MIN_SIZE", "0")
    lg.cache.clear(disk=False)
    yield
    lg.cache.clear(disk=False)


@st.composite
def geometry(draw, max_pad_half: bool = True):  # noqa: ANN001, ANN201
    """Kernel, stride, padding, dilation and an image size the dilated kernel fits in."""
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    s = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    # the pooling operators' rule is padding <= k // 2; im2col takes any padding
    p = tuple(draw(st.integers(0, kk // 2 if max_pad_half else kk)) for kk in k)
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    low = [max(1, dd * (kk - 1) + 1 - 2 * pp) for kk, pp, dd in zip(k, p, d)]
    hw = tuple(draw(st.sampled_from([lo, lo + 1, lo + 2, lo + 4])) for lo in low)
    return k, s, p, d, hw


def _values(rng: np.random.Generator, shape: tuple, dtype: np.dtype, specials: bool) -> np.ndarray:
    """Small integers (many ties), with NaN, -inf and +inf sprinkled in for floats."""
    lo = 0 if dtype.kind == "u" else -3
    x = rng.integers(lo, lo + 5, size=shape).astype(dtype)
    if dtype.kind == "f" and specials and x.size:
        for v in (np.nan, -np.inf, np.inf):
            x[rng.random(shape) < 0.08] = v
    return x


def _pool_attrs(k, s, p, d) -> dict:  # noqa: ANN001
    return {"kernel_size": k, "stride": s, "padding": p, "dilation": d}


@given(
    dtype=st.sampled_from(POOL_DTYPES),
    gdtype=st.sampled_from(["float32", "float64"]),
    n=st.sampled_from([0, 1, 3]),
    c=st.integers(1, 3),
    geo=geometry(),
    specials=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_max_pool2d_and_grad_equal_reference_exactly(dtype, gdtype, n, c, geo, specials, seed) -> None:  # noqa: ANN001
    k, s, p, d, hw = geo
    dt, gdt = np.dtype(dtype), np.dtype(gdtype)
    assert window.supported("max_pool2d", [dt]) and window.supported("max_pool2d_grad", [gdt, dt])
    rng = np.random.default_rng(seed)
    x = _values(rng, (n, c, *hw), dt, specials)
    attrs = _pool_attrs(k, s, p, d)
    want = REGISTRY["max_pool2d"].kernel(x, **attrs)
    got = window.KERNELS["max_pool2d"](x, **attrs)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    # a preallocated buffer is filled and returned
    buf = np.full(want.shape, 7, dtype=dt)
    assert window.KERNELS["max_pool2d"](x, out=buf, **attrs) is buf
    np.testing.assert_array_equal(buf, want)

    # non-integer cotangents: where windows overlap, the order of the sums shows
    g = rng.standard_normal(want.shape).astype(gdt) * 3
    gwant = REGISTRY["max_pool2d_grad"].kernel(g, x, want, **attrs)
    np.testing.assert_array_equal(REGISTRY["max_pool2d_grad"].kernel(g, x, None, **attrs), gwant)
    ggot = window.KERNELS["max_pool2d_grad"](g, x, want, **attrs)
    assert ggot.dtype == gdt and ggot.shape == x.shape
    np.testing.assert_array_equal(ggot, gwant)
    gbuf = np.full(x.shape, 7, dtype=gdt)
    assert window.KERNELS["max_pool2d_grad"](g, x, None, out=gbuf, **attrs) is gbuf
    np.testing.assert_array_equal(gbuf, gwant)


def test_max_pool_first_maximum_and_first_nan_win() -> None:
    """Hand-made windows: ties go to the first element, the first NaN wins, -inf ties padding."""
    x = np.array([[[[1.0, 3.0, 3.0, 2.0], [3.0, np.nan, 0.0, np.nan], [-np.inf, -np.inf, 5.0, 5.0]]]])
    attrs = _pool_attrs((2, 2), (1, 1), (1, 1), (1, 1))
    g = np.arange(1, 21, dtype=np.float64).reshape(1, 1, 4, 5)
    for dt in ("float32", "float64"):
        xd = x.astype(dt)
        want = REGISTRY["max_pool2d"].kernel(xd, **attrs)
        assert np.isnan(want).any() and np.isneginf(want).any()
        np.testing.assert_array_equal(window.KERNELS["max_pool2d"](xd, **attrs), want)
        np.testing.assert_array_equal(
            window.KERNELS["max_pool2d_grad"](g, xd, want, **attrs),
            REGISTRY["max_pool2d_grad"].kernel(g, xd, want, **attrs),
        )


def test_bool_pooling_is_not_supported() -> None:
    assert not window.supported("max_pool2d", [np.dtype(bool)])
    assert not window.supported("max_pool2d_grad", [np.dtype(np.float32), np.dtype(bool)])


@given(
    dtype=st.sampled_from(
        ["bool", "int8", "float16", "uint16", "float32", "int32", "complex64", "float64", "uint64"]
    ),
    n=st.sampled_from([0, 1, 2]),
    c=st.integers(1, 4),
    geo=geometry(max_pad_half=False),
    seed=st.integers(0, 2**31),
)
def test_im2col_equals_im2col_rows_exactly(dtype, n, c, geo, seed) -> None:  # noqa: ANN001
    k, s, p, d, hw = geo
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(n, c, *hw) + (np.dtype(dtype).itemsize,), dtype=np.uint8)
    x = raw.view(dtype).reshape(n, c, *hw) if dtype != "bool" else raw[..., 0] % 2 == 1
    want = im2col_rows(x, k, s, p, d)
    got = window.im2col(x, k, s, p, d)
    assert got.dtype == want.dtype and got.shape == want.shape
    # compare bits: random bytes make NaNs, whose payloads must survive the copy
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    # a non-contiguous input gives the same columns
    np.testing.assert_array_equal(
        window.im2col(x[:, ::-1], k, s, p, d).view(np.uint8),
        im2col_rows(np.ascontiguousarray(x[:, ::-1]), k, s, p, d).view(np.uint8),
    )


def _conv_attrs(s, p, d, groups: int = 1) -> dict:  # noqa: ANN001
    return {"stride": s, "padding": p, "dilation": d, "groups": groups}


def _tol(dt: np.dtype) -> dict:
    return {"rtol": 1e-5, "atol": 1e-5} if dt == np.float32 else {"rtol": 1e-10, "atol": 1e-10}


@given(
    dtype=st.sampled_from(["float32", "float64"]),
    n=st.sampled_from([0, 1, 3]),
    c=st.sampled_from([1, 2, 5]),
    o=st.sampled_from([1, 3, 4]),
    geo=geometry(max_pad_half=False),
    bias=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_conv_kernels_match_reference_in_small_chunks(dtype, n, c, o, geo, bias, seed) -> None:  # noqa: ANN001
    with pytest.MonkeyPatch.context() as mp:
        # several images per chunk, or one, and a ragged last chunk
        mp.setattr(conv, "CHUNK_ROWS", 7)
        _check_conv(np.dtype(dtype), n, c, o, geo, bias, seed)


def _check_conv(dt: np.dtype, n: int, c: int, o: int, geo: tuple, bias: bool, seed: int) -> None:
    k, s, p, d, hw = geo
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, *hw)).astype(dt)
    w = rng.standard_normal((o, c, *k)).astype(dt)
    b = rng.standard_normal(o).astype(dt) if bias else None
    attrs = _conv_attrs(s, p, d)
    y = REGISTRY["conv2d"].kernel(x, w, b, **attrs)
    g = rng.standard_normal(y.shape).astype(dt)
    # one group, one float dtype: chunked im2col + GEMM, or (C*kH*kW < C_out) direct accumulation
    got = conv.KERNELS["conv2d"](x, w, b, **attrs)
    assert got is not None
    np.testing.assert_allclose(got, y, **_tol(dt))
    buf = np.full(y.shape, 7, dtype=dt)
    assert conv.KERNELS["conv2d"](x, w, b, out=buf, **attrs) is buf
    np.testing.assert_allclose(buf, y, **_tol(dt))

    gwant = REGISTRY["conv2d_grad_weight"].kernel(g, x, w, **attrs)
    np.testing.assert_allclose(conv.KERNELS["conv2d_grad_weight"](g, x, w, **attrs), gwant, **_tol(dt))
    wbuf = np.full(w.shape, 7, dtype=dt)
    assert conv.KERNELS["conv2d_grad_weight"](g, x, w, out=wbuf, **attrs) is wbuf
    np.testing.assert_allclose(wbuf, gwant, **_tol(dt))

    gi_fits = (
        s == (1, 1)
        and o <= c
        and o * k[0] * k[1] >= c
        and all(pp <= dd * (kk - 1) for pp, dd, kk in zip(p, d, k))
    )
    gi = conv.KERNELS["conv2d_grad_input"](g, w, x, **attrs)
    assert (gi is not None) == gi_fits
    if gi_fits:
        assert gi.shape == x.shape
        np.testing.assert_allclose(gi, REGISTRY["conv2d_grad_input"].kernel(g, w, x, **attrs), **_tol(dt))


def test_conv_kernels_decline_what_they_do_not_cover() -> None:
    rng = np.random.default_rng(0)
    f4 = np.float32
    x = rng.standard_normal((2, 4, 6, 6)).astype(f4)
    w = rng.standard_normal((4, 4, 3, 3)).astype(f4)
    g = rng.standard_normal((2, 4, 4, 4)).astype(f4)
    ok = _conv_attrs((1, 1), (0, 0), (1, 1))
    fwd, gw, gi = (conv.KERNELS[n] for n in ("conv2d", "conv2d_grad_weight", "conv2d_grad_input"))
    # the baseline applies everywhere, so each refusal below is due to its one change
    assert (
        fwd(x, w, None, **ok) is not None and gw(g, x, w, **ok) is not None and gi(g, w, x, **ok) is not None
    )
    # groups != 1
    w2 = w[:, :2]
    g2 = _conv_attrs((1, 1), (0, 0), (1, 1), groups=2)
    assert fwd(x, w2, None, **g2) is None and gw(g, x, w2, **g2) is None and gi(g, w2, x, **g2) is None
    # non-float
    xi, wi, gint = x.astype(np.int32), w.astype(np.int32), g.astype(np.int32)
    assert (
        fwd(xi, wi, None, **ok) is None and gw(gint, xi, wi, **ok) is None and gi(gint, wi, xi, **ok) is None
    )
    # float16 is a float the kernels do not compile
    assert fwd(x.astype(np.float16), w.astype(np.float16), None, **ok) is None
    # mixed dtypes: weight, bias, x against the cotangent, cotangent against the weight
    w8 = w.astype(np.float64)
    assert fwd(x, w8, None, **ok) is None
    assert fwd(x, w, np.zeros(4, np.float64), **ok) is None
    assert gw(g, x.astype(np.float64), w, **ok) is None
    assert gi(g, w8, x, **ok) is None
    # a window shorter than the output channels (C*kH*kW < C_out) runs the direct kernels, which
    # also decline the cases above
    wide = rng.standard_normal((5, 1, 1, 1)).astype(f4)
    x1, g5 = x[:, :1], rng.standard_normal((2, 5, 6, 6)).astype(f4)
    assert fwd(x1, wide, None, **ok) is not None and gw(g5, x1, wide, **ok) is not None
    assert (
        fwd(x1.astype(np.float64), wide, None, **ok) is None
        and gw(g5, x1.astype(np.float64), wide, **ok) is None
    )
    assert fwd(x1.astype(np.int32), wide.astype(np.int32), None, **ok) is None
    xw, ww, gw2 = x[:, :2], rng.standard_normal((6, 1, 1, 1)).astype(f4), g5[:, :1].repeat(6, axis=1)
    g2w = _conv_attrs((1, 1), (0, 0), (1, 1), groups=2)
    assert fwd(xw, ww, None, **g2w) is None and gw(gw2, xw, ww, **g2w) is None
    # grad_input: stride 2, more output than input channels, padding a full correlation cannot undo
    gs = rng.standard_normal((2, 4, 2, 2)).astype(f4)
    assert gi(gs, w, x, **_conv_attrs((2, 2), (0, 0), (1, 1))) is None
    w6 = rng.standard_normal((6, 4, 3, 3)).astype(f4)
    g6 = rng.standard_normal((2, 6, 4, 4)).astype(f4)
    assert gi(g6, w6, x, **ok) is None
    wk = rng.standard_normal((4, 4, 2, 2)).astype(f4)
    gk = rng.standard_normal((2, 4, 9, 9)).astype(f4)
    assert gi(gk, wk, x, **_conv_attrs((1, 1), (2, 2), (1, 1))) is None
    # ...while padding up to dilation*(k-1) is covered
    gd = rng.standard_normal((2, 4, 7, 7)).astype(f4)
    got = gi(gd, wk, x, **_conv_attrs((1, 1), (1, 1), (1, 1)))
    want = REGISTRY["conv2d_grad_input"].kernel(gd, wk, x, **_conv_attrs((1, 1), (1, 1), (1, 1)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# -- end to end through lazygraph ---------------------------------------------------------------


def _cnn() -> list[np.ndarray]:
    """A tiny CNN's forward and backward in one graph: the output and every gradient."""
    rng = np.random.default_rng(5)
    xn = rng.standard_normal((3, 3, 9, 9)).astype(np.float32)
    params = [
        lg.asarray(np.ones((1, 3, 1, 1), np.float32)),  # scales x: its gradient is the input gradient summed
        lg.asarray(rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
        lg.asarray(rng.standard_normal(4).astype(np.float32)),
        lg.asarray(rng.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3),
    ]
    for t in params:
        t.requires_grad = True
    s, w1, b1, w2 = params
    h = lg.maximum(lg.conv2d(lg.asarray(xn) * s, w1, b1, padding=1), 0)
    h = lg.max_pool2d(h, 2)
    h = lg.conv2d(h, w2, padding=1)
    y = lg.max_pool2d(h, 3, stride=2, padding=1)
    gn = np.cos(np.arange(y.size, dtype=np.float32)).reshape(y.shape)
    loss = (y * lg.asarray(gn)).sum()
    loss.backward()
    lg.eval(loss, *(t.grad for t in params))
    return [loss.numpy(), y.numpy()] + [t.grad.numpy() for t in params]


def _reference(make) -> list[np.ndarray]:  # noqa: ANN001
    with lg.settings.override(optimize=False):
        return make()


def _window_rules() -> set[str]:
    return {r for r in lg.cache.passes()["rules"] if r.startswith("jit_window:")}


def _close(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for u, v in zip(a, b):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-4)


def test_cnn_training_step_through_the_pass_matches_reference(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(conv, "CHUNK_ROWS", 7)
    on = _cnn()
    fired = _window_rules()
    for op in ("conv2d", "conv2d_grad_weight", "conv2d_grad_input", "max_pool2d", "max_pool2d_grad"):
        assert f"jit_window:{op}" in fired, fired
    ref = _reference(_cnn)
    _close(on, ref)
    assert any(np.abs(v).sum() > 0 for v in on[2:])  # gradients that carry information

    # the in-memory cache forgotten: the plan comes back from disk, its steps rebuilt
    assert lg.cache.stats(per_entry=False)["disk_writes"] > 0
    lg.cache.clear(disk=False)
    again = _cnn()
    assert lg.cache.stats(per_entry=False)["disk_hits"] > 0
    for u, v in zip(again, on):
        np.testing.assert_array_equal(u, v)


def test_lazygraph_jit_0_keeps_the_pass_off(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("LAZYGRAPH_JIT", "0")
    on = _cnn()
    assert _window_rules() == set()
    _close(on, _reference(_cnn))


def test_inference_conv_is_not_lowered() -> None:
    rng = np.random.default_rng(3)
    xn = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    wn = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)

    def run() -> list[np.ndarray]:
        y = lg.max_pool2d(lg.conv2d(lg.asarray(xn), lg.asarray(wn), padding=1), 2)
        return [y.numpy()]

    on = run()
    fired = _window_rules()
    assert "jit_window:max_pool2d" in fired and "jit_window:conv2d" not in fired, fired
    _close(on, _reference(run))


def test_window_constructor_rejects_unknown_operators() -> None:
    build = ENGINE.constructors["jit_window"]
    for op in ("add", "avg_pool2d", "no_such_op"):
        with pytest.raises(RecipeError, match=op):
            build(Recipe("jit_window", op, {}, None, "float32"), {})
    # a window operator builds a step that runs
    run = build(Recipe("jit_window", "max_pool2d", {}, None, "float32"), {}).run
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    attrs = _pool_attrs((2, 2), (2, 2), (0, 0), (1, 1))
    np.testing.assert_array_equal(run(x, **attrs), REGISTRY["max_pool2d"].kernel(x, **attrs))


@pytest.mark.parametrize("dtype", ["float32", "int8", "uint8", "uint64"])
def test_windows_of_padding_only_and_ties_with_the_fill(dtype) -> None:  # noqa: ANN001
    """Dilated windows that hold only padding, and real elements equal to the fill (0 for unsigned)."""
    dt = np.dtype(dtype)
    x = np.array([[[[0, 2, 0], [0, 0, 1]]]]).astype(dt)
    if dt.kind == "f":
        x[0, 0, 1, 0] = -np.inf
    g = np.arange(1, 7, dtype=np.float64).reshape(1, 1, 2, 3) / 7
    for k, p, d in [((2, 2), (1, 1), (2, 2)), ((3, 3), (1, 1), (1, 1)), ((2, 3), (1, 1), (1, 2))]:
        attrs = _pool_attrs(k, (1, 1), p, d)
        want = REGISTRY["max_pool2d"].kernel(x, **attrs)
        np.testing.assert_array_equal(window.KERNELS["max_pool2d"](x, **attrs), want)
        gg = np.resize(g, want.shape)
        np.testing.assert_array_equal(
            window.KERNELS["max_pool2d_grad"](gg, x, want, **attrs),
            REGISTRY["max_pool2d_grad"].kernel(gg, x, want, **attrs),
        )


def test_window_step_falls_back_to_the_reference(monkeypatch) -> None:  # noqa: ANN001
    """Shapes the compiled kernels decline, small sizes and LAZYGRAPH_JIT=0 run the NumPy kernel."""
    run = ENGINE.constructors["jit_window"](Recipe("jit_window", "conv2d", {}, None, "float32"), {}).run
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 5, 5)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    attrs = _conv_attrs((1, 1), (1, 1), (1, 1), groups=2)  # no compiled kernel for groups
    want = REGISTRY["conv2d"].kernel(x, w, None, **attrs)
    buf = np.full(want.shape, 7, dtype=np.float32)
    assert run(x, w, None, out=buf, **attrs) is buf
    np.testing.assert_array_equal(buf, want)
    w1 = w[:4].repeat(2, axis=1)
    one = _conv_attrs((1, 1), (1, 1), (1, 1))
    want1 = REGISTRY["conv2d"].kernel(x, w1, None, **one)
    np.testing.assert_allclose(run(x, w1, None, **one), want1, rtol=1e-5, atol=1e-5)
    for var, value in (("LAZYGRAPH_JIT_MIN_SIZE", "1000000"), ("LAZYGRAPH_JIT", "0")):
        with monkeypatch.context() as mp:
            mp.setenv(var, value)
            np.testing.assert_array_equal(run(x, w1, None, **one), want1)
