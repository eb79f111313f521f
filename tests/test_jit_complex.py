"""Complex values in fused kernels (jit/complex_c.py) against NumPy, bit for bit.

Every supported operator on a grid of special components (+-0, +-inf, nan, huge, subnormal),
random chains of them (hypothesis), broadcasting with real arrays and Python scalars, views,
0-size and 0-d values, on the C backend and on the emulated CUDA device (the CUDA source the
GPU would compile, built by the host compiler). Results compare bits: equal values, equal
signs of zeros, NaN where NumPy has NaN.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lazygraph as lg
from jit import backend, compile_c
from jit.backend import cuda_emulated
from jit.fusion import find_regions
from jit.kernel import FusedKernel, compile_region
from jit.runner import run_graph
from lazygraph.engine.evaluate import schedule
from ops.settings import SETTINGS

pytestmark = [
    pytest.mark.skipif(not compile_c.available(), reason="needs a C compiler"),
    pytest.mark.host_backend,
]


@pytest.fixture(autouse=True)
def _compile_now():  # noqa: ANN202
    """Kernels compile before the call returns (no op-by-op NumPy run while they build)."""
    with SETTINGS.override(jit_background=False):
        yield


CDTYPES = [np.complex64, np.complex128]
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e300, -1e-310, 3.0, -2.5, 1e-3]
GRID = np.array([complex(x, y) for x in SPECIAL for y in SPECIAL])


def same_bits(got: np.ndarray, exp: np.ndarray) -> None:
    """Values, dtypes, shapes and signed zeros equal; NaN where NumPy has NaN."""
    got, exp = np.asarray(got), np.asarray(exp)
    assert got.dtype == exp.dtype and got.shape == exp.shape, (got.dtype, exp.dtype, got.shape, exp.shape)
    if exp.dtype.kind == "c":
        got = np.stack([got.real, got.imag])
        exp = np.stack([exp.real, exp.imag])
    np.testing.assert_array_equal(got, exp, strict=True)
    if exp.dtype.kind == "f":
        both = ~np.isnan(exp)
        np.testing.assert_array_equal(np.signbit(got[both]), np.signbit(exp[both]))


def numpy_value(fn: Callable, *arrays: np.ndarray) -> np.ndarray:
    """fn on NumPy, its warnings silenced (inf - inf and friends are the point)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return np.asarray(fn(np, *arrays))


def run_cpu(fn: Callable, *arrays: np.ndarray) -> tuple[np.ndarray, list[list[str]]]:
    """fn through fused C kernels (everything else op by op), and the regions' operators."""
    out = fn(lg, *(lg.asarray(a) for a in arrays))
    roots = [out.node]
    order = schedule(roots)
    regions = find_regions(order, roots)
    got = run_graph(order, roots)[0]
    for r in regions:  # each region ran as a compiled kernel, not op by op
        k = compile_region(r)
        assert k.variants or 0 in r.nodes[-1].shape, k.label()
    return got, [[n.op.name for n in r.nodes] for r in regions]


def run_on(be_name: str, fn: Callable, *arrays: np.ndarray) -> tuple[np.ndarray, int]:
    """fn with every fused region launched on backend `be_name`, the rest on NumPy."""
    be = backend.get(be_name)
    out = fn(lg, *(lg.asarray(a) for a in arrays))
    roots = [out.node]
    order = schedule(roots)
    regions = find_regions(order, roots)
    member = {id(m): r for r in regions for m in r.nodes}
    vals: dict[int, object] = {}
    done: set[int] = set()

    def value(c):  # noqa: ANN001, ANN202
        return c.buffer if c.buffer is not None else vals[id(c)]

    with np.errstate(all="ignore"):
        for n in order:
            r = member.get(id(n))
            if r is None:
                vals[id(n)] = np.asarray(n.op.kernel(*(np.asarray(value(c)) for c in n.inputs), **n.attrs))
            elif id(r) not in done:
                done.add(id(r))
                outs = FusedKernel(r)(*(value(c) for c in r.inputs), backend=be)
                for o, v in zip(r.outputs, outs):
                    vals[id(o)] = be.to_host(v)
    return np.asarray(value(roots[0])), len(regions)


# operator -> program over two complex operands; each must become one fused region
OPS: dict[str, Callable] = {
    "add": lambda F, x, y: x + y,
    "subtract": lambda F, x, y: x - y,
    "multiply": lambda F, x, y: x * y,
    "square": lambda F, x, y: F.square(x),
    "pow2": lambda F, x, y: x**2,
    "negative": lambda F, x, y: -x,
    "positive": lambda F, x, y: +x,
    "conj": lambda F, x, y: F.conj(x),
    "real": lambda F, x, y: F.real(x) * 1,
    "imag": lambda F, x, y: F.imag(x) * 1,
    "abs": lambda F, x, y: F.abs(x),
    "equal": lambda F, x, y: x == y,
    "not_equal": lambda F, x, y: x != y,
    "where": lambda F, x, y: F.where(F.abs(x) <= 2.0, x, y),
    "astype": lambda F, x, y: x.astype(np.complex64) * y.astype(np.complex64),
    "astype_up": lambda F, x, y: x.astype(np.complex128) - y,
    "real_promoted": lambda F, x, y: (x * F.real(y)) + (F.imag(y) - x),
    "real_to_complex": lambda F, x, y: F.real(x).astype(y.dtype) * y,
    "float_scalar": lambda F, x, y: (x * 2.5 - 0.0) * -1.0 + 1,
    # a negated product: -(0 * 0 - 0) is -0 (a compiler folding the negation into fma gives +0)
    "negated_product": lambda F, x, y: -(x * y),
    "negated_square": lambda F, x, y: F.conj(F.square(x)),
    "negated_real_part": lambda F, x, y: -F.real(x * y),
    # NumPy's Smith division with its NaN/infinity cases; real operands promoted first
    "divide": lambda F, x, y: x / y,
    "divide_by_real": lambda F, x, y: x / F.real(y),
    "real_divided": lambda F, x, y: F.real(x) / y,
    "divide_by_scalar": lambda F, x, y: (x * 1) / 2.5,
}


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("name", sorted(OPS))
def test_each_op_on_special_components(name: str, dtype: type) -> None:
    a = np.repeat(GRID, len(GRID)).astype(dtype)
    b = np.tile(GRID, len(GRID)).astype(dtype)
    fn = OPS[name]
    got, regions = run_cpu(fn, a, b)
    same_bits(got, numpy_value(fn, a, b))
    assert len(regions) == 1, regions


@pytest.mark.parametrize("dtype", CDTYPES)
def test_random_values(dtype: type) -> None:
    """Random magnitudes: |z| and products hit the roundings where a fused multiply-add differs."""
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(5000) + 1j * rng.standard_normal(5000)).astype(dtype)
    b = (rng.standard_normal(5000) * 1e3 + 1j * rng.standard_normal(5000)).astype(dtype)
    for name in ("multiply", "square", "abs", "real_promoted", "divide"):
        got, _ = run_cpu(OPS[name], a, b)
        same_bits(got, numpy_value(OPS[name], a, b))


def _mandel_step(F, z, c, n):  # noqa: ANN001, ANN202
    active = F.abs(z) <= 2.0
    return F.where(active, z**2 + c, z), F.where(active, n + 1, n)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_mandelbrot_step_is_one_kernel(dtype: type) -> None:
    """One iteration of mandelbrot (masked update of z and of the counts): one fused kernel."""
    x = np.linspace(-2.2, 0.8, 23)
    y = np.linspace(-1.2, 1.2, 17)
    c = (x[None, :] + 1j * y[:, None]).astype(dtype)
    z0, n0 = np.zeros_like(c), np.zeros(c.shape, np.int32)
    z, n = lg.asarray(z0), lg.asarray(n0)
    zn, nn = z0, n0
    for _ in range(3):
        z, n = _mandel_step(lg, z, lg.asarray(c), n)
        zn, nn = _mandel_step(np, zn, c, nn)
    roots = [z.node, n.node]
    order = schedule(roots)
    regions = find_regions(order, roots)
    assert len(regions) == 1, [[m.op.name for m in r.nodes] for r in regions]
    got = run_graph(order, roots)
    same_bits(got[0], zn)
    same_bits(got[1], nn)
    same_bits(z.numpy(), zn)  # and through a whole evaluation


@pytest.mark.parametrize("dtype", CDTYPES)
def test_broadcasting_with_real_operands(dtype: type) -> None:
    rng = np.random.default_rng(0)
    z = (rng.standard_normal((3, 1)) + 1j * rng.standard_normal((3, 1))).astype(dtype)
    z[0, 0] = complex(-0.0, np.inf)
    for real in (
        np.array([0.0, -0.0, np.inf, 2.0]),
        np.array([-0.0, 1.5, np.nan, 3.0], np.float32),
        np.array([0, -3, 7, 2**40]),
        np.array([True, False, True, False]),
    ):
        for fn in (
            lambda F, a, r: a * r,
            lambda F, a, r: r * a + r,
            lambda F, a, r: a - r,
            lambda F, a, r: F.where(r > 1, a, r),
            lambda F, a, r: a == r,
        ):
            got, regions = run_cpu(fn, z, real)
            same_bits(got, numpy_value(fn, z, real))
            assert len(regions) == 1


def test_python_scalars() -> None:
    """Real Python scalars fuse (promoted in the kernel); complex ones stay with NumPy, same bits."""
    z = GRID.astype(np.complex64)
    fn = lambda F, a: (a * 2 + 0.5) * -0.0  # noqa: E731
    got, regions = run_cpu(fn, z)
    same_bits(got, numpy_value(fn, z))
    assert len(regions) == 1
    fn = lambda F, a: (a * (1 - 2j) + 1j) * a  # noqa: E731
    got, _ = run_cpu(fn, z)
    same_bits(got, numpy_value(fn, z))


@pytest.mark.parametrize("dtype", CDTYPES)
def test_views_empty_and_0d(dtype: type) -> None:
    rng = np.random.default_rng(1)
    base = (rng.standard_normal((6, 8)) + 1j * rng.standard_normal((6, 8))).astype(dtype)
    other = (rng.standard_normal((8, 6)) + 1j * rng.standard_normal((8, 6))).astype(dtype)
    fn = lambda F, a, b: F.square(a) + b * F.conj(a)  # noqa: E731
    for a, b in (
        (base[::2, ::3], other.T[::2, ::3]),
        (base.T, other),
        (base[:, :0], other.T[:, :0]),
        (base[1, 2], other[3, 4]),
    ):
        a, b = np.asarray(a), np.asarray(b)
        got, _ = run_cpu(fn, a, b)
        same_bits(got, numpy_value(fn, a, b))


def test_unsupported_stay_with_numpy() -> None:
    """exp, sums and complex-to-real astype are NumPy's kernels; values still exact."""
    z = np.repeat(GRID, 4).astype(np.complex128)
    for fn in (
        lambda F, a: F.sqrt(a + a),
        lambda F, a: F.exp(a + a),
        lambda F, a: F.sum(a * a, axis=0),
        lambda F, a: (a * a).astype(np.float64),
    ):
        got, regions = run_cpu(fn, z)
        same_bits(got, numpy_value(fn, z))
        assert all(len(r) == 1 for r in regions), regions


# -- random chains ------------------------------------------------------------------------
UNARY = ["square", "negative", "conj", "positive", "abs_c", "real_c", "imag_c"]
BINARY = ["add", "subtract", "multiply", "divide", "where"]


def _apply(F, op: str, x, y):  # noqa: ANN001, ANN202
    if op == "square":
        return F.square(x)
    if op == "negative":
        return -x
    if op == "conj":
        return F.conj(x)
    if op == "positive":
        return +x
    if op == "abs_c":  # a real value back into complex arithmetic
        return F.abs(x) * x
    if op == "real_c":
        return x - F.real(x)
    if op == "imag_c":
        return F.imag(x) + x
    if op == "add":
        return x + y
    if op == "subtract":
        return y - x
    if op == "multiply":
        return x * y
    if op == "divide":
        return x / y
    return F.where(x != y, x, y * 2.0)


def _chain(ops: list[str]) -> Callable:
    def fn(F, a, b):  # noqa: ANN001, ANN202
        x = a
        for op in ops:
            x = _apply(F, op, x, b)
        return x

    return fn


components = st.sampled_from(SPECIAL) | st.floats(-1e3, 1e3, width=32)


@pytest.mark.parametrize("dtype", CDTYPES)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(st.sampled_from(UNARY + BINARY), min_size=1, max_size=6),
    parts=st.lists(components, min_size=24, max_size=24),
)
def test_random_chains(dtype: type, ops: list[str], parts: list[float]) -> None:
    p = np.array(parts).reshape(4, 6)
    a, b = np.empty(6, dtype), np.empty(6, dtype)
    a.real, a.imag, b.real, b.imag = p  # exact parts (x + 1j * inf would make the real part NaN)
    fn = _chain(ops)
    got, regions = run_cpu(fn, a, b)
    same_bits(got, numpy_value(fn, a, b))
    assert len(regions) == 1


# -- the emulated CUDA device ---------------------------------------------------------------
needs_emu = pytest.mark.skipif(cuda_emulated.toolchain() is None, reason="needs a C++ compiler")


@needs_emu
@pytest.mark.parametrize("dtype", CDTYPES)
def test_emulated_cuda_ops(dtype: type) -> None:
    a = np.repeat(GRID, len(GRID)).astype(dtype)
    b = np.tile(GRID, len(GRID)).astype(dtype)

    def fn(F, x, y):  # noqa: ANN001, ANN202
        picked = F.where(F.abs(x) <= 2.0, F.square(x) + y * F.real(y), -F.conj(x) - (x / y) * 1.5)
        return picked.astype(np.complex128) + (F.imag(x) * (x != y))

    got, nreg = run_on("cuda-emulated", fn, a, b)
    assert nreg == 1
    same_bits(got, numpy_value(fn, a, b))


@needs_emu
def test_emulated_cuda_mandelbrot_step() -> None:
    x = np.linspace(-2.2, 0.8, 13)
    y = np.linspace(-1.2, 1.2, 7)
    c = x[None, :] + 1j * y[:, None]
    n0 = np.zeros(c.shape, np.int32)

    def fn(F, c, n):  # noqa: ANN001, ANN202
        z = c
        for _ in range(3):
            z, n = _mandel_step(F, z, c, n)
        return F.where(n == 3, z, -z)

    got, nreg = run_on("cuda-emulated", fn, c, n0)
    assert nreg == 1
    same_bits(got, numpy_value(fn, c, n0))
    with lg.device("cuda-emulated"):
        dev = fn(lg, lg.asarray(c), lg.asarray(n0)).numpy()
    same_bits(dev, numpy_value(fn, c, n0))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", CDTYPES)
def test_gpu_ops(dtype: type) -> None:
    """The same kernels through NVRTC on a real GPU (skipped without one): fma, IEEE sqrt and division."""
    a = np.repeat(GRID, len(GRID)).astype(dtype)
    b = np.tile(GRID, len(GRID)).astype(dtype)
    for name in (
        "multiply",
        "square",
        "abs",
        "where",
        "negated_product",
        "real_promoted",
        "astype",
        "divide",
    ):
        got, nreg = run_on("cuda", OPS[name], a, b)
        assert nreg == 1
        same_bits(got, numpy_value(OPS[name], a, b))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16, np.bool_])
def test_real_and_imag_of_real_arrays(dtype: type) -> None:
    """real/imag of a real operand: the value and zero, in the operand's dtype, fused."""
    x = np.array([0.0, -0.0, 1.5, -np.inf, np.nan, 7.0]).astype(dtype) if dtype != np.bool_ else GRID.real > 0
    fn = lambda F, a: F.real(a) + F.imag(a)  # noqa: E731
    got, regions = run_cpu(fn, x)
    same_bits(got, numpy_value(fn, x))
    assert len(regions) == 1
