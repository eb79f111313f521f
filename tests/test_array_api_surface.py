"""The array API standard's inspection surface and array-object protocol, against NumPy.

Namespace info, `isdtype`, `astype(copy=)`, devices, `mT`, DLPack both ways, constants,
`finfo`/`iinfo`, and the standard's functions added with them (`take`, the inverse hyperbolic
functions, `logaddexp`, `nextafter`): differential checks against NumPy, gradients against
finite differences. The conformance suite itself runs from scripts/array_api_tests.sh.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from _support import evaluations
from gradcheck import check_grad
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import arrays, broadcast_shapes, check, dtypes, lazy, nonempty_shapes, shapes

import lazygraph as lg

FEW = settings(max_examples=30)
ALL_DTYPES = [
    np.dtype(t)
    for t in (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float32,
        np.float64,
        np.complex64,
        np.complex128,
    )
]
KINDS = [
    "bool",
    "signed integer",
    "unsigned integer",
    "integral",
    "real floating",
    "complex floating",
    "numeric",
]


def as_view(draw, a: np.ndarray) -> tuple[np.ndarray, lg.Array]:
    """The NumPy value and a lazy array holding it: fresh, or a negative-stride view of a larger one."""
    if a.ndim and draw(st.booleans()):
        big = np.concatenate([a, a], axis=0)[::-1]  # reversed: a view with a negative stride
        return big[a.shape[0] :], lg.asarray(big)[a.shape[0] :]
    return a, lg.asarray(a)


# -- the namespace ----------------------------------------------------------------------


def test_version_and_namespace():
    x = lg.ones(3)
    assert lg.__array_api_version__ == "2024.12"
    assert x.__array_namespace__() is lg
    assert x.__array_namespace__(api_version="2023.12") is lg
    with pytest.raises(ValueError, match="api_version"):
        x.__array_namespace__(api_version="1999.01")


def test_namespace_info():
    info = lg.__array_namespace_info__()
    caps = info.capabilities()
    assert caps["boolean indexing"] is True and caps["data-dependent shapes"] is True
    assert isinstance(caps["max dimensions"], int) and caps["max dimensions"] >= 32
    assert info.devices()[:2] == ["cpu", "cuda-emulated"] and info.default_device() in info.devices()
    defaults = info.default_dtypes(device="cpu")
    assert defaults == info.default_dtypes()
    # the defaults are what creation functions choose
    assert defaults["real floating"] == lg.asarray(1.5).dtype == lg.zeros(2).dtype
    assert defaults["integral"] == lg.asarray(3).dtype == lg.arange(3).dtype
    assert defaults["complex floating"] == lg.asarray(1j).dtype
    assert defaults["indexing"] == lg.argmax(lg.zeros(3)).dtype
    every = info.dtypes()
    assert list(every.values()) == ALL_DTYPES
    for name, dt in every.items():
        assert getattr(lg, name) == dt
    for kind in KINDS:
        assert info.dtypes(kind=kind) == {n: d for n, d in every.items() if np.isdtype(d, kind)}
    assert set(info.dtypes(kind=("bool", "complex floating"))) == {"bool", "complex64", "complex128"}
    with pytest.raises(ValueError, match="device"):
        info.dtypes(device="tpu")
    with pytest.raises(ValueError, match="device"):
        info.default_dtypes(device="tpu")


@pytest.mark.parametrize("kind", [*KINDS, *ALL_DTYPES])
def test_isdtype_every_kind(kind):
    for dt in ALL_DTYPES:
        for spelled in (dt, dt.type):  # np.dtype objects and the lg.float32-style types
            got = lg.isdtype(spelled, kind)
            assert type(got) is bool
            assert got == np.isdtype(dt, kind), (dt, kind)


def test_isdtype_tuples_and_errors():
    assert lg.isdtype(lg.int8, ("real floating", "signed integer"))
    assert not lg.isdtype(lg.uint8, ("real floating", lg.int8))
    assert lg.isdtype(lg.ones(2, dtype=lg.float32), lg.float32)  # an array's dtype
    with pytest.raises(ValueError, match="unknown kind"):
        lg.isdtype(lg.float32, "floating")
    with pytest.raises(TypeError):
        lg.isdtype(lg.float32, (("bool",),))


def test_constants():
    assert lg.e == math.e and lg.pi == math.pi and lg.inf == math.inf and math.isnan(lg.nan)
    assert all(type(c) is float for c in (lg.e, lg.pi, lg.inf, lg.nan))
    x = lg.arange(6).reshape(2, 3)
    assert lg.newaxis is None and x[:, lg.newaxis].shape == (2, 1, 3)


@pytest.mark.parametrize("dt", [d for d in ALL_DTYPES if d.kind in "fc"] + [np.dtype(np.float16)])
def test_finfo(dt):
    got, want = lg.finfo(dt), np.finfo(dt)
    for field in ("eps", "max", "min", "smallest_normal"):
        assert type(getattr(got, field)) is float
        assert getattr(got, field) == float(getattr(want, field))
    assert type(got.bits) is int and got.bits == want.bits
    assert got.dtype == want.dtype and got.dtype.kind == "f"  # complex64 -> float32
    assert got.tiny == want.tiny and got.resolution == want.resolution  # NumPy's other fields
    assert lg.finfo(lg.zeros(2, dtype=dt)).eps == got.eps  # from an array
    with pytest.raises(ValueError, match="not a floating"):
        lg.finfo(lg.int32)


@pytest.mark.parametrize("dt", [d for d in ALL_DTYPES if d.kind in "iu"])
def test_iinfo(dt):
    got, want = lg.iinfo(dt), np.iinfo(dt)
    assert (got.bits, got.max, got.min, got.dtype) == (want.bits, want.max, want.min, want.dtype)
    assert type(got.max) is int and type(got.min) is int and type(got.bits) is int
    assert lg.iinfo(lg.zeros(2, dtype=dt)).max == want.max
    with pytest.raises(ValueError, match="not an integer"):
        lg.iinfo(lg.float32)


def test_can_cast_result_type_broadcast_shapes():
    f32, i8 = lg.ones(2, dtype=lg.float32), lg.ones(2, dtype=lg.int8)
    for a in ALL_DTYPES:
        for b in ALL_DTYPES:
            assert lg.can_cast(a, b) == np.can_cast(a, b)
    assert lg.can_cast(i8, lg.float32) and not lg.can_cast(f32, lg.int8)
    assert lg.result_type(f32, i8) == np.float32
    assert lg.result_type(i8, 1.5) == np.float64 and lg.result_type(f32, 2) == np.float32
    assert np.result_type(f32, lg.float64) == np.float64  # NumPy's function on lazy arrays
    with pytest.raises(ValueError):
        lg.result_type()
    assert lg.broadcast_shapes((2, 1), (3,), ()) == (2, 3)
    assert lg.broadcast_shapes() == ()
    with pytest.raises(ValueError, match="broadcast_shapes"):
        lg.broadcast_shapes((2,), (3,))


# -- the array object -------------------------------------------------------------------


def test_device_and_to_device():
    x = lg.arange(4.0)
    assert repr(x.device) == "cpu" and str(x.device) == "cpu" and x.device == "cpu"
    assert x.device == lg.__array_namespace_info__().default_device()
    assert hash(x.device) == hash("cpu")
    y = lg.asarray(np.ones(2), device=x.device)  # a device object is accepted where devices go
    assert y.device == x.device
    assert lg.zeros(2, device=x.device).device == "cpu"
    before = evaluations()
    z = x.to_device("cpu")
    assert z.device == "cpu" and np.array_equal(z.numpy(), np.arange(4.0))
    with pytest.raises(ValueError, match="not available"):
        x.to_device("cuda:7")
    with pytest.raises(ValueError, match="stream"):
        x.to_device("cpu", stream=1)
    assert evaluations() == before + 1  # only z.numpy() evaluated


def test_astype_copy_semantics():
    x = lg.arange(6.0).reshape(2, 3)
    assert lg.astype(x, lg.float64, copy=False) is x  # no conversion needed: x itself
    assert x.astype(np.float64, copy=False) is x
    c = lg.astype(x, lg.float64)  # copy=True: a new array
    assert c is not x
    c[0, 0] = 100.0  # writing the copy leaves x alone
    assert x.numpy()[0, 0] == 0.0 and c.numpy()[0, 0] == 100.0
    d = lg.astype(x, lg.int32, copy=False)  # a conversion is always a new array
    assert d is not x and d.dtype == np.int32
    assert lg.astype(x, lg.float32, device="cpu").device == "cpu"
    with pytest.raises(ValueError, match="not available"):
        lg.astype(x, lg.float32, device="cuda")


@FEW
@given(st.data(), st.sampled_from(ALL_DTYPES), shapes(min_dims=0))
def test_astype_matches_numpy(data, dt, shape):
    # NaN and inf have no integer value: NumPy's result there is platform-defined (C's cast)
    a, x = as_view(data.draw, data.draw(arrays(np.float64, shape, special=dt.kind in "fcb")))
    with np.errstate(all="ignore"):
        check(lambda: a.astype(dt), lambda: lg.astype(x, dt), exact_float=True)


@FEW
@given(st.data(), dtypes, shapes(min_dims=2))
def test_mT(data, dt, shape):
    a, x = as_view(data.draw, data.draw(arrays(dt, shape)))
    check(lambda: np.swapaxes(a, -1, -2), lambda: x.mT, exact_float=True)


def test_mT_errors():
    with pytest.raises(ValueError, match="2 dimensions"):
        lg.ones(3).mT


# -- DLPack -----------------------------------------------------------------------------


@FEW
@given(st.data(), st.sampled_from(ALL_DTYPES), shapes(min_dims=0))
def test_dlpack_lazy_to_numpy(data, dt, shape):
    a, x = as_view(data.draw, data.draw(arrays(dt if dt.kind != "c" else np.float64, shape)))
    a = a.astype(dt)
    x = lg.astype(x, dt)  # a value computed lazily: __dlpack__ evaluates it
    got = np.from_dlpack(x)
    assert got.dtype == dt and got.shape == a.shape
    np.testing.assert_array_equal(got, a)
    assert not got.flags.writeable  # DLPack 1.0 tells NumPy the buffer is read-only
    assert x.__dlpack_device__() == (1, 0)  # kDLCPU, device 0


def test_dlpack_versions_and_copy():
    x = lg.arange(5.0) + 1
    for kw in ({}, {"max_version": (0, 8)}, {"max_version": (1, 0)}, {"max_version": (2, 0)}):
        for copy in (None, True):
            assert type(x.__dlpack__(copy=copy, **kw)).__name__ == "PyCapsule"
    assert type(x.__dlpack__(copy=False, max_version=(1, 0))).__name__ == "PyCapsule"
    with pytest.raises(BufferError, match="read-only"):  # an older consumer cannot be told
        x.__dlpack__(copy=False)
    assert type(x.__dlpack__(dl_device=(1, 0))).__name__ == "PyCapsule"
    with pytest.raises(BufferError, match="stream"):
        x.__dlpack__(stream=1)
    # an old consumer gets a copy of the value (it cannot be told the buffer is read-only)
    old = np.from_dlpack(_Legacy(x))
    np.testing.assert_array_equal(old, np.arange(5.0) + 1)
    assert not np.shares_memory(old, x.numpy())


class _Legacy:
    """An exporter wrapper that asks for the pre-1.0 protocol (no read-only flag)."""

    def __init__(self, x):
        self.x = x

    def __dlpack__(self, **kw):
        return self.x.__dlpack__()

    def __dlpack_device__(self):
        return self.x.__dlpack_device__()


@FEW
@given(st.data(), st.sampled_from(ALL_DTYPES), shapes(min_dims=0))
def test_dlpack_numpy_to_lazy(data, dt, shape):
    base = data.draw(arrays(dt if dt.kind != "c" else np.float64, shape)).astype(dt)
    src = base[::-1] if base.ndim and data.draw(st.booleans()) else base  # negative strides
    before = evaluations()
    x = lg.from_dlpack(src, copy=data.draw(st.sampled_from([None, True])))
    assert evaluations() == before  # nothing runs to take it in
    expected = src.copy()
    if src.size and src.flags.writeable:
        src.reshape(-1)[0] = src.reshape(-1)[-1] if src.size > 1 else src.reshape(-1)[0]
    assert x.device == "cpu" and x.dtype == dt and x.shape == src.shape
    np.testing.assert_array_equal(x.numpy(), expected)


def test_from_dlpack_copies_and_lazy_inputs():
    src = np.arange(4.0)
    x = lg.from_dlpack(src)
    src[0] = 99.0  # the lazy array holds its own copy
    assert x.numpy()[0] == 0.0
    assert lg.from_dlpack(src, device="cpu").numpy()[0] == 99.0
    shared = lg.from_dlpack(src, copy=False)  # the producer's memory itself, read-only here
    assert np.shares_memory(shared.numpy(), src)
    doubled = shared * 2
    src[1] = 7.0  # lazy values read the memory when evaluated
    assert doubled.numpy()[1] == 14.0
    shared[0] = -1.0  # a lazy write makes the array's own value: the producer is not written
    assert src[0] == 99.0 and shared.numpy()[0] == -1.0
    with pytest.raises(BufferError, match="strided"):
        lg.from_dlpack(np.arange(6.0).reshape(2, 3).T, copy=False)
    with pytest.raises(ValueError, match="not available"):
        lg.from_dlpack(src, device="cuda")
    y = lg.arange(3.0) * 2
    assert lg.from_dlpack(y, copy=False) is y
    z = lg.from_dlpack(y)
    y += 1  # a write to y is not seen by z
    np.testing.assert_array_equal(z.numpy(), [0.0, 2.0, 4.0])
    with pytest.raises(TypeError, match="asarray"):
        lg.from_dlpack([1, 2, 3])  # not a DLPack exporter


# -- functions of the standard ------------------------------------------------------------


UNARY = {"asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh}
BINARY = {"logaddexp": np.logaddexp, "nextafter": np.nextafter}


@FEW
@pytest.mark.parametrize("name", sorted(UNARY))
@given(data=st.data(), dt=dtypes, shape=shapes())
def test_inverse_hyperbolic(name, data, dt, shape):
    a, x = as_view(data.draw, data.draw(arrays(dt, shape, special=data.draw(st.booleans()))))
    if name == "acosh" and dt.kind == "f":
        a, x = a + 1, x + 1  # mostly inside the domain, NaN below it
    check(lambda: UNARY[name](a), lambda: getattr(lg, name)(x))
    check(lambda: UNARY[name](a), lambda: getattr(np, UNARY[name].__name__)(x))  # NumPy's ufunc


@FEW
@pytest.mark.parametrize("name", sorted(BINARY))
@given(data=st.data(), dts=st.tuples(dtypes, dtypes), special=st.booleans())
def test_logaddexp_nextafter(name, data, dts, special):
    sa, sb = data.draw(broadcast_shapes(2))
    a, x = as_view(data.draw, data.draw(arrays(dts[0], sa, special=special)))
    b = data.draw(arrays(dts[1], sb, special=special))
    check(lambda: BINARY[name](a, b), lambda: getattr(lg, name)(x, lazy(b)), exact_float=name == "nextafter")
    scalar = data.draw(st.sampled_from([0.5, -2.0, math.inf, math.nan, 3]))
    check(
        lambda: BINARY[name](a, scalar), lambda: getattr(lg, name)(x, scalar), exact_float=name == "nextafter"
    )


def test_nextafter_steps_one_ulp():
    for dt in (np.float16, np.float32, np.float64):
        x = lg.asarray(np.array([0.0, 1.0, -1.0, np.inf], dt))
        up = lg.nextafter(x, dt(np.inf)).numpy()
        np.testing.assert_array_equal(up, np.nextafter(x.numpy(), dt(np.inf)))
        assert up.dtype == dt and up[1] == 1 + np.finfo(dt).eps


def test_gradients():
    rng = np.random.default_rng(0)
    x = rng.uniform(-0.9, 0.9, (3, 4))
    check_grad(lg.asinh, x)
    check_grad(lg.atanh, x)
    check_grad(lg.acosh, 1.5 + np.abs(x))
    check_grad(lg.logaddexp, x, rng.standard_normal((4,)) * 3)
    check_grad(lambda a: lg.logaddexp(a, a), x)  # equal operands: each weighs 1/2


@FEW
@given(data=st.data(), dt=dtypes, shape=nonempty_shapes(min_dims=1))
def test_take(data, dt, shape):
    a, x = as_view(data.draw, data.draw(arrays(dt, shape)))
    axis = data.draw(st.sampled_from([None, *range(-a.ndim, a.ndim)]))
    n = a.size if axis is None else a.shape[axis]
    ind_shape = data.draw(shapes(max_dims=2))
    mode = data.draw(st.sampled_from(["raise", "wrap", "clip"]))
    lo, hi = (-n, n - 1) if mode == "raise" else (-3 * n - 2, 3 * n + 2)
    idx = data.draw(arrays(np.int64, ind_shape, lo=lo, hi=hi))
    spellings = [lg.asarray, lambda i: i] + ([lambda i: i.tolist()] if idx.size else [])  # [] loses shape
    lazy_idx = data.draw(st.sampled_from(spellings))
    check(
        lambda: np.take(a, idx, axis=axis, mode=mode),
        lambda: lg.take(x, lazy_idx(idx), axis=axis, mode=mode),
        exact_float=True,
    )
    check(lambda: np.take(a, idx, axis=axis, mode=mode), lambda: np.take(x, idx, axis=axis, mode=mode))


def test_take_errors_and_out():
    x = lg.arange(12.0).reshape(3, 4)
    out = lg.zeros((3, 2))
    assert lg.take(x, [3, 0], axis=1, out=out) is out
    np.testing.assert_array_equal(out.numpy(), np.take(np.arange(12.0).reshape(3, 4), [3, 0], axis=1))
    with pytest.raises(ValueError, match="out of bounds"):
        lg.take(x, [0], axis=2)
    with pytest.raises(IndexError, match="integers"):
        lg.take(x, [0.5], axis=0)
    with pytest.raises(ValueError, match="mode"):
        lg.take(x, [0], axis=0, mode="nearest")
    with pytest.raises(ValueError, match="0-d"):
        lg.take(lg.asarray(1.0), [0], axis=0)
    bad = lg.take(x, [5], axis=0)  # an index out of range fails at evaluation, naming the line
    with pytest.raises(IndexError, match="out of bounds"):
        bad.numpy()
