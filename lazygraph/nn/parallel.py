"""Data-parallel training: every process trains a replica on its shard of each batch.

    lg.distributed.init()                       # under `mpiexec -n N`
    model = nn.DataParallel(model)              # parameters broadcast from rank 0
    opt = lg.optim.Adam(model.parameters())
    loss = F.cross_entropy(model(x_shard), y_shard)
    opt.zero_grad(); loss.backward(); opt.step()  # gradients averaged inside the step's graph

As PyTorch's DistributedDataParallel: the wrapped module is `.module` (state-dict keys gain
the `module.` prefix), rank 0's parameters and buffers reach every rank at construction, and
each optimizer step averages the gradients over the ranks before it updates. The average is
recorded by the optimizer's step (`lg.optim.register_grad_hook`) into the step's one graph,
so forward, backward, the all-reduce and the update are one cached graph. Gradients are
recorded one all-reduce per gradient, last layers first (the order backward produces them), and
the executor posts consecutive ones as one flat call up to `lg.distributed.set_bucket_bytes`
(1 MiB by default). `bucket_bytes > 0` flattens them in the recorded graph instead (a copy
into one array per bucket, then views). With one process the wrapper changes nothing.
"""

from __future__ import annotations

from typing import Any

from lazygraph import distributed
from lazygraph.api import eval as evaluate_arrays
from lazygraph.array import Array
from lazygraph.nn.module import Module
from lazygraph.optim import register_grad_hook


class DataParallel(Module):
    """Replicate `module` over the processes of `lg.distributed` (initialized here if not yet)."""

    def __init__(self, module: Module, bucket_bytes: int = 0, broadcast: bool = True) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DataParallel: expected an nn.Module, got {type(module).__name__}")
        if bucket_bytes < 0:
            raise ValueError(f"DataParallel: bucket_bytes must be >= 0, got {bucket_bytes}")
        distributed.init()
        self.module = module
        self.bucket_bytes = bucket_bytes
        self._mine = {id(p) for p in module.parameters()}
        if broadcast:
            self.broadcast_state()
        register_grad_hook(self._average_gradients)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped module's forward on this rank's inputs."""
        return self.module(*args, **kwargs)

    def broadcast_state(self) -> None:
        """Give every rank rank 0's parameters and buffers (one graph, one evaluation)."""
        if distributed.world_size() == 1:
            return
        state = self.module._state_arrays()
        values = evaluate_arrays(*[distributed.broadcast(a, root=0) for a in state.values()])
        self.module.load_state_dict(dict(zip(state, values)))

    def _average_gradients(self, params: list[Array]) -> None:
        """Called by each optimizer step: replace this model's gradients by their mean over ranks."""
        if distributed.world_size() == 1:
            return
        mine = [p for p in params if id(p) in self._mine][::-1]  # backward's order: last layer first
        if not mine:
            return
        averaged = distributed.all_reduce_coalesced([p.grad for p in mine], "mean", self.bucket_bytes)
        for p, g in zip(mine, averaged):
            p.grad = g


DistributedDataParallel = DataParallel

__all__ = ["DataParallel", "DistributedDataParallel"]
