"""CUDA window kernels (jit/window_cuda.py): pooling, convolution and the softmax family on a device.

Every property takes a `dev` fixture: "cuda-emulated" (the CUDA kernels run on the host with
their real launch shape; sizes stay small) and "cuda" (marked `cuda`: `pytest -m cuda` runs it
on a real GPU; skipped without one). Values are checked against the CPU device and against
NumPy loops written here; gradients against finite differences; and each test checks that the
device launched the new kernels (window_cuda.LAUNCHES), not a host fallback.
"""

from __future__ import annotations

import importlib.util
import io
import warnings
from pathlib import Path

import numpy as np
import pytest

import lazygraph as lg
import lazygraph.nn.functional as F
from jit import backend, nvrtc
from jit import window_cuda as wc
from jit import window_cuda_calls as wcc
from jit.backend import cuda_emulated

EMU = "cuda-emulated"
needs_cxx = pytest.mark.skipif(cuda_emulated.toolchain() is None, reason="needs a C++ compiler")


@pytest.fixture(params=[pytest.param(EMU, marks=needs_cxx), pytest.param("cuda", marks=pytest.mark.cuda)])
def dev(request: pytest.FixtureRequest) -> str:
    """The CUDA device a property runs on."""
    return request.param


def _launched(dev: str, *kernels: str) -> dict[str, int]:
    return {k: wc.LAUNCHES[(dev, k)] for k in kernels}


def _im2col_path(dev: str) -> bool:
    """Whether convolutions on `dev` run the im2col kernels (no cuDNN: always when emulated)."""
    return backend.get(dev).cudnn() is None


def _pad(x: np.ndarray, p: tuple, fill: float) -> np.ndarray:
    return np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])), constant_values=fill)


def np_pool(x: np.ndarray, k: tuple, s: tuple, p: tuple, d: tuple, mode: str, count_pad: bool = True):
    """Max or average pooling by explicit loops over windows (the test's own reference)."""
    n, c, h, w = x.shape
    ho = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    wo = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    xp = _pad(x.astype(np.float64), p, -np.inf if mode == "max" else 0.0)
    real = _pad(np.ones((1, 1, h, w)), p, 0.0)
    y = np.empty((n, c, ho, wo))
    for i in range(ho):
        for j in range(wo):
            win = xp[
                :,
                :,
                i * s[0] : i * s[0] + d[0] * (k[0] - 1) + 1 : d[0],
                j * s[1] : j * s[1] + d[1] * (k[1] - 1) + 1 : d[1],
            ]
            if mode == "max":
                y[:, :, i, j] = win.max(axis=(2, 3))
            else:
                cnt = (
                    k[0] * k[1]
                    if count_pad
                    else real[0, 0, i * s[0] : i * s[0] + k[0], j * s[1] : j * s[1] + k[1]].sum()
                )
                y[:, :, i, j] = win.sum(axis=(2, 3)) / cnt
    return y


def np_conv(x: np.ndarray, w: np.ndarray, b, s: tuple, p: tuple, d: tuple, groups: int) -> np.ndarray:
    """Grouped cross-correlation by a loop over kernel offsets (einsum per offset)."""
    n, c, h, wd = x.shape
    o, cp, kh, kw = w.shape
    ho = (h + 2 * p[0] - d[0] * (kh - 1) - 1) // s[0] + 1
    wo = (wd + 2 * p[1] - d[1] * (kw - 1) - 1) // s[1] + 1
    xp = _pad(x.astype(np.float64), p, 0.0)
    y = np.zeros((n, o, ho, wo))
    og = o // groups
    for i in range(kh):
        for j in range(kw):
            patch = xp[
                :,
                :,
                i * d[0] : i * d[0] + s[0] * (ho - 1) + 1 : s[0],
                j * d[1] : j * d[1] + s[1] * (wo - 1) + 1 : s[1],
            ]
            for g in range(groups):
                y[:, g * og : (g + 1) * og] += np.einsum(
                    "nchw,oc->nohw", patch[:, g * cp : (g + 1) * cp], w[g * og : (g + 1) * og, :, i, j]
                )
    return y if b is None else y + np.asarray(b)[None, :, None, None]


POOLS = [  # kernel, stride, padding, dilation (max only)
    ((2, 2), (2, 2), (0, 0), (1, 1)),
    ((3, 3), (2, 1), (1, 1), (1, 1)),
    ((3, 2), (1, 2), (1, 0), (2, 1)),
]


# each (geometry, dtype) compiles its own kernels: pairs, not the product, keep the suite fast
@pytest.mark.parametrize(
    ("geo", "dtype"),
    [(POOLS[0], np.float32), (POOLS[1], np.float64), (POOLS[2], np.int32), (POOLS[2], np.float32)],
)
def test_max_pool_forward_and_gradient_match_cpu_and_numpy(dev: str, geo: tuple, dtype: type) -> None:
    k, s, p, d = geo
    rng = np.random.default_rng(sum(k) + sum(s))
    xs = (rng.standard_normal((2, 3, 7, 8)) * 8).astype(dtype)
    xs[0, 0, 1, 1] = xs[0, 0, 1, 2]  # a tie: the first maximum takes the gradient
    before = _launched(dev, "max_pool", "max_pool_grad")
    y = F.max_pool2d(lg.asarray(xs, device=dev), k, s, p, d).numpy()
    np.testing.assert_array_equal(y, F.max_pool2d(lg.asarray(xs), k, s, p, d).numpy())
    np.testing.assert_array_equal(y, np_pool(xs, k, s, p, d, "max").astype(dtype))
    if dtype != np.int32:
        x = lg.asarray(xs, device=dev, requires_grad=True)
        xc = lg.asarray(xs, requires_grad=True)
        gs = rng.standard_normal(y.shape).astype(dtype)
        (F.max_pool2d(x, k, s, p, d) * lg.asarray(gs, device=dev)).sum().backward()
        (F.max_pool2d(xc, k, s, p, d) * lg.asarray(gs)).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), xc.grad.numpy())  # the reference's bits
    after = _launched(dev, "max_pool", "max_pool_grad")
    assert after["max_pool"] > before["max_pool"]
    assert dtype == np.int32 or after["max_pool_grad"] > before["max_pool_grad"]


def test_max_pool_nan_and_padding_semantics(dev: str) -> None:
    xs = np.array([[[[1.0, np.nan, 3.0], [-np.inf, -np.inf, 2.0], [np.nan, 0.0, -1.0]]]])
    x = lg.asarray(xs, device=dev, requires_grad=True)
    xc = lg.asarray(xs, requires_grad=True)
    for a in (x, xc):
        F.max_pool2d(a, 2, 1, 1).sum().backward()
    np.testing.assert_array_equal(F.max_pool2d(x, 2, 1, 1).numpy(), F.max_pool2d(xc, 2, 1, 1).numpy())
    np.testing.assert_array_equal(x.grad.numpy(), xc.grad.numpy())


@pytest.mark.parametrize(
    ("geo", "dtype", "count_pad"),
    [
        (POOLS[0], np.float32, True),
        (POOLS[1], np.float64, True),
        (POOLS[1], np.float32, False),
        (POOLS[1], np.int16, False),
    ],
)
def test_avg_pool_forward_and_gradient_match_cpu_and_numpy(
    dev: str, geo: tuple, dtype: type, count_pad: bool
) -> None:
    k, s, p, _ = geo
    rng = np.random.default_rng(3)
    xs = (rng.standard_normal((2, 2, 7, 6)) * 8).astype(dtype)
    before = _launched(dev, "avg_pool", "avg_pool_grad")
    y = F.avg_pool2d(lg.asarray(xs, device=dev), k, s, p, count_include_pad=count_pad).numpy()
    yc = F.avg_pool2d(lg.asarray(xs), k, s, p, count_include_pad=count_pad).numpy()
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert y.dtype == yc.dtype
    np.testing.assert_allclose(y, yc, rtol=tol, atol=tol)
    np.testing.assert_allclose(y, np_pool(xs, k, s, p, (1, 1), "avg", count_pad), rtol=tol, atol=tol)
    if dtype != np.int16:
        x = lg.asarray(xs, device=dev, requires_grad=True)
        xc = lg.asarray(xs, requires_grad=True)
        gs = rng.standard_normal(y.shape).astype(dtype)
        (F.avg_pool2d(x, k, s, p, count_include_pad=count_pad) * lg.asarray(gs, device=dev)).sum().backward()
        (F.avg_pool2d(xc, k, s, p, count_include_pad=count_pad) * lg.asarray(gs)).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), xc.grad.numpy(), rtol=tol, atol=tol)
    after = _launched(dev, "avg_pool", "avg_pool_grad")
    assert after["avg_pool"] > before["avg_pool"]
    assert dtype == np.int16 or after["avg_pool_grad"] > before["avg_pool_grad"]


CONVS = [  # in channels, out channels, kernel, stride, padding, dilation, groups (the MNIST
    # test covers one group, stride 1, "same" padding)
    (4, 6, (3, 2), (2, 1), (1, 0), (1, 2), 2),
    (6, 6, (2, 2), (2, 2), (0, 1), (1, 1), 3),
]


@pytest.mark.parametrize(("cfg", "dtype"), [(CONVS[0], np.float64), (CONVS[1], np.float32)])
def test_conv_forward_and_gradients_match_cpu_and_numpy(dev: str, cfg: tuple, dtype: type) -> None:
    c, o, k, s, p, d, groups = cfg
    rng = np.random.default_rng(c + o)
    xs = rng.standard_normal((2, c, 7, 6)).astype(dtype)
    ws = rng.standard_normal((o, c // groups, *k)).astype(dtype)
    bs = rng.standard_normal(o).astype(dtype)
    kernels = ("im2col", "col2im", "rows_to_nchw", "nchw_to_rows", "mat_to_weight")
    before = _launched(dev, *kernels)
    out = {}
    for where in (dev, "cpu"):
        # x: data (not static, so constant folding leaves the convolutions to the device) plus
        # zeros that require grad, whose gradient is x's
        e = lg.asarray(np.zeros_like(xs), device=where, requires_grad=True)
        x = lg.asarray(xs, device=where) + e
        w = lg.asarray(ws, device=where, requires_grad=True)
        b = lg.asarray(bs, device=where, requires_grad=True)
        y = F.conv2d(x, w, b, stride=s, padding=p, dilation=d, groups=groups)
        (y * y).sum().backward()
        out[where] = (y.numpy(), e.grad.numpy(), w.grad.numpy(), b.grad.numpy())
    tol = 2e-4 if dtype == np.float32 else 1e-10
    for got, want in zip(out[dev], out["cpu"]):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(out[dev][0], np_conv(xs, ws, bs, s, p, d, groups), rtol=tol, atol=tol)
    after = _launched(dev, *kernels)
    if _im2col_path(dev):
        assert all(after[kn] > before[kn] for kn in kernels), (before, after)


def _check_finite_differences(f, x: np.ndarray, grad: np.ndarray, picks: int = 2, eps: float = 1e-6) -> None:
    """Central differences of f at `picks` random elements of x against those of `grad`."""
    for i in np.random.default_rng(x.size).choice(x.size, picks, replace=False):
        e = np.zeros(x.size)
        e[i] = eps
        e = e.reshape(x.shape)
        fd = (f(x + e) - f(x - e)) / (2 * eps)
        np.testing.assert_allclose(grad.flat[i], fd, rtol=1e-5, atol=1e-6)


def test_gradients_match_finite_differences(dev: str) -> None:
    rng = np.random.default_rng(7)
    xs = rng.standard_normal((1, 2, 5, 5))
    ws = rng.standard_normal((2, 2, 3, 3)) * 0.5

    def loss_of(xv: np.ndarray, wv: np.ndarray, grad: bool = False):
        e = lg.asarray(np.zeros_like(xv), device=dev, requires_grad=grad)  # e.grad is x's gradient
        x = lg.asarray(xv, device=dev) + e
        w = lg.asarray(wv, device=dev, requires_grad=grad)
        h = F.conv2d(x, w, padding=1, stride=(1, 2))
        h = F.avg_pool2d(h, 2, 1, 1, count_include_pad=False)
        loss = (F.max_pool2d(h, 2, 1) ** 2).sum()
        return (loss, e, w) if grad else float(loss)

    loss, x, w = loss_of(xs, ws, grad=True)
    loss.backward()
    _check_finite_differences(lambda v: loss_of(v, ws), xs, x.grad.numpy())
    _check_finite_differences(lambda v: loss_of(xs, v), ws, w.grad.numpy())


class _NoCudnnEmulated(cuda_emulated.CudaEmulatedBackend):
    """The emulated device playing a CUDA backend whose cuDNN is missing."""

    name = "cuda-emulated-nocudnn"
    expects_cudnn = True

    def cudnn_missing_reason(self) -> str:
        return "libcudnn.so.9 not found (test)"


@needs_cxx
def test_missing_cudnn_warns_once_and_convolves_with_im2col() -> None:
    be = _NoCudnnEmulated()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    attrs = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1}
    wcc._warned.discard(be.name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        xd, wd = be.to_device(x), be.to_device(w)
        ys = [be.to_host(be.conv2d(xd, wd, None, exact=False, **attrs)) for _ in range(3)]
        be.conv2d_grad_weight(be.to_device(ys[0]), xd, wd, exact=False, **attrs)
    mine = [c for c in caught if issubclass(c.category, wcc.CudnnMissingWarning)]
    assert len(mine) == 1
    text = str(mine[0].message)
    assert "nvidia-cudnn-cu12" in text and "libcudnn.so.9" in text and be.name in text
    for y in ys:
        np.testing.assert_allclose(y, np_conv(x, w, None, (1, 1), (1, 1), (1, 1), 1), rtol=1e-5, atol=1e-5)
    assert wc.LAUNCHES[(be.name, "im2col")] >= 4


@needs_cxx
def test_unsupported_dtypes_use_the_host_path() -> None:
    xs = np.random.default_rng(1).standard_normal((1, 2, 4, 4)).astype(np.float16)
    before = wc.LAUNCHES[(EMU, "max_pool")]
    y = F.max_pool2d(lg.asarray(xs, device=EMU), 2).numpy()
    np.testing.assert_array_equal(y, F.max_pool2d(lg.asarray(xs), 2).numpy())
    assert wc.LAUNCHES[(EMU, "max_pool")] == before  # float16: the CPU backend's kernel
    assert not wc.supported("max_pool2d", [np.dtype(np.float16)])


@pytest.mark.skipif(not nvrtc.available(), reason="needs NVRTC")
def test_every_window_kernel_compiles_with_nvrtc() -> None:
    geo = ((3, 3), (2, 1), (1, 1), (1, 2))
    f4, f8 = np.dtype(np.float32), np.dtype(np.float64)
    sources = [
        wc._max_pool_source(f4, False, *geo),
        wc._max_pool_source(np.dtype(np.int8), True, *geo),
        wc._max_pool_source(np.dtype(np.uint64), False, *geo),
        wc._max_pool_grad_source(f8, *geo),
        wc._avg_pool_source(np.dtype(np.int32), f8, False, *geo[:3]),
        wc._avg_pool_grad_source(f4, True, *geo[:3]),
        wc._im2col_source(f4, *geo),
        wc._col2im_source(f8, *geo),
        wc._rows_to_nchw_source(f4, True),
        wc._nchw_to_rows_source(f8),
        wc._weight_to_mat_source(f4),
        wc._mat_to_weight_source(f8),
    ]
    for src in sources:
        assert nvrtc.compile_cuda(src, "window.cu", device=None).data


def _steps(arr: lg.Array, dev: str) -> str:
    buf = io.StringIO()
    with backend.running(dev):
        lg.explain(arr, file=buf)
    return buf.getvalue().split("Q = ", 1)[1]


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "cross_entropy_probs", "cross_entropy_grad"])
def test_softmax_family_is_fused_kernels_on_the_device(dev: str, name: str) -> None:
    rng = np.random.default_rng(2)
    xs = rng.standard_normal((5, 11))
    qs = rng.dirichlet(np.ones(11), size=5)

    def run(where: str):
        e = lg.asarray(np.zeros_like(xs), device=where, requires_grad=True)
        x = lg.asarray(xs, device=where) + e  # data: not folded as a constant
        q = lg.asarray(qs, device=where)
        if name == "softmax":
            return lg.softmax(x, axis=1), None
        if name == "log_softmax":
            return lg.log_softmax(x, axis=1), None
        loss = F.cross_entropy(x, q, reduction="none")
        if name == "cross_entropy_probs":
            return loss, None
        (loss * lg.asarray(np.arange(1.0, 6.0), device=where)).sum().backward()
        return e.grad, None

    got, _ = run(dev)
    steps = _steps(got, dev)
    ops = [
        line.split("=", 1)[1].split("(")[0].split()[0] for line in steps.splitlines() if line.startswith("%")
    ]
    # inputs, views and the backward pass's seed (a fill) aside, every step is a fused kernel
    computed = [o for o in ops if o not in ("buffer", "scalar", "view", "full")]
    assert computed and all(o == "jit_region" for o in computed), steps  # no host step
    want = run("cpu")[0].numpy()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)
    e = np.exp(xs - xs.max(1, keepdims=True))
    p = e / e.sum(1, keepdims=True)
    ref = {
        "softmax": p,
        "log_softmax": np.log(p),
        "cross_entropy_probs": -(qs * np.log(p)).sum(1),
        "cross_entropy_grad": (p - qs) * np.arange(1.0, 6.0)[:, None],
    }[name]
    np.testing.assert_allclose(want, ref, rtol=1e-10, atol=1e-12)


def test_mnist_cnn_training_step_matches_cpu(dev: str) -> None:
    """examples/train_mnist.py's CNN (small batch): one SGD step, loss and parameters as on the CPU."""
    path = Path(__file__).resolve().parent.parent / "examples" / "train_mnist.py"
    spec = importlib.util.spec_from_file_location("train_mnist", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    dali_cnn = example.dali_cnn

    rng = np.random.default_rng(4)
    xs = rng.standard_normal((2, 1, 28, 28)).astype(np.float32)
    ys = np.array([3, 7])
    out = {}
    for where in (dev, "cpu"):
        lg.manual_seed(0)
        model = dali_cnn().to(where)
        opt = lg.optim.SGD(model.parameters(), lr=0.05)
        loss = F.cross_entropy(model(lg.asarray(xs, device=where)), lg.asarray(ys, device=where))
        opt.zero_grad()
        loss.backward()
        opt.step()
        out[where] = (float(loss), {k: np.asarray(v) for k, v in model.state_dict().items()})
    np.testing.assert_allclose(out[dev][0], out["cpu"][0], rtol=1e-5)
    for k, v in out["cpu"][1].items():
        np.testing.assert_allclose(out[dev][1][k], v, rtol=1e-4, atol=1e-5, err_msg=k)
    assert wc.LAUNCHES[(dev, "max_pool_grad")]
    assert wc.LAUNCHES[(dev, "im2col")] or not _im2col_path(dev)


@needs_cxx
def test_inconsistent_shapes_are_refused_before_any_launch() -> None:
    be = backend.get(EMU)
    x = np.zeros((1, 6, 5, 5))
    attrs = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 2}
    with pytest.raises(ValueError, match=r"conv2d: input \(1, 6, 5, 5\) and weight \(9, 3, 3, 3\)"):
        wcc.conv2d(be, x, np.zeros((9, 3, 3, 3)), **attrs)
    with pytest.raises(ValueError, match="max_pool2d_grad: cotangent"):
        wcc.max_pool2d_grad(
            be, np.zeros((1, 6, 3, 3)), x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1)
        )


@needs_cxx
def test_an_injected_grid_stride_bug_fails_on_the_emulated_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulator runs the window kernels' own source and launch shape: an off-by-one start shows."""
    be = backend.get(EMU)
    x = np.random.default_rng(9).standard_normal((3, 2, 9, 9))
    geo = {"kernel_size": (3, 3), "stride": (1, 1), "padding": (1, 1), "dilation": (1, 1)}
    want = F.max_pool2d(lg.asarray(x), 3, 1, 1).numpy()
    xd = be.to_device(x)  # the device's arrays, as the engine hands them over
    good = be.to_host(wcc.max_pool2d(be, xd, out=be.to_device(np.full(want.shape, np.nan)), **geo))
    np.testing.assert_array_equal(good, want)
    monkeypatch.setattr(wc, "_programs", {})  # build from the edited source
    monkeypatch.setattr(wc, "LOOP", wc.LOOP.replace("+ threadIdx.x;", "+ threadIdx.x + 1;"))
    bad = be.to_host(wcc.max_pool2d(be, xd, out=be.to_device(np.full(want.shape, np.nan)), **geo))
    assert np.isnan(bad.flat[0]) and not np.array_equal(bad, want)
