"""NumPy's unique on the CPU in one call, for `lazygraph.numlib_sort`'s unique functions.

The number of distinct values decides the results' shapes, so x is evaluated for it anyway;
running NumPy's unique on those values once gives the indices, inverse and counts too.
"""

from __future__ import annotations

import numpy as np

from lazygraph.array import Array
from lazygraph.shape import asarray


def unique_host(x: Array, flat: Array, equal_nan: bool, first: bool) -> tuple[Array, Array, Array, Array]:
    """`_unique_parts` on the CPU: the count needs x's values, so NumPy's unique runs on them once.

    Recording `unique_count` and then `unique_indices` sorted x twice, in two evaluations (1M
    int64 ids: 84 + 294 ms traced); the indices, inverse and counts are integers no gradient
    flows through, so they are leaves made from that one call, and the values stay a gather
    from x (differentiable). Indices are first occurrences either way.
    """
    v = flat.numpy()
    if first:
        _, index, inverse, counts = np.unique(
            v, return_index=True, return_inverse=True, return_counts=True, equal_nan=equal_nan
        )
    else:  # NumPy's return_index takes a stable sort: the first occurrences by a reversed scatter
        _, inverse, counts = np.unique(v, return_inverse=True, return_counts=True, equal_nan=equal_nan)
        inverse = inverse.reshape(-1)
        index = np.empty(counts.shape[0], dtype=np.intp)
        index[inverse[::-1]] = np.arange(v.shape[0] - 1, -1, -1)
    index, counts = asarray(index.astype(np.intp, copy=False)), asarray(counts.astype(np.intp, copy=False))
    inverse = asarray(inverse.astype(np.intp, copy=False).reshape(x.shape))
    return flat[index], index, inverse, counts
