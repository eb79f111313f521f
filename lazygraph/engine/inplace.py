"""The in-place forms of the write steps (`Kernel.in_place`): `assign` and `update` (`a[i] += v`).

A write step whose base value dies at that step writes into the base's buffer instead of a
copy when nothing else holds the buffer (reference counts: no view, memo or user shares it);
`Program._leaf_write` hands them an evaluated leaf's buffer it found free (lazygraph/txn.py).
"""

from __future__ import annotations

from sys import getrefcount
from typing import Any

import numpy as np

from lazygraph.txn import LOGGED
from ops.movement import write_through
from ops.views import update_into


def _dying_base(vals: list, ins: tuple, dtype: np.dtype) -> np.ndarray | None:
    """The base buffer of a write step when nothing else holds it (else None: the step copies)."""
    base = vals[ins[0]]
    if (
        type(base) is not np.ndarray
        or base.base is not None
        or base.dtype != dtype
        or not base.flags.writeable
        or not base.flags.c_contiguous
    ):
        return None
    # references an undo log holds (txn.overwrite) are not holders that read the buffer
    held = 3 + LOGGED.get(id(base), 0) if LOGGED else 3
    if getrefcount(base) == held + 1:
        value = vals[ins[1]]
        if type(value) is np.ndarray and value.base is base and getrefcount(value) == 3:
            # the value is a view of the base that only `vals` holds (`u[:, 0] = u[:, 1]`): a
            # copy of it takes its place, so this write and later readers still see old values
            vals[ins[1]] = value = value.copy()
        del value
    # held by `vals`, `base` and getrefcount's argument only: no view, memo or user shares it
    if getrefcount(base) != held:
        return None
    return base


def _assign_in_place(vals: list, ins: tuple, dtype: np.dtype, attrs: dict, base: Any = None) -> Any:
    """`assign` writing into its dying base when nothing else holds the base (else None: copy).

    `base`: a buffer the caller found free to write (`Program._leaf_write`)."""
    base = _dying_base(vals, ins, dtype) if base is None else base
    if base is None:
        return None
    idx = tuple(vals[k] for k in ins[2:])
    return write_through(base, vals[ins[1]], idx, attrs.get("view"), attrs.get("index"))


def _update_in_place(vals: list, ins: tuple, dtype: np.dtype, attrs: dict, base: Any = None) -> Any:
    """`update` (`a[i] += v`) combining into its dying base's region (else None: copy)."""
    base = _dying_base(vals, ins, dtype) if base is None else base
    if base is None:
        return None
    return update_into(base, vals[ins[1]], attrs["view"], attrs["ufunc"], attrs["dtype"])


#: operator name -> the in-place form of its kernel (Kernel.in_place)
IN_PLACE = {"assign": _assign_in_place, "update": _update_in_place}
