"""Operators' shape and dtype rules remembered per input signature, for `record`'s general path.

An operator's `infer` validates its inputs and attributes and normalizes the attributes
(reductions' axes, reshapes' -1, convolutions' padding): 2-4 µs a call, as much as the rest
of recording together. Its answer depends only on the inputs' shapes and dtypes and on the
attributes, so it is kept per (operator, those, attributes). A Python float, bool or
complex operand counts by its type (under NEP 50 its value never changes NumPy's answer:
`dtype_by_example` caches it so too); Python ints (whose values decide NumPy's promotion),
operators without inputs, unhashable attributes and rules that warn are asked every time; a
rule that raises is never remembered (the next call raises again).

A signature is remembered on its second sight, not its first: watching a rule for warnings
(`warnings.catch_warnings`) costs 5 µs warm and tens of µs in a program's first call, where
most signatures are seen once, and a first call records every operator for the first time.
"""

from __future__ import annotations

import warnings
from typing import Any

from ops.creation import SCALAR
from ops.node import Node

#: (operator, ((shape, dtype) per input), attributes with their types) -> (shape, dtype, attrs)
_MEMO: dict[tuple, tuple] = {}
#: signatures asked once, unwatched (their warnings reach the user as the rule's own)
_SEEN: set[tuple] = set()
_MAX = 4096


def infer(opdef: Any, nodes: tuple[Node, ...], attrs: dict) -> tuple[tuple[int, ...], Any, dict]:
    """`opdef.infer(nodes, attrs)`, from the memo when this signature was seen."""
    if not nodes:
        return opdef.infer(nodes, attrs)
    sig = []
    for n in nodes:
        if n.op is SCALAR:
            t = type(n.buffer)
            if t is not float and t is not bool and t is not complex:
                return opdef.infer(nodes, attrs)  # an int's value decides NumPy's answer (int8 + 300)
            sig.append((t, None))  # NEP 50: a float's, bool's or complex's value never does
            continue
        sig.append((n.shape, n.dtype))
    try:
        key = _key(opdef, sig, attrs)
        hit = _MEMO.get(key)
    except TypeError:  # an unhashable attribute (a list, an array, a slice)
        return opdef.infer(nodes, attrs)
    if hit is not None:
        return hit[0], hit[1], dict(hit[2])
    if key not in _SEEN:
        if len(_SEEN) >= _MAX:
            _SEEN.clear()
        _SEEN.add(key)
        return opdef.infer(nodes, attrs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shape, dtype, out = opdef.infer(nodes, attrs)
    if caught:  # said again where the user sees it, and asked again next time
        for w in caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
        return shape, dtype, out
    if len(_MEMO) >= _MAX:
        _MEMO.clear()
    _MEMO[key] = (shape, dtype, dict(out))
    return shape, dtype, out


def _key(opdef: Any, sig: list | tuple, attrs: dict) -> tuple:
    """The memo's key (raises TypeError for an unhashable attribute)."""
    # the values' types too: 1, 1.0 and True hash alike but may not infer alike
    return (opdef, tuple(sig), tuple(sorted([(k, type(v), v) for k, v in attrs.items()])))


def settled(opdef: Any, nodes: tuple[Node, ...], attrs: dict) -> bool:
    """Whether this signature's inference is memoized (it raised no warning that must be said again)."""
    try:
        return _key(opdef, [(n.shape, n.dtype) for n in nodes], attrs) in _MEMO
    except TypeError:
        return False
