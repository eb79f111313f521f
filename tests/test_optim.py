"""lg.optim: each optimizer's steps against hand-computed updates, PyTorch where installed, and
the training-step contract (one evaluation per step, a graph that does not grow)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import lazygraph as lg
from lazygraph import nn
from lazygraph.debug import evaluation_stats

STEPS = 4


def _grads(shape: tuple[int, ...], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape) for _ in range(STEPS)]


def _run(make_opt, p0: np.ndarray, grads: list[np.ndarray]) -> list[np.ndarray]:
    """Parameter values after each step, feeding the given gradients."""
    p = nn.Parameter(p0.copy())
    opt = make_opt([p])
    out = []
    for g in grads:
        p.grad = lg.asarray(g)
        opt.step()
        out.append(np.array(p.numpy()))
    return out


# -- hand-computed references (the update rules written out, as in the papers / PyTorch docs) --


def sgd_reference(
    p, grads, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False
):
    p, buf, out = p.copy(), None, []
    for g in grads:
        d = -g if maximize else g
        d = d + weight_decay * p
        if momentum:
            buf = d.copy() if buf is None else momentum * buf + (1 - dampening) * d
            d = d + momentum * buf if nesterov else buf
        p = p - lr * d
        out.append(p)
    return out


def adam_reference(p, grads, lr, b1, b2, eps, weight_decay=0.0, decoupled=False, amsgrad=False):
    p, m, v, vmax, out = p.copy(), 0.0, 0.0, 0.0, []
    for t, g in enumerate(grads, start=1):
        if decoupled:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        vhat = np.maximum(vmax, v) if amsgrad else v
        vmax = vhat
        mhat, denom = m / (1 - b1**t), np.sqrt(vhat) / math.sqrt(1 - b2**t) + eps
        p = p - lr * mhat / denom
        out.append(p)
    return out


SGD_CASES = [
    dict(lr=0.1),
    dict(lr=0.05, momentum=0.9),
    dict(lr=0.05, momentum=0.9, dampening=0.3),
    dict(lr=0.05, momentum=0.8, nesterov=True),
    dict(lr=0.05, momentum=0.9, weight_decay=0.01),
    dict(lr=0.01, weight_decay=0.1, maximize=True),
]


@pytest.mark.parametrize("kw", SGD_CASES, ids=lambda kw: ",".join(kw))
def test_sgd_matches_hand_computed(kw):
    p0 = np.random.default_rng(1).standard_normal((3, 4))
    grads = _grads(p0.shape, 2)
    got = _run(lambda ps: lg.optim.SGD(ps, **kw), p0, grads)
    for a, b in zip(got, sgd_reference(p0, grads, **kw)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


ADAM_CASES = [
    ("adam", dict(lr=0.01)),
    ("adam", dict(lr=0.01, weight_decay=0.1)),
    ("adam", dict(lr=0.003, betas=(0.8, 0.99), eps=1e-6, amsgrad=True)),
    ("adamw", dict(lr=0.01)),
    ("adamw", dict(lr=0.01, weight_decay=0.3, amsgrad=True)),
]


@pytest.mark.parametrize("name, kw", ADAM_CASES, ids=[f"{n}-{','.join(kw)}" for n, kw in ADAM_CASES])
def test_adam_family_matches_hand_computed(name, kw):
    p0 = np.random.default_rng(3).standard_normal((5,))
    grads = _grads(p0.shape, 4)
    cls = lg.optim.Adam if name == "adam" else lg.optim.AdamW
    got = _run(lambda ps: cls(ps, **kw), p0, grads)
    b1, b2 = kw.get("betas", (0.9, 0.999))
    wd = kw.get("weight_decay", 0.01 if name == "adamw" else 0.0)
    want = adam_reference(
        p0,
        grads,
        kw["lr"],
        b1,
        b2,
        kw.get("eps", 1e-8),
        wd,
        decoupled=name == "adamw",
        amsgrad=kw.get("amsgrad", False),
    )
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@given(
    lr=st.floats(1e-4, 1.0),
    momentum=st.sampled_from([0.0, 0.5, 0.9]),
    wd=st.sampled_from([0.0, 1e-3, 0.1]),
    nesterov=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_sgd_property(lr, momentum, wd, nesterov, seed):
    nesterov = nesterov and momentum > 0
    p0 = np.random.default_rng(seed).standard_normal((2, 3))
    grads = _grads(p0.shape, seed + 1)
    kw = dict(lr=lr, momentum=momentum, weight_decay=wd, nesterov=nesterov)
    got = _run(lambda ps: lg.optim.SGD(ps, **kw), p0, grads)
    for a, b in zip(got, sgd_reference(p0, grads, **kw)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw"])
def test_optimizers_match_torch_on_a_model(name):
    torch = pytest.importorskip("torch")
    lg.manual_seed(0)
    ours = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    theirs = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    theirs.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in ours.state_dict().items()})
    make = {
        "sgd": (
            lambda m, mod: m.SGD(mod.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2)
        ),
        "adam": (lambda m, mod: m.Adam(mod.parameters(), lr=0.01, weight_decay=1e-3)),
        "adamw": (lambda m, mod: m.AdamW(mod.parameters(), lr=0.01)),
    }[name]
    opt, topt = make(lg.optim, ours), make(torch.optim, theirs)
    rng = np.random.default_rng(0)
    for _ in range(5):
        x = rng.standard_normal((10, 6)).astype(np.float32)
        y = rng.integers(0, 3, 10)
        loss = nn.functional.cross_entropy(ours(lg.asarray(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        tloss = torch.nn.functional.cross_entropy(theirs(torch.from_numpy(x)), torch.from_numpy(y))
        topt.zero_grad()
        tloss.backward()
        topt.step()
        assert abs(float(loss) - tloss.item()) < 1e-5
    for k, v in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[k], v.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)


# -- the training-step contract ---------------------------------------------------------------


def _model_and_data():
    lg.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.BatchNorm1d(16), nn.Linear(16, 3))
    rng = np.random.default_rng(0)
    data = [(rng.standard_normal((8, 5)).astype(np.float32), rng.integers(0, 3, 8)) for _ in range(6)]
    return model, data


def _reachable(arrays) -> int:
    seen, stack = set(), [a.node for a in arrays]
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            stack.extend(n.inputs)
    return len(seen)


@pytest.mark.parametrize(
    "make", [lambda ps: lg.optim.SGD(ps, 0.1, momentum=0.9), lambda ps: lg.optim.Adam(ps)]
)
def test_one_evaluation_per_step_and_graph_does_not_grow(make):
    model, data = _model_and_data()
    opt = make(model.parameters())
    sizes = []
    for x, y in data:
        loss = nn.functional.cross_entropy(model(lg.asarray(x)), y)
        opt.zero_grad()
        loss.backward()
        before = evaluation_stats()["evaluations"]
        opt.step()
        assert evaluation_stats()["evaluations"] == before + 1
        assert loss.node.buffer is not None  # the deferred loss was computed in the same graph
        float(loss)
        assert evaluation_stats()["evaluations"] == before + 1  # reading it costs nothing
        state = [v for st in opt.state.values() for v in st.values() if isinstance(v, lg.Array)]
        grads = [p.grad for p in model.parameters()]
        arrays = [*model.parameters(), *model.buffers(), *state, *grads]
        # every parameter, buffer, gradient and state array is a plain evaluated leaf
        assert all(a.node.buffer is not None and not a.node.inputs for a in arrays)
        sizes.append(_reachable(arrays))
    assert len(set(sizes)) == 1 and sizes[-1] == len(arrays), sizes


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: lg.optim.SGD(ps, 0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
        lambda ps: lg.optim.Adam(ps, amsgrad=True),
        lambda ps: lg.optim.AdamW(ps),
    ],
)
def test_every_step_records_the_same_graph(make, monkeypatch):
    # The first step too: fresh optimizer state is a zero buffer, not a creation op, and the
    # step-dependent scalars (lr, bias corrections) are 0-d leaves, not structure.
    monkeypatch.setenv("LAZYGRAPH_CACHE", "1")
    model, data = _model_and_data()
    opt = make(model.parameters())
    lg.cache.reset_stats()
    for x, y in data:
        loss = nn.functional.cross_entropy(model(lg.asarray(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    st = lg.cache.stats()
    assert st["evaluations"] == len(data) and st["distinct_graphs"] == 1, st


@pytest.mark.parametrize(
    "make, scalars",
    [
        (lambda ps: lg.optim.SGD(ps, 0.1, momentum=0.9), 1),  # the learning rate
        (lambda ps: lg.optim.Adam(ps), 2),  # the step size and the second moment's correction
        (lambda ps: lg.optim.AdamW(ps), 3),  # and the decay factor
    ],
)
def test_a_step_reads_each_hyperparameter_from_one_leaf(make, scalars, monkeypatch):
    # every parameter's update reads the same 0-d leaves: one per quantity, not one per parameter
    model, data = _model_and_data()
    opt = make(model.parameters())
    seen = []
    real = lg.optim.Optimizer._materialize

    def capture(self):
        params = [p for g in self.param_groups for p in g["params"]]
        stack, ids, leaves = [p.node for p in params], set(), set()
        while stack:
            n = stack.pop()
            if id(n) in ids:
                continue
            ids.add(id(n))
            if not n.inputs and n.buffer is not None and n.shape == () and n.dtype == np.float32:
                leaves.add(id(n))
            stack.extend(n.inputs)
        seen.append(len(leaves))
        real(self)

    monkeypatch.setattr(lg.optim.Optimizer, "_materialize", capture)
    for x, y in data[:3]:
        loss = nn.functional.cross_entropy(model(lg.asarray(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert seen == [scalars] * 3, seen


def test_zero_grad_and_skipped_parameters():
    a, b = nn.Parameter(np.ones(3)), nn.Parameter(np.ones(2))
    opt = lg.optim.SGD([a, b], lr=0.5)
    (a * 2).sum().backward()
    opt.step()
    np.testing.assert_allclose(a.numpy(), 0.0)
    np.testing.assert_allclose(b.numpy(), 1.0)  # no gradient, no update
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(a.grad.numpy(), np.zeros(3))
    opt.zero_grad()
    assert a.grad is None and b.grad is None


def test_param_groups_and_closure():
    a, b = nn.Parameter(np.ones(2)), nn.Parameter(np.ones(2))
    opt = lg.optim.SGD([{"params": [a]}, {"params": [b], "lr": 1.0}], lr=0.1)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 1.0]

    def closure():
        opt.zero_grad()
        loss = (a + b).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert float(loss) == 4.0
    np.testing.assert_allclose(a.numpy(), 0.9)
    np.testing.assert_allclose(b.numpy(), 0.0)
    opt.param_groups[0]["lr"] = 0.5  # a changed learning rate applies at the next step
    opt.zero_grad()
    (a.sum()).backward()
    opt.step()
    np.testing.assert_allclose(a.numpy(), 0.4)


def test_optimizer_argument_errors():
    p = nn.Parameter(np.ones(2))
    with pytest.raises(ValueError, match="empty"):
        lg.optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="learning rate"):
        lg.optim.SGD([p], lr=-1)
    with pytest.raises(ValueError, match="Nesterov"):
        lg.optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="require grad"):
        lg.optim.Adam([lg.ones(2)])
    with pytest.raises(ValueError, match="more than one group"):
        lg.optim.Adam([{"params": [p]}, {"params": [p]}])
    with pytest.raises(ValueError, match="betas"):
        lg.optim.Adam([p], betas=(1.0, 0.9))
    with pytest.raises(TypeError, match="lazygraph arrays"):
        lg.optim.SGD([np.ones(2)], lr=0.1)
