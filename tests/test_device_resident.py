"""Values stay on the device: a device program's values are device arrays from bind to result.

On "cuda-emulated" the buffers are EmulatedDeviceArray (CuPy's rules over host memory: any
hidden `np.asarray` of a device value raises), so these tests run the very path the CUDA
backend takes with CuPy arrays. Counted copies (`jit.backend.transfers`) show that leaves go
to the device once and that steps copy nothing; values are checked against NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
import lazygraph.nn.functional as F
from jit import backend
from jit.backend import cuda_emulated
from lazygraph.engine import evaluate as evaluation
from ops.settings import SETTINGS

EMU = "cuda-emulated"
needs_cxx = pytest.mark.skipif(cuda_emulated.toolchain() is None, reason="needs a C++ compiler")
#: the emulated device everywhere; the GPU with `pytest -m cuda` where one exists
DEVICES = [pytest.param(EMU, marks=needs_cxx), pytest.param("cuda", marks=pytest.mark.cuda)]


@pytest.fixture(params=DEVICES)
def dev(request: pytest.FixtureRequest) -> str:
    """A device whose memory is not the host's."""
    return request.param


def resident(dev: str, x: lg.Array) -> bool:
    """Whether an evaluated array holds a buffer of `dev` (a device array, not host data)."""
    buf = x.node.buffer
    return buf is not None and backend.get(dev).is_buffer(buf) and type(buf) is not np.ndarray


def copies(dev: str = EMU) -> dict:
    """The device's copy counters now."""
    return backend.transfers(dev)


def delta(before: dict, dev: str = EMU) -> dict:
    """Copies since `before`."""
    now = copies(dev)
    return {k: now[k] - before[k] for k in now}


def test_leaves_are_copied_once_and_steps_copy_nothing(dev: str) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 5)).astype(np.float32)
    w = rng.standard_normal((5, 4)).astype(np.float32)
    before = copies(dev)
    x, y = lg.asarray(a, device=dev), lg.asarray(w, device=dev)
    placed = delta(before, dev)
    assert placed["to_device"] == 2 and placed["to_device_bytes"] == a.nbytes + w.nbytes
    assert resident(dev, x)
    before = copies(dev)
    h = lg.tanh(x @ y + 1.0)  # a library step (GEMM + bias), a fused region
    s = (h * h).sum(axis=0)  # reductions
    lg.eval(h, s)  # evaluated: both stay device arrays
    assert resident(dev, h) and resident(dev, s)
    ran = delta(before, dev)
    assert ran["to_device"] == 0  # no step copied anything to the device
    t = lg.exp(h - s)  # reads evaluated device values: no copy either
    for _ in range(3):  # the same structure again: a cache hit, still no copy
        t = lg.exp(t * 0.5 - s)
    before = copies(dev)
    got = t.numpy()
    d = delta(before, dev)
    assert d["to_device"] == 0 and d["to_host"] == 1 and d["to_host_bytes"] == got.nbytes
    want_h = np.tanh(a @ w + 1.0)
    want_s = (want_h * want_h).sum(axis=0)
    want = np.exp(want_h - want_s)
    for _ in range(3):
        want = np.exp(want * 0.5 - want_s)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
    assert type(got) is np.ndarray and not got.flags.writeable


def test_numpy_and_to_cpu_copy_back(dev: str) -> None:
    a = np.arange(12.0).reshape(3, 4)
    x = lg.asarray(a, device=dev) * 2
    before = copies(dev)
    v = x.numpy()
    assert delta(before, dev)["to_host"] == 1
    np.testing.assert_array_equal(v, a * 2)
    c = x.to("cpu")
    assert c.device == "cpu" and type(c.node.buffer) is np.ndarray
    np.testing.assert_array_equal((c + 1).numpy(), a * 2 + 1)
    assert float(x[1, 2]) == 12.0 and x.tolist() == (a * 2).tolist()
    assert "22." in str(x)
    back = lg.asarray(c, device=dev)  # and to the device again: a device array leaf
    assert resident(dev, back)


def _mlp() -> lg.nn.Module:
    return lg.nn.Sequential(
        lg.nn.Linear(4, 8, dtype=np.float64), lg.nn.Tanh(), lg.nn.Linear(8, 2, dtype=np.float64)
    )


def _train(dev: str, init: dict, steps: int, counts: list | None = None) -> list[float]:
    rng = np.random.default_rng(11)
    X = rng.standard_normal((16, 4))
    Y = (X[:, 0] + X[:, 1] > 0).astype(np.int64)
    model = _mlp()
    model.load_state_dict(init)
    model.to(dev)
    x, y = lg.asarray(X, device=dev), lg.asarray(Y, device=dev)
    losses = []
    for _ in range(steps):
        before = copies(dev)
        loss = F.cross_entropy(model(x), y)
        for p in model.parameters():
            p.grad = None
        loss.backward()
        losses.append(float(loss))  # evaluates the loss with the last step's parameter updates
        if counts is not None:
            assert all(resident(dev, p) for p in model.parameters())  # updated on the device
        with lg.no_grad():
            for p in model.parameters():
                p -= 0.5 * p.grad  # SGD (evaluated with the next step's loss)
        if counts is not None:
            counts.append(delta(before, dev))
    return losses


def test_sgd_training_keeps_parameters_on_the_device(dev: str) -> None:
    init = {k: v.copy() for k, v in _mlp().state_dict().items()}
    counts: list[dict] = []
    got = _train(dev, init, 5, counts)
    want = _train("cpu", init, 5)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    assert got[-1] < got[0]
    for c in counts:  # per step: nothing to the device, only the loss (one float64) back
        assert c["to_device"] == 0 and c["to_host"] == 1 and c["to_host_bytes"] == 8, c


@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_optimizer_state_and_parameters_stay_device_arrays(dev: str, name: str) -> None:
    model = _mlp()
    model.to(dev)
    opt = getattr(lg.optim, name)(model.parameters(), lr=0.01)
    x = lg.asarray(np.random.default_rng(2).standard_normal((8, 4)), device=dev)
    sent = []
    for _ in range(4):
        before = copies(dev)
        loss = (model(x) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        float(loss)
        sent.append(delta(before, dev)["to_device"])
    # warm steps: the optimizer's 0-d hyper-parameter leaves are copied once per distinct value
    # (SGD's learning rate: never again; Adam's two bias corrections change every step, one
    # copy each for the 4 parameters, unless an earlier test already placed those values)
    assert all(n <= (0 if name == "SGD" else 2) for n in sent[2:]), sent
    params = list(model.parameters())
    lg.eval(*[p * 1.0 for p in params])  # evaluates the pending updates
    assert all(resident(dev, p) for p in params)
    assert all(p.grad.device == dev for p in params)


def test_in_place_writes_and_views_on_device_values(dev: str) -> None:
    a = np.arange(20.0).reshape(4, 5)
    x = lg.asarray(a, device=dev)
    y = x * 2.0
    y.numpy()  # evaluated: a device array
    want = a * 2.0
    y[0] = -1.0
    want[0] = -1.0
    y[:, 1] += 3.0
    want[:, 1] += 3.0
    t = y.T  # a view of the written value
    r = y[1:, ::2]
    y[2, 2] = 100.0  # after the views: NumPy aliasing, they see it
    want[2, 2] = 100.0
    np.testing.assert_array_equal(y.numpy(), want)
    np.testing.assert_array_equal(t.numpy(), want.T)
    np.testing.assert_array_equal(r.numpy(), want[1:, ::2])
    assert resident(dev, y)
    v = y[1]  # a view of an evaluated device buffer is a device view
    assert resident(dev, v)
    v += 1.0  # writes through into y
    want[1] += 1.0
    np.testing.assert_array_equal(y.numpy(), want)
    z = lg.asarray(a, device=dev)
    z[z > 10.0] = 0.0  # a boolean mask built on the device
    np.testing.assert_array_equal(z.numpy(), np.where(a > 10.0, 0.0, a))
    np.testing.assert_array_equal(x.numpy(), a)  # the source leaf is untouched


def test_steps_without_a_device_kernel_run_on_device_arrays(dev: str) -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 6))
    x = lg.asarray(a, device=dev)
    before = copies(dev)
    outs = [
        lg.sort(x, axis=1),
        lg.argmax(x, axis=0),
        lg.concatenate([x, x[:2]], axis=0),
        lg.cumsum(x, axis=1),
        x.reshape(3, 10)[::2],
        lg.take(x, lg.asarray([4, 0, 2], device=dev), axis=0),
        lg.zeros((2, 3), device=dev) + lg.arange(3.0, device=dev),
        lg.eye(3, device=dev) @ x[:3],
    ]
    got = [o.numpy() for o in outs]
    d = delta(before, dev)
    assert d["to_device"] == 1  # the index array only (a leaf made on the host)
    want = [
        np.sort(a, axis=1),
        np.argmax(a, axis=0),
        np.concatenate([a, a[:2]], axis=0),
        np.cumsum(a, axis=1),
        a.reshape(3, 10)[::2],
        a[[4, 0, 2]],
        np.zeros((2, 3)) + np.arange(3.0),
        np.eye(3) @ a[:3],
    ]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    assert not backend.host_steps(dev).get("sort")


def test_jit_off_runs_regions_op_by_op_on_device_arrays(dev: str) -> None:
    a = np.random.default_rng(4).standard_normal((3, 7))
    with SETTINGS.override(jit=False):
        x = lg.asarray(a, device=dev)
        y = lg.exp(x) * 2.0 + lg.tanh(x)
        s = y.sum(axis=1)
        lg.eval(y, s)
        assert resident(dev, s)
        np.testing.assert_allclose(s.numpy(), (np.exp(a) * 2.0 + np.tanh(a)).sum(axis=1), rtol=1e-12)


@pytest.mark.parametrize("jit", [True, False])
def test_window_steps_no_cuda_kernel_takes_stay_on_the_device(dev: str, jit: bool) -> None:
    """float16 and bool pooling (and every window step under LAZYGRAPH_JIT=0) run the operator's
    reference kernel on the device arrays: the reference's values, no host round trip."""
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((1, 2, 6, 6)).astype(np.float16)
    bs = rng.standard_normal((1, 2, 6, 6)) > 0
    with SETTINGS.override(jit=jit):
        x, b = lg.asarray(xs, device=dev), lg.asarray(bs, device=dev)
        x.requires_grad = True
        before, host = copies(dev), dict(backend.host_steps(dev))
        y = F.max_pool2d(x, 2)  # float16: no CUDA kernel takes it
        a = F.avg_pool2d(x, 3, stride=1, padding=1)
        m = F.max_pool2d(b, 2)  # bool
        (g,) = lg.grad((y.astype(np.float32).sum() + a.astype(np.float32).sum()), [x])
        evaluation.evaluate([y.node, a.node, m.node, g.node])  # (lg.eval would copy them back)
        assert delta(before, dev)["to_host"] == 0 and delta(before, dev)["to_device"] <= 2
        assert backend.host_steps(dev) == host
        assert all(resident(dev, v) for v in (y, a, m, g))
    xc, bc = lg.asarray(xs), lg.asarray(bs)
    xc.requires_grad = True
    yc, ac, mc = F.max_pool2d(xc, 2), F.avg_pool2d(xc, 3, stride=1, padding=1), F.max_pool2d(bc, 2)
    (gc,) = lg.grad((yc.astype(np.float32).sum() + ac.astype(np.float32).sum()), [xc])
    for got, want in ((y, yc), (a, ac), (m, mc), (g, gc)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_device_arrays_refuse_implicit_host_conversion(dev: str) -> None:
    x = lg.asarray(np.ones(3), device=dev) + 1.0
    x.numpy()
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.asarray(x.node.buffer)


def test_a_failed_device_evaluation_changes_nothing(dev: str) -> None:
    a = np.arange(6.0)
    x = lg.asarray(a, device=dev) + 1.0
    x.numpy()
    y = x * 2.0
    bad = lg.take(y, lg.asarray([0, 9], device=dev))  # index 9 is out of range at run time
    with pytest.raises(IndexError):
        bad.numpy()
    np.testing.assert_array_equal(x.numpy(), a + 1.0)
    np.testing.assert_array_equal((y + 1.0).numpy(), (a + 1.0) * 2.0 + 1.0)  # the next one works
    assert resident(dev, x)


def _cnn_losses(dev: str, steps: int, sent: list | None = None) -> list[float]:
    lg.manual_seed(0)
    model = lg.nn.Sequential(
        lg.nn.Conv2d(1, 3, 3, padding=1),
        lg.nn.ReLU(),
        lg.nn.MaxPool2d(2),
        lg.nn.Flatten(),
        lg.nn.Linear(3 * 3 * 3, 4),
    ).to(dev)
    opt = lg.optim.SGD(model.parameters(), lr=0.1)
    rng = np.random.default_rng(6)
    x = lg.asarray(rng.standard_normal((2, 1, 6, 6)).astype(np.float32), device=dev)
    y = lg.asarray(rng.integers(0, 4, 2), device=dev)
    losses = []
    for _ in range(steps):
        before = copies(dev)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
        if sent is not None:
            sent.append(delta(before, dev)["to_device"])
    return losses


def test_cnn_training_steps_stay_on_the_device(dev: str) -> None:
    """Convolution, pooling and their gradients are window steps on device arrays: no copies."""
    host_before = dict(backend.host_steps(dev))
    sent: list[int] = []
    got = _cnn_losses(dev, 3, sent)
    np.testing.assert_allclose(got, _cnn_losses("cpu", 3), rtol=1e-4)
    assert sent[1:] == [0, 0], sent
    assert backend.host_steps(dev) == host_before  # no window step left the device


def allocated(dev: str = EMU) -> dict:
    """The device's allocation counters now."""
    return dict(backend.allocations(dev))


def _gemm_chain(dev: str, runs: int) -> tuple[list[int], np.ndarray]:
    """Allocations of each run of a GEMM/sort chain (sort allocates; GEMM can write into a freed buffer)."""
    rng = np.random.default_rng(7)
    a, w = rng.standard_normal((32, 32)), rng.standard_normal((32, 32)) / 6
    x, W = lg.asarray(a, device=dev), lg.asarray(w, device=dev)
    counts = []
    for _ in range(runs):
        before = allocated(dev)["count"]
        h = x
        for _ in range(5):
            h = lg.sort(h @ W, axis=1)
        evaluation.evaluate([h.node])
        counts.append(allocated(dev)["count"] - before)
    want = a
    for _ in range(5):
        want = np.sort(want @ w, axis=1)
    np.testing.assert_array_equal(h.numpy(), want)
    return counts, want


@needs_cxx
def test_device_runs_reuse_freed_buffers() -> None:
    """The planner's layout is followed on the device: warm runs write GEMM outputs into buffers
    freed earlier in the run (`out=`), so they allocate fewer buffers than the first run and
    than runs without the planner; values equal NumPy's."""
    counts, _ = _gemm_chain(EMU, 3)
    assert counts[1] == counts[2] < counts[0], counts
    with SETTINGS.override(schedule=False):
        plain, _ = _gemm_chain(EMU, 3)
    assert plain[1] == plain[0] and counts[2] <= plain[2] - 3, (counts, plain)


def _stencil(u: np.ndarray | lg.Array) -> None:
    u[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2])


@needs_cxx
def test_stencil_writes_in_place_on_the_device() -> None:
    """`u[1:-1, 1:-1] = f(u)` with views aliasing u: a lazy chain writes through each dying base
    and an evaluated u is written in place (its region saved for rollback when a later step
    could fail): no whole-buffer copy per step, as the allocation counter shows; values equal
    NumPy's."""
    u0 = np.random.default_rng(8).standard_normal((128, 128))  # 128 KiB: above txn.LEAF_WRITE_MIN
    inner = 126 * 126 * 8
    u, want = lg.asarray(u0, device=EMU), u0.copy()
    per_step = []
    for _ in range(4):  # evaluated each step: the write goes into u's own buffer
        before = allocated()
        _stencil(u)
        _stencil(want)
        evaluation.evaluate([u.node])
        per_step.append(allocated()["bytes"] - before["bytes"])
    np.testing.assert_array_equal(u.numpy(), want)
    assert resident(EMU, u)
    # the stencil's value only: no copy of u's buffer (before: the value and a copy of u), and
    # no saved region (the write is the run's last step: nothing after it can fail)
    assert per_step[-1] <= inner < u0.nbytes, per_step
    spent = []
    for _ in range(2):
        before = allocated()
        for _ in range(4):  # four lazy steps: each write goes through the base the last one made
            _stencil(u)
            _stencil(want)
        evaluation.evaluate([u.node])
        spent.append(allocated()["bytes"] - before["bytes"])
    np.testing.assert_array_equal(u.numpy(), want)
    # warm: the saved region and values in reused buffers (before: a base copy and a value per step, 8x)
    assert spent[1] < 4 * u0.nbytes, spent


@needs_cxx
def test_small_writes_into_an_evaluated_device_buffer_copy_only_the_region() -> None:
    """A row write into a large evaluated buffer allocates about the row, not the buffer; a view
    the user holds keeps NumPy's aliasing (it sees the write)."""
    a = np.random.default_rng(9).standard_normal((256, 256))
    u, want = lg.asarray(a, device=EMU) + 0.0, a + 0.0
    evaluation.evaluate([u.node])
    spent = []
    for i in range(3):
        before = allocated()
        u[i] = u[i + 1] * 0.5
        want[i] = want[i + 1] * 0.5
        evaluation.evaluate([u.node])
        spent.append(allocated()["bytes"] - before["bytes"])
    assert max(spent[1:]) <= 4 * 256 * 8, spent
    np.testing.assert_array_equal(u.numpy(), want)
    v = u[3:5]  # a view the user holds: the next write must not hide from it
    old = u * 1.0  # recorded before the write, evaluated after: reads the old value
    u[4] = 7.0
    evaluation.evaluate([u.node])
    np.testing.assert_array_equal(old.numpy(), want)
    want[4] = 7.0
    np.testing.assert_array_equal(v.numpy(), want[3:5])
    np.testing.assert_array_equal(u.numpy(), want)


@needs_cxx
def test_a_failed_run_puts_back_a_device_buffer_it_wrote_into() -> None:
    a = np.random.default_rng(10).standard_normal((128, 128))
    u = lg.asarray(a, device=EMU) * 1.0
    evaluation.evaluate([u.node])
    _stencil(u)
    bad = lg.take(u.reshape(-1), lg.asarray([0, 10**7], device=EMU))  # fails after the write
    with pytest.raises(IndexError):
        evaluation.evaluate([u.node, bad.node])
    np.testing.assert_array_equal(u.numpy(), _stencil_np(a))  # the write is still pending, u's old value kept


def _stencil_np(a: np.ndarray) -> np.ndarray:
    b = a.copy()
    _stencil(b)
    return b


@needs_cxx
def test_host_constants_are_copied_once_per_value() -> None:
    x = lg.asarray(np.arange(6.0), device=EMU)
    sent = []
    for _ in range(3):
        before = copies()
        y = (x + np.ones(6)) * np.full(6, 2.0)  # fresh host constants each time, same values
        evaluation.evaluate([y.node])
        sent.append(delta(before)["to_device"])
    assert sent == [2, 0, 0], sent
    np.testing.assert_array_equal(y.numpy(), (np.arange(6.0) + 1) * 2)
    big = np.ones(1 << 14)  # 128 KiB: keyed by content would cost as much as the copy
    z = lg.asarray(np.zeros(1 << 14), device=EMU)
    for _ in range(2):
        before = copies()
        evaluation.evaluate([(z + big).node])
        assert delta(before)["to_device"] == 1


def test_realize_evaluates_without_copying_to_the_host(dev: str) -> None:
    a = np.arange(12.0).reshape(3, 4)
    x = lg.asarray(a, device=dev)
    y, s = lg.exp(x) * 2.0, (x * x).sum(axis=1)
    before = copies(dev)
    got = lg.realize(y, s)
    assert got[0] is y and got[1] is s
    assert delta(before, dev)["to_host"] == 0  # lg.eval would copy both values back
    assert resident(dev, y) and resident(dev, s)
    np.testing.assert_allclose(y.numpy(), np.exp(a) * 2.0)
    np.testing.assert_allclose(s.numpy(), (a * a).sum(axis=1))
    assert lg.realize() == ()
