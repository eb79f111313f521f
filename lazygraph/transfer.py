"""Transfers: a value moved to another device is an evaluated copy, a leaf of the new device.

`x.to(device)` / `x.to_device(device)` (installed on `Array` here) and `nn.Module.to` (in place,
through `move_`). The value comes to the host (`host_value`: a counted copy from a device's
memory) and goes into the destination's memory (`on_device`: a counted copy where that is not
the host's; to the CPU the read-only host array is shared). See lazygraph/device.py.
"""

from __future__ import annotations

from typing import Any

from lazygraph.array import Array, from_node
from lazygraph.device import canonical, of, on_device
from ops.creation import BUFFER
from ops.node import Node


def _copy_leaf(node: Node, value: Any, dst: str) -> Node:
    """A leaf on `dst` holding host `value`, copied into `dst`'s memory where it is not the host's."""
    fresh = Node(BUFFER, (), {}, node.shape, node.dtype, buffer=on_device(value, dst))
    fresh.device = dst
    fresh.static = node.static
    return fresh


def transfer(x: Array, device: Any) -> Array:
    """`x` on `device`: itself when it is there, else an evaluated copy (a leaf of the new device).

    A parameter (a grad leaf) gives a new leaf that requires grad; gradients do not flow through
    a transfer, so moving any other array that requires grad is an error.
    """
    dst = canonical(device)
    node = x.node
    if of(node) is dst:
        return x
    leaf = node.grad_leaf and node.requires_grad
    if node.requires_grad and not leaf:
        raise RuntimeError(
            f"to({dst!r}): gradients do not flow through a device transfer; move the parameters "
            "(or the inputs) instead, or detach() this array first"
        )
    out = from_node(_copy_leaf(node, x._value(), dst))
    if leaf:
        out.requires_grad = True
    return out


def move_(x: Array, device: Any) -> None:
    """Put the value of a whole array (a parameter, a buffer) on `device` in place, with its `.grad`."""
    dst = canonical(device)
    if x._view is not None:
        raise ValueError("to: only a whole array moves in place, not a view")
    storage = x._storage
    node = storage.node
    if of(node) is not dst:
        storage.set(_copy_leaf(node, x._value(), dst))  # a parameter's value stays a grad leaf
    if storage.grad is not None:
        storage.grad = transfer(storage.grad, dst)


def _to(self: Array, device: Any) -> Array:
    """This array on `device`: itself when it is there, else an evaluated copy (a transfer)."""
    return transfer(self, device)


Array.to = _to
