"""lg.nn: module bookkeeping, initialisation, state dicts, and layers against PyTorch.

Layer outputs and gradients are compared with PyTorch when it is installed (those tests are
skipped otherwise); the bookkeeping, initialisation and file tests need only NumPy.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

import lazygraph as lg
from lazygraph import nn

F = nn.functional


def _torch():
    return pytest.importorskip("torch")


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# -- Module bookkeeping ----------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.norm = nn.BatchNorm1d(3)
        self.scale = nn.Parameter(np.ones(3, dtype=np.float32))
        self.plain = 7  # an ordinary attribute is not registered

    def forward(self, x):
        return self.norm(self.fc(x)) * self.scale


def test_registration_names_and_order():
    model = nn.Sequential(Block(), nn.ReLU(), nn.Linear(3, 2))
    names = [n for n, _ in model.named_parameters()]
    assert names == [
        "0.scale",
        "0.fc.weight",
        "0.fc.bias",
        "0.norm.weight",
        "0.norm.bias",
        "2.weight",
        "2.bias",
    ]
    assert [n for n, _ in model.named_buffers()] == [
        "0.norm.running_mean",
        "0.norm.running_var",
        "0.norm.num_batches_tracked",
    ]
    assert len(list(model.children())) == 3
    assert [n for n, _ in model.named_modules()] == ["", "0", "0.fc", "0.norm", "1", "2"]
    assert isinstance(model[0].fc, nn.Linear) and model[0].plain == 7
    assert len(model) == 3 and isinstance(model[1:], nn.Sequential) and len(model[1:]) == 2
    assert "Linear(in_features=3, out_features=2, bias=True)" in repr(model)


def test_shared_parameters_are_listed_once():
    lin = nn.Linear(3, 3)
    model = nn.Sequential(lin, nn.Tanh(), lin)
    assert len(list(model.parameters())) == 2
    assert list(model.state_dict()) == ["0.weight", "0.bias"]


def test_parameter_is_an_array_leaf():
    p = nn.Parameter(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    assert isinstance(p, lg.Array) and p.requires_grad and p.dtype == np.float32
    assert nn.Parameter(np.arange(3)).dtype == np.float32  # integer data gives a float parameter
    assert not nn.Parameter(np.zeros(2), requires_grad=False).requires_grad
    with pytest.raises(RuntimeError, match="no_grad"):
        p += 1
    with lg.no_grad():
        p += 1
    np.testing.assert_array_equal(p.numpy(), np.arange(1.0, 7.0).reshape(2, 3))
    assert p.requires_grad
    q = nn.Parameter(lg.asarray(np.ones(2)) * 3)  # from a lazy array
    assert float(q.sum()) == 6.0 and q.requires_grad


def test_assignment_rules():
    m = nn.Linear(2, 2)
    m.bias = None  # a registered parameter may be switched off
    assert [n for n, _ in m.named_parameters()] == ["weight"]
    with pytest.raises(TypeError, match="Parameter"):
        m.weight = lg.zeros((2, 2))
    del m.weight
    assert list(m.parameters()) == []

    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(np.zeros(1))

    with pytest.raises(AttributeError, match="super"):
        Early()


def test_train_eval_propagates():
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Dropout(0.5)))
    assert all(m.training for m in model.modules())
    assert model.eval() is model
    assert not any(m.training for m in model.modules())
    model.train()
    assert all(m.training for m in model.modules())


def test_module_requires_grad_and_zero_grad():
    m = nn.Linear(3, 1)
    loss = m(lg.asarray(_rand(2, 3))).sum()
    loss.backward()
    assert m.weight.grad is not None
    m.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(m.weight.grad.numpy(), np.zeros((1, 3)))
    m.zero_grad()
    assert m.weight.grad is None
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())


# -- initialisation ---------------------------------------------------------------------------


def test_default_initialisation_bounds_and_dtype():
    lg.manual_seed(0)
    lin, conv = nn.Linear(300, 200), nn.Conv2d(6, 16, 5)
    for w, b, fan_in in ((lin.weight, lin.bias, 300), (conv.weight, conv.bias, 150)):
        bound = 1 / math.sqrt(fan_in)  # kaiming_uniform(a=sqrt(5)) and PyTorch's bias bound
        wv, bv = w.numpy(), b.numpy()
        assert wv.dtype == np.float32 and bv.dtype == np.float32
        assert np.abs(wv).max() <= bound and np.abs(bv).max() <= bound
        assert abs(wv.std() - bound / math.sqrt(3)) < 0.05 * bound  # uniform, not a narrower law
    emb = nn.Embedding(1000, 64).weight.numpy()
    assert abs(emb.mean()) < 0.02 and abs(emb.std() - 1) < 0.02


def test_manual_seed_reproduces_weights():
    lg.manual_seed(123)
    a = nn.Linear(5, 4).state_dict()
    lg.manual_seed(123)
    b = nn.Linear(5, 4).state_dict()
    lg.manual_seed(124)
    c = nn.Linear(5, 4).state_dict()
    np.testing.assert_array_equal(a["weight"], b["weight"])
    assert not np.array_equal(a["weight"], c["weight"])


def test_init_helpers():
    w = nn.Parameter(np.zeros((4, 6), dtype=np.float32))
    nn.init.constant_(w, 2.5)
    assert np.all(w.numpy() == 2.5) and w.requires_grad
    nn.init.xavier_uniform_(w, generator=lg.random.default_rng(0))
    assert np.abs(w.numpy()).max() <= math.sqrt(6 / 10)
    assert nn.init.calculate_gain("relu") == math.sqrt(2)
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.init.calculate_gain("swishy")


# -- state dicts and files ---------------------------------------------------------------------


def _cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 3, 3, padding="same"),
        nn.BatchNorm2d(3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(3 * 4 * 4, 5),
    )


def test_state_dict_round_trip_through_file(tmp_path):
    lg.manual_seed(1)
    a = _cnn()
    x = lg.asarray(_rand(4, 1, 8, 8))
    a(x)  # a training-mode forward updates the batch-norm running statistics
    path = tmp_path / "model.npz"
    a.save(path)
    assert os.listdir(tmp_path) == ["model.npz"]  # no temporary file left behind
    with np.load(path, allow_pickle=False) as f:
        assert sorted(f.files) == sorted(a.state_dict())
    lg.manual_seed(2)
    b = _cnn()
    b.load(path)
    for k, v in a.state_dict().items():
        np.testing.assert_array_equal(b.state_dict()[k], v, err_msg=k)
    a.eval(), b.eval()
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())


def test_load_state_dict_errors_name_the_key():
    m = _cnn()
    sd = dict(m.state_dict())
    bad = dict(sd, **{"5.weight": np.zeros((5, 47), np.float32)})
    before = m.state_dict()["0.weight"].copy()
    with pytest.raises(ValueError, match=r"'5\.weight'.*\(5,47\).*\(5,48\)"):
        m.load_state_dict(dict(bad, **{"0.weight": np.zeros((3, 1, 3, 3))}))
    np.testing.assert_array_equal(m.state_dict()["0.weight"], before)  # nothing written
    with pytest.raises(KeyError, match=r"missing keys \['0\.bias'\]"):
        m.load_state_dict({k: v for k, v in sd.items() if k != "0.bias"})
    with pytest.raises(KeyError, match="unexpected keys.*extra"):
        m.load_state_dict(dict(sd, extra=np.zeros(1)))
    res = m.load_state_dict(dict(sd, extra=np.zeros(1)), strict=False)
    assert res.unexpected_keys == ["extra"] and res.missing_keys == []


def test_load_rejects_corrupt_and_pickled_files(tmp_path):
    m = nn.Linear(2, 2)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="junk.npz"):
        m.load(junk)
    pickled = tmp_path / "obj.npz"
    np.savez(pickled, weight=np.array([{"a": 1}], dtype=object), bias=np.zeros(2))
    with pytest.raises(ValueError, match="obj.npz"):
        m.load(pickled)


def test_load_keeps_parameters_trainable():
    m = nn.Linear(3, 2)
    m.load_state_dict({"weight": np.ones((2, 3)), "bias": np.zeros(2)})
    assert m.weight.dtype == np.float32 and m.weight.requires_grad
    m(lg.asarray(np.ones((1, 3), np.float32))).sum().backward()
    np.testing.assert_allclose(m.weight.grad.numpy(), np.ones((2, 3)))


# -- train/eval behaviour ----------------------------------------------------------------------


def test_dropout_train_and_eval():
    x = lg.ones((200, 50), dtype=lg.float32)
    d = nn.Dropout(0.3, generator=lg.random.default_rng(0))
    y = d(x).numpy()
    kept = y != 0
    assert abs(kept.mean() - 0.7) < 0.02
    np.testing.assert_allclose(y[kept], 1 / 0.7, rtol=1e-6)
    assert y.dtype == np.float32
    d.eval()
    np.testing.assert_array_equal(d(x).numpy(), x.numpy())
    lg.manual_seed(5)
    a = F.dropout(x, 0.5).numpy()
    lg.manual_seed(5)
    b = F.dropout(x, 0.5).numpy()
    np.testing.assert_array_equal(a, b)  # seeded through the default generator
    assert np.all(F.dropout(x, 1.0).numpy() == 0)
    with pytest.raises(ValueError, match="probability"):
        nn.Dropout(1.5)


def test_batchnorm_running_statistics():
    bn = nn.BatchNorm2d(3)
    xs = [_rand(8, 3, 4, 4, seed=s) * (s + 1) + s for s in range(3)]
    rm, rv = np.zeros(3), np.ones(3)
    for x in xs:
        y = bn(lg.asarray(x)).numpy()
        mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
        np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), 0, atol=1e-5)
        rm = 0.9 * rm + 0.1 * mean
        rv = 0.9 * rv + 0.1 * var * x[:, 0].size / (x[:, 0].size - 1)  # unbiased
    np.testing.assert_allclose(bn.running_mean.numpy(), rm, rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), rv, rtol=1e-5)
    assert int(bn.num_batches_tracked) == 3
    bn.eval()
    x = xs[0]
    want = (x - rm.reshape(1, 3, 1, 1)) / np.sqrt(rv.reshape(1, 3, 1, 1) + 1e-5)
    np.testing.assert_allclose(bn(lg.asarray(x)).numpy(), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.running_mean.numpy(), rm, rtol=1e-5)  # eval does not update
    with pytest.raises(ValueError, match="BatchNorm2d.*channels"):
        bn(lg.asarray(_rand(2, 4, 3, 3)))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3)(lg.asarray(_rand(1, 3)))


def test_running_statistics_do_not_chain_across_steps():
    bn = nn.BatchNorm1d(4)
    opt = lg.optim.SGD(bn.parameters(), lr=0.1)
    for step in range(5):
        loss = (bn(lg.asarray(_rand(6, 4, seed=step))) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()  # the deferred running statistics are computed here too
        assert bn.running_mean.node.buffer is not None and not bn.running_mean.node.inputs


# -- layers against PyTorch --------------------------------------------------------------------


def _copy_to_torch(ours: nn.Module, theirs) -> None:
    torch = _torch()
    theirs.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in ours.state_dict().items()})


def _compare(ours: nn.Module, theirs, x: np.ndarray, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """Outputs, input gradient and parameter gradients of sum(layer(x) * r) agree with torch."""
    torch = _torch()
    _copy_to_torch(ours, theirs)
    xl = lg.asarray(x, requires_grad=True)
    out = ours(xl)
    r = _rand(*out.shape, seed=99)
    params = list(ours.parameters())
    grads = lg.grad((out * lg.asarray(r)).sum(), [xl, *params])
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    outt = theirs(xt)
    (outt * torch.from_numpy(r)).sum().backward()
    np.testing.assert_allclose(out.numpy(), outt.detach().numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(grads[0].numpy(), xt.grad.numpy(), rtol=rtol, atol=atol, err_msg="input grad")
    tparams = dict(theirs.named_parameters())
    for (name, _), g in zip(ours.named_parameters(), grads[1:]):
        np.testing.assert_allclose(g.numpy(), tparams[name].grad.numpy(), rtol=rtol, atol=atol, err_msg=name)


LAYER_CASES = [
    ("linear", lambda t: (nn.Linear(7, 5), t.nn.Linear(7, 5)), (3, 7)),
    ("linear-3d", lambda t: (nn.Linear(7, 5, bias=False), t.nn.Linear(7, 5, bias=False)), (2, 3, 7)),
    ("conv", lambda t: (nn.Conv2d(3, 4, 3), t.nn.Conv2d(3, 4, 3)), (2, 3, 7, 6)),
    (
        "conv-stride-pad-groups",
        lambda t: (
            nn.Conv2d(4, 6, (3, 2), stride=2, padding=1, groups=2),
            t.nn.Conv2d(4, 6, (3, 2), stride=2, padding=1, groups=2),
        ),
        (2, 4, 7, 6),
    ),
    (
        "conv-same",
        lambda t: (nn.Conv2d(2, 3, 5, padding="same"), t.nn.Conv2d(2, 3, 5, padding="same")),
        (1, 2, 6, 6),
    ),
    ("maxpool", lambda t: (nn.MaxPool2d(2), t.nn.MaxPool2d(2)), (2, 3, 6, 5)),
    ("maxpool-stride", lambda t: (nn.MaxPool2d(3, 2, 1), t.nn.MaxPool2d(3, 2, 1)), (1, 2, 7, 7)),
    ("avgpool", lambda t: (nn.AvgPool2d(2), t.nn.AvgPool2d(2)), (2, 3, 6, 5)),
    (
        "avgpool-pad",
        lambda t: (
            nn.AvgPool2d(3, 2, 1, count_include_pad=False),
            t.nn.AvgPool2d(3, 2, 1, count_include_pad=False),
        ),
        (1, 2, 7, 7),
    ),
    ("relu", lambda t: (nn.ReLU(), t.nn.ReLU()), (4, 9)),
    ("tanh", lambda t: (nn.Tanh(), t.nn.Tanh()), (4, 9)),
    ("sigmoid", lambda t: (nn.Sigmoid(), t.nn.Sigmoid()), (4, 9)),
    ("gelu", lambda t: (nn.GELU(), t.nn.GELU()), (4, 9)),
    ("gelu-tanh", lambda t: (nn.GELU("tanh"), t.nn.GELU("tanh")), (4, 9)),
    ("softmax", lambda t: (nn.Softmax(dim=1), t.nn.Softmax(dim=1)), (4, 9, 2)),
    ("logsoftmax", lambda t: (nn.LogSoftmax(dim=-1), t.nn.LogSoftmax(dim=-1)), (4, 9)),
    ("flatten", lambda t: (nn.Flatten(), t.nn.Flatten()), (2, 3, 4, 5)),
    ("layernorm", lambda t: (nn.LayerNorm(6), t.nn.LayerNorm(6)), (3, 4, 6)),
    ("layernorm-2d", lambda t: (nn.LayerNorm((4, 6)), t.nn.LayerNorm((4, 6))), (3, 4, 6)),
    ("batchnorm2d", lambda t: (nn.BatchNorm2d(3), t.nn.BatchNorm2d(3)), (4, 3, 5, 5)),
    ("batchnorm1d", lambda t: (nn.BatchNorm1d(5), t.nn.BatchNorm1d(5)), (8, 5)),
    ("dropout-eval", lambda t: (nn.Dropout(0.4).eval(), t.nn.Dropout(0.4).eval()), (4, 9)),
]


@pytest.mark.parametrize("make, shape", [c[1:] for c in LAYER_CASES], ids=[c[0] for c in LAYER_CASES])
def test_layer_matches_torch(make, shape):
    torch = _torch()
    torch.manual_seed(0)
    lg.manual_seed(0)
    ours, theirs = make(torch)
    x = _rand(*shape, seed=1)
    _compare(ours, theirs, x)


def test_affine_params_match_torch_after_perturbation():
    # LayerNorm/BatchNorm start with weight 1, bias 0: perturb so the affine part is exercised.
    torch = _torch()
    for ours, theirs, shape in (
        (nn.LayerNorm(5), torch.nn.LayerNorm(5), (3, 5)),
        (nn.BatchNorm2d(2), torch.nn.BatchNorm2d(2), (3, 2, 3, 3)),
    ):
        ours.load_state_dict(
            {
                **ours.state_dict(),
                "weight": _rand(*ours.weight.shape, seed=3),
                "bias": _rand(*ours.bias.shape, seed=4),
            }
        )
        _compare(ours, theirs, _rand(*shape, seed=5))


def test_batchnorm_eval_and_running_stats_match_torch():
    torch = _torch()
    ours, theirs = nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
    for s in range(3):
        x = _rand(4, 3, 5, 5, seed=s) * 2 + 1
        ours(lg.asarray(x))
        theirs(torch.from_numpy(x))
    for k, v in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[k], v.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
    ours.eval(), theirs.eval()
    _compare(ours, theirs, _rand(2, 3, 5, 5, seed=7))


def test_embedding_matches_torch():
    torch = _torch()
    ours, theirs = nn.Embedding(10, 4, padding_idx=0), torch.nn.Embedding(10, 4, padding_idx=0)
    assert np.all(ours.weight.numpy()[0] == 0)
    _copy_to_torch(ours, theirs)
    idx = np.array([[1, 0, 3], [3, 9, 0]])
    out = ours(idx)
    r = _rand(2, 3, 4, seed=2)
    (g,) = lg.grad((out * lg.asarray(r)).sum(), [ours.weight])
    outt = theirs(torch.from_numpy(idx))
    (outt * torch.from_numpy(r)).sum().backward()
    np.testing.assert_allclose(out.numpy(), outt.detach().numpy())
    np.testing.assert_allclose(g.numpy(), theirs.weight.grad.numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(TypeError, match="embedding: indices must be integers"):
        ours(np.array([0.5]))


def test_layer_errors_at_record_time():
    with pytest.raises(ValueError, match=r"linear: input of shape \(2,3\).*weight of shape \(4,5\)"):
        nn.Linear(5, 4)(lg.zeros((2, 3), dtype=lg.float32))
    with pytest.raises(ValueError, match="conv2d"):
        nn.Conv2d(3, 4, 3)(lg.zeros((1, 2, 8, 8), dtype=lg.float32))
    with pytest.raises(ValueError, match="layer_norm.*normalized_shape"):
        nn.LayerNorm(4)(lg.zeros((2, 3)))
    with pytest.raises(ValueError, match="same"):
        nn.Conv2d(1, 1, 4, padding="same")
