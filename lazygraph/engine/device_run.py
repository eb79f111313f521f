"""The run loop of a program on a device whose memory is not the host's ("cuda", "cuda-emulated").

A `Program` built for such a device (program.py: chosen once, when the program is built) runs
here instead of its host loop. Its values are the device's arrays from the first step to the
last:

- leaves are bound as they are held: a device array stays one. A leaf of this device that still
  holds host data (made by a creation function before it was placed) is copied to the device
  once, and the node keeps the device copy, so the next evaluation binds it without a copy; a
  neutral host constant (`x + np.ones(3)`) is copied once per distinct value (up to 64 KiB;
  larger ones for each run: lazygraph/device.py `constant`). Both are counted
  (`jit.backend.transfers`).
- fused regions, window steps and library steps (GEMM and its bias/ReLU epilogue, on the
  device through `DeviceLibraryKernel`) launch on the device arrays and return device arrays;
- every other step runs its operator's reference kernel on the device arrays through their
  namespace (ops/namespace.py: CuPy's module on "cuda", the emulated namespace on
  "cuda-emulated"), which allocates on the device; creation operators without inputs get the
  device's namespace as their `xp` (`CreationKernel`), folded steps run through it
  (`DeviceMemoKernel`), and collectives on "cuda-emulated" run the host transport on the memory
  behind the device arrays (`RawMemoryKernel`, as NCCL reads device memory on "cuda");
- a step that still returns host data (a memo step's constant, a host-only kernel) has its value
  copied to the device, counted in `jit.backend.transfers` and by step in `jit.backend.host_steps`
  (LAZYGRAPH_DEBUG=1 logs each run's copies to the device, =2 each such step).

Only `.numpy()`, printing and `to("cpu")` copy values back (lazygraph/array.py, transfer.py).

Like the host loop it follows the memory planner's layout (`out=` into buffers freed earlier
in the run) and writes into a dying base or an evaluated buffer in place, with the device
backend's `held_only` in place of NumPy's reference counts (device_memory.py). The meter
(LAZYGRAPH_DEBUG) sees the memory behind each device array (`be.memory` on the emulator, so
views alias their base) and the per-step trace works as on the host.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable
from math import prod
from typing import Any

import numpy as np

from jit.backend import Backend, count_host_step, transfers
from lazygraph import debug, device
from lazygraph.engine import device_memory
from lazygraph.engine.kernels import Kernel, OpKernel
from ops.base import REGISTRY
from ops.creation import SCALAR
from ops.node import Node
from optimizer.fold import MEMO_STATS


def bind_leaf(be: Backend, node: Node) -> Any:
    """A leaf's value on device `be`: its device array, or its host data copied there (counted).

    A node of this device keeps the copy, so it is copied once however often it is read; a
    neutral host constant (`x + np.ones(3)`) is copied once per distinct value
    (`lazygraph.device.constant`).
    """
    b = node.buffer
    if be.is_buffer(b) or node.op is SCALAR or not isinstance(b, (np.ndarray, np.generic)):
        return b
    if node.device != be.name:
        return device.constant(be, b)  # a neutral host constant: copied once per distinct value
    d = be.to_device(b)
    node.buffer = d  # the same value, now in device memory: later runs bind it as it is
    node.kid = None  # its local id names the buffer's type and memory: found again (cache/)
    return d


def adopt(be: Backend, v: Any, what: str) -> Any:
    """A step's value that is not a device array, copied to the device (counted by step)."""
    count_host_step(be.name, what)
    debug.log(f"{be.name}: {what} gave a host value; copied to the device", at=2)
    if not isinstance(v, np.ndarray):
        v = np.asarray(v)  # a Python or NumPy scalar: host data by nature
    return be.to_device(v)


def run(
    program: Any,
    be: Backend,
    nodes: list[Node],
    keep: set[int],
    meter: Any = None,
    trace: Callable | None = None,
    error: Callable | None = None,
    mismatch: Callable | None = None,
) -> list[Any]:
    """Bind the leaves, run every step on device arrays, free each value after its last reader.

    Follows the planner's layout learnt for this keep set (`program.layouts`, as the host loop
    is handed it), and writes in place where the run holds the base alone (device_memory.py).
    """
    vals: list[Any] = [None] * program.size
    start = transfers(be.name) if debug.level() >= 1 else None
    for q, p in program.leaves:
        vals[q] = bind_leaf(be, nodes[p])
    # what the meter sees of a device array: the host array owning its memory on the emulator
    mem = getattr(be, "memory", None) or _same_object
    if meter is not None:
        meter.start(program, [mem(x) if be.is_buffer(x) else x for x in vals])
    log: list = []
    try:
        reused, written = _loop(program, be, nodes, keep, vals, meter, mem, trace, error, mismatch, log)
    except BaseException:
        device_memory.undo(log)  # a failed run leaves the evaluated buffers it wrote into as they were
        raise
    log.clear()
    if meter is not None:
        meter.reused, meter.inplace = reused, written
    if start is not None:
        end = transfers(be.name)
        debug.log(
            f"{be.name}: this run copied {end['to_device'] - start['to_device']} values "
            f"({end['to_device_bytes'] - start['to_device_bytes']} bytes) to the device"
        )
    return vals


def _same_object(x: Any) -> Any:
    return x


def _loop(
    program: Any,
    be: Backend,
    nodes: list[Node],
    keep: set[int],
    vals: list,
    meter: Any,
    mem: Callable,
    trace: Callable | None,
    error: Callable | None,
    mismatch: Callable | None,
    log: list,
) -> tuple[int, int]:
    """`run`'s loop; returns (buffers reused, in-place writes)."""
    is_buffer = be.is_buffer
    first_value = program.first_value
    # the host's decisions made on device arrays: only a backend that can tell who holds a
    # device array's memory (`held_only`) reuses buffers or writes in place
    owned = hasattr(be, "held_only")
    layout = program.layouts.get(frozenset(keep)) if owned else None
    take = give = into = pool = None
    if layout is not None:
        take, give, into, pool = layout.take, layout.give, layout.into, [None] * layout.nbuf
    inplace, leaf_write = program.inplace, program.leaf_write
    logged: dict[int, int] = {}
    reused = written = 0
    for i, step in enumerate(program.steps):
        fn, ins, out, src, recover, dies, more = program.program[i]
        if recover is None:
            node = nodes[src]
            attrs, shape, dtype = node.attrs, node.shape, node.dtype
        else:
            attrs, shape, dtype = recover(nodes)
        t = time.perf_counter()
        try:
            v = None
            if owned:
                if inplace[i] and ins[0] not in keep:
                    base = device_memory.dying_base(be, vals, ins, dtype, logged)
                    if base is not None:
                        v = step.kernel.in_place(vals, ins, dtype, attrs, base)
                    base = None
                elif leaf_write[i] is not None:
                    v = device_memory.leaf_write(be, program, i, nodes, vals, dtype, attrs, log, logged)
                written += v is not None
                if v is None and take is not None and take[i] >= 0:
                    o = pool[take[i]]
                    if o is not None:
                        pool[take[i]] = None
                        if meter is not None:
                            meter.took(mem(o))
                        n = prod(shape)
                        if o.dtype == dtype and o.size >= n:
                            dest = o if tuple(o.shape) == shape else o.reshape(-1)[:n].reshape(shape)
                            v = into[i](*[vals[k] for k in ins], out=dest, **attrs)
                            reused += 1
                        o = dest = None
            if v is None:
                v = fn(*[vals[k] for k in ins], **attrs)
        except Exception as e:
            raise error(e, nodes, step, vals) from e
        if more is not None:
            if not isinstance(v, tuple) or len(v) != 1 + len(more):
                raise mismatch(nodes, step, v, (), None)
            for (slot, shape_of, dt), x in zip(more, v[1:]):
                if not is_buffer(x):
                    x = adopt(be, x, step.name)
                sh = tuple(shape_of(nodes))
                if tuple(x.shape) != sh or x.dtype != dt:
                    raise mismatch(nodes, step, x, sh, dt)
                vals[slot] = x
            v = v[0]
        if not is_buffer(v):
            v = adopt(be, v, nodes[src].op.name if src >= 0 else step.name)
        if tuple(v.shape) != shape or v.dtype != dtype:
            raise mismatch(nodes, step, v, shape, dtype)
        vals[out] = v
        v = None
        if meter is not None:
            k = first_value[i]
            meter.value(k, mem(vals[out]), ins, out, shape, dtype)
            for j, (slot, _, dt) in enumerate(more or (), 1):
                meter.value(k + j, mem(vals[slot]), ins, slot, tuple(vals[slot].shape), dt)
        if trace is not None:
            trace(nodes[src].op.name if src >= 0 else step.name, shape, dtype, time.perf_counter() - t)
        grabbed = None
        if give is not None and give[i]:
            # buffers a later step writes into, taken before their last holder in `vals` drops
            grabbed = [(vals[s], b) for s, b in give[i] if is_buffer(vals[s])]
        for d in dies:
            if d not in keep:
                if meter is not None:
                    meter.drop(d)
                vals[d] = None
        while grabbed:
            o, b = grabbed.pop()
            # pooled only when the run held it last (no view, memo, leaf or user shares it)
            if be.held_only(o, 1):
                pool[b] = o
                if meter is not None:
                    meter.pooled(mem(o))
            o = None
    return reused, written


class DeviceLibraryKernel(Kernel):
    """A library step (GEMM or a window producer, then its bias/ReLU epilogue) on device arrays.

    The device's form of optimizer/library.py's `build_library` step, which is written for
    host values: the producer is the device backend's call (cuBLAS through CuPy on "cuda"),
    the epilogue runs in place on its fresh value, and nothing leaves the device.
    """

    __slots__ = ("be", "producer", "call", "n_in", "bias", "relu")

    def __init__(self, be: Backend, data: dict) -> None:
        self.be = be
        self.producer = str(data["producer"])
        self.call = be.library(self.producer)
        if self.call is None:
            raise KeyError(f"library: no library call for {self.producer!r} on {be.name}")
        self.n_in, self.bias, self.relu = int(data["n_in"]), bool(data["bias"]), bool(data["relu"])

    def writer(self, attrs: dict | None, dtype: np.dtype) -> Callable | None:
        """A GEMM producer writes into a given device buffer (as the host's library step does)."""
        return self.run if self.producer == "matmul" else None

    def run(self, *inputs: Any, out: Any = None, **attrs: Any) -> Any:
        """The producer's value on the device, then its epilogue in place."""
        be, n = self.be, self.n_in
        if self.producer == "matmul":
            v = be.gemm(*inputs[:n], out=out)
        else:
            v = self.call(*inputs[:n], out=out, exact=True, **attrs)
        if any(be.is_buffer(x) and be.may_share(v, x) for x in inputs):
            c = be.empty(tuple(v.shape), v.dtype)  # never write into memory an input may share
            be.copyto(c, v)
            v = c
        return be.epilogue(v, inputs[n] if self.bias else None, self.relu)


class DeviceMemoKernel(Kernel):
    """A memo step (optimizer/fold.py: a folded subgraph of model state) on device arrays.

    fold.py's step converts each value with `np.asarray` and keys its memo by host memory;
    here the subgraph's reference kernels run through the device arrays' namespace, and the
    value is reused while the very same input objects come again (held, so their identities
    cannot be reused by other arrays meanwhile).
    """

    __slots__ = ("be", "program", "memo")

    def __init__(self, be: Backend, data: Any) -> None:
        self.be = be
        xp = be.namespace()
        self.program = [
            (_creation(REGISTRY[str(name)].kernel, xp), [(r[0], int(r[1])) for r in refs], list(names), name)
            for name, refs, names in data
        ]
        self.memo: tuple = (None, None)  # (key with the inputs held, value), replaced whole

    def run(self, *inputs: Any, out: Any = None, **attrs: Any) -> Any:
        """The subgraph's value: the held one while the inputs and attributes are the same."""
        key = (inputs, tuple(sorted(attrs.items(), key=lambda kv: kv[0])))
        held, value = self.memo
        if held is not None and len(held[0]) == len(inputs) and all(a is b for a, b in zip(held[0], inputs)):
            if _same(held[1], key[1]):
                MEMO_STATS["hits"] += 1  # counted as the host's memo steps count (lg's pass report)
                return value
        MEMO_STATS["misses"] += 1
        vals: list[Any] = []
        for j, (kernel, refs, names, name) in enumerate(self.program):
            args = [inputs[i] if kind == "i" else vals[i] for kind, i in refs]
            v = kernel(*args, **{a: attrs[f"{j}:{a}"] for a in names})
            vals.append(v if self.be.is_buffer(v) else adopt(self.be, v, f"memo:{name}"))
        value = vals[-1]
        self.memo = (key, value)
        MEMO_STATS["stored"] += 1
        return value


def _same(a: tuple, b: tuple) -> bool:
    """Attribute lists equal (views and arrays compared by identity where == is not a bool)."""
    try:
        return bool(a == b)
    except (ValueError, TypeError):
        return False


class CreationKernel(Kernel):
    """A creation operator without inputs (`full`, `arange`, `eye`, ...) made in the device's
    namespace (its kernel's `xp`), so the device allocates it: no host array, no copy."""

    __slots__ = ("fn", "xp")

    def __init__(self, fn: Callable, xp: Any) -> None:
        self.fn = fn
        self.xp = xp

    def run(self, *inputs: Any, out: Any = None, **attrs: Any) -> Any:
        """The operator's value, created on the device."""
        return self.fn(*inputs, xp=self.xp, **attrs)


class RawMemoryKernel(Kernel):
    """A collective's start or wait on "cuda-emulated": the host transport (MPI, tcp) runs on the
    memory behind the device arrays (`be.raw`, shared, no copy), as NCCL runs on device memory
    on "cuda"; the placeholder a start returns is the same memory its wait is handed."""

    __slots__ = ("fn", "be")

    def __init__(self, fn: Callable, be: Backend) -> None:
        self.fn = fn
        self.be = be

    def run(self, *inputs: Any, out: Any = None, **attrs: Any) -> Any:
        """The collective's step on the raw memory, its value a device array over it."""
        raw = self.be.raw  # type: ignore[attr-defined]
        return self.be.from_raw(self.fn(*[raw(x) for x in inputs], **attrs))  # type: ignore[attr-defined]


#: operators whose kernels hand arrays to a transport (lazygraph/distributed)
_TRANSPORT_OPS = frozenset({"collective_start", "collective_wait"})


def _creation(fn: Callable, xp: Any) -> Callable:
    """`fn` creating in namespace `xp` where it takes one (creation kernels), else `fn`."""
    try:
        takes = "xp" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        takes = False
    return functools.partial(fn, xp=xp) if takes else fn


def device_kernel(be: Backend, step: Any) -> Kernel:
    """The kernel a device program runs for `step`: the device's form of a library step, a memo
    step or a creation operator (the classes above), else the kernel its constructor built."""
    recipe, kernel = step.recipe, step.kernel
    ctor = getattr(recipe, "ctor", None)
    if ctor == "library" and isinstance(recipe.data, dict):
        return DeviceLibraryKernel(be, recipe.data)
    if ctor == "memo":
        return DeviceMemoKernel(be, recipe.data)
    op = getattr(kernel, "op", None)
    if isinstance(kernel, OpKernel) and op.name in _TRANSPORT_OPS and getattr(be, "host_transport", False):
        return RawMemoryKernel(op.kernel, be)
    if not step.ins and isinstance(kernel, OpKernel) and _creation(op.kernel, np) is not op.kernel:
        return CreationKernel(op.kernel, be.namespace())
    return kernel


def adapt(be: Backend, steps: list) -> None:
    """Give each step of a program built for device `be` its device kernel (`device_kernel`)."""
    for s in steps:
        s.kernel = device_kernel(be, s)
