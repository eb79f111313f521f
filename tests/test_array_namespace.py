"""Every operator's reference kernel runs on device arrays: written once against the namespace.

The kernels in ops/ are the semantics of lazygraph, and they must run where their inputs live
(NumPy on the host, CuPy on the GPU) without a second copy. This test records real calls of
every registered operator's kernel (lazygraph programs evaluated on the reference path:
LAZYGRAPH_JIT=0, LAZYGRAPH_OPTIMIZE=0), then replays each call with its array arguments moved
onto emulated device arrays (jit/backend/emulated_array.py: CuPy's rules, NumPy's values) and
compares with the NumPy call: same values bit for bit (NaN where NaN), same dtype and shape,
and every array in the result a device array. A kernel that converts an input to NumPy, or
mixes in an array it created on the host, raises there. Creation kernels, which have no array
input, take the namespace as `xp=`.

Every registered operator is either replayed here or in `EXEMPT` with the reason, so an
operator added without a namespace-clean kernel fails `test_every_operator_is_covered`.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import lazygraph as lg
from jit.backend.emulated_array import EmulatedDeviceArray, emulated_namespace, to_device
from ops.base import REGISTRY
from ops.collective import set_transport
from ops.declare import Elementwise
from ops.namespace import asarray_like, from_host, namespace, to_host

L = lg.linalg
F = lg.nn.functional

#: operators whose kernel is not an array computation on its inputs
EXEMPT = {
    "buffer": "a leaf: its value is its buffer, no kernel runs",
    "scalar": "a leaf: its value is its Python scalar, no kernel runs",
    "memo": "the fold pass's steps (optimizer/fold.py): its kernel raises, they run through their constructor",
    "library": "library steps (optimizer/library.py): its kernel raises, a backend's GEMM/conv call runs them",
    "superopt": "the superoptimizer's steps: its kernel raises, they run through their constructor",
    "collective_start": "posts a transfer to an MPI/NCCL transport: communication, not computation",
    "collective_wait": "completes a transport's transfer: communication, not computation",
}

#: operators without array inputs: the kernel takes the namespace to create in as `xp=`
CREATION = {"full", "arange", "linspace", "eye", "window"}


def _rng() -> np.random.Generator:
    return np.random.default_rng(7)


def _programs() -> list[Callable[[], Any]]:
    """lazygraph programs that together call every operator's kernel (covered is asserted)."""
    r = _rng()
    x = r.standard_normal((3, 4))
    y = r.standard_normal((3, 4))
    p = np.abs(x) + 0.5
    i = r.integers(-5, 5, (3, 4))
    u = r.integers(0, 7, (3, 4)).astype(np.uint8)
    b = x > 0
    c = x + 1j * y
    sq = r.standard_normal((3, 3)) + 3 * np.eye(3)
    spd = sq @ sq.T
    img = r.standard_normal((2, 3, 6, 6)).astype(np.float32)
    w = r.standard_normal((4, 3, 3, 3)).astype(np.float32)
    nanx = np.array([1.0, np.nan, -np.inf, 3.0, np.nan])
    dup = np.array([3, 1, 3, 2, 1, 1])
    A = lg.asarray
    progs: list[Callable[[], Any]] = []

    unary = ["abs", "ceil", "conj", "cos", "cosh", "exp", "expm1", "floor", "isfinite", "isinf", "isnan",
             "log1p", "negative", "positive", "reciprocal", "sign", "signbit", "sin", "sinh", "sqrt",
             "square", "tan", "tanh", "trunc", "erf", "sigmoid", "round", "imag", "real", "angle"]  # fmt: skip
    for name in unary:
        progs.append(lambda n=name: getattr(lg, n)(A(x)))
        progs.append(lambda n=name: getattr(lg, n)(A(nanx)))
    for name in ["log", "log2", "log10", "acosh"]:
        progs.append(lambda n=name: getattr(lg, n)(A(p + 1)))
    for name in ["acos", "asin", "atanh"]:
        progs.append(lambda n=name: getattr(lg, n)(A(np.tanh(x))))
    for name in ["asinh", "atan", "exp", "sqrt", "tanh", "expm1", "sign", "sigmoid", "erf"]:
        progs.append(lambda n=name: getattr(lg, n)(A(c if n not in ("erf", "sigmoid") else x)))
    binary = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "pow", "atan2", "copysign",
              "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logaddexp",
              "nextafter", "fmod", "remainder", "floor_divide"]  # fmt: skip
    for name in binary:
        progs.append(lambda n=name: getattr(lg, n)(A(x), A(y)))
        progs.append(lambda n=name: getattr(lg, n)(A(x), 2.0))
    for name in ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift",
                 "floor_divide", "remainder", "pow"]:  # fmt: skip
        progs.append(lambda n=name: getattr(lg, n)(A(u), A((u % 3).astype(np.uint8))))
        progs.append(lambda n=name: getattr(lg, n)(A(i), 2))
    for name in ["logical_and", "logical_or", "logical_xor"]:
        progs.append(lambda n=name: getattr(lg, n)(A(b), A(~b)))
    progs += [
        lambda: lg.bitwise_invert(A(i)),
        lambda: lg.logical_not(A(b)),
        lambda: lg.where(A(b), A(x), A(y)),
        lambda: lg.clip(A(x), -0.5, 0.5),
        lambda: A(x).astype(np.float32),
        lambda: A(x).astype(np.int32),
        lambda: A(c).astype(np.complex64),
        lambda: A(x).real + 1j * A(y),  # make_complex (or a complex add)
        lambda: lg.real(A(c)) + lg.imag(A(c)),
        lambda: A(x).view(np.int64),
        lambda: _set_real(A(c), A(x)),
        # reductions and scans
        lambda: [f(A(x), axis=1) for f in (lg.sum, lg.prod, lg.max, lg.min, lg.mean, lg.std, lg.var)],
        lambda: [f(A(x)) for f in (lg.sum, lg.argmax, lg.argmin, lg.cumsum, lg.cumprod)],
        lambda: [lg.all(A(b), axis=0), lg.any(A(b)), lg.argmax(A(x), axis=0), lg.cumsum(A(i), axis=1)],
        lambda: np.bitwise_xor.reduce(A(i), axis=1),
        lambda: np.maximum.accumulate(A(x), axis=1),
        lambda: np.add.reduceat(A(x), [0, 2], axis=1),
        lambda: _ufunc_at(A(x)),
        lambda: lg.logsumexp(A(x), axis=1),
        # movement
        lambda: A(x)[1:, ::-2].reshape(-1),
        lambda: A(x)[A(np.array([2, 0, 1]))],
        lambda: A(x)[A(b)],
        lambda: lg.concat([A(x), A(y)], axis=0),
        lambda: lg.stack([A(x), A(y)], axis=1),
        lambda: lg.pad(A(x), ((1, 0), (2, 1))),
        lambda: lg.pad(A(x), ((1, 1), (0, 2)), mode="reflect"),
        lambda: _assign(A(x)),
        lambda: _update(A(x)),
        lambda: _scatter(A(x)),
        lambda: lg.reshape(A(x).T, (2, 6)),
        # sorting
        lambda: [lg.sort(A(x), axis=1), lg.argsort(A(x), axis=0), lg.sort(A(nanx))],
        lambda: lg.searchsorted(A(np.sort(x[0])), A(y[0])),
        lambda: [lg.partition(A(x), 1, axis=1), lg.argpartition(A(x), 2, axis=1)],
        lambda: lg.nonzero(A(b)),
        lambda: lg.unique(A(dup)),
        lambda: lg.unique_all(A(dup)),
        lambda: lg.unique_counts(A(nanx)),
        lambda: lg.unique_values(A(nanx)),
        lambda: lg.unique_inverse(A(dup)),
        # linear algebra
        lambda: lg.matmul(A(x), A(y).T),
        lambda: lg.einsum("ij,kj->ik", A(x), A(y)),
        lambda: [L.det(A(sq)), L.inv(A(sq)), L.solve(A(sq), A(x[:, :3])), L.slogdet(A(sq))],
        lambda: [L.cholesky(A(spd)), L.eigh(A(spd)), L.eigvalsh(A(spd)), L.eig(A(sq)), L.eigvals(A(sq))],
        lambda: [L.svd(A(x)), L.svdvals(A(x)), L.qr(A(x)), L.pinv(A(x)), L.matrix_rank(A(x))],
        lambda: L.lstsq(A(x.T), A(y.T[:, 0]), rcond=None).x,
        lambda: L.lstsq(A(x.T), A(y.T[:, :2]), rcond=None).s,
        # fft and windows
        lambda: [lg.fft.fft(A(c)), lg.fft.ifft(A(c)), lg.fft.rfft(A(x)), lg.fft.irfft(A(c))],
        lambda: [lg.fft.hfft(A(c)), lg.fft.ihfft(A(x))],
        lambda: [lg.fft.fftn(A(c)), lg.fft.ifftn(A(c)), lg.fft.rfftn(A(x)), lg.fft.irfftn(A(c))],
        lambda: [lg.hanning(5), lg.hamming(4), lg.blackman(6), lg.bartlett(5), lg.kaiser(5, 3.0)],
        # creation
        lambda: [lg.full((2, 3), 1.5), lg.arange(1, 7, 2), lg.linspace(0, 1, 5), lg.eye(3, 4, k=1)],
        lambda: lg.zeros((2, 2), dtype=np.int32) + lg.ones(3, dtype=np.float32).sum(),
        # nn
        lambda: [F.softmax(A(x), dim=1), F.log_softmax(A(x), dim=1), F.one_hot(A(dup), 4)],
        lambda: F.conv2d(A(img), A(w), stride=1, padding=1),
        lambda: F.max_pool2d(A(img), 2),
        lambda: F.avg_pool2d(A(img), 2),
        lambda: F.cross_entropy(A(x), A(np.array([0, 3, 1]))),
        lambda: _grads(A, img, w, x, sq),
        lambda: _window_variants(A, img, w),
        lambda: [F.softmax(A(x.astype(np.float16)), dim=0), lg.logsumexp(A(i))],
        lambda: [L.inv(A(sq + 1j * sq.T)), L.eigh(A(spd + 0j)), L.svd(A(c))],
        lambda: [lg.fft.fft(A(x), n=6, norm="ortho"), lg.fft.rfftn(A(x), s=(2, 8), norm="forward")],
        lambda: [lg.pad(A(x), ((0, 1), (2, 2)), mode="edge"), lg.pad(A(i), 1, constant_values=3)],
        lambda: [lg.sum(A(i), axis=0), lg.mean(A(u)), lg.var(A(x), ddof=1), lg.prod(A(b), axis=1)],
        lambda: [lg.sort(A(i), axis=None), lg.unique(A(nanx), equal_nan=False)],
    ]
    progs.append(lambda: (A(x)[A(b)].sum(), A(c)[A(b[:, 0])].sum(axis=0)))  # masked_sum
    return progs


def _window_variants(A: Callable, img: np.ndarray, w: np.ndarray) -> list:
    """Convolution and pooling branches: groups, stride and dilation, padded and untiled windows,
    and their gradients (col2im, masks of the first maximum, counts without padding)."""
    xi, wi = A(img.astype(np.float64)), A(w[:, :1].astype(np.float64))
    w3 = A(np.ones((6, 1, 2, 2)))
    y1 = F.conv2d(xi, A(w.astype(np.float64)), stride=2, padding=1, dilation=2)
    y2 = F.conv2d(xi, w3, groups=3, padding=(1, 0), bias=A(np.arange(6.0)))
    y3 = F.max_pool2d(xi, 3, stride=1, padding=1)
    y4 = F.avg_pool2d(xi, 3, stride=2, padding=1, count_include_pad=False)
    loss = (
        y1.sum()
        + (y2 * y2).sum()
        + y3.sum()
        + y4.sum()
        + F.conv2d(xi, wi[:3].reshape(3, 1, 3, 3), groups=3).sum()
    )
    return [y1, y2, y3, y4, *lg.grad(loss, [xi, w3, wi])]


def _set_real(z: Any, re: Any) -> Any:
    z.real = re
    return z


def _ufunc_at(a: Any) -> Any:
    np.add.at(a, np.array([0, 2, 0]), 1.0)
    return a


def _assign(a: Any) -> Any:
    a[1, 1:3] = 7.0  # into an evaluated buffer no one else reads: written there directly
    a[0, :2] = a[2, :2]  # a lazy value: recorded as an `assign`
    return a


def _update(a: Any) -> Any:
    a[1:, ::2] += 2.0
    a[0] *= a[1]
    return a


def _scatter(a: Any) -> Any:
    return lg.put_along_axis(a, lg.asarray(np.array([[0], [1], [2]])), 5.0, axis=1)


def _grads(A: Callable, img: np.ndarray, w: np.ndarray, x: np.ndarray, sq: np.ndarray) -> list:
    """Gradient-only operators (convolution, pooling and cross-entropy backward, scatter_add)."""
    xi = A(img, requires_grad=True) if _takes_grad() else A(img)
    wi = A(w, requires_grad=True) if _takes_grad() else A(w)
    loss = F.conv2d(xi, wi, padding=1).sum() + F.max_pool2d(xi, 2).sum() + F.avg_pool2d(xi, 2).sum()
    gx, gw = lg.grad(loss, [xi, wi])
    xa = A(x)
    ce = F.cross_entropy(xa, A(np.array([0, 3, 1])))
    g1 = lg.grad(ce, [xa])
    xb = A(x)
    g2 = lg.grad(xb[A(np.array([2, 0, 2]))].sum(), [xb])
    return [gx, gw, *g1, *g2]


def _takes_grad() -> bool:
    try:
        lg.asarray(np.zeros(1), requires_grad=True)
        return True
    except TypeError:
        return False


def _materialize(value: Any) -> None:
    if isinstance(value, lg.Array):
        value.numpy()
    elif isinstance(value, (list, tuple)):
        for v in value:
            _materialize(v)


def _signature(args: tuple, attrs: dict) -> str:
    """A call's form (operand dtypes and shapes, attributes): calls of one form are kept once."""
    form = [(a.dtype.str, a.shape) if isinstance(a, np.ndarray) else type(a).__name__ for a in args]
    return repr((form, sorted(attrs.items(), key=lambda kv: kv[0])))


def _record() -> dict[str, list[tuple[tuple, dict]]]:
    """Run the programs on the reference path with every kernel wrapped to keep its calls."""
    calls: dict[str, list[tuple[tuple, dict]]] = {}

    def recorder(name: str, kernel: Callable) -> Callable:
        def call(*args: Any, **attrs: Any) -> Any:
            seen = calls.setdefault(name, [])
            if len(seen) < 12 and _signature(args, attrs) not in {_signature(*c) for c in seen}:
                seen.append((copy.deepcopy(args), copy.deepcopy(attrs)))
            return kernel(*args, **attrs)

        return call

    patched = []
    for name, op in REGISTRY.items():
        if "kernel" not in vars(op):
            op.kernel = recorder(name, op.kernel)
            patched.append(op)
    # plans cached by earlier tests hold the kernels as they were: these programs must compile
    lg.cache.clear(disk=False)
    try:
        with lg.settings.override(jit=False, optimize=False), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for prog in _programs():
                _materialize(prog())
    finally:
        for op in patched:
            del op.kernel
    return calls


class _Rank1:
    """A stand-in transport for the kernels that only read the rank (shard/unshard)."""

    rank, size = 1, 2


def _hand_written(calls: dict) -> None:
    """Kernels no reference-path program reaches: the optimizer's library steps and split pieces,
    the sharding steps of collectives (they read only the transport's rank)."""
    r = _rng()
    x = r.standard_normal((2, 3, 5, 5))
    w = r.standard_normal((4, 3, 3, 3))
    win = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1)}
    cols = REGISTRY["conv2d_im2col"].kernel(x, w, **win)
    g = r.standard_normal((2, 4, 5, 5))
    calls["conv2d_im2col"] = [((x, w), win), ((x, w), dict(win, stride=(2, 1)))]
    calls["conv2d_from_cols"] = [((cols, w, r.standard_normal(4)), {}), ((cols, w), {})]
    calls["conv2d_grad_weight_from_cols"] = [((g, cols), {})]
    shard = {"axis": 1, "world": 2, "transport": "namespace-test"}
    calls["collective_shard"] = [((r.standard_normal((3, 4)),), shard)]
    calls["collective_unshard"] = [((r.standard_normal((3, 2)),), shard)]
    # unique on a device (on the CPU, NumPy's unique runs once on the evaluated values instead)
    v = np.array([3.0, np.nan, 1.0, 3.0, np.nan, 2.0, 1.0])
    calls["unique_indices"] = [
        ((v,), {"count": 4, "equal_nan": True, "first": True}),
        ((v,), {"count": 5, "equal_nan": False, "first": False}),
    ]
    # the superoptimizer's split piece (optimizer/superopt/pseudo.py): made by rewrites only
    calls["slice_axis"] = [((r.standard_normal((3, 6)),), {"axis": 1, "start": 2, "stop": 5})]


@pytest.fixture(scope="module")
def calls() -> Any:
    recorded = _record()
    _hand_written(recorded)
    set_transport("namespace-test", _Rank1())
    yield recorded
    set_transport("namespace-test", None)


def _host(value: Any) -> Any:
    if isinstance(value, EmulatedDeviceArray):
        return value.get()
    if isinstance(value, tuple):
        return tuple(_host(v) for v in value)
    if isinstance(value, list):
        return [_host(v) for v in value]
    return value


def _same(name: str, want: Any, got: Any) -> None:
    """Bit-equal (NaN-equal) values, same dtype and shape, every array a device array."""
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), name
        for w, g in zip(want, got):
            _same(name, w, g)
        return
    if not isinstance(want, (np.ndarray, np.generic)):
        assert not isinstance(got, EmulatedDeviceArray) and got == want, (name, want, got)
        return
    assert isinstance(got, EmulatedDeviceArray), f"{name}: returned {type(got).__name__}, not a device array"
    g, w = got.get(), np.asarray(want)
    assert g.dtype == w.dtype and g.shape == w.shape, (name, g.dtype, w.dtype, g.shape, w.shape)
    np.testing.assert_array_equal(g, w, err_msg=name, strict=True)
    # bit-equal, not just equal: -0.0 vs 0.0 and NaN payloads as NumPy computes them
    assert g.tobytes() == np.ascontiguousarray(w).tobytes() or (w.dtype.kind in "fc" and np.isnan(w).any()), (
        name
    )


def test_every_operator_is_covered(calls: dict) -> None:
    replayed = set(calls) - set(EXEMPT)
    missing = sorted(set(REGISTRY) - replayed - set(EXEMPT))
    assert not missing, f"operators whose kernel no program here calls (add one, or exempt it): {missing}"


def _fortran(value: Any) -> Any:
    """The same values in another memory layout (column-major), as a device may hold them."""
    if isinstance(value, np.ndarray) and value.ndim > 1:
        return np.asfortranarray(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_fortran(v) for v in value)
    return value


@pytest.mark.parametrize("name", sorted(set(REGISTRY) - set(EXEMPT)))
def test_kernel_runs_on_device_arrays(calls: dict, name: str) -> None:
    kernel = REGISTRY[name].kernel
    for args, attrs in calls.get(name, []):
        with np.errstate(all="ignore"):
            want = kernel(*copy.deepcopy(args), **attrs)
            dev_attrs = dict(attrs, xp=emulated_namespace) if name in CREATION else attrs
            got = kernel(*to_device(copy.deepcopy(args)), **dev_attrs)
            _same(name, want, got)
            # column-major inputs: NumPy's result on that layout (its sums' order follows memory)
            if any(isinstance(a, np.ndarray) and a.ndim > 1 for a in args):
                want = kernel(*_fortran(copy.deepcopy(args)), **attrs)
                got = kernel(*to_device(_fortran(copy.deepcopy(args))), **dev_attrs)
                _same(name, want, got)


POINTWISE = sorted(n for n, op in REGISTRY.items() if type(op) is Elementwise)
DTYPES = [np.dtype(t) for t in (np.bool_, np.int8, np.uint8, np.int32, np.int64, np.float32, np.float64,
                                np.complex128)]  # fmt: skip


def _outcome(fn: Callable) -> tuple[Any, type | None]:
    try:
        with np.errstate(all="ignore"):
            return fn(), None
    except (TypeError, ValueError, ZeroDivisionError) as e:
        return None, type(e)


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(POINTWISE), st.sampled_from(DTYPES), st.sampled_from(DTYPES))
def test_pointwise_kernels_agree_on_every_dtype(data, name: str, d0: np.dtype, d1: np.dtype) -> None:
    """Pointwise kernels on device arrays of any dtype pair: NumPy's values, or NumPy's error."""
    op = REGISTRY[name]
    shape = data.draw(st.sampled_from([(), (0,), (1,), (3,), (2, 3)]))

    def elements(d: np.dtype) -> Any:
        if d.kind == "f":  # NaN, infinities and signed zeros included
            return st.floats(allow_nan=True, allow_infinity=True, width=8 * d.itemsize)
        return None

    args = [data.draw(hnp.arrays(d, shape, elements=elements(d))) for d in (d0, d1, d1)][: op.arity]
    if name == "where":
        args[0] = args[0].astype(bool)
    want, err = _outcome(lambda: op.kernel(*copy.deepcopy(args)))
    got, got_err = _outcome(lambda: op.kernel(*to_device(copy.deepcopy(args))))
    assert got_err == err, (name, err, got_err)
    if err is None:
        _same(name, want, got)


def test_emulated_array_refuses_host_conversion() -> None:
    d = to_device(np.arange(3.0))
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.asarray(d)
    with pytest.raises(TypeError, match="host array"):
        np.add(d, np.ones(3))
    with pytest.raises(TypeError, match="host array"):
        np.concatenate([d, np.ones(3)])
    with pytest.raises(TypeError, match="host array"):
        d[np.array([0, 1])]
    with pytest.raises(TypeError, match="host array"):
        d[:2] = np.ones(2)
    with pytest.raises(TypeError, match="host array"):
        np.add.at(d, [0], np.ones(1))
    with pytest.raises(TypeError):
        d.astype(object)
    assert isinstance(np.sum(d), EmulatedDeviceArray) and np.sum(d).shape == ()
    assert isinstance(d[0], EmulatedDeviceArray)
    assert isinstance(np.zeros(2, like=d), EmulatedDeviceArray)
    xp = namespace(d)
    assert xp is emulated_namespace and namespace(np.ones(2), 3.0) is np
    assert isinstance(xp.linalg.inv(to_device(np.eye(2))), EmulatedDeviceArray)
    assert isinstance(asarray_like([1, 2], d), EmulatedDeviceArray)
    assert isinstance(to_host(d), np.ndarray) and isinstance(from_host(np.ones(2), d), EmulatedDeviceArray)
    with pytest.raises(AttributeError):
        xp.frompyfunc  # noqa: B018


#: operators whose results hold eigen- or singular vectors (packed with the values)
_SIGN_FREE = {"eigh", "svd"}


def _to_cupy(value: Any) -> Any:
    import cupy

    if isinstance(value, np.ndarray):
        return cupy.asarray(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_to_cupy(v) for v in value)
    return value


def _close(name: str, want: Any, got: Any) -> None:
    """CuPy's result against NumPy's: same dtype and shape; exact for integers and booleans,
    within the GPU's own rounding of transcendental functions for floats (NaN where NaN)."""
    import cupy

    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), name
        for w, g in zip(want, got):
            _close(name, w, g)
        return
    if not isinstance(want, (np.ndarray, np.generic)):
        assert not isinstance(got, cupy.ndarray) and got == want, (name, want, got)
        return
    assert isinstance(got, cupy.ndarray), f"{name}: returned {type(got).__name__}, not a CuPy array"
    g, w = cupy.asnumpy(got), np.asarray(want)
    assert g.dtype == w.dtype and g.shape == w.shape, (name, g.dtype, w.dtype, g.shape, w.shape)
    if name in _SIGN_FREE:  # vectors are unique up to sign: cuSOLVER and LAPACK choose differently
        g, w = np.abs(g), np.abs(w)
    if w.dtype.kind in "fc":
        tol = {2: 1e-3, 4: 1e-5, 8: 1e-12 if w.dtype.kind == "f" else 1e-5}.get(w.dtype.itemsize, 1e-12)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True, err_msg=name)
    else:
        np.testing.assert_array_equal(g, w, err_msg=name, strict=True)


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(set(REGISTRY) - set(EXEMPT)))
def test_kernel_runs_on_cupy_arrays(calls: dict, name: str) -> None:
    """The same replay on real CuPy arrays: the emulated array checks where arrays live, this
    checks that CuPy has every function and keyword the kernels use (amax's `initial=` it has not)."""
    import cupy

    kernel = REGISTRY[name].kernel
    for args, attrs in calls.get(name, []):
        with np.errstate(all="ignore"):
            want = kernel(*copy.deepcopy(args), **attrs)
            dev_attrs = dict(attrs, xp=cupy) if name in CREATION else attrs
            _close(name, want, kernel(*_to_cupy(copy.deepcopy(args)), **dev_attrs))


def test_ufunc_methods_a_device_lacks_run_on_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """CuPy implements reduce/accumulate for a few ufuncs only (not maximum.accumulate,
    bitwise_xor.reduce): the kernels then compute on host copies and return a device array."""
    import ops.scan as scan

    class Lacking:
        def reduce(self, *a: Any, **k: Any) -> Any:
            raise NotImplementedError("reduce is not supported yet")

        accumulate = reduceat = reduce

    monkeypatch.setattr(scan, "xp_ufunc", lambda x, name: Lacking())
    x = np.array([[3, 1, 4], [1, 5, 9]], dtype=np.int64)
    got = REGISTRY["accumulate"].kernel(to_device(x), ufunc="maximum", axis=1)
    assert isinstance(got, EmulatedDeviceArray)
    np.testing.assert_array_equal(got.get(), np.maximum.accumulate(x, axis=1))
    got = REGISTRY["ufunc_reduce"].kernel(to_device(x), ufunc="bitwise_xor", axis=(0,), keepdims=False)
    assert isinstance(got, EmulatedDeviceArray)
    np.testing.assert_array_equal(got.get(), np.bitwise_xor.reduce(x, axis=(0,)))
    idx = np.array([0, 2])
    got = REGISTRY["reduceat"].kernel(to_device(x), to_device(idx), ufunc="maximum", axis=1)
    assert isinstance(got, EmulatedDeviceArray)
    np.testing.assert_array_equal(got.get(), np.maximum.reduceat(x, idx, axis=1))


def test_scatters_a_device_refuses_run_on_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """CuPy's ufunc.at and add.at take no complex (TypeError) and few ufuncs: NumPy's on host copies."""
    import ops.movement as movement
    import ops.scan as scan

    class Refusing:
        def at(self, *a: Any, **k: Any) -> Any:
            raise TypeError("cupy.add.at only supports ...")

    base = np.zeros(4, dtype=np.complex128)
    idx = np.array([0, 2, 2])
    val = np.array([1 + 1j, 2 - 1j, 0.5j])
    want = base.copy()
    np.add.at(want, idx, val)
    template = (("a", 0),)
    monkeypatch.setattr(scan, "xp_ufunc", lambda x, name: Refusing())
    got = REGISTRY["ufunc_at"].kernel(
        to_device(base), to_device(val), to_device(idx), ufunc="add", index=template
    )
    assert isinstance(got, EmulatedDeviceArray)
    np.testing.assert_array_equal(got.get(), want)

    class Lacking:  # the emulated namespace, but an add.at that refuses, as CuPy's does complex
        add = Refusing()

        def __getattr__(self, name: str) -> Any:
            return getattr(emulated_namespace, name)

    monkeypatch.setattr(movement, "namespace", lambda *v: Lacking())
    got = REGISTRY["scatter_add"].kernel(to_device(base), to_device(val), to_device(idx), index=template)
    assert isinstance(got, EmulatedDeviceArray)
    np.testing.assert_array_equal(got.get(), want)
