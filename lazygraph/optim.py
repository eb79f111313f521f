"""Optimizers: SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW.

`step()` records each parameter update as a memory transaction on the parameter (`p -= ...`,
under `no_grad`) and is then THE evaluation point of a training step: it evaluates every
parameter and every optimizer state array in one graph, together with the loss that
`backward()` deferred. So forward, backward and update run as one graph, and afterwards the
parameters are plain buffers again: the graph does not grow from one step to the next, and
reading the loss (`float(loss)`) costs nothing.

    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()    # one graph, evaluated here
    print(float(loss))                               # already computed

Values that change from step to step (the learning rate, Adam's bias corrections) enter the
graph as 0-d array leaves rather than Python scalars, so every step records the same graph
structure.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from lazygraph import api, txn
from lazygraph.array import Array, constant, from_node
from lazygraph.creation import zeros
from lazygraph.engine.evaluate import evaluate
from lazygraph.gradmode import enable_grad, no_grad
from lazygraph.shape import copy

#: weak references to callables every step runs first with the parameters that have gradients:
#: lazygraph.nn.parallel.DataParallel records their all-reduce there, inside the step's graph
GRAD_HOOKS: list[weakref.WeakMethod] = []


def register_grad_hook(method: Callable[[list[Array]], None]) -> None:
    """Run a bound method before every optimizer step's updates (held weakly: no leak)."""
    GRAD_HOOKS.append(weakref.WeakMethod(method))


def _run_grad_hooks(params: list[Array]) -> None:
    GRAD_HOOKS[:] = [h for h in GRAD_HOOKS if h() is not None]
    for h in GRAD_HOOKS:
        fn = h()
        if fn is not None:
            fn(params)


def _leaf(value: float, dtype: np.dtype, device: Any, role: str) -> Array:
    """A 0-d array leaf in the parameter's dtype, on its device (its value may differ from step to step).

    One leaf node per (role, value, dtype, device) is kept and shared: every parameter of a step
    reads the same learning rate or bias correction, so the step's graph has one leaf for it
    instead of one per parameter (fewer leaves to record, hash and bind), and a value that stays
    the same (a constant learning rate) is not copied anew each step. The role keeps two
    quantities that happen to be equal apart, so the graph's structure does not depend on that.
    """
    key = (role, float(value), dtype, device)
    node = _LEAVES.get(key)
    if node is None:
        if len(_LEAVES) >= 256:
            _LEAVES.clear()
        node = _LEAVES[key] = constant(np.asarray(value, dtype=dtype), device=device)
    return from_node(node)


#: (role, value, dtype, device) -> the shared 0-d leaf `_leaf` hands out (read-only buffers)
_LEAVES: dict[tuple, Any] = {}


def _zeros_state(p: Array) -> Array:
    """Fresh optimizer state: a zero buffer leaf, so the first step records the same graph
    structure as every later one (whose state is an evaluated buffer)."""
    return from_node(constant(np.zeros(p.shape, dtype=p.dtype), device=p.device))


def _follow(p: Array, state: dict[str, Any]) -> None:
    """Move a parameter's state to the parameter's device (after `module.to(device)`)."""
    d = p._storage.node.device
    for k, v in state.items():
        if isinstance(v, Array) and v._storage.node.device is not d:
            state[k] = v.to(d)


class Optimizer:
    """Base class: parameter groups with per-group hyper-parameters, per-parameter state."""

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self.param_groups: list[dict[str, Any]] = []
        #: id(parameter) -> its state (arrays and counters); parameters are held by the groups
        self.state: dict[int, dict[str, Any]] = {}
        params = list(params)
        if not params:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, group: dict[str, Any]) -> None:
        """Add parameters with their own hyper-parameters (missing ones take the defaults)."""
        group = dict(group)
        ps = group["params"]
        ps = [ps] if isinstance(ps, Array) else list(ps)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for p in ps:
            if not isinstance(p, Array):
                raise TypeError(
                    f"{type(self).__name__}: parameters must be lazygraph arrays, got {type(p).__name__}"
                )
            if not p.requires_grad or p._view is not None:
                raise ValueError(
                    f"{type(self).__name__}: can only optimize whole arrays that require grad "
                    f"(got shape {p.shape}, requires_grad={p.requires_grad})"
                )
            if id(p) in seen:
                raise ValueError(f"{type(self).__name__}: a parameter appears in more than one group")
            seen.add(id(p))
        group["params"] = ps
        for k, v in self.defaults.items():
            group.setdefault(k, v)
        self._check_group(group)
        self.param_groups.append(group)

    def _check_group(self, group: dict[str, Any]) -> None:
        if group["lr"] < 0:
            raise ValueError(f"{type(self).__name__}: invalid learning rate {group['lr']}")
        if group.get("weight_decay", 0) < 0:
            raise ValueError(f"{type(self).__name__}: invalid weight_decay {group['weight_decay']}")

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget accumulated gradients before the next backward()."""
        for g in self.param_groups:
            for p in g["params"]:
                if set_to_none or p.grad is None:
                    p.grad = None
                else:
                    p.grad = zeros(p.shape, dtype=p.dtype)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Record every parameter's update, then evaluate the whole training step as one graph."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        undo = self._snapshot()
        try:
            with no_grad():
                if GRAD_HOOKS:
                    _run_grad_hooks([p for g in self.param_groups for p in g["params"] if p.grad is not None])
                for group in self.param_groups:
                    for p in group["params"]:
                        if p.grad is not None:
                            state = self.state.setdefault(id(p), {})
                            _follow(p, state)
                            self._update(p, p.grad, state, group)
            self._materialize()
        except BaseException:
            # a failed step (a bad label, an interrupt) is no step: parameters, state arrays and
            # counters go back to their values before it, so the next step is the one it replaced
            self._restore(undo)
            raise
        return loss

    def _snapshot(self) -> tuple[dict, list]:
        """What a step changes: per-parameter state entries and the value of every array."""
        state = {k: (v, dict(v)) for k, v in self.state.items()}
        arrays = [p for g in self.param_groups for p in g["params"]]
        arrays += [v for st in self.state.values() for v in st.values() if isinstance(v, Array)]
        return state, [(a._storage, a._storage.node) for a in arrays]

    def _restore(self, undo: tuple[dict, list]) -> None:
        """Undo a step that failed: state entries and counters, then the arrays' values."""
        state, values = undo
        for k in [k for k in self.state if k not in state]:
            del self.state[k]  # a first step's fresh state
        for k, (entries, saved) in state.items():
            entries.clear()
            entries.update(saved)
            self.state[k] = entries
        for storage, node in values:
            txn.restore(storage, node)

    def _update(self, p: Array, g: Array, state: dict[str, Any], group: dict[str, Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define _update")

    def _materialize(self) -> None:
        """The evaluation point: parameters and state in one graph (with the deferred loss)."""
        arrays = [p for g in self.param_groups for p in g["params"]]
        arrays += [v for st in self.state.values() for v in st.values() if isinstance(v, Array)]
        evaluate([a.node for a in arrays])

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {v}" for k, v in sorted(g.items()) if k != "params"]
        return "\n".join(lines + [")"])


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, dampening, Nesterov and weight decay.

    The update is PyTorch's: d = g + wd * p; buf = momentum * buf + (1 - dampening) * d
    (buf = d on the first step); d = d + momentum * buf (Nesterov) or buf; p -= lr * d.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        maximize: bool = False,
    ) -> None:
        if momentum < 0:
            raise ValueError(f"SGD: invalid momentum {momentum}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum requires a momentum and zero dampening")
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    def _update(self, p: Array, g: Array, state: dict[str, Any], group: dict[str, Any]) -> None:
        d = -g if group["maximize"] else g
        if group["weight_decay"]:
            d = d + p * group["weight_decay"]
        mu = group["momentum"]
        if mu:
            buf = state.get("momentum_buffer")
            if buf is None and group["dampening"]:
                buf = state["momentum_buffer"] = copy(d)  # the first step's buffer is d itself
            else:
                if buf is None:  # without dampening mu * 0 + d is exactly d: one graph for every step
                    buf = state["momentum_buffer"] = _zeros_state(p)
                buf *= mu
                buf += d * (1.0 - group["dampening"]) if group["dampening"] else d
            d = d + buf * mu if group["nesterov"] else buf
        p -= _leaf(group["lr"], p.dtype, p.device, "lr") * d


class Adam(Optimizer):
    """Adam (Kingma & Ba) with PyTorch's update; weight_decay adds wd * p to the gradient (L2).

    m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
    p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)   (amsgrad: max of v so far).
    """

    decoupled = False

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        maximize: bool = False,
    ) -> None:
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"{type(self).__name__}: invalid betas {betas}")
        if eps < 0:
            raise ValueError(f"{type(self).__name__}: invalid eps {eps}")
        defaults = dict(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize
        )
        super().__init__(params, defaults)

    def _update(self, p: Array, g: Array, state: dict[str, Any], group: dict[str, Any]) -> None:
        b1, b2 = group["betas"]
        lr, wd = group["lr"], group["weight_decay"]
        if group["maximize"]:
            g = -g
        if not state:
            state["step"] = 0
            state["exp_avg"] = _zeros_state(p)
            state["exp_avg_sq"] = _zeros_state(p)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = _zeros_state(p)
        state["step"] += 1
        t = state["step"]
        if wd:
            if self.decoupled:
                p *= _leaf(1.0 - lr * wd, p.dtype, p.device, "decay")
            else:
                g = g + p * wd
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m *= b1
        m += g * (1.0 - b1)
        v *= b2
        v += g * g * (1.0 - b2)
        if group["amsgrad"]:
            vmax = state["max_exp_avg_sq"]
            vmax[...] = api.maximum(vmax, v)
            v = vmax
        step_size = _leaf(lr / (1.0 - b1**t), p.dtype, p.device, "step_size")
        inv_bc2 = _leaf(1.0 / math.sqrt(1.0 - b2**t), p.dtype, p.device, "inv_bc2")
        p -= step_size * m / (api.sqrt(v) * inv_bc2 + group["eps"])


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr * wd before the Adam step (default wd 0.01)."""

    decoupled = True

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        maximize: bool = False,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize)


__all__ = ["Optimizer", "SGD", "Adam", "AdamW"]
