"""Short training runs on the bundled MNIST digits: the loss falls, train/eval modes behave,
trained weights survive a save/load, and a small CNN's steps match PyTorch's."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import lazygraph as lg
from lazygraph import nn
from lazygraph.datasets import batches, load_mnist

F = nn.functional
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mnist():
    d = load_mnist()
    x = (d.x_train[:512].astype(np.float32) / 255.0 - 0.1307) / 0.3081
    return x, d.y_train[:512].astype(np.int64)


def _train(model, opt, x, y, epochs, batch_size, seed=0):
    rng = np.random.default_rng(seed)
    losses = []
    for _ in range(epochs):
        for xb, yb in batches(x, y, batch_size, shuffle=True, rng=rng):
            loss = F.cross_entropy(model(lg.asarray(xb)), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss))
    return losses


def test_mlp_loss_falls(mnist):
    x, y = mnist
    lg.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
    losses = _train(model, lg.optim.Adam(model.parameters(), lr=3e-3), x, y, epochs=4, batch_size=64)
    assert np.mean(losses[-4:]) < 0.4 * np.mean(losses[:2]), losses
    model.eval()
    with lg.no_grad():
        acc = float((model(lg.asarray(x)).argmax(axis=1) == y).mean())
    assert acc > 0.85


def test_cnn_with_batchnorm_and_dropout_loss_falls(mnist):
    x, y = mnist
    x = x[:256, None, ::2, ::2]  # 14x14 keeps the test quick
    y = y[:256]
    lg.manual_seed(1)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Dropout(0.2),
        nn.Linear(8 * 7 * 7, 10),
    )
    opt = lg.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
    losses = _train(model, opt, x, y, epochs=4, batch_size=64)
    assert np.mean(losses[-4:]) < 0.5 * np.mean(losses[:2]), losses
    xb = lg.asarray(x[:32])
    a, b = model(xb).numpy(), model(xb).numpy()
    assert not np.array_equal(a, b)  # training mode: fresh dropout masks, batch statistics
    model.eval()
    a, b = model(xb).numpy(), model(xb).numpy()
    np.testing.assert_array_equal(a, b)  # eval: deterministic, running statistics


def test_trained_model_survives_save_and_load(mnist, tmp_path):
    x, y = mnist
    lg.manual_seed(2)

    def make():
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 10))

    model = make()
    _train(model, lg.optim.AdamW(model.parameters(), lr=3e-3), x, y, epochs=1, batch_size=128)
    model.save(tmp_path / "m.npz")
    fresh = make()
    fresh.load(tmp_path / "m.npz")
    xb = lg.asarray(x[:50])
    np.testing.assert_array_equal(model(xb).numpy(), fresh(xb).numpy())


def test_small_cnn_training_steps_match_torch(mnist):
    torch = pytest.importorskip("torch")
    x, y = mnist
    x, y = x[:64, None], y[:64]
    lg.manual_seed(3)
    ours = nn.Sequential(
        nn.Conv2d(1, 4, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 14 * 14, 10)
    )
    theirs = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 5, padding=2),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 14 * 14, 10),
    )
    theirs.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in ours.state_dict().items()})
    opt, topt = lg.optim.Adam(ours.parameters(), lr=1e-3), torch.optim.Adam(theirs.parameters(), lr=1e-3)
    for i in range(3):
        xb, yb = x[i * 16 : (i + 1) * 16], y[i * 16 : (i + 1) * 16]
        loss = F.cross_entropy(ours(lg.asarray(xb)), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        tl = torch.nn.functional.cross_entropy(theirs(torch.from_numpy(xb)), torch.from_numpy(yb))
        topt.zero_grad()
        tl.backward()
        topt.step()
        np.testing.assert_allclose(float(loss), tl.item(), rtol=1e-5)
    for k, v in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[k], v.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)


@pytest.mark.slow
def test_train_mnist_example_smoke(capsys):
    spec = importlib.util.spec_from_file_location("train_mnist", ROOT / "examples" / "train_mnist.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    acc = mod.train(mod.parser().parse_args(["--epochs", "1", "--limit", "512", "--batch-size", "128"]))
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == f"test accuracy: {acc * 100:.2f}%"
    assert out[1].startswith("epoch 1/1: train loss")
    assert acc > 0.5
