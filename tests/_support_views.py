"""Strategies for programs of views (tests/test_shapes_views.py, tests/test_indexing.py): chains of
reshapes, transposes, slices and the like, applied alike to NumPy and lazygraph arrays."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from strategies import shapes

import lazygraph as lg


def distinct(shape, dtype=np.int64) -> np.ndarray:
    """Distinct values, so that any misplaced element shows."""
    size = int(np.prod(shape, dtype=np.int64))
    return (np.arange(size) + 1).astype(dtype).reshape(shape)


# -- strategies for view programs ---------------------------------------------------------------


@st.composite
def reshape_target(draw, size: int, allow_minus_one: bool = True):
    """A random shape with `size` elements (sometimes with one -1)."""
    if size == 0:
        dims = list(draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=3)))
        dims[draw(st.integers(0, len(dims) - 1))] = 0
    else:
        ndim = draw(st.integers(0 if size == 1 else 1, 4))
        dims, rest = [], size
        for _ in range(max(ndim - 1, 0)):
            d = draw(st.sampled_from([k for k in range(1, rest + 1) if rest % k == 0]))
            dims.append(d)
            rest //= d
        if ndim:
            dims.append(rest)
        dims = draw(st.permutations(dims)) if dims else dims
    if allow_minus_one and dims and size and draw(st.booleans()):
        dims[draw(st.integers(0, len(dims) - 1))] = -1
    return tuple(dims)


@st.composite
def view_step(draw, shape: tuple[int, ...]):
    """One NumPy view operation valid for `shape`, as data: (name, *args)."""
    ndim = len(shape)
    names = ["index", "reshape", "expand_dims", "ravel"]
    if ndim:
        names += ["T", "transpose", "swapaxes", "moveaxis", "flip", "flip_all", "split"]
    if ndim >= 2:
        names.append("mT")
    if 1 in shape:
        names.append("squeeze")
    name = draw(st.sampled_from(names))
    if name == "index":
        # NumPy returns a scalar, not a view, for full integer indices: keep to views here
        probe = np.empty(shape)
        if ndim >= 2:
            idx = draw(
                hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True).filter(
                    lambda i: isinstance(probe[i], np.ndarray)
                )
            )
        elif ndim == 1:
            idx = draw(st.slices(shape[0]) | st.just(Ellipsis) | st.just((None, slice(None, None, -1))))
        else:
            idx = draw(st.sampled_from([Ellipsis, None, (None, None)]))
        return ("index", idx)
    if name == "reshape":
        return ("reshape", draw(reshape_target(int(np.prod(shape, dtype=np.int64)))))
    if name == "expand_dims":
        return ("expand_dims", draw(st.integers(-ndim - 1, ndim)))
    if name == "transpose":
        return ("transpose", tuple(draw(st.permutations(range(ndim)))))
    if name == "swapaxes":
        return ("swapaxes", draw(st.integers(-ndim, ndim - 1)), draw(st.integers(-ndim, ndim - 1)))
    if name == "moveaxis":
        return ("moveaxis", draw(st.integers(-ndim, ndim - 1)), draw(st.integers(-ndim, ndim - 1)))
    if name == "flip":
        return ("flip", draw(st.integers(-ndim, ndim - 1)))
    if name == "squeeze":
        ones = [i for i, d in enumerate(shape) if d == 1]
        return ("squeeze", draw(st.none() | st.sampled_from(ones)))
    if name == "split":
        axis = draw(st.integers(0, ndim - 1))
        n = shape[axis]
        divisors = [k for k in range(1, n + 1) if n % k == 0] or [1]
        k = draw(st.sampled_from(divisors))
        return ("split", k, axis, draw(st.integers(0, k - 1)))
    return (name,)


def apply_step(mod, x, step):
    """Apply a view step with module `mod` (np or lg) to x."""
    name, *args = step
    if name == "index":
        return x[args[0]]
    if name == "reshape":
        return x.reshape(args[0])
    if name == "ravel":
        return mod.ravel(x)
    if name == "T":
        return x.T
    if name == "mT":
        return x.mT
    if name == "transpose":
        return mod.permute_dims(x, args[0]) if mod is lg else mod.transpose(x, args[0])
    if name == "swapaxes":
        return mod.swapaxes(x, *args)
    if name == "moveaxis":
        return mod.moveaxis(x, *args)
    if name == "expand_dims":
        return mod.expand_dims(x, args[0])
    if name == "squeeze":
        return mod.squeeze(x, args[0])
    if name == "flip":
        return mod.flip(x, args[0])
    if name == "flip_all":
        return mod.flip(x)
    if name == "split":
        k, axis, piece = args
        return mod.split(x, k, axis=axis)[piece]
    raise AssertionError(step)


@st.composite
def view_program(draw, max_steps: int = 4):
    base_shape = draw(shapes(max_dims=4, min_side=0, max_side=4))
    steps = []
    shape = base_shape
    for _ in range(draw(st.integers(1, max_steps))):
        step = draw(view_step(shape))
        shape = apply_step(np, np.empty(shape), step).shape
        steps.append(step)
    return base_shape, steps


def run_views(steps, nb, lb):
    nv, lv = nb, lb
    for step in steps:
        nv, lv = apply_step(np, nv, step), apply_step(lg, lv, step)
        assert lv.shape == nv.shape, step
    return nv, lv
