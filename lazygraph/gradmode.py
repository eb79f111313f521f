"""Whether recording tracks gradients (`lg.no_grad()` switches it off for a block)."""

from __future__ import annotations

import contextlib
import threading

from ops.node import Node


class _GradState(threading.local):
    """Per-thread switch; a class default, so reading it on a fresh thread raises nothing inside."""

    enabled = True


_local = _GradState()
#: the per-thread switch itself (`GRAD_STATE.enabled`), for the lean recording path
GRAD_STATE = _local


def is_grad_enabled() -> bool:
    """True when newly recorded operations are tracked for differentiation."""
    return _local.enabled


def set_grad_enabled(mode: bool) -> None:
    """Switch gradient tracking on or off for this thread."""
    _local.enabled = bool(mode)


class no_grad(contextlib.ContextDecorator):  # noqa: N801 - PyTorch's spelling
    """Context manager and decorator: operations recorded inside are not differentiated."""

    def __enter__(self) -> None:
        self._prev = is_grad_enabled()
        set_grad_enabled(False)

    def __exit__(self, *exc: object) -> None:
        set_grad_enabled(self._prev)


class enable_grad(contextlib.ContextDecorator):  # noqa: N801 - PyTorch's spelling
    """Context manager and decorator: track gradients again inside a no_grad block."""

    def __enter__(self) -> None:
        self._prev = is_grad_enabled()
        set_grad_enabled(True)

    def __exit__(self, *exc: object) -> None:
        set_grad_enabled(self._prev)


def track(node: Node) -> Node:
    """Mark a freshly recorded node as differentiable when an input requires grad.

    A floating-point node recorded while tracking is off is a grad leaf: differentiation stops
    there, also for grad() with respect to an array that does not require grad.
    """
    if node.dtype.kind in "fc":  # complex intermediates (fft) carry gradients too
        if _local.enabled:
            for inp in node.inputs:
                if inp.requires_grad:
                    node.requires_grad = True
                    break
        else:
            node.grad_leaf = True
    return node
