"""A template's matcher as straight-line Python, or the same checks in C: the hit path at a few tens
of nanoseconds per node.

`template.match` verifies a graph against a template with bulk operations over lists (one
C-level pass each: inputs, local ids, leaves, distinctness), about 0.25 us per node warm and
twice that on fresh nodes. A template that has matched three times gets a function written for
its numbering alone, compiled once (`compile_matcher`), doing the same checks on local variables:

- per operation, from the roots down, one tuple unpacking of its inputs (`a, b = n7.inputs`):
  the arity is checked by the unpacking itself, an input reached for the first time lands in
  its slot's variable, an input the template shares is compared by identity (`is`);
- one tuple comparison of every operation's local id (an evaluated node has -2, a tuple or
  None: a node recorded without its id goes to the general match, which computes it);
- one tuple comparison of the Python scalars' types;
- the held buffers' memoized (static, id, owner): ids and static marks as two tuple comparisons,
  owners as one set (`template.buffers_ok` when one differs, or when memory is shared in the
  template);
- one set over the slots that could hold the same node (the others cannot: every edge is
  compared, so two slots holding one node have equal local ids and equal inputs all the way
  down, which ends at a buffer with its own memory owner or at the template's distinct ones).

Everything the general match checks is checked, so a structural difference still misses; the
generated text holds only integers and fixed names (no data of the graph's values). When the C
extension is loaded (`NATIVE`, lazygraph/lean_match.c) the template gets a C matcher instead, made
from the same tables: the same checks in the same order, three to four times faster, and cheap
enough to make (about 1.5 us a slot) that `template.compile_after` stops growing with the size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cache.nodekey import TOKENS

#: what a generated matcher returns when a node lacks its local id (the general match fills it)
SLOW = object()
#: graphs above this many slots keep the general match unless the C matcher is loaded (compiling the
#: generated Python grows faster than the slots: 94 ms at 936)
MAX_SLOTS = 1500
#: `NATIVE(loaded_only)`: the C matchers' module (lazygraph/lean_match.c), loading it unless
#: `loaded_only`, or None (not loaded, no compiler, or switched off); the engine installs it, as the
#: cache never imports the engine's native code
NATIVE: Callable[[bool], Any] | None = None


def native_ready() -> bool:
    """Whether making a matcher now costs little (the C module is loaded: about 1.5 us a slot)."""
    return NATIVE is not None and NATIVE(True) is not None


def _could_coincide(n: int, ids: list[int], edges: list[Any], interior: set[int], alias: bool) -> list[int]:
    """Slots that may hold the same node as another slot after every other check passed.

    A value number per slot: a buffer with no memory shared in the template is unique (the
    owner check separates them); an aliased buffer numbers by (id, alias); a scalar by its id;
    an operation by (id, its inputs' numbers). Slots whose number is unique cannot coincide.
    """
    numbers: dict[tuple, int] = {}  # flat tuples only: nested ones would hash the unfolded tree
    vn = [0] * n
    for s in range(n):
        e = edges[s]
        if s in interior:
            v: tuple = (ids[s], *[vn[j] for j in e])
        elif e is None:
            v = ("s", ids[s])
        elif alias:
            v = ("b", ids[s], e)
        else:
            v = ("u", s)
        vn[s] = numbers.setdefault(v, len(numbers))
    count = [0] * len(numbers)
    for x in vn:
        count[x] += 1
    return [s for s in range(n) if count[vn[s]] > 1]


def matcher_source(
    n: int,
    roots: Sequence[int],
    ids: list[int],
    edges: list[Any],
    interior: list[int],
    scalars: list[int],
    buffers: list[int],
    alias: bool,
) -> str:
    """The text of `match(R)` for one template (see the module's docstring)."""
    inner = set(interior)
    lines = ["def match(R):"]
    seen: set[int] = set()
    temps = 0

    def unpack(source: str, slots: Sequence[int]) -> None:
        # one tuple unpacking (it checks the arity too); a slot met before is bound to a
        # temporary that must be that very node
        nonlocal temps
        targets, checks = [], []
        for j in slots:
            if j in seen:
                targets.append(f"t{temps}")
                checks.append(f"t{temps} is not n{j}")
                temps += 1
            else:
                seen.add(j)
                targets.append(f"n{j}")
        lines.append(f"    {', '.join(targets)}, = {source}")
        if checks:
            lines.append(f"    if {' or '.join(checks)}: return None")

    unpack("R", roots)
    for s in sorted(interior, reverse=True):  # consumers before their inputs: slots number inputs first
        e = edges[s]
        if not e:
            lines.append(f"    if n{s}.inputs: return None")
            continue
        unpack(f"n{s}.inputs", e)
    if interior:
        kids = ", ".join(f"n{s}.kid" for s in interior)
        lines.append(f"    k = ({kids},)")
        lines.append("    if k != K: return SLOW if None in k else None")
    if scalars:
        types = ", ".join(f"type(n{s}.buffer)" for s in scalars)
        lines.append(f"    if ({types},) != ST: return None")
    if buffers:
        held = ", ".join(f"n{s}" for s in buffers)
        if alias:
            lines.append(f"    if not buffers_ok(T, ({held},)): return None")
        else:  # each memoized (static, id, owner): the ids, the marks, distinct owners; else in full
            lines += [f"    c{s} = n{s}.kid" for s in buffers]
            ids_ = ", ".join(f"c{s}[1]" for s in buffers)
            marks = ", ".join(f"n{s}.static" for s in buffers)
            owners = ", ".join(f"c{s}[2]" for s in buffers)
            distinct = f" and len({{{owners}}}) == {len(buffers)}" if len(buffers) > 1 else ""
            lines += [
                "    try:",
                f"        ok = ({ids_},) == BIDS and ({marks},) == BST{distinct}",
                "    except TypeError:  # a kid that is not a buffer's memo (evaluated since, or None)",
                "        ok = False",
                f"    if not ok and not buffers_ok(T, ({held},)): return None",
            ]
    maybe = _could_coincide(n, ids, edges, inner, alias)
    if maybe:
        lines.append(f"    if len({{{', '.join(f'n{s}' for s in maybe)}}}) != {len(maybe)}: return None")
    lines.append(f"    return [{', '.join(f'n{s}' for s in range(n))}]")
    return "\n".join(lines) + "\n"


def compile_matcher(t: Any, buffers_ok: Callable[[Any, tuple], bool]) -> Callable[[Sequence[Any]], Any]:
    """The compiled matcher of template `t` (cache/template.py), returning nodes, None or SLOW:
    the C one when its module loads (the same checks over slot tables, a few times faster), else
    the generated Python."""
    inner = set(t.interior)
    scalars = [s for s in range(t.n) if s not in inner and t.edges[s] is None]
    buffers = [s for s in range(t.n) if s not in inner and t.edges[s] is not None]
    native = NATIVE(False) if NATIVE is not None else None
    if native is not None:
        ops = []
        for s in sorted(t.interior, reverse=True):  # consumers first, as the Python text unpacks
            ops += [s, len(t.edges[s]), *t.edges[s]]
        return native.match_make(
            t.n,
            list(t.roots),
            ops,
            list(t.interior),
            list(t.inner_ids),
            scalars,
            tuple(t.scalar_types),
            buffers,
            list(t.buffer_ids),
            tuple(TOKENS[i][4] for i in t.buffer_ids),
            _could_coincide(t.n, t.ids, t.edges, inner, t.alias is not None),
            t.alias is not None,
            t,
            buffers_ok,
            SLOW,
        )
    src = matcher_source(t.n, t.roots, t.ids, t.edges, t.interior, scalars, buffers, t.alias is not None)
    space: dict[str, Any] = {
        "K": tuple(t.inner_ids),
        "ST": tuple(t.scalar_types),
        "T": t,
        "SLOW": SLOW,
        "buffers_ok": buffers_ok,
        "BIDS": tuple(t.buffer_ids),
        "BST": tuple(TOKENS[i][4] for i in t.buffer_ids),  # a buffer token's static mark
        "len": len,
        "type": type,
    }
    exec(compile(src, "<template matcher>", "exec"), space)  # noqa: S102 (integers and fixed names only)
    return space["match"]
