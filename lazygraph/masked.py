"""Boolean-mask selections that do not force an evaluation: `x[mask]` kept as (x's value, mask).

`x[mask]` has as many elements as the mask has True values, so gathering it needs the mask's
values: NumPy code that updates masked elements in a loop (`z[active] = z[active] ** 2 + c[active]`,
`counts[active] += 1`, `dhid[hid <= 0] = 0`) would evaluate at every iteration. Most such
selections are only combined elementwise and written back under the same mask, which needs no
count: over the full shape, `z <- where(active, z**2 + c, z)`.

`Masked` is that deferred selection: the full-shape value `_base` (x's value when it was
selected, then whatever elementwise operators made of it) and the mask's node `_mnode`. It
stays deferred through
- elementwise operators (`+ - * / // % ** & | ^ << >>`, comparisons, `- + abs ~`, their
  in-place forms) with a selection of the same mask node (the same value of the same mask)
  and the same number of dimensions, with Python and NumPy scalars, and with arrays that
  broadcast against the selection's trailing axes only (at most `ndim - 1` dimensions);
- `y[mask] = s` of such a selection, a Python scalar or a 0-d array (`y[mask] op= v` is that
  too): recorded as `y`'s new value `where(mask, s, y)`, through `y`'s own window, so views of
  `y` see the write in program order, as NumPy's in-place write;
- `sum`, `any`, `all` over every axis or the masked one, for integer and boolean values (the
  result cannot depend on the order of the additions, so NumPy's bits are kept).
Anything else (its shape or length, printing, `.numpy()`, other indexing, matmul, float sums,
...) materializes the selection at that point exactly as NumPy's `x[mask]` and as lazygraph
did before (the mask is evaluated, `nonzero`, a gather of the selected value), and from then
on it is an ordinary array. Results are those of the gathered selection: dtypes are
promoted alike (same operand dtypes), masked-out lanes are computed but never read (`where`
picks), an evaluation runs without floating-point traps, and an operator whose kernel can fail
on data (an integer power with a negative exponent) materializes first instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lazygraph.array import _LEAN, DEFERRED, Array, Storage, _fallible, from_node, record
from lazygraph.gradmode import GRAD_STATE
from ops import masked_reduce  # noqa: F401  (registers masked_sum)
from ops.node import Node

_PY_SCALARS = (bool, int, float, complex)
_NO = object()  # an operand that a deferred selection cannot meet without its count


class Masked(Array):
    """`x[mask]` before its count is known: x's full-shape value under a mask (see the module doc)."""

    __slots__ = ("_base", "_mnode", "_mask", "_mat")

    def __init__(self, base: Array, mnode: Node, mask: Array | None = None) -> None:
        # Array.__init__ is not called: `_storage` is the materialized selection (a property)
        self._base = base
        self._mnode = mnode
        self._mask = from_node(mnode) if mask is None else mask
        self._mat: Storage | None = None
        self._view = None
        self._readonly = False
        self._vnode = None
        self._vbase = None

    @property
    def _storage(self) -> Storage:  # type: ignore[override]
        """The gathered selection: every Array operation not overridden here reads it."""
        mat = self._mat
        if mat is None:
            # the general path: the mask is evaluated, nonzero, a gather of the base
            mat = self._mat = self._base._getitem(self._mask)._storage
        return mat

    @property
    def dtype(self) -> np.dtype:  # type: ignore[override]
        """Element type (the base's: no count needed)."""
        return self._base.dtype if self._mat is None else self._mat.node.dtype

    @property
    def ndim(self) -> int:  # type: ignore[override]
        """Number of dimensions: the mask's axes become one."""
        return self._base.ndim - self._mnode.ndim + 1

    @property
    def device(self) -> Any:  # type: ignore[override]
        """Where the selection lives (its base's device)."""
        return self._base.device

    def _derived(self, base: Array) -> Masked:
        return Masked(base, self._mnode, self._mask)

    def _operand(self, other: Any) -> Any:
        """`other` as it meets the full-shape base, or _NO where the selection must be gathered."""
        if isinstance(other, Masked):
            if other._mat is not None or other._mnode is not self._mnode:
                return _NO
            return other._base if other._base.ndim == self._base.ndim else _NO
        if type(other) in _PY_SCALARS or isinstance(other, np.generic):
            return other
        if isinstance(other, (Array, np.ndarray)) and other.ndim < self.ndim:
            return other  # broadcast against the trailing axes only, never the masked one
        return _NO

    def _cond(self, ndim: int) -> Array:
        """The mask with unit axes appended, to broadcast against a base of `ndim` dimensions."""
        extra = ndim - self._mnode.ndim
        return self._mask[(Ellipsis,) + (None,) * extra] if extra else self._mask

    def _axes(self, axis: Any) -> tuple | None | Any:
        """The base's axes reducing the selection's `axis` (None or the masked one), else _NO."""
        if axis is None:
            return None
        if isinstance(axis, tuple) and len(axis) == 1:
            axis = axis[0]
        if type(axis) is int and axis in (0, -self.ndim):
            return tuple(range(self._mnode.ndim))
        return _NO

    def _reduce(self, op: str, fill: int, axis: Any) -> Array | None:
        axes = self._axes(axis)
        if axes is _NO:
            return None
        full = record("where", self._cond(self._base.ndim), self._base, fill)
        return record(op, full, axis=axes, keepdims=False)

    def sum(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Array:
        """Sum; lazy: integer and boolean sums over the full shape (their value does not depend
        on the order), float sums as `masked_sum`, which gathers when it runs (NumPy's order)."""
        if self._mat is None and dtype is None and not keepdims:
            if self.dtype.kind in "biu":
                out = self._reduce("sum", 0, axis)
                if out is not None:
                    return out
            elif self.dtype.kind in "fc" and self._axes(axis) is not _NO and not _tracked(self._base):
                return record("masked_sum", self._base, self._mask, axis=None if axis is None else 0)
        return Array.sum(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def any(self, axis: Any = None, keepdims: bool = False) -> Array:
        """Whether any selected element is true (lazy: the masked-out ones count as false)."""
        if self._mat is None and not keepdims:
            out = self._reduce("any", 0, axis)
            if out is not None:
                return out
        return Array.any(self, axis=axis, keepdims=keepdims)

    def all(self, axis: Any = None, keepdims: bool = False) -> Array:
        """Whether every selected element is true (lazy: the masked-out ones count as true)."""
        if self._mat is None and not keepdims:
            out = self._reduce("all", 1, axis)
            if out is not None:
                return out
        return Array.all(self, axis=axis, keepdims=keepdims)


def _tracked(x: Array) -> bool:
    """Whether autograd records through x (`masked_sum` has no gradient: the gather has one)."""
    return x.node.requires_grad and GRAD_STATE.enabled


def _traps(dunder: str, out: Array, other: Any) -> bool:
    """Whether the full-shape result could fail on a masked-out lane (an integer power)."""
    if not _fallible(out._storage.node):
        return False
    return not (dunder == "__pow__" and type(other) is int and other >= 0)


def _binary(dunder: str) -> Any:

    def method(self: Masked, other: Any) -> Any:
        if self._mat is None:
            o = self._operand(other)
            if o is not _NO:
                try:
                    out = getattr(Array, dunder)(self._base, o)
                except ValueError:  # shapes: the gathered selection raises NumPy's message
                    out = None
                if isinstance(out, Array) and not _traps(dunder, out, o):
                    return self._derived(out)
        return getattr(Array, dunder)(self, other)

    method.__name__ = dunder
    return method


def _inplace(dunder: str) -> Any:
    pow_ = dunder == "__ipow__"

    def method(self: Masked, other: Any) -> Any:
        if self._mat is None:
            o = self._operand(other)
            if o is not _NO and (not pow_ or self.dtype.kind in "fc" or (type(o) is int and o >= 0)):
                tmp = from_node(self._base.node)  # a private copy: nothing else sees it
                try:
                    getattr(Array, dunder)(tmp, o)  # NumPy's casting rule and shape checks
                except ValueError:  # shapes: the gathered selection raises NumPy's message
                    tmp = None
                if tmp is not None:
                    self._base = tmp  # in place: every name bound to this selection sees it
                    return self
        return getattr(Array, dunder)(self, other)

    method.__name__ = dunder
    return method


def _unary(dunder: str) -> Any:
    def method(self: Masked) -> Any:
        if self._mat is None:
            return self._derived(getattr(Array, dunder)(self._base))
        return getattr(Array, dunder)(self)

    method.__name__ = dunder
    return method


_ARITH = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift", "rshift")
for _n in _ARITH:
    setattr(Masked, f"__{_n}__", _binary(f"__{_n}__"))
    setattr(Masked, f"__r{_n}__", _binary(f"__r{_n}__"))
    setattr(Masked, f"__i{_n}__", _inplace(f"__i{_n}__"))
for _n in ("eq", "ne", "lt", "le", "gt", "ge"):
    setattr(Masked, f"__{_n}__", _binary(f"__{_n}__"))
for _n in ("neg", "pos", "abs", "invert"):
    setattr(Masked, f"__{_n}__", _unary(f"__{_n}__"))


def select(x: Array, key: Array) -> Masked | None:
    """`x[key]` deferred when `key` is a boolean array on x's leading axes; None: gather now."""
    if key.dtype.kind != "b" or isinstance(x, Masked):
        return None
    kshape = key.shape
    if not kshape or x.shape[: len(kshape)] != kshape:
        return None  # a mismatched mask raises NumPy's IndexError on the general path
    xnode = x.node
    if xnode.requires_grad and GRAD_STATE.enabled:
        return None  # autograd sees the gather it knows
    mnode = key.node
    if mnode.device != xnode.device:
        return None
    return Masked(from_node(xnode), mnode)


def assign(y: Array, key: Array, value: Any) -> bool:
    """Record `y[key] = value` as `y <- where(key, value, y)` when no count is needed; else False."""
    if key.dtype.kind != "b" or type(y) not in _LEAN:
        return False  # OwnedView targets write back into their owner: the general path
    kshape = key.shape
    yshape = y.shape
    if not kshape or yshape[: len(kshape)] != kshape:
        return False
    if y._storage.requires_grad and GRAD_STATE.enabled:
        return False  # the general path raises its error
    mnode = key.node
    ynode = y.node
    dtype = y.dtype
    if isinstance(value, Masked):
        if value._mat is not None or value._mnode is not mnode or value._base.shape != yshape:
            return False
        v: Any = value._base
    elif type(value) in _PY_SCALARS:
        probe = np.empty((), dtype)
        try:  # NumPy converts the scalar first (300 into int8, nan into int raise)
            probe[()] = value
        except (TypeError, ValueError, OverflowError) as e:
            raise type(e)(f"setitem: {e}") from None
        v = probe.item()
    elif isinstance(value, Array) and value.ndim == 0:
        v = value
    else:
        return False
    if isinstance(v, Array):
        if (v.dtype.kind == "c" and dtype.kind != "c") or v.node.device != ynode.device:
            return False  # the general path warns (ComplexWarning) or places the value
        if v.dtype != dtype:
            v = record("astype", v, dtype=dtype)  # NumPy casts the value before writing it
    if mnode.device != ynode.device:
        return False
    cond = key[(Ellipsis,) + (None,) * (len(yshape) - len(kshape))] if len(yshape) > len(kshape) else key
    new = record("where", cond, v, y)
    if new.dtype != dtype:
        new = record("astype", new, dtype=dtype)
    y._write(new)
    return True


DEFERRED[:] = [select, assign]
