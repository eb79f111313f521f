"""The backend seam (jit/backend/) used directly: the CPU backend's allocator, compiler, loader
and library calls against NumPy and the reference kernels in ops/, the CUDA backend's compile
step through NVRTC (no GPU needed, nothing launched), and a further backend slotting in."""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest

import lazygraph as lg
from jit import backend, compile_c, generate, nvrtc
from jit import layout as lay
from jit.backend.cpu import CpuBackend
from jit.compile_c import CompileError
from jit.fusion import find_regions
from jit.kernel import FusedKernel
from ops.base import REGISTRY
from ops.settings import SETTINGS

needs_cc = pytest.mark.skipif(not compile_c.available(), reason="needs a C compiler")
needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="pynvrtc / libnvrtc not installed")

CPU = backend.get("cpu")


def region_of(*arrays: lg.Array):  # noqa: ANN201
    """The one fused region of a recorded program, and its inputs' values."""
    roots = [a.node for a in arrays]
    order: list = []
    seen: set[int] = set()

    def visit(n) -> None:  # noqa: ANN001
        if id(n) in seen or n.buffer is not None:
            return
        seen.add(id(n))
        for c in n.inputs:
            visit(c)
        order.append(n)

    for r in roots:
        visit(r)
    (region,) = find_regions(order, roots)
    return region, [c.buffer for c in region.inputs]


# -- registry -------------------------------------------------------------------------------------
def test_registry_builds_each_backend_once_and_names_the_known_ones() -> None:
    assert backend.get("cpu") is CPU and CPU.name == "cpu" and CPU.language == "c"
    cuda = backend.get("cuda")
    assert cuda.name == "cuda" and cuda.language == "cuda"
    with pytest.raises(ValueError, match=r"no backend 'tpu' \(known: cpu, cuda"):
        backend.get("tpu")
    assert ("cpu" in backend.available()) == compile_c.available()


# -- allocator ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "complex64"])
def test_cpu_allocate_and_copy_round_trip(dtype: str) -> None:
    buf = CPU.empty((3, 4), np.dtype(dtype))
    assert buf.shape == (3, 4) and buf.dtype == dtype and buf.flags.c_contiguous and CPU.is_buffer(buf)
    host = (np.arange(12) % 5).astype(dtype).reshape(3, 4)
    dev = CPU.to_device(host)
    back = CPU.to_host(dev)
    assert back.dtype == host.dtype
    np.testing.assert_array_equal(back, host)
    assert CPU.may_share(dev[1:], dev[:2]) and not CPU.may_share(dev, buf)
    assert not CPU.is_buffer([1, 2]) and not CPU.is_buffer(np.ma.masked_array([1]))


# -- compiler, loader, runner ---------------------------------------------------------------------
ABI_KERNEL = r"""#include <stdint.h>
void lg_kernel(void **ptrs, const int64_t *dims, const double *fs, const int64_t *is) {
  const float *x = (const float *)ptrs[0]; float *y = (float *)ptrs[1]; int64_t *z = (int64_t *)ptrs[2];
  for (int64_t i = 0; i < dims[0]; i++) { y[i] = x[i * dims[1]] * (float)fs[1] + (float)is[0]; }
  if (z) z[0] = dims[0] + dims[1];
}
"""


@needs_cc
def test_cpu_compile_load_launch_with_the_kernel_abi() -> None:
    binary = CPU.compile(ABI_KERNEL, "abi")
    assert binary.kind == "so" and binary.data and len(binary.key) == 64
    assert CPU.compile(ABI_KERNEL).key == binary.key  # the store's content key
    prog = CPU.load(binary)
    x = np.arange(12, dtype=np.float32)
    y = np.zeros(4, np.float32)
    z = np.zeros(1, np.int64)
    prog([x, y, z], [4, 3], [0.0, 2.5], [7, 0])  # scalar slots: fs[1] a float, is_[0] an int
    np.testing.assert_array_equal(y, x[::3] * np.float32(2.5) + 7)
    assert z[0] == 7
    prog([x, y, None], [2, 1], [0.0, -1.0], [1])  # None: a null pointer
    np.testing.assert_array_equal(y[:2], [1.0, 0.0])


@needs_cc
def test_cpu_compile_errors_show_the_numbered_source() -> None:
    with pytest.raises(CompileError) as e:
        CPU.compile("void lg_kernel(void) { nonsense; }\n")
    assert "error" in str(e.value) and "   1  void lg_kernel(void) { nonsense; }" in str(e.value)


@needs_cc
def test_a_generated_kernel_compiles_loads_and_runs_through_the_interface() -> None:
    xn = np.linspace(-2, 2, 35, dtype=np.float32).reshape(7, 5)
    x = lg.asarray(xn)
    region, values = region_of(x[:, ::2] * 3.0 + 1.0)  # a strided view, two float scalars
    k = FusedKernel(region)
    arrays = [np.asarray(v) for (kind, _), v in zip(k.spec.arg_of_input, values) if kind == "array"]
    out = CPU.empty((7, 3), np.dtype(np.float32))
    layout, sizes, strides = k.layout_for(arrays)
    ints = lay.loop_args(k.spec, layout, sizes, lay.axis_strides(k.spec, arrays + [out]))
    gen = generate.GENERATORS[CPU.language]
    src = gen.render(k.spec, layout, gen.mode(layout, ints))
    assert "lg_kernel" in src.text and src.scalars == () and src.launch(ints) == (1, 1)
    fs = [0.0] * len(k.spec.scalars)
    is_ = [0] * len(k.spec.scalars)
    for (kind, i), v, dt in zip(k.spec.arg_of_input, values, k.in_dtypes):
        if kind == "scalar":
            fs[i] = float(v)
    CPU.load(CPU.compile(src.text))(arrays + [out], ints, fs, is_)
    np.testing.assert_array_equal(out, k.fallback(tuple(values))[0])
    assert k(*values, backend=CPU)[0].tobytes() == out.tobytes()


@needs_cc
def test_a_further_backend_slots_in_and_runs_fused_kernels() -> None:
    """A backend of its own (here the CPU's with a counting allocator) runs FusedKernel unchanged."""

    class Counting(CpuBackend):
        name = "cpu-counting"

        def __init__(self) -> None:
            super().__init__()
            self.allocated = 0

        def empty(self, shape, dtype):  # noqa: ANN001, ANN202
            self.allocated += 1
            return super().empty(shape, dtype)

    backend.register("cpu-counting", Counting)
    try:
        be = backend.get("cpu-counting")
        region, values = region_of(lg.tanh(lg.asarray(np.arange(6.0).reshape(2, 3))) - 0.5)
        k = FusedKernel(region)
        (got,) = k(*values, backend=be)
        assert be.allocated == 1 and any(key[0] == "cpu-counting" for key in k.variants)
        # compiled transcendentals are within a few units in the last place of NumPy's
        np.testing.assert_array_max_ulp(got, np.tanh(np.arange(6.0).reshape(2, 3)) - 0.5, maxulp=2)
        with pytest.raises(ValueError, match=r"out= is None list, the output is \(2, 3\) float64"):
            k(*values, out=[1, 2], backend=be)
    finally:
        backend.register("cpu-counting", CpuBackend)


# -- GEMM -----------------------------------------------------------------------------------------
def _operands(rng: np.random.Generator, dtype: str, shape_a: tuple, shape_b: tuple, strided: bool):  # noqa: ANN202
    def make(shape: tuple) -> np.ndarray:
        if dtype.startswith("int"):
            big = rng.integers(-9, 9, size=(shape[0] * 2, shape[1] * 3)).astype(dtype)
        else:
            big = rng.standard_normal((shape[0] * 2, shape[1] * 3)).astype(dtype)
        return big[::2, 1::3] if strided else np.ascontiguousarray(big[: shape[0], : shape[1]])

    return make(shape_a), make(shape_b)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("strided", [False, True])
def test_gemm_every_transpose_combination_matches_numpy_bit_for_bit(dtype: str, strided: bool) -> None:
    rng = np.random.default_rng(7)
    m, k, n = 13, 9, 6
    matmul = REGISTRY["matmul"].kernel
    for ta, tb in itertools.product([False, True], repeat=2):
        a, b = _operands(rng, dtype, (k, m) if ta else (m, k), (n, k) if tb else (k, n), strided)
        want = matmul(a.T if ta else a, b.T if tb else b)  # the operator on the transposed views
        got = CPU.gemm(a, b, trans_a=ta, trans_b=tb)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (ta, tb)
        out = np.full((m, n), 99, dtype=want.dtype)
        assert CPU.gemm(a, b, trans_a=ta, trans_b=tb, out=out) is out
        assert out.tobytes() == want.tobytes()
        # the flags mean transposes: the same product as of materialised transposes
        dense = matmul(np.ascontiguousarray(a.T) if ta else a, np.ascontiguousarray(b.T) if tb else b)
        if dtype.startswith("int"):
            np.testing.assert_array_equal(got, dense)
        else:
            np.testing.assert_allclose(got, dense, rtol=1e-5 if dtype == "float32" else 1e-12)


def test_gemm_batched_and_the_epilogue_in_place() -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 5, 3)).astype(np.float32)
    b = rng.standard_normal((4, 5, 2)).astype(np.float32)
    bias = rng.standard_normal(2).astype(np.float32)
    y = CPU.gemm(a, b, trans_a=True)
    want = np.matmul(np.swapaxes(a, -1, -2), b)
    assert y.tobytes() == want.tobytes()
    assert CPU.epilogue(y, bias, relu=True) is y
    assert y.tobytes() == np.maximum(want + bias, 0).tobytes()
    assert CPU.epilogue(y).tobytes() == y.tobytes()


# -- convolution and pooling ----------------------------------------------------------------------
CONV_CASES = [
    # (x shape, w shape, stride, padding, dilation, groups)
    ((2, 3, 9, 8), (8, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1),  # im2col chunks (window >= channels)
    ((2, 1, 10, 9), (6, 1, 2, 2), (2, 1), (0, 1), (1, 2), 1),  # direct (short window)
    ((1, 4, 7, 7), (4, 2, 3, 3), (1, 1), (1, 1), (1, 1), 2),  # groups: always the reference
]


@pytest.mark.parametrize("case", CONV_CASES, ids=["chunks", "direct", "groups"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv2d_and_its_gradients_against_the_reference_kernels(case: tuple, dtype: str) -> None:
    xs, ws, s, p, d, groups = case
    rng = np.random.default_rng(11)
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal(ws).astype(dtype)
    b = rng.standard_normal(ws[0]).astype(dtype)
    attrs = {"stride": s, "padding": p, "dilation": d, "groups": groups}
    y = REGISTRY["conv2d"].kernel(x, w, b, **attrs)
    g = rng.standard_normal(y.shape).astype(dtype)
    refs = {
        "conv2d": ((x, w, b), y),
        "conv2d_grad_input": ((g, w, x), REGISTRY["conv2d_grad_input"].kernel(g, w, x, **attrs)),
        "conv2d_grad_weight": ((g, x, w), REGISTRY["conv2d_grad_weight"].kernel(g, x, w, **attrs)),
    }
    tol = {"rtol": 2e-4, "atol": 2e-4} if dtype == "float32" else {"rtol": 1e-10, "atol": 1e-10}
    for name, (args, want) in refs.items():
        call = getattr(CPU, name)
        exact = call(*args, **attrs)  # exact: the reference kernel's bits
        assert exact.dtype == want.dtype and exact.tobytes() == np.ascontiguousarray(want).tobytes(), name
        fast = call(*args, exact=False, **attrs)  # compiled where it applies: rounding differs
        assert fast.shape == want.shape and fast.dtype == want.dtype, name
        np.testing.assert_allclose(fast, want, **tol, err_msg=name)
        out = np.empty(want.shape, want.dtype)
        got = call(*args, out=out, **attrs)
        assert got is out and out.tobytes() == np.ascontiguousarray(want).tobytes(), name
        with SETTINGS.override(jit=False):  # compiled kernels off: the reference, inexact or not
            assert call(*args, exact=False, **attrs).tobytes() == np.ascontiguousarray(want).tobytes()


@pytest.mark.parametrize("dtype", ["float32", "int16", "bool"])
def test_max_pooling_and_its_gradient_match_the_reference_bit_for_bit(dtype: str) -> None:
    rng = np.random.default_rng(5)
    x = (
        rng.integers(-3, 3, size=(2, 3, 9, 7)) if dtype != "bool" else rng.random((2, 3, 9, 7)) < 0.5
    ).astype(dtype)
    if dtype == "float32":
        x[0, 0, 1, 1], x[1, 2, 4, 3] = np.nan, -np.inf
    attrs = {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 1), "dilation": (1, 2)}
    want = REGISTRY["max_pool2d"].kernel(x, **attrs)
    for exact in (True, False):
        got = CPU.max_pool2d(x, exact=exact, **attrs)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    out = np.empty(want.shape, want.dtype)
    assert CPU.max_pool2d(x, out=out, **attrs) is out and out.tobytes() == want.tobytes()
    if dtype == "bool":
        return  # no gradient of a bool pool
    g = rng.standard_normal(want.shape).astype(np.float32)
    gwant = REGISTRY["max_pool2d_grad"].kernel(g, x, want, **attrs)
    got = CPU.max_pool2d_grad(g, x, want, **attrs)
    assert got.dtype == gwant.dtype and got.tobytes() == gwant.tobytes()
    gout = np.empty(gwant.shape, gwant.dtype)
    assert CPU.max_pool2d_grad(g, x, None, out=gout, **attrs) is gout and gout.tobytes() == gwant.tobytes()


def test_library_lookup_by_operator_name() -> None:
    assert CPU.library("matmul") == CPU.gemm and CPU.library("conv2d") == CPU.conv2d
    assert CPU.library("max_pool2d_grad") == CPU.max_pool2d_grad and CPU.library("exp") is None


# -- the CUDA backend's compile step (NVRTC, no GPU) ----------------------------------------------
@needs_nvrtc
def test_cuda_backend_compiles_a_generated_kernel_with_nvrtc() -> None:
    cupy_before = "cupy" in sys.modules
    xi = lg.asarray(np.arange(-6, 6, dtype=np.int32).reshape(3, 4))
    # an int scalar (the shift) before a float one (the scale): parameters in declaration order
    region, values = region_of((xi << 2) * 1.5)
    k = FusedKernel(region)
    arrays = [np.asarray(v) for (kind, _), v in zip(k.spec.arg_of_input, values) if kind == "array"]
    layout, _, _ = k.layout_for(arrays)
    src = k.source(layout, "cuda")
    assert src.scalars == (("i", 0), ("f", 1))
    assert src.text.index("int64_t c0") < src.text.index("double c1")
    cuda = backend.get("cuda")
    binary = cuda.compile(src.text, "test_kernel")
    assert binary.data and binary.kind in ("ptx", "cubin") and len(binary.key) == 64
    if binary.kind == "ptx":
        assert b".entry lg_kernel" in binary.data
    with SETTINGS.override(fast_math=True):  # --fmad=true: a binary of its own
        assert cuda.compile(src.text).key != binary.key
    assert cuda.compile(src.text).key == binary.key
    if not cupy_before and cuda.device_arch() is None:
        assert "cupy" not in sys.modules and "jit.backend.cuda_cupy" not in sys.modules
    grid, block = src.launch(lay.loop_args(k.spec, layout, *k.layout_for(arrays)[1:]))
    assert grid >= 1 and block in (1, 256)


@needs_nvrtc
def test_cuda_compile_errors_show_the_numbered_source() -> None:
    with pytest.raises(CompileError, match="   1  extern"):
        backend.get("cuda").compile('extern "C" __global__ void lg_kernel() { undefined_thing(); }\n')


def test_cuda_programs_pass_the_kernel_abi_as_typed_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    """The packing a CUDA launch gets (recorded at the CuPy layer's edge, nothing launched)."""
    import types

    from jit.backend import cuda

    launches: list = []
    layer = types.SimpleNamespace(
        launch=lambda fn, grid, block, args: launches.append((fn, grid, block, args))
    )
    monkeypatch.setattr(cuda, "_rt", lambda: layer)
    prog = cuda.CudaProgram("fn", (("i", 1), ("f", 0)))
    a, b = np.zeros(2), np.zeros(3)
    prog([a, b], [5, 7], [2.5, 0.0], [0, -3], grid=4, block=256)
    ((fn, grid, block, args),) = launches
    assert (fn, grid, block) == ("fn", 4, 256)
    assert args[0] is a and args[1] is b
    assert [type(v) for v in args[2:]] == [np.int64, np.int64, np.int64, np.float64]
    assert [v.item() for v in args[2:]] == [5, 7, -3, 2.5]
