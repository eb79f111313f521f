"""Data movement: views, writes into views, gathers, reshape copies, concat, stack, pad.

Their gradient rules are in ops/movement_grad.py.

Writes are functional: `assign` returns a new version of the whole base buffer with a
region replaced, so a recorded node never changes and reads recorded before a write
still see the old value. The index template used by gathers and writes is data:
("s", start, stop, step) | ("i", int) | ("n",) for None | ("a", k) for index operand k |
("e",) for an Ellipsis that stands for no dimensions (it still separates advanced indices).
"""

from __future__ import annotations

from math import prod
from typing import Any

import numpy as np

from ops.base import (
    Op,
    drops_imaginary,
    dtype_by_example,
    fmt_shape,
    normalize_axis,
    register,
    shape_error,
)
from ops.namespace import namespace, on_host
from ops.node import Node
from ops.views import View, materialize, mostly_overwritten, write_into

Template = tuple[tuple, ...]


def build_index(template: Template, arrays: tuple[Any, ...], shape: tuple[int, ...] | None = None) -> tuple:
    """The NumPy index tuple a template denotes, with its index operands filled in.

    With the indexed array's `shape`, index operands on a device are bounds-checked first:
    CuPy wraps an out-of-range index around where NumPy raises IndexError, and a silently
    wrong gather is worse than the one device-to-host read the check costs.
    """
    if shape is not None and any(type(a) is not np.ndarray for a in arrays):
        check_device_bounds(template, arrays, shape)
    out: list[Any] = []
    for it in template:
        tag = it[0]
        if tag == "s":
            out.append(slice(it[1], it[2], it[3]))
        elif tag == "i":
            out.append(it[1])
        elif tag == "n":
            out.append(None)
        elif tag == "e":
            out.append(Ellipsis)
        else:
            out.append(arrays[it[1]])
    return tuple(out)


def host_at(ufunc: str, base: Any, value: Any, idx: tuple, index: Template) -> Any:
    """A copy of device array `base` with NumPy's `ufunc.at` applied, computed on host copies:
    for the dtypes and ufuncs CuPy's unbuffered scatter refuses (complex, most ufuncs)."""

    def at(b: np.ndarray, v: Any, *i: np.ndarray) -> np.ndarray:
        out = np.array(b, copy=True, order="C")
        getattr(np, ufunc).at(out, build_index(index, i), v)
        return out

    return on_host(at, base, value, *idx)


def check_device_bounds(template: Template, arrays: tuple[Any, ...], shape: tuple[int, ...]) -> None:
    """NumPy's IndexError for an out-of-range index operand that lives on a device (one read)."""
    consumed = sum(1 for it in template if it[0] in "sia")
    checks: list[tuple[Any, int, int]] = []
    dim = 0
    for it in template:
        tag = it[0]
        if tag == "e":
            dim += len(shape) - consumed
        elif tag in "si":
            dim += 1
        elif tag == "a":
            a = arrays[it[1]]
            if type(a) is not np.ndarray and getattr(a, "size", 0) and getattr(a, "dtype", None) is not None:
                if a.dtype.kind in "iu":
                    checks.append((a, dim, shape[dim]))
            dim += 1
    if not checks:
        return
    xp = namespace(checks[0][0])
    bad = [xp.logical_or(a < -n, a >= n).any() for a, _, n in checks]
    if not bool(xp.stack(bad).any()):
        return
    for (a, d, n), b in zip(checks, bad):
        if bool(b):
            v = int(a[xp.logical_or(a < -n, a >= n)][0])
            raise IndexError(f"index {v} is out of bounds for axis {d} with size {n}")


def index_shape(
    src: tuple[int, ...], template: Template, index_shapes: list[tuple[int, ...]]
) -> tuple[int, ...]:
    """Result shape of NumPy indexing with a (fully expanded) template.

    Integers next to index arrays count as advanced (0-d) indices. The broadcast shape of
    the advanced indices replaces them in place when they are adjacent, else goes first.
    """
    adv_pos = [k for k, it in enumerate(template) if it[0] == "a"]
    has_arrays = bool(adv_pos)
    if has_arrays:
        adv_pos = [k for k, it in enumerate(template) if it[0] in ("a", "i")]
        shapes = [index_shapes[it[1]] if it[0] == "a" else () for it in template if it[0] in ("a", "i")]
        bshape = tuple(np.broadcast_shapes(*shapes))
        adjacent = adv_pos == list(range(adv_pos[0], adv_pos[-1] + 1))
    out: list[int] = []
    dim = 0
    placed = False
    if has_arrays and not adjacent:
        out.extend(bshape)
        placed = True
    for it in template:
        tag = it[0]
        if tag == "n":
            out.append(1)
            continue
        if tag == "e":
            continue
        if tag == "s":
            out.append(len(range(*slice(it[1], it[2], it[3]).indices(src[dim]))))
        elif has_arrays and not placed:
            out.extend(bshape)
            placed = True
        dim += 1
    out.extend(src[dim:])
    return tuple(out)


class ViewOp(Op):
    """A strided window onto a base buffer; costs nothing to run."""

    kind = "view"
    size_attrs = ("view",)

    def __init__(self) -> None:
        super().__init__("view")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Shape from the view; the base's dtype."""
        view = attrs["view"]
        return tuple(view.shape), inputs[0].dtype, attrs

    def kernel(self, base: np.ndarray, view: View) -> np.ndarray:
        """as_strided over the base buffer (read-only)."""
        return materialize(base, view)


class Assign(Op):
    """A new base equal to the old one with a region (view, then optional index) replaced."""

    kind = "assign"
    size_attrs = ("view", "index")

    def __init__(self) -> None:
        super().__init__("assign")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Value must broadcast to the target region; result is the base's shape and dtype."""
        base, value, *idx = inputs
        view: View | None = attrs.get("view")
        template = attrs.get("index")
        target = tuple(view.shape) if view is not None else base.shape
        if template is not None:
            target = index_shape(target, template, [n.shape for n in idx])
        vshape = value.shape
        while len(vshape) > len(target) and vshape[0] == 1:
            vshape = vshape[1:]
        try:
            ok = tuple(np.broadcast_shapes(vshape, target)) == target
        except ValueError:
            ok = False
        if not ok:
            raise shape_error(
                "setitem",
                f"could not broadcast input array from shape {fmt_shape(value.shape)} "
                f"into shape {fmt_shape(target)}",
            )
        # complex into real: NumPy drops the imaginary part (the recording side warns)
        return base.shape, base.dtype, attrs

    def kernel(
        self, base: np.ndarray, value: Any, *idx: Any, view: View | None = None, index: Template | None = None
    ) -> np.ndarray:
        """Copy the base, write the value through the view/index (NumPy casting rules)."""
        if view is not None and index is None and type(base) is np.ndarray:
            starts = mostly_overwritten(view, base.shape)
            if starts is not None:
                # most of the base is overwritten: copy only what stays (a stencil's border)
                out = np.empty(base.shape, base.dtype)
                _copy_outside(out, base, starts, view.shape)
                return write_through(out, value, idx, view, index)
        return write_through(namespace(base).array(base, copy=True, order="C"), value, idx, view, index)


def _copy_outside(out: np.ndarray, base: np.ndarray, starts: tuple[int, ...], sizes: tuple[int, ...]) -> None:
    """Copy base into out everywhere but the box (starts, sizes): two slabs per axis."""
    inside: tuple[slice, ...] = ()
    for lo, n in zip(starts, sizes):
        for part in (slice(0, lo), slice(lo + n, None)):
            at = (*inside, part)
            out[at] = base[at]
        inside = (*inside, slice(lo, lo + n))


def write_through(
    out: np.ndarray, value: Any, idx: tuple, view: View | None = None, index: Template | None = None
) -> np.ndarray:
    """Write `value` into `out` through an assign's view/index (also the engine's in-place path)."""
    if drops_imaginary(getattr(value, "dtype", out.dtype), out.dtype):
        value = value.real  # as NumPy's cast does; the recording side warned already
    if index is None:
        if view is None:
            out[...] = value
        else:
            write_into(out, view, value)
        return out
    target = out if view is None else materialize(out, view, writeable=True)
    target[build_index(index, idx, target.shape)] = value
    return out


class Gather(Op):
    """Advanced indexing (integer index arrays, mixed with slices and ints): a copy."""

    kind = "gather"
    size_attrs = ("index",)

    def __init__(self) -> None:
        super().__init__("gather")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """NumPy's advanced-indexing shape; index operands must be integers."""
        src, *idx = inputs
        for n in idx:
            if n.dtype.kind not in "iu":
                raise IndexError(
                    f"getitem: index arrays must be integers or booleans, got {n.dtype} "
                    f"(indexing an array of shape {fmt_shape(src.shape)})"
                )
        try:
            shape = index_shape(src.shape, attrs["index"], [n.shape for n in idx])
        except ValueError:
            raise IndexError(
                "getitem: shape mismatch: indexing arrays could not be broadcast together with shapes "
                + " ".join(fmt_shape(n.shape) for n in idx)
            ) from None
        return shape, src.dtype, attrs

    def kernel(self, src: np.ndarray, *idx: Any, index: Template) -> np.ndarray:
        """Fancy indexing (NumPy's rules, in the source's namespace)."""
        if type(src) is not np.ndarray:  # NumPy scalars and device arrays: through their namespace
            src = namespace(src).asarray(src)
        return src[build_index(index, idx, src.shape)]


def resolve_shape(op: str, shape: Any, size: int) -> tuple[int, ...]:
    """Normalize a requested shape, filling one -1 from the total size."""
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    shape = tuple(int(d) for d in shape)
    unknown = [i for i, d in enumerate(shape) if d == -1]
    if len(unknown) > 1 or any(d < -1 for d in shape):
        raise ValueError(f"{op}: invalid shape {shape}: at most one -1 and no other negative sizes")
    known = prod(d for d in shape if d != -1)  # exact (NumPy's int64 product could wrap)
    if unknown:
        if known == 0 or size % known:
            raise ValueError(f"{op}: cannot reshape array of size {size} into shape {shape}")
        shape = tuple(size // known if d == -1 else d for d in shape)
    elif known != size:
        raise ValueError(f"{op}: cannot reshape array of size {size} into shape {fmt_shape(shape)}")
    return shape


class Reshape(Op):
    """Reshape that copies (used when NumPy could not make a view)."""

    kind = "movement"
    size_attrs = ("shape",)

    def __init__(self) -> None:
        super().__init__("reshape")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Sizes must agree; one -1 is filled in."""
        shape = resolve_shape("reshape", attrs["shape"], inputs[0].size)
        return shape, inputs[0].dtype, {"shape": shape}

    def kernel(self, x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """np.reshape."""
        return np.reshape(x, shape)


class Concat(Op):
    """Join arrays along an existing axis."""

    kind = "movement"

    def __init__(self) -> None:
        super().__init__("concat")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """All dimensions but `axis` must match; NumPy's result dtype."""
        if not inputs:
            raise ValueError("concat: need at least one array to concatenate")
        first = inputs[0]
        if first.ndim == 0:
            raise shape_error("concat", "zero-dimensional arrays cannot be concatenated", inputs)
        axis = normalize_axis("concat", attrs.get("axis", 0), first.ndim)
        for n in inputs[1:]:
            if n.ndim != first.ndim or any(
                a != b for i, (a, b) in enumerate(zip(n.shape, first.shape)) if i != axis
            ):
                raise shape_error(
                    "concat",
                    f"all input dimensions except axis {axis} must match",
                    inputs,
                )
        shape = list(first.shape)
        shape[axis] = sum(n.shape[axis] for n in inputs)
        dtype = dtype_by_example("concat", np.result_type, inputs)
        return tuple(shape), dtype, {"axis": axis}

    def kernel(self, *xs: Any, axis: int) -> np.ndarray:
        """np.concatenate."""
        return np.concatenate(xs, axis=axis)


class Stack(Op):
    """Join same-shaped arrays along a new axis."""

    kind = "movement"

    def __init__(self) -> None:
        super().__init__("stack")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """All shapes equal; the new axis may be -ndim-1 .. ndim."""
        if not inputs:
            raise ValueError("stack: need at least one array to stack")
        first = inputs[0]
        if any(n.shape != first.shape for n in inputs):
            raise shape_error("stack", "all input arrays must have the same shape", inputs)
        axis = normalize_axis("stack", attrs.get("axis", 0), first.ndim + 1)
        shape = first.shape[:axis] + (len(inputs),) + first.shape[axis:]
        dtype = dtype_by_example("stack", np.result_type, inputs)
        return shape, dtype, {"axis": axis}

    def kernel(self, *xs: Any, axis: int) -> np.ndarray:
        """np.stack."""
        return np.stack(xs, axis=axis)


PAD_MODES = ("constant", "edge", "reflect", "symmetric", "wrap")


class Pad(Op):
    """np.pad with a constant, edge, reflect, symmetric or wrap border."""

    kind = "movement"
    size_attrs = ("pad_width", "constant_values")

    def __init__(self) -> None:
        super().__init__("pad")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Normalize pad_width to ((before, after), ...) per dimension."""
        (x,) = inputs
        mode = attrs.get("mode", "constant")
        if mode not in PAD_MODES:
            raise ValueError(f"pad: mode must be one of {PAD_MODES}, got {mode!r}")
        try:
            widths = np.broadcast_to(np.asarray(attrs["pad_width"], dtype=np.int64), (x.ndim, 2))
        except ValueError:
            raise shape_error(
                "pad", f"pad_width {attrs['pad_width']!r} does not fit an array of shape {fmt_shape(x.shape)}"
            ) from None
        if (widths < 0).any():
            raise ValueError(f"pad: negative pad width in {attrs['pad_width']!r}")
        widths = tuple((int(a), int(b)) for a, b in widths)
        if mode != "constant":
            for d, (a, b) in zip(x.shape, widths):
                if d == 0 and (a or b):
                    raise shape_error("pad", f"can't extend empty axis using mode {mode!r}", inputs)
        shape = tuple(d + a + b for d, (a, b) in zip(x.shape, widths))
        out = {"pad_width": widths, "mode": mode}
        if mode == "constant":
            out["constant_values"] = attrs.get("constant_values", 0)
        return shape, x.dtype, out

    def kernel(self, x: np.ndarray, pad_width: tuple, mode: str, constant_values: Any = 0) -> np.ndarray:
        """np.pad."""
        if not pad_width:  # a 0-d array: np.pad returns a copy, but rejects the empty widths
            return namespace(x).array(x, copy=True)
        if mode == "constant":
            return np.pad(x, pad_width, mode="constant", constant_values=constant_values)
        if mode == "wrap" and all(lo <= n and hi <= n and n for (lo, hi), n in zip(pad_width, x.shape)):
            return _pad_wrap(x, pad_width)
        return np.pad(x, pad_width, mode=mode)


def _pad_wrap(x: np.ndarray, pad_width: tuple) -> np.ndarray:
    """np.pad(mode="wrap") for widths up to the axis length: one copy of x and one copy per
    padded side (np.pad's general loop took twice as long on a roll's small pads)."""
    xp = namespace(x)
    shape = tuple(n + lo + hi for (lo, hi), n in zip(pad_width, x.shape))
    out = xp.empty(shape, dtype=x.dtype)
    center = tuple(slice(lo, lo + n) for (lo, _), n in zip(pad_width, x.shape))
    out[center] = x
    # axis by axis: the axes already done are read at full extent, so corners wrap twice, as in np.pad
    for k, ((lo, hi), n) in enumerate(zip(pad_width, x.shape)):

        def at(sl: slice, k: int = k) -> tuple:
            return tuple(slice(None) if j < k else center[j] for j in range(k)) + (sl,) + center[k + 1 :]

        if lo:
            out[at(slice(0, lo))] = out[at(slice(n, n + lo))]
        if hi:
            out[at(slice(lo + n, lo + n + hi))] = out[at(slice(lo, lo + hi))]
    return out


class ScatterAdd(Op):
    """base + value added at an index (repeated positions accumulate, like np.add.at).

    The adjoint of `gather`: the gradient of advanced indexing sums into the source.
    """

    kind = "gather"
    size_attrs = ("index",)

    def __init__(self) -> None:
        super().__init__("scatter_add")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """The value must broadcast to the indexed region; result is the base's shape and dtype."""
        base, value, *idx = inputs
        target = index_shape(base.shape, attrs["index"], [n.shape for n in idx])
        try:
            ok = tuple(np.broadcast_shapes(value.shape, target)) == target
        except ValueError:
            ok = False
        if not ok:
            raise shape_error(
                "scatter_add",
                f"value of shape {fmt_shape(value.shape)} does not broadcast to the region {fmt_shape(target)}",
            )
        return base.shape, base.dtype, attrs

    def kernel(self, base: np.ndarray, value: Any, *idx: Any, index: Template) -> np.ndarray:
        """A copy of base with add.at applied (the namespace's unbuffered scatter)."""
        xp = namespace(base)
        out = xp.array(base, copy=True, order="C")
        try:
            xp.add.at(out, build_index(index, idx, out.shape), value)
        except TypeError:
            if xp is np:
                raise
            # CuPy's add.at takes no complex or small integers: NumPy's on the host
            return host_at("add", base, value, idx, index)
        return out


for _op in (ViewOp(), Assign(), Gather(), Reshape(), Concat(), Stack(), Pad(), ScatterAdd()):
    register(_op)
