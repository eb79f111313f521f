"""`Module` and `Parameter`: the containers models are built from (PyTorch's interface).

A `Parameter` is an `Array` that requires grad; parameters (frozen ones too) and registered
buffers are static (model state, `Array.static_`): the fold pass memoizes what is computed from
them alone until one is written. A `Module` keeps its parameters, buffers and
sub-modules in registration order so `named_parameters()` and `state_dict()` keys are stable
(`"0.weight"`, `"features.3.bias"`). `state_dict()` evaluates every entry in one graph;
`save`/`load` use `.npz` files (no pickle, written atomically).
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from lazygraph.array import Array, Storage, constant
from lazygraph.engine.evaluate import evaluate
from lazygraph.gradmode import no_grad
from ops.base import fmt_shape
from ops.fileio import atomic_write


class Parameter(Array):
    """An array that is a trainable leaf: it requires grad and accumulates `.grad`; always static."""

    __slots__ = ()

    def __init__(self, data: Any, requires_grad: bool = True) -> None:
        if isinstance(data, Array):
            node = data.node
        else:
            arr = np.asarray(data)
            if arr.dtype.kind != "f":  # integer data makes a float32 parameter, as torch.tensor would not
                arr = arr.astype(np.float32)
            node = constant(arr)
        super().__init__(Storage(node))
        self.static_()  # model state even when frozen (requires_grad=False, fine-tuning)
        if requires_grad:
            self.requires_grad = True

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


class IncompatibleKeys(NamedTuple):
    """Keys `load_state_dict(strict=False)` did not match."""

    missing_keys: list[str]
    unexpected_keys: list[str]


class Module:
    """Base class of layers and models: register parameters, buffers and children by assignment."""

    def __init__(self) -> None:
        # object.__setattr__: our __setattr__ needs these dictionaries to exist already.
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)

    # -- registration -------------------------------------------------------------------

    def _registries(self) -> tuple[dict, dict, dict]:
        try:
            return self.__dict__["_parameters"], self.__dict__["_buffers"], self.__dict__["_modules"]
        except KeyError:
            raise AttributeError(
                f"{type(self).__name__}: call super().__init__() before assigning attributes"
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, (Parameter, Module)):
            params, buffers, modules = self._registries()
            for d in (params, buffers, modules):
                d.pop(name, None)
            self.__dict__.pop(name, None)
            (params if isinstance(value, Parameter) else modules)[name] = value
            return
        params, buffers, modules = self.__dict__.get("_parameters"), self.__dict__.get("_buffers"), None
        if params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"{type(self).__name__}: cannot assign {type(value).__name__} to parameter {name!r} "
                    "(expected lg.nn.Parameter or None)"
                )
            params[name] = None
            return
        if buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Array):
                raise TypeError(f"{type(self).__name__}: buffer {name!r} must be an Array or None")
            buffers[name] = value if value is None else value.static_()
            return
        modules = self.__dict__.get("_modules")
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError(
                    f"{type(self).__name__}: cannot assign {type(value).__name__} to module {name!r}"
                )
            modules[name] = None
            return
        object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # Only reached when ordinary lookup fails: parameters, buffers and children live here.
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            reg = d.get(key)
            if reg is not None and name in reg:
                return reg[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        for key in ("_parameters", "_buffers", "_modules"):
            reg = self.__dict__.get(key)
            if reg is not None and name in reg:
                del reg[name]
                self.__dict__["_non_persistent"].discard(name)
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add a parameter (or a None placeholder, e.g. a disabled bias) under `name`."""
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter: {name!r} must be a Parameter or None")
        params, buffers, modules = self._registries()
        buffers.pop(name, None)
        modules.pop(name, None)
        params[name] = param

    def register_buffer(self, name: str, value: Array | None, persistent: bool = True) -> None:
        """Add non-trainable state (running statistics) saved in the state dict when persistent.

        The buffer is marked static (model state) whether or not it is persistent, which is
        only about the state dict: what is computed from it alone is memoized until it is written.
        """
        if value is not None and not isinstance(value, Array):
            raise TypeError(f"register_buffer: {name!r} must be an Array or None")
        params, buffers, modules = self._registries()
        params.pop(name, None)
        modules.pop(name, None)
        buffers[name] = value if value is None else value.static_()
        if persistent:
            self.__dict__["_non_persistent"].discard(name)
        else:
            self.__dict__["_non_persistent"].add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        """Add a child module under `name`."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {name!r} must be a Module or None")
        self._registries()[2][name] = module

    # -- traversal ----------------------------------------------------------------------

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """Direct sub-modules with their attribute names."""
        for name, m in self._modules.items():
            if m is not None:
                yield name, m

    def children(self) -> Iterator[Module]:
        """Direct sub-modules."""
        for _, m in self.named_children():
            yield m

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """This module and every descendant, each once, with dotted names."""
        seen: set[int] = set()
        stack = [(prefix, self)]
        while stack:
            name, m = stack.pop()
            if id(m) in seen:
                continue
            seen.add(id(m))
            yield name, m
            kids = [(f"{name}.{n}" if name else n, c) for n, c in m.named_children()]
            stack.extend(reversed(kids))

    def modules(self) -> Iterator[Module]:
        """This module and every descendant."""
        for _, m in self.named_modules():
            yield m

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Parameter]]:
        """Parameters with dotted names, each once even if shared between modules."""
        seen: set[int] = set()
        mods = self.named_modules(prefix) if recurse else iter([(prefix, self)])
        for mname, m in mods:
            for n, p in m._parameters.items():
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    yield (f"{mname}.{n}" if mname else n), p

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """The trainable arrays, for an optimizer."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Array]]:
        """Buffers with dotted names."""
        mods = self.named_modules(prefix) if recurse else iter([(prefix, self)])
        for mname, m in mods:
            for n, b in m._buffers.items():
                if b is not None:
                    yield (f"{mname}.{n}" if mname else n), b

    def buffers(self, recurse: bool = True) -> Iterator[Array]:
        """Non-trainable state arrays."""
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # -- modes and gradients ------------------------------------------------------------

    def train(self, mode: bool = True) -> Module:
        """Training mode (dropout active, batch statistics) for this module and its children."""
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self) -> Module:
        """Inference mode: dropout off, running statistics in batch norm."""
        return self.train(False)

    def requires_grad_(self, flag: bool = True) -> Module:
        """Freeze (False) or unfreeze every parameter."""
        for p in self.parameters():
            p.requires_grad = flag
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop (or zero) every parameter's accumulated gradient."""
        from lazygraph.creation import zeros

        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad = zeros(p.shape, dtype=p.dtype, device=p.device)

    def to(self, device: Any) -> Module:
        """Move every parameter (with its `.grad`) and buffer to `device` in place; returns the module.

        The parameter objects stay the same, so an optimizer made before the move keeps working
        (its state follows each parameter at the next step).
        """
        from lazygraph.device import canonical
        from lazygraph.transfer import move_

        dev = canonical(device)
        with no_grad():
            for p in self.parameters():
                move_(p, dev)
            for _, b in self.named_buffers():
                move_(b, dev)
        return self

    # -- calling ------------------------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The computation; subclasses define it."""
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def extra_repr(self) -> str:
        """Hyper-parameters shown in repr()."""
        return ""

    def __repr__(self) -> str:
        lines = [f"({n}): " + repr(m).replace("\n", "\n  ") for n, m in self.named_children()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"

    # -- state --------------------------------------------------------------------------

    def _state_arrays(self) -> dict[str, Array]:
        out: dict[str, Array] = dict(self.named_parameters())
        for mname, m in self.named_modules():
            for n, b in m._buffers.items():
                if b is not None and n not in m._non_persistent:
                    out[f"{mname}.{n}" if mname else n] = b
        return out

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every parameter and persistent buffer as read-only NumPy arrays (one evaluation)."""
        arrays = self._state_arrays()
        evaluate([a.node for a in arrays.values()])
        return {k: a.numpy() for k, a in arrays.items()}

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copy values into parameters and buffers; shapes must match exactly."""
        own = self._state_arrays()
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise KeyError(
                f"load_state_dict: missing keys {missing}, unexpected keys {unexpected} "
                f"for {type(self).__name__}"
            )
        values = {}
        for k, target in own.items():
            if k not in state_dict:
                continue
            value = np.asarray(state_dict[k])
            if value.shape != target.shape:
                raise ValueError(
                    f"load_state_dict: {k!r} has shape {fmt_shape(value.shape)} in the state dict "
                    f"but {fmt_shape(target.shape)} in the model"
                )
            if value.dtype.kind not in "biuf":
                raise TypeError(f"load_state_dict: {k!r} has unsupported dtype {value.dtype}")
            values[k] = value.astype(target.dtype)
        # Checked everything before writing anything: a failed load leaves the model as it was.
        with no_grad():
            for k, value in values.items():
                own[k][...] = value
        return IncompatibleKeys(missing, unexpected)

    def save(self, path: str | os.PathLike) -> None:
        """Write the state dict to an .npz file (atomically: a temp file, then rename)."""
        state = self.state_dict()
        buf = io.BytesIO()
        np.savez(buf, **state)
        atomic_write(path, buf.getvalue())

    def load(self, path: str | os.PathLike, strict: bool = True) -> IncompatibleKeys:
        """Read an .npz state file written by `save` (never unpickles) into this module."""
        try:
            with np.load(os.fspath(path), allow_pickle=False) as f:
                state = {k: f[k] for k in f.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise ValueError(f"load: {os.fspath(path)!r} is not a readable .npz state file ({e})") from e
        return self.load_state_dict(state, strict=strict)


class Sequential(Module):
    """Modules applied one after the other."""

    def __init__(self, *modules: Module) -> None:
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], Mapping):
            for name, m in modules[0].items():
                self.add_module(str(name), m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, x: Any) -> Any:
        """Feed x through each module in order."""
        for m in self.children():
            x = m(x)
        return x

    def append(self, module: Module) -> Sequential:
        """Add a module at the end."""
        self.add_module(str(len(self._modules)), module)
        return self

    def __getitem__(self, i: int | slice) -> Module:
        mods = list(self._modules.values())
        if isinstance(i, slice):
            return Sequential(*mods[i])
        return mods[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())


class ModuleList(Module):
    """A list of modules whose parameters are registered (for models built in loops)."""

    def __init__(self, modules: Any = ()) -> None:
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module: Module) -> ModuleList:
        """Add a module at the end."""
        self.add_module(str(len(self._modules)), module)
        return self

    def __getitem__(self, i: int) -> Module:
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())
