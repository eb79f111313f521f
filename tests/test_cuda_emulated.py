"""The CUDA kernels run on the host (jit/backend/cuda_emulated.py) against the CPU backend and NumPy.

Every region is rendered by the CUDA generator (the source NVRTC would compile), compiled by the
host C++ compiler and launched with its real launch shape: grid-stride and block-stride loops,
guarded stores, and the block reductions' warp shuffles and barriers all execute.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import lazygraph as lg
import lazygraph.nn.functional as F
from jit import backend
from jit.backend import cuda_emulated
from jit.backend.emulated_array import EmulatedDeviceArray
from jit.fusion import find_regions
from jit.kernel import FusedKernel
from lazygraph.engine.evaluate import schedule

pytestmark = [
    pytest.mark.skipif(cuda_emulated.toolchain() is None, reason="needs a C++ compiler"),
    pytest.mark.host_backend,
]

EMU = backend.get("cuda-emulated")
CPU = backend.get("cpu")


def run_regions(be, *arrays: lg.Array) -> tuple[list[np.ndarray], int]:  # noqa: ANN001
    """Each fused region on backend `be`; everything else (and the inputs) through NumPy."""
    roots = [a.node for a in arrays]
    order = schedule(roots)
    vals: dict[int, object] = {}
    regions = find_regions(order, roots)
    member = {id(m): r for r in regions for m in r.nodes}
    done: set[int] = set()

    def value(c):  # noqa: ANN001, ANN202
        return c.buffer if c.buffer is not None else vals[id(c)]

    for n in order:
        r = member.get(id(n))
        if r is None:
            vals[id(n)] = np.asarray(n.op.kernel(*(np.asarray(value(c)) for c in n.inputs), **n.attrs))
        elif id(r) not in done:
            done.add(id(r))
            outs = FusedKernel(r)(*(value(c) for c in r.inputs), backend=be)
            for o, v in zip(r.outputs, outs):
                vals[id(o)] = be.to_host(v)
    return [np.asarray(value(r)) for r in roots], len(regions)


def check(outs: list[lg.Array], exact: bool, rtol: float = 2e-5, atol: float = 1e-6) -> None:
    """Emulated CUDA against the CPU backend and NumPy: bit for bit, or within rounding."""
    emu, nreg = run_regions(EMU, *outs)
    cpu, _ = run_regions(CPU, *outs)
    assert nreg >= 1
    for e, c, lazy in zip(emu, cpu, outs):
        ref = lazy.numpy()
        assert e.shape == ref.shape and e.dtype == ref.dtype
        if exact:
            np.testing.assert_array_equal(e, c)
            np.testing.assert_array_equal(e, ref)
        else:
            np.testing.assert_allclose(e, c, rtol=rtol, atol=atol)
            np.testing.assert_allclose(e, ref, rtol=rtol, atol=atol)


def test_registered_with_cuda_source_and_device_arrays() -> None:
    assert EMU.name == "cuda-emulated" and EMU.language == "cuda" and EMU.available()
    assert "cuda-emulated" in backend.available() and not backend.host_memory(EMU)
    buf = EMU.empty((2, 3), np.dtype("float32"))
    assert type(buf) is EmulatedDeviceArray and EMU.is_buffer(buf)
    assert not EMU.is_buffer(np.zeros(3))
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.asarray(buf)  # device memory, as CuPy's: only explicit copies reach the host


RNG = np.random.default_rng(0)


def _f(*shape: int) -> lg.Array:
    return lg.asarray(RNG.standard_normal(shape).astype(np.float32))


def _i(*shape: int, lo: int = -50, hi: int = 50, dtype: str = "int32") -> lg.Array:
    return lg.asarray(RNG.integers(lo, hi, shape).astype(dtype))


def _adam_like() -> list[lg.Array]:
    p, g, m = _f(33, 9), _f(33, 9), _f(33, 9)
    v = lg.asarray(np.abs(RNG.standard_normal((33, 9))).astype(np.float32))
    m2 = 0.9 * m + 0.1 * g
    v2 = 0.999 * v + 0.001 * g * g
    return [m2, v2, p - 0.01 * m2 / (lg.sqrt(v2) + 1e-8)]


def _int64_uint8() -> list[lg.Array]:
    x = _i(6, 11, dtype="int64", lo=-(10**12), hi=10**12)
    y = _i(6, 11, dtype="uint8", lo=0, hi=255)
    return [x * 3 - (x >> 2), y + y, (y // 7).astype("int64") + x]


def _bool_logic() -> list[lg.Array]:
    x, y = _f(12, 40), _f(12, 40)
    return [(x > 0) & (y < 0.5), (x > 1).any(axis=1), (y > -2).all(axis=0)]


def _f64_3d() -> list[lg.Array]:
    x, y = lg.asarray(RNG.standard_normal((3, 1, 6))), lg.asarray(RNG.standard_normal((1, 4, 6)))
    return [x * y - (x + 1.5) / (y * y + 1.0)]


def _one_sized() -> list[lg.Array]:
    x, y = _f(1, 1), _f(1, 7)
    return [x * y, (x * y).sum(axis=1), (x * y).max(axis=0)]


def _chain() -> list[lg.Array]:
    x, w, b = _f(5, 7), _f(7), _f(5, 1)
    return [(x * w + b) - x / 3.0, lg.maximum(x, b) * 2.0]


# name -> (outputs builder, bit for bit: else within rounding, for float sums and libm calls)
CASES: dict[str, tuple[Callable[[], list[lg.Array]], bool]] = {
    "broadcast-chain": (_chain, True),
    "broadcast-3d-f64": (_f64_3d, True),
    "sum-each-axis": (lambda: (lambda x: [x.sum(axis=0), x.sum(axis=1), x.sum(axis=2)])(_f(4, 37, 6)), False),
    "max-min-each-axis": (
        lambda: (lambda x: [x.max(axis=0), x.min(axis=1), x.max(axis=2)])(_f(4, 37, 6)),
        True,
    ),
    "int-sum-each-axis": (
        lambda: (lambda x: [x.sum(axis=0), x.sum(axis=1), x.max(axis=1)])(_i(9, 300)),
        True,
    ),
    "mean-wide-rows": (lambda: (lambda x: [x.mean(axis=1), (x * x).sum(axis=0)])(_f(6, 700)), False),
    "softmax-logsumexp": (
        lambda: (lambda x: [lg.softmax(x, axis=1), lg.logsumexp(x, axis=1)])(_f(7, 300)),
        False,
    ),
    "softmax-axis0": (lambda: [lg.softmax(_f(300, 5), axis=0)], False),
    "adam-like": (_adam_like, True),
    "int-ops": (lambda: (lambda x: [(x // 3) % 5 + (x << 1), x * x - 7])(_i(8, 15)), True),
    "int64-uint8": (_int64_uint8, True),
    "bool-logic-any-all": (_bool_logic, True),
    "where-tanh-exp": (lambda: (lambda x: [lg.where(x > 0, lg.tanh(x), lg.exp(x) - 1.0)])(_f(10, 13)), False),
    "one-sized-dims": (_one_sized, False),
    "one-sized-rows": (lambda: (lambda x: [x.sum(axis=1), x.max(axis=0), x - 1.0])(_f(7, 1)), False),
    "zero-size-kept": (lambda: (lambda x: [x * 2.0 + 1.0, x.sum(axis=1)])(_f(0, 5)), True),
    "zero-size-reduced": (lambda: (lambda x: [x.sum(axis=1), (x > 0).any(axis=1)])(_f(5, 0)), True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_fused_regions_match_the_cpu_backend_and_numpy(name: str) -> None:
    build, exact = CASES[name]
    check(build(), exact)


def test_strided_views() -> None:
    x = _i(8, 15)
    v = x[::-2, 1::3]
    check([(v // 3) % 5 + (v << 1), v.sum(axis=1)], True)
    y = _f(9, 12)
    check([lg.softmax(y[1::2, ::-3], axis=1)], False)


# -- the programs tests/test_jit_cuda.py runs on a GPU -----------------------------------------------
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (64, 1000), (257, 33)])
def test_softmax_layernorm_gelu_as_in_the_gpu_tests(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(shape[1]).astype(np.float32)
    X, W = lg.asarray(x), lg.asarray(w)
    outs = [lg.softmax(X, axis=1), F.layer_norm(X, shape[1], W, W), F.gelu(X), X.sum(axis=0), X.max(axis=1)]
    for lazy in outs:
        (got,), _ = run_regions(EMU, lazy)
        np.testing.assert_allclose(got, lazy.numpy(), rtol=1e-4, atol=1e-5)


# -- the launcher and the emulation's own checks --------------------------------------------------
SCALARS = r"""extern "C" __global__ void lg_kernel(const float *__restrict__ a0, double *__restrict__ a1,
    int64_t n0, int64_t s0_0, double c1, int64_t c0) {
  for (int64_t i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i0 < n0; i0 += (int64_t)gridDim.x * blockDim.x)
    a1[i0] = a0[i0 * s0_0] * c1 + (double)c0 + 1000.0 * blockIdx.x;
}
"""


def test_the_launcher_passes_the_kernel_abi_and_the_launch_shape() -> None:
    prog = EMU.load(EMU.compile(SCALARS), "lg_kernel", (("f", 1), ("i", 0)))
    x = np.arange(10, dtype=np.float32)
    y = np.zeros(5)
    prog([x, y], [5, 2], [0.0, 0.5], [7, 0], grid=3, block=2)
    # grid-stride: element i is first reached by block i // 2
    np.testing.assert_array_equal(y, x[::2] * 0.5 + 7 + 1000.0 * (np.arange(5) // 2))


DIVERGED = r"""extern "C" __global__ void lg_kernel(float *__restrict__ a0, int64_t n0) {
  __shared__ float sh[4];
  if (threadIdx.x < n0) { sh[0] = 1.0f; __syncthreads(); }
  a0[threadIdx.x] = sh[0];
}
"""

SHUFFLE = r"""extern "C" __global__ void lg_kernel(float *__restrict__ a0, int64_t n0) {
  float v = (float)threadIdx.x;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x >= n0) v += __shfl_xor_sync(0xffffffffu, v, 1);
  __syncthreads();
  a0[blockIdx.x * blockDim.x + threadIdx.x] = v;
}
"""


def test_shuffles_exchange_within_warps_and_divergence_is_an_error() -> None:
    prog = EMU.load(EMU.compile(SHUFFLE))
    a = np.zeros(128, dtype=np.float32)
    prog([a], [64], grid=2, block=64)
    lanes = np.arange(64).reshape(2, 32)
    np.testing.assert_array_equal(
        a.reshape(4, 32), np.repeat(lanes.sum(axis=1), 32).reshape(2, 32)[[0, 1, 0, 1]]
    )
    with pytest.raises(RuntimeError, match="divergent warp"):
        prog([a], [16], grid=1, block=64)
    with pytest.raises(RuntimeError, match="__syncthreads not reached"):
        EMU.load(EMU.compile(DIVERGED))([np.zeros(64, dtype=np.float32)], [8], grid=1, block=64)
    with pytest.raises(RuntimeError, match="launch shape"):
        prog([a], [64], grid=1, block=2048)


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint64, np.float32, np.float64])
def test_casts_to_bool_inside_a_kernel(dtype: type) -> None:
    """A bool cast inside a fused expression: operator templates say `_Bool` (C's), which CUDA
    C++ does not know (NVRTC 13 and the emulator's C++ compiler refused it)."""
    a = np.array([0, 1, 2, 0, 5, 7], dtype=dtype)
    x = lg.asarray(a, device="cuda-emulated")
    np.testing.assert_array_equal((x.astype(bool) * 1).numpy(), a.astype(bool) * 1)
    np.testing.assert_array_equal((x.astype(bool) | (x > 3)).numpy(), a.astype(bool) | (a > 3))
