"""Seedable random numbers: `lg.random.default_rng(seed)`, values identical to NumPy's.

Draws are made when requested and enter the graph as leaves, so a seeded program gives
the same numbers as the same program on NumPy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lazygraph.array import Array, constant, from_node


def _leaf(values: Any, dtype: Any) -> Array:
    arr = np.asarray(values)
    if dtype is not None:
        arr = arr.astype(dtype, copy=False)
    return from_node(constant(arr))


class Generator:
    """A NumPy `Generator` whose draws are lazygraph arrays (optional `dtype=`)."""

    def __init__(self, seed: Any = None) -> None:
        self._rng = np.random.default_rng(seed)

    def normal(self, loc: float = 0.0, scale: float = 1.0, size: Any = None, dtype: Any = None) -> Array:
        """Gaussian samples."""
        return _leaf(self._rng.normal(loc, scale, size), dtype)

    def standard_normal(self, size: Any = None, dtype: Any = None) -> Array:
        """Samples from N(0, 1)."""
        return _leaf(self._rng.standard_normal(size), dtype)

    def uniform(self, low: float = 0.0, high: float = 1.0, size: Any = None, dtype: Any = None) -> Array:
        """Uniform samples in [low, high)."""
        return _leaf(self._rng.uniform(low, high, size), dtype)

    def random(self, size: Any = None, dtype: Any = None) -> Array:
        """Uniform samples in [0, 1)."""
        return _leaf(self._rng.random(size), dtype)

    def integers(
        self,
        low: int,
        high: int | None = None,
        size: Any = None,
        dtype: Any = np.int64,
        endpoint: bool = False,
    ) -> Array:
        """Random integers in [low, high) (or [0, low))."""
        return _leaf(self._rng.integers(low, high, size, dtype=dtype, endpoint=endpoint), None)

    def permutation(self, x: Any) -> Array:
        """A shuffled range(x), or a shuffled copy of an array along its first axis."""
        if isinstance(x, Array):
            if x.ndim == 0:
                raise ValueError("permutation: x must be an integer or at least 1-dimensional")
            return x[self._rng.permutation(x.shape[0])]
        return _leaf(self._rng.permutation(x), None)

    def choice(
        self,
        a: Any,
        size: Any = None,
        replace: bool = True,
        p: Any = None,
        axis: int = 0,
        shuffle: bool = True,
    ) -> Array:
        """Random samples of range(a) or of a (lazy) array's slices along `axis`; a lazy `p` is evaluated."""
        if isinstance(p, Array):
            p = p.numpy()
        if not isinstance(a, Array):
            return _leaf(self._rng.choice(a, size, replace, p, axis, shuffle), None)
        if a.ndim == 0:
            raise ValueError("choice: a must be a positive integer or at least 1-dimensional")
        idx = self._rng.choice(a.shape[axis], size, replace, p, shuffle=shuffle)
        return a[(slice(None),) * (axis % a.ndim) + (idx,)]

    def shuffle(self, x: Any, axis: int = 0) -> None:
        """Shuffle along `axis` in place (for a lazy array, a recorded write of the permuted values)."""
        if not isinstance(x, Array):
            self._rng.shuffle(x, axis)
            return
        if x.ndim == 0:
            raise TypeError("shuffle: x must be an array of at least 1 dimension")
        axis = axis % x.ndim
        perm = self._rng.permutation(x.shape[axis])
        x[...] = x[(slice(None),) * axis + (perm,)]

    def bernoulli(self, p: float, size: Any = None) -> Array:
        """Booleans that are True with probability p (dropout masks)."""
        return _leaf(self._rng.random(size) < p, None)


def default_rng(seed: Any = None) -> Generator:
    """A seeded generator, like numpy.random.default_rng."""
    return Generator(seed)


#: the generator that weight initialisation and dropout draw from unless given their own
_default = Generator()


def manual_seed(seed: int) -> Generator:
    """Reseed the default generator so initialisation and dropout are reproducible."""
    _default._rng = np.random.default_rng(seed)
    return _default


def default_generator() -> Generator:
    """The process-wide generator that `manual_seed` seeds."""
    return _default
