"""Why a lookup missed: the part of the key that differs from the nearest cached entry."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cache.key import LEAF_SCALAR, is_leaf_token
from cache.store import Entry

_DIM = {0: "0", 1: "1", 2: "n", 3: "n(stride 0)", 4: "n(reversed)"}


def _dims(cls: tuple) -> str:
    return "[" + ",".join(_DIM.get(c, "?") for c in cls) + "]"


def _leaf_kind(tok: tuple) -> str:
    return "a Python scalar" if tok[0] == LEAF_SCALAR else "a held array"


def _what(tok: tuple) -> str:
    return _leaf_kind(tok) if is_leaf_token(tok) else f"an operation ({tok[0]})"


def _alias(tok: tuple, i: int) -> str:
    return f"shares memory with leaf %{tok[-1]}" if tok[-1] != i else "has its own memory"


def _ins(tok: tuple) -> str:
    return ", ".join(f"%{s}" for s in tok[4])


def token_difference(i: int, a: tuple, b: tuple) -> str:
    """One sentence on how node i differs: this key's token `a`, the cached entry's `b`."""
    if is_leaf_token(a) != is_leaf_token(b):
        return f"node %{i} is {_what(a)} here but {_what(b)} in the cached graph"
    if is_leaf_token(a):
        if a[0] != b[0]:
            return f"leaf %{i}: scalar vs array ({_leaf_kind(a)} here, {_leaf_kind(b)} cached)"
        if a[0] == LEAF_SCALAR:
            return f"leaf %{i}: Python scalar type {a[1]} here, {b[1]} cached"
        if a[1] != b[1]:
            return f"leaf %{i}: dtype {a[1]} here, {b[1]} cached"
        if len(a[2]) != len(b[2]):
            return f"leaf %{i}: rank {len(a[2])} here, {len(b[2])} cached"
        if a[2] != b[2]:
            return f"leaf %{i}: unit/broadcast dimensions {_dims(a[2])} here, {_dims(b[2])} cached"
        if a[3] != b[3]:
            return f"leaf %{i}: device {a[3]} here, {b[3]} cached"
        if a[4] != b[4]:
            return f"leaf %{i}: static (model state) {a[4]} here, {b[4]} cached"
        return f"leaf %{i}: aliasing: {_alias(a, i)} here, {_alias(b, i)} cached"
    if a[0] != b[0]:
        return f"node %{i}: op {a[0]} here, {b[0]} cached"
    if a[1] != b[1]:
        return f"node %{i} ({a[0]}): dtype {a[1]} here, {b[1]} cached"
    if len(a[2]) != len(b[2]):
        return f"node %{i} ({a[0]}): rank {len(a[2])} here, {len(b[2])} cached"
    if a[2] != b[2]:
        return f"node %{i} ({a[0]}): unit dimensions {_dims(a[2])} here, {_dims(b[2])} cached"
    if a[3] != b[3]:
        da, db = dict(a[3]), dict(b[3])
        names = sorted(k for k in set(da) | set(db) if da.get(k) != db.get(k))
        return f"node %{i} ({a[0]}): attribute {', '.join(names)} {da.get(names[0])!r} here, " + (
            f"{db.get(names[0])!r} cached"
        )
    return f"node %{i} ({a[0]}): inputs ({_ins(a)}) here, ({_ins(b)}) cached"


def _compare(a: tuple, b: tuple) -> tuple[int, int, str]:
    """(first differing node, number of differing nodes, description)."""
    ta, tb = a[0], b[0]
    first = -1
    count = abs(len(ta) - len(tb))
    for i, (x, y) in enumerate(zip(ta, tb)):
        if x != y:
            count += 1
            if first < 0:
                first = i
    if first >= 0:
        what = token_difference(first, ta[first], tb[first])
    elif len(ta) != len(tb):
        first = min(len(ta), len(tb))
        what = f"the graph has {len(ta)} nodes here, {len(tb)} cached (the same first {first})"
    elif a[1] != b[1]:
        first = len(ta)
        what = f"the requested outputs differ: {list(a[1])} here, {list(b[1])} cached"
    else:
        first, what = len(ta), "the keys are equal apart from the optimizer setting"
    return first, count, what


def explain_miss(skey: tuple, entries: Iterable[Entry]) -> str:
    """Describe the entry nearest to a structural key (longest equal prefix, then fewest differences)."""
    best: tuple[int, int, str, Entry] | None = None
    for e in entries:
        if e.skey == skey:
            return f"same key as entry {e.digest[:12]}: none of its variants' guards hold for these sizes"
        first, count, what = _compare(skey, e.skey)
        if best is None or (first, -count) > (best[0], -best[1]):
            best = (first, count, what, e)
    if best is None:
        return f"nothing cached yet ({len(skey[0])} nodes)"
    first, count, what, e = best
    return f"nearest entry {e.digest[:12]} differs in {count} node(s); first: {what}"


def _mib(n: int) -> str:
    return f"{n} B" if n < 2**10 else f"{n / 2**20:.3f} MiB"


def memory_lines(plan: Any) -> list[str]:
    """The memory plan of a cached plan: the chosen order, and the last metered run's peaks."""
    lines = []
    info = plan.tgraph.artifacts.get("schedule")
    if isinstance(info, dict):
        proof = ", proven optimal" if info.get("optimal") else ""
        lines.append(
            f"memory plan = order by {info.get('method')} ({len(plan.steps)} steps{proof}), predicted peak "
            f"{_mib(int(info.get('peak', 0)))} vs {_mib(int(info.get('recorded_peak', 0)))} "
            "in the recorded order (sizes when it was planned)"
        )
    else:
        lines.append("memory plan = recorded order (the planner was off or the plan is too small)")
    if plan.memory is not None:
        pred, meas, reused, inplace = plan.memory
        lines.append(
            f"last metered run = peak {_mib(pred)} predicted, {_mib(meas)} measured; "
            f"{reused} buffers reused (out=), {inplace} in-place writes"
        )
    return lines
