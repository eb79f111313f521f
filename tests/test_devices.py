"""Devices for users: placement, the default-device context, transfers, caching and evaluation per device.

The differential subset runs on "cpu" and on "cuda-emulated" (the CUDA kernels compiled for and
run on the host) and compares both with NumPy; tests marked `cuda` run the same on a real GPU.
Sizes are small: the emulator runs every CUDA thread on the host.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import lazygraph as lg
import lazygraph.nn.functional as F
from jit import backend as jit_backend
from jit import kernel
from jit.backend import cuda_emulated
from lazygraph.engine.lower_fusion import RegionKernel
from lazygraph.engine.state import ENGINE
from ops.settings import SettingError

EMU = "cuda-emulated"
needs_cxx = pytest.mark.skipif(cuda_emulated.toolchain() is None, reason="needs a C++ compiler")
DEVICES = ["cpu", pytest.param(EMU, marks=needs_cxx), pytest.param("cuda", marks=pytest.mark.cuda)]
RNG = np.random.default_rng(7)
A = RNG.standard_normal((6, 9)).astype(np.float32)
B = RNG.standard_normal((9, 4)).astype(np.float32)


def ran_on(device: str) -> bool:
    """Whether some fused kernel of this process was built for `device`'s backend."""
    return any(key[0] == device for k in list(kernel._kernels.values()) for key in list(k.variants))


# -- placement ---------------------------------------------------------------------------


def test_devices_and_default_placement() -> None:
    assert lg.devices()[:2] == ["cpu", EMU]
    assert repr(lg.device(EMU)) == EMU and lg.device(EMU) == EMU
    x = lg.ones((2, 3))
    assert x.device == "cpu" and (x * 2 + 1).device == "cpu"
    for make in (
        lambda d: lg.zeros(3, device=d),
        lambda d: lg.full((2,), 7.0, device=d),
        lambda d: lg.arange(4, device=d),
        lambda d: lg.linspace(0, 1, 5, device=d),
        lambda d: lg.eye(3, device=d),
        lambda d: lg.asarray(np.ones(3), device=d),
        lambda d: lg.asarray([1, 2], device=lg.device(d)),
    ):
        y = make(EMU)
        assert y.device == EMU and (y + 1).device == EMU and lg.exp(y).device == EMU
        assert y.T.device == EMU and y.reshape(-1).device == EMU and y.sum().device == EMU
        assert lg.zeros_like(y).device == EMU and lg.ones_like(y, device="cpu").device == "cpu"


def test_context_manager_nests_and_is_per_thread() -> None:
    seen = []
    with lg.device(EMU) as d:
        assert d == EMU and lg.zeros(2).device == EMU
        assert lg.__array_namespace_info__().default_device() == EMU
        with lg.device("cpu"):
            assert lg.zeros(2).device == "cpu" and lg.asarray(np.ones(2)).device == "cpu"
        assert lg.ones(2).device == EMU and lg.random.default_rng(0).normal(size=2).device == EMU
        t = threading.Thread(target=lambda: seen.append(lg.zeros(1).device))
        t.start()
        t.join()
    assert seen == ["cpu"]  # another thread keeps its own default
    assert lg.zeros(2).device == "cpu"


def test_device_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAZYGRAPH_DEVICE", EMU)
    assert lg.zeros(2).device == EMU and lg.asarray(3.0).device == EMU
    with lg.device("cpu"):
        assert lg.zeros(2).device == "cpu"
    monkeypatch.setenv("LAZYGRAPH_DEVICE", "tpu")
    with pytest.raises(SettingError, match="LAZYGRAPH_DEVICE"):
        lg.zeros(2)
    monkeypatch.delenv("LAZYGRAPH_DEVICE")
    assert lg.zeros(2).device == "cpu"


def test_unknown_and_unavailable_devices() -> None:
    with pytest.raises(
        ValueError, match=r"'tpu' is not available \(known devices: cpu, cuda-emulated, cuda\)"
    ):
        lg.zeros(2, device="tpu")
    with pytest.raises(TypeError, match="device name"):
        lg.device(3)
    if "cuda" not in lg.devices():
        with pytest.raises(ValueError, match="'cuda' is not available here: .*cuda-emulated"):
            lg.device("cuda")
        with pytest.raises(ValueError, match="'cuda' is not available"):
            lg.ones(2).to("cuda")


def test_mixing_devices_is_an_error_at_record_time() -> None:
    x, y = lg.ones(3), lg.ones(3, device=EMU)
    before = lg.cache.stats(per_entry=False)["evaluations"]
    for bad in (lambda: x + y, lambda: y * x, lambda: lg.where(x > 0, y, 0.0), lambda: lg.matmul(x, y)):
        with pytest.raises(lg.DeviceMismatchError) as e:
            bad()
        msg = str(e.value)
        assert "'cpu'" in msg and f"'{EMU}'" in msg and "x.to(device)" in msg
    with pytest.raises(lg.DeviceMismatchError, match=r"^add: .*'cpu' and 'cuda-emulated'"):
        x + y
    with pytest.raises(lg.DeviceMismatchError, match="setitem"):
        y[0] = x[1]
    with pytest.raises(lg.DeviceMismatchError, match="setitem"):
        y[...] = x
    assert lg.cache.stats(per_entry=False)["evaluations"] == before  # nothing ran
    # Python scalars and NumPy operands join the device of the arrays they meet
    z = 2.0 - y * np.arange(3.0) + 1
    assert z.device == EMU and lg.maximum(0.0, z).device == EMU
    y[1] = 5.0
    y[...] = np.zeros(3)
    assert y.device == EMU


# -- transfers -----------------------------------------------------------------------------


def test_transfers_round_trip() -> None:
    x = lg.asarray(A) * 2
    assert x.to("cpu") is x and x.to_device("cpu") is x
    y = x.to(EMU)
    assert y.device == EMU and x.device == "cpu"
    np.testing.assert_array_equal(y.numpy(), A * 2)
    back = (y + 1).to_device("cpu")
    assert back.device == "cpu"
    np.testing.assert_array_equal(back.numpy(), A * 2 + 1)
    np.testing.assert_array_equal(np.asarray(lg.asarray(y, device="cpu")), A * 2)
    assert lg.astype(x, np.float64, device=EMU).device == EMU
    assert lg.from_dlpack(A, device=EMU).device == EMU
    p = lg.asarray(A, requires_grad=True)
    q = p.to(EMU)  # a leaf moves as a new leaf that requires grad
    assert q.requires_grad and q.device == EMU
    (q * q).sum().backward()
    np.testing.assert_allclose(q.grad.numpy(), 2 * A, rtol=1e-6)
    assert q.grad.device == EMU and p.grad is None
    with pytest.raises(RuntimeError, match="gradients do not flow through a device transfer"):
        (p * 2).to(EMU)


# -- evaluation per device -------------------------------------------------------------------


@needs_cxx
def test_cache_entries_are_per_device(tmp_path, monkeypatch) -> None:
    # a private cache directory: the suite's is shared by its workers, and another worker's
    # test clearing it between this test's writes and reads took both disk hits away
    monkeypatch.setenv("LAZYGRAPH_CACHE_DIR", str(tmp_path / "cache"))
    lg.cache.clear(disk=False)
    lg.cache.reset_stats()
    a = np.arange(12.0).reshape(3, 4)
    for dev in ("cpu", EMU, EMU, "cpu"):
        x = lg.asarray(a, device=dev)
        np.testing.assert_allclose(lg.tanh(x * 0.5 + 1.0).numpy(), np.tanh(a * 0.5 + 1.0), rtol=1e-12)
    s = lg.cache.stats()
    assert len(s["entries"]) == 2 and s["misses"] == 2 and s["hits"] == 2
    assert ran_on(EMU)
    # from the disk, each device's entry is rebuilt for its own device
    lg.cache.clear(disk=False)
    for dev in ("cpu", EMU):
        x = lg.asarray(a, device=dev)
        np.testing.assert_allclose(lg.tanh(x * 0.5 + 1.0).numpy(), np.tanh(a * 0.5 + 1.0), rtol=1e-12)
    assert lg.cache.stats(per_entry=False)["disk_hits"] == 2
    built = {}
    for entry in ENGINE.memory.entries():
        for step in entry.variants[0].program.steps:
            if isinstance(step.kernel, RegionKernel):
                built[entry.skey[-1]] = step.kernel.device
    assert built[f"device:{EMU}"].name == EMU and sum(d is None for d in built.values()) == 1


@pytest.mark.parametrize("dev", DEVICES)
def test_differential_subset(dev: str) -> None:
    x, w = lg.asarray(A, device=dev), lg.asarray(B, device=dev)
    got = {
        "elementwise": lg.tanh(x) * 3.0 - lg.exp(x * 0.25),
        "reductions": lg.sum(x * x, axis=1),
        "mean_max": lg.mean(x, axis=0) + lg.max(x, axis=0),
        "softmax": lg.softmax(x, axis=-1),
        "log_softmax": lg.log_softmax(x, axis=0),
        "matmul": lg.maximum(x @ w + 1.0, 0.0),
    }
    want = {
        "elementwise": np.tanh(A) * 3.0 - np.exp(A * 0.25),
        "reductions": np.sum(A * A, axis=1),
        "mean_max": A.mean(axis=0) + A.max(axis=0),
        "softmax": np.exp(A) / np.exp(A).sum(-1, keepdims=True),
        "log_softmax": A - np.log(np.exp(A).sum(0, keepdims=True)),
        "matmul": np.maximum(A @ B + 1.0, 0.0),
    }
    lg.eval(*got.values())
    for k, v in got.items():
        assert v.device == dev, k
        np.testing.assert_allclose(v.numpy(), want[k], rtol=2e-5, atol=2e-6, err_msg=k)
    if dev != "cpu":
        assert ran_on(dev)


@needs_cxx
def test_gradient_rules_create_their_constants_on_the_graph_device() -> None:
    a = np.arange(6.0).reshape(2, 3)
    x = lg.asarray(a, device=EMU, requires_grad=True)
    y = (x[:, [0, 2]] ** 2).sum() + lg.sort(x, axis=1).sum() + lg.cumsum(x, axis=1).sum()
    y.backward()  # scatter, sort and cumsum gradients make zeros and index constants
    want = np.ones_like(a) + [3.0, 2.0, 1.0]
    want[:, [0, 2]] += 2 * a[:, [0, 2]]
    assert x.grad.device == EMU
    np.testing.assert_allclose(x.grad.numpy(), want)


def _mlp_reference(X, Y, W1, b1, W2, b2, lr, steps):  # noqa: ANN001, ANN202
    """Two-layer MLP, mean cross-entropy, plain SGD, in NumPy (float64)."""
    losses = []
    for _ in range(steps):
        h = X @ W1.T + b1
        r = np.maximum(h, 0)
        z = r @ W2.T + b2
        e = np.exp(z - z.max(1, keepdims=True))
        p = e / e.sum(1, keepdims=True)
        losses.append(-np.log(p[np.arange(len(Y)), Y]).mean())
        dz = (p - np.eye(z.shape[1])[Y]) / len(Y)
        dW2, db2 = dz.T @ r, dz.sum(0)
        dh = (dz @ W2) * (h > 0)
        dW1, db1 = dh.T @ X, dh.sum(0)
        W1, b1, W2, b2 = W1 - lr * dW1, b1 - lr * db1, W2 - lr * dW2, b2 - lr * db2
    return losses, W1


@pytest.mark.parametrize("dev", DEVICES)
def test_mlp_training_steps(dev: str) -> None:
    rng = np.random.default_rng(3)
    X = rng.standard_normal((8, 6))
    Y = rng.integers(0, 3, 8)
    model = lg.nn.Sequential(
        lg.nn.Linear(6, 5, dtype=np.float64), lg.nn.ReLU(), lg.nn.Linear(5, 3, dtype=np.float64)
    )
    init = {k: v.copy() for k, v in model.state_dict().items()}
    opt = lg.optim.SGD(model.parameters(), lr=0.5)
    assert model.to(dev) is model and all(p.device == dev for p in model.parameters())
    losses = []
    for _ in range(2):
        loss = F.cross_entropy(model(lg.asarray(X, device=dev)), lg.asarray(Y, device=dev))
        opt.zero_grad()
        loss.backward()
        assert model[0].weight.grad.device == dev
        opt.step()
        losses.append(float(loss))
    want, W1 = _mlp_reference(
        X, Y, init["0.weight"], init["0.bias"], init["2.weight"], init["2.bias"], 0.5, 2
    )
    np.testing.assert_allclose(losses, want, rtol=1e-10)
    np.testing.assert_allclose(model.state_dict()["0.weight"], W1, rtol=1e-10, atol=1e-12)
    assert all(p.device == dev for p in model.parameters())


@needs_cxx
def test_module_to_moves_parameters_grads_and_optimizer_state() -> None:
    model = lg.nn.Linear(4, 2)
    opt = lg.optim.Adam(model.parameters(), lr=0.01)
    x = np.ones((3, 4), np.float32)
    model(lg.asarray(x)).sum().backward()
    opt.step()  # state made on the CPU
    model.to(EMU)
    assert model.weight.device == EMU and model.weight.grad.device == EMU and model.weight.requires_grad
    opt.zero_grad()
    model(lg.asarray(x, device=EMU)).sum().backward()
    opt.step()  # the state follows its parameter
    st = opt.state[id(model.weight)]
    assert st["exp_avg"].device == EMU and st["exp_avg_sq"].device == EMU
    ref = lg.nn.Linear(4, 2)
    ref.load_state_dict({k: v for k, v in model.state_dict().items()})
    assert np.isfinite(model.weight.numpy()).all()
    with pytest.raises(lg.DeviceMismatchError):
        model(lg.asarray(x))  # a CPU input into a model on the device


@needs_cxx
def test_conv_and_pooling_training_on_the_emulated_device(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str]] = []
    real = jit_backend.library_call

    def counting(b, op, *rest):  # noqa: ANN001, ANN002, ANN202
        calls.append((b.name, op))
        return real(b, op, *rest)

    monkeypatch.setattr(jit_backend, "library_call", counting)
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((2, 2, 6, 6))
    ws = rng.standard_normal((3, 2, 3, 3))
    out = {}
    for dev in ("cpu", EMU):
        x = lg.asarray(xs, device=dev)
        w = lg.asarray(ws, device=dev, requires_grad=True)
        y = F.max_pool2d(F.relu(F.conv2d(x, w, padding=1)), 2)
        (y * y).sum().backward()
        out[dev] = (y.numpy(), w.grad.numpy())
        assert w.grad.device == dev
    np.testing.assert_allclose(out[EMU][0], out["cpu"][0], rtol=1e-12)
    np.testing.assert_allclose(out[EMU][1], out["cpu"][1], rtol=1e-10)
    # the window steps (pooling, the training convolutions) ran as the device's library calls
    assert {(EMU, "max_pool2d"), (EMU, "max_pool2d_grad"), (EMU, "conv2d_grad_weight")} <= set(calls)


@needs_cxx
def test_cnn_modules_train_alike_on_cpu_and_the_emulated_device() -> None:
    """Conv, batch norm (running statistics), pooling, layer norm, AdamW; NumPy targets join."""
    out = {}
    for dev in ("cpu", EMU):
        lg.manual_seed(0)
        m = lg.nn.Sequential(
            lg.nn.Conv2d(1, 2, 3),
            lg.nn.BatchNorm2d(2),
            lg.nn.ReLU(),
            lg.nn.MaxPool2d(2),
            lg.nn.Flatten(),
            lg.nn.Linear(8, 3),
            lg.nn.LayerNorm(3),
        ).to(dev)
        opt = lg.optim.AdamW(m.parameters(), lr=1e-2)
        x = lg.asarray(np.random.default_rng(0).standard_normal((4, 1, 6, 6)), device=dev)
        losses = []
        for _ in range(2):
            loss = F.cross_entropy(m(x), np.array([0, 1, 2, 0]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss))
        assert m[1].running_mean.device == dev
        out[dev] = (losses, m.state_dict())
    np.testing.assert_allclose(out[EMU][0], out["cpu"][0], rtol=1e-12)
    for k, v in out["cpu"][1].items():
        np.testing.assert_allclose(out[EMU][1][k], v, rtol=1e-10, atol=1e-12, err_msg=k)
