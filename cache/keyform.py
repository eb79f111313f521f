"""Key forms of values: dtypes, shape classes, structural and size-like attributes.

A structural key keeps what changes the computation and drops data and exact sizes. These
functions turn one node's parts into that form: `canon` keeps a structural attribute whole
(with its Python type, so 1, 1.0 and True differ, and 0.0 is not -0.0), `abstract` keeps
only the form of a size-like one (rank, unit extents, Python type, index tags).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ops.views import View

LEAF_BUFFER = "<B>"
LEAF_SCALAR = "<S>"


class Uncacheable(Exception):
    """An attribute whose value cannot be written into a key (e.g. an arbitrary object)."""


_dtype_str: dict[np.dtype, str] = {}
_shape_cls: dict[tuple, tuple] = {}


def dtype_str(dtype: np.dtype) -> str:
    """dtype.str, memoized (the attribute builds a new string on every access)."""
    s = _dtype_str.get(dtype)
    if s is None:
        s = _dtype_str[dtype] = dtype.str
    return s


def shape_class(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Per dimension 0, 1 or 2 (meaning: any other extent); memoized per shape."""
    c = _shape_cls.get(shape)
    if c is None:
        if len(_shape_cls) > 65536:  # shapes of a long run with many sizes: start over
            _shape_cls.clear()
        c = _shape_cls[shape] = tuple([d if d < 2 else 2 for d in shape])
    return c


def canon(value: Any) -> Any:
    """A structural attribute as a JSON-friendly, hashable value (types kept distinct)."""
    t = type(value)
    if t is str or value is None:
        return value
    if t is bool:
        return value
    if t is int:
        return ("i", value)
    if t is float:
        return ("f", repr(value))
    if t is complex:
        return ("c", repr(value))
    if t is tuple or t is list:
        return tuple(canon(v) for v in value)
    if isinstance(value, np.dtype):
        return ("dtype", value.str)
    if isinstance(value, np.generic):
        return ("np", value.dtype.str, repr(value.item()))
    if isinstance(value, np.ndarray) and value.dtype != object:
        return ("nd", value.dtype.str, value.shape, value.tobytes().hex())
    if isinstance(value, type) and issubclass(value, np.generic):
        return ("dtype", np.dtype(value).str)
    if isinstance(value, tuple):  # other named tuples
        return (t.__name__, tuple(canon(v) for v in value))
    raise Uncacheable(f"attribute value of type {t.__name__} cannot be part of a structural key")


def _view_class(view: View) -> tuple:
    # Per axis: 0 / 1 extents, 3 broadcast (stride 0), 4 reversed (negative stride), 2 other.
    out = []
    for d, s in zip(view.shape, view.strides):
        if d < 2:
            out.append(d)
        elif s == 0:
            out.append(3)
        elif s < 0:
            out.append(4)
        else:
            out.append(2)
    return ("V", tuple(out))


def abstract(value: Any) -> Any:
    """The form of a size-like attribute: rank, unit extents, Python type, index tags."""
    t = type(value)
    if value is None or t is bool or t is str:
        return value
    if t is int or isinstance(value, np.integer):
        return "#"
    if t is float:
        return "f#"
    if t is complex:
        return "c#"
    if t is View:
        return _view_class(value)
    if t is tuple or t is list:
        if value and type(value[0]) is str:  # an index template item: ("s", a, b, step), ("a", k)
            tag = value[0]
            if tag == "a":
                return ("a", value[1])
            if tag == "s":
                step = value[3]
                return ("s", None if step is None else step > 0)
            return (tag,)
        return ("T", tuple(abstract(v) for v in value))
    if isinstance(value, np.generic):
        return ("np", value.dtype.str)
    if isinstance(value, np.ndarray):
        return ("nd", value.dtype.str, value.ndim)
    return canon(value)


def attrs_key(op: Any, attrs: dict) -> tuple:
    """Attributes in key form: size-like ones abstracted, the others whole."""
    size = op.size_attrs
    return tuple((k, abstract(v) if k in size else canon(v)) for k, v in attrs.items())
