"""Templates: numberings of graphs seen before, found by their roots' hints and verified exactly.

An evaluation of a structure seen before does not walk its graph: the roots' hints (hashed
as the graph was recorded, cache/nodekey.py) name a few templates, each the numbering an
earlier full walk produced (its key, and per slot the local id and the input slots or the
alias). `match` places the new graph's nodes into that numbering from the roots down, one
step per node, and then compares, in bulk, everything the key encodes: every operation's
local id and inputs (by identity, so shared nodes are shared in the same way), every
leaf's local id and memory aliasing, and that no node fills two slots. A match therefore
means the full walk would have produced this very key; a hint collision or a stale hint
only costs a failed match and the full walk.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Any

from cache.nodekey import _SCALAR_IDS, hint_of, kid_of, leaf_parts
from cache.tmatch import MAX_SLOTS, SLOW, compile_matcher, native_ready
from ops.node import Node

_KID = attrgetter("kid")
_HINT = attrgetter("h")
_INPUTS = attrgetter("inputs")
_BUFFER = attrgetter("buffer")
_STATIC = attrgetter("static")
_FIRST, _SECOND, _THIRD = itemgetter(0), itemgetter(1), itemgetter(2)
_SCALAR_TYPES = {i: t for t, i in _SCALAR_IDS.items()}


def _getter(slots: list[int]) -> Callable[[list], tuple]:
    """The nodes at `slots`, as a tuple, in one C call."""
    if len(slots) >= 2:
        return itemgetter(*slots)
    if slots:
        (s,) = slots
        return lambda nodes: (nodes[s],)
    return lambda nodes: ()


class Template:
    """A numbered graph seen before: what the full walk returned, minus the nodes."""

    __slots__ = (
        "key",
        "roots",
        "ids",
        "edges",
        "interior",
        "n",
        "fetch",
        "inner",
        "inner_ids",
        "arity",
        "inputs",
        "scalars",
        "scalar_types",
        "buffers",
        "buffer_slots",
        "buffer_ids",
        "alias",
        "tuples",
        "few",
        "fast",
        "uses",
        "refs",
        "cached",
        "stale",
    )

    def __init__(
        self, key: tuple, roots: tuple, ids: list[int], edges: list[Any], interior: list[int]
    ) -> None:
        self.key, self.roots, self.ids, self.edges, self.interior = key, roots, ids, edges, interior
        n = self.n = len(ids)
        # per non-root slot, where the first node to reach it (the highest consumer) holds it
        first: dict[int, tuple[int, int]] = {}
        for s in reversed(interior):
            for p, j in enumerate(edges[s]):
                first.setdefault(j, (s, p))
        self.fetch = [(j, *first[j]) for j in range(n - 1, -1, -1) if j in first and j not in roots]
        self.inner = _getter(interior)
        self.inner_ids = [ids[s] for s in interior]
        self.arity = [len(edges[s]) for s in interior]
        self.inputs = _getter([j for s in interior for j in edges[s]])
        inner = set(interior)
        scalars = [s for s in range(n) if s not in inner and edges[s] is None]
        buffers = [s for s in range(n) if s not in inner and edges[s] is not None]
        self.scalars = _getter(scalars)
        self.scalar_types = [_SCALAR_TYPES[ids[s]] for s in scalars]
        self.buffers = _getter(buffers)
        self.buffer_slots = buffers[::-1]  # reversed: the lowest slot of an owner is its alias
        self.buffer_ids = [ids[s] for s in buffers]
        alias = [edges[s] for s in buffers]
        self.alias = None if alias == buffers else alias
        self.tuples = [tuple] * len(buffers)
        self.few = [(s, ids[s], edges[s]) for s in buffers] if len(buffers) <= 3 else None
        self.fast: Callable[[Sequence[Node]], Any] | None = None  # compiled at the second match
        self.uses = 0
        #: (store, its generation, the entry of `key` there): the engine's lookup, remembered
        self.cached: tuple | None = None
        #: the one stale recorded hint this template is also filed under (`find`), if any
        self.stale: int | None = None
        self.refs = [0] * n  # per slot, how many operations' inputs name it (the engine's `memoized`)
        for s in interior:
            for j in edges[s]:
                self.refs[j] += 1
        if len(KEY_HASHES) >= 4 * _MAX:
            KEY_HASHES.clear()
        KEY_HASHES[id(key)] = (key, hash(key))


def match(t: Template, roots: Sequence[Node]) -> list[Node] | None:
    """The graph's nodes by slot when it has exactly the template's numbered structure, else None."""
    if len(roots) != len(t.roots):
        return None
    nodes: list[Any] = [None] * t.n
    for r, s in zip(roots, t.roots):
        d = nodes[s]
        if d is None:
            nodes[s] = r
        elif d is not r:
            return None
    try:
        for j, s, p in t.fetch:
            nodes[j] = nodes[s].inputs[p]
    except IndexError:  # an evaluated node has no inputs: not this structure
        return None
    inner = t.inner(nodes)
    kids = list(map(_KID, inner))
    if kids != t.inner_ids:
        # a node recorded without its id gets it now; an evaluated one has none (-2, a tuple)
        for x, node in enumerate(inner):
            if kids[x] is None and node.buffer is None:
                kids[x] = kid_of(node)
        if kids != t.inner_ids:
            return None
    ins = list(map(_INPUTS, inner))
    if tuple(chain.from_iterable(ins)) != t.inputs(nodes) or list(map(len, ins)) != t.arity:
        return None
    if t.scalar_types and list(map(type, map(_BUFFER, t.scalars(nodes)))) != t.scalar_types:
        return None
    if t.buffer_ids and not buffers_ok(t, t.buffers(nodes)):
        return None
    if len(set(nodes)) != t.n:
        return None
    return nodes


def buffers_ok(t: Template, held: tuple, kids: tuple | None = None, marks: tuple | None = None) -> bool:
    """Whether the held buffers (in the template's buffer order) have its layouts, marks and aliasing.

    A compiled matcher passes their `kid` and `static` values too, read inline (cheaper than maps).
    """
    if t.few:  # up to 3 buffers: one by one costs less than the bulk comparisons
        first: dict[int, int] = {}
        for (s, k, e), node in zip(t.few, held):
            c = node.kid
            if type(c) is not tuple or c[0] != node.static:
                buf = node.buffer
                if buf is None or type(buf) in _SCALAR_IDS:
                    return False
                c = leaf_parts(node, buf)
            if c[1] != k or first.setdefault(c[2], s) != e:
                return False
        return True
    parts = list(map(_KID, held)) if kids is None else list(kids)
    if marks is None:
        marks = tuple(map(_STATIC, held))
    if list(map(type, parts)) != t.tuples or tuple(map(_FIRST, parts)) != marks:
        for x, node in enumerate(held):  # first seen, evaluated since, or marked static since
            c = parts[x]
            if type(c) is not tuple or c[0] != node.static:
                buf = node.buffer
                if buf is None or type(buf) in _SCALAR_IDS:
                    return False
                parts[x] = leaf_parts(node, buf)
    if list(map(_SECOND, parts)) != t.buffer_ids:
        return False
    owners = list(map(_THIRD, parts))
    if t.alias is None:  # no two buffers share memory
        return len(set(owners)) == len(owners)
    lowest = dict(zip(reversed(owners), t.buffer_slots))
    return list(map(lowest.__getitem__, owners)) == t.alias


def compile_after(n: int) -> int:
    """How many general matches a template of `n` slots gets before its matcher is compiled.

    A structure that recurs is worth compiling, but compiling the generated Python costs more
    than linearly in the slots (about 0.4 ms at 3, 7 ms at 238 on a busy machine) while a
    general match costs about 0.5 us a slot: a large template waits for more uses, so a loop's
    first call (a few evaluations of each structure) pays no compile and its warm calls run
    compiled. Making a C matcher (once its module is loaded) costs about 1.5 us a slot, three
    general matches, at any size.
    """
    return 3 + (n >> 11) if native_ready() else 3 + (n >> 4)


#: hands a matcher's compile to a worker off the hit path, `DEFER(key, job)` (the engine installs
#: its background worker; None: none)
DEFER: Callable[[Hashable, Callable[[], object]], bool] | None = None
#: with a worker, the general matches after which the compile is handed to it: a structure seen
#: twice recurs, and its hit path then waits neither for `compile_after` general matches (0.5 us
#: a slot each) nor on the compile (milliseconds at a hundred slots); a worker still busy at
#: `compile_after` (a kernel compiling) does not hold it up: it compiles in place as without one
DEFER_AFTER = 2


def _compile(t: Template) -> None:
    """Give `t` its compiled matcher (on the worker, or in place; the first one kept)."""
    if t.fast is None:
        fast = compile_matcher(t, buffers_ok)
        if t.fast is None:
            t.fast = fast


def _match(t: Template, roots: Sequence[Node]) -> list[Node] | None:
    """`match` through the template's compiled matcher once it has one (cache/tmatch.py)."""
    fast = t.fast
    if fast is not None:
        try:
            nodes = fast(roots)
        except ValueError:  # an unpacking found another number of inputs (or of roots)
            return None
        return match(t, roots) if nodes is SLOW else nodes
    nodes = match(t, roots)
    if nodes is not None:
        t.uses += 1
        if t.n <= MAX_SLOTS or native_ready():
            if t.uses >= compile_after(t.n):
                _compile(t)
            elif t.uses == DEFER_AFTER and DEFER is not None:
                DEFER(("matcher", id(t)), lambda: _compile(t))
    return nodes


#: roots' hint -> templates (most recent first); bounded, cleared when large
_templates: dict[int, list[Template]] = {}
_PER_HINT = 4
_MAX = 512
#: id of a template's key -> (the key, its hash): tuples do not keep their hash (cache/key.py
#: key_hash); the key is held, so the id stays its own
KEY_HASHES: dict[int, tuple[tuple, int]] = {}


def roots_hint(roots: Sequence[Node]) -> int | None:
    """The combined hint of the roots (None when one is too deep to hint now)."""
    try:
        return hash(tuple([r.h if r.h is not None else hint_of(r) for r in roots]))
    except RecursionError:  # a long chain recorded without hints: the full walk hints it
        return None


_ROOTS_HINT = roots_hint


def find(roots: Sequence[Node]) -> tuple[int | None, Template | None, list[Node] | None]:
    """(roots' hint as recorded, the template this graph matches and its nodes by slot), or Nones.

    The common case calls nothing written in Python but the compiled matcher: on this path a
    function call costs microseconds with the caches cold from the previous step's run.
    """
    hints = tuple(map(_HINT, roots))
    if None in hints or roots_hint is not _ROOTS_HINT:  # (tests replace roots_hint to force collisions)
        h = roots_hint(roots)
    else:
        h = hash(hints)  # the same hash as roots_hint's
    found = _templates.get(h) if h is not None else None
    if found is not None:
        for t in found:
            fast = t.fast
            if fast is None:
                nodes = _match(t, roots)
            else:
                try:
                    nodes = fast(roots)
                except ValueError:  # an unpacking found another number of inputs (or of roots)
                    nodes = None
                if nodes is SLOW:
                    nodes = match(t, roots)
            if nodes is not None:
                if found[0] is not t:
                    _templates[h] = [t, *[x for x in found if x is not t]]
                return h, t, nodes
    return h, None, None


def remember(
    recorded: int | None,
    fresh: int,
    key: tuple,
    roots: tuple,
    ids: list[int],
    edges: list[Any],
    interior: list[int],
) -> Template:
    """File a full walk's numbering under the roots' hint as the walk recomputed it (`fresh`),
    and under the hint they had as recorded when it differs (a stale one: an input was
    evaluated after its consumer was recorded).

    A template of the same key already filed under `fresh` is reused: a loop whose recorded
    hints go stale every round walks in full once, then finds its template under the recorded
    hint (the same history gives the same stale hint) and never makes another one.
    """
    t = next((x for x in _templates.get(fresh, ()) if x.key == key), None)
    if t is None:
        t = Template(key, roots, ids, edges, interior)
        _offer(fresh, t)
    if recorded is not None and recorded != fresh and t.stale != recorded:
        _file_stale(t, recorded)
    return t


def _offer(h: int, t: Template) -> None:
    """File `t` first under the hint `h` (replacing a template of the same key there)."""
    found = _templates.get(h)
    if found is None:
        if len(_templates) >= _MAX:
            _templates.clear()
        _templates[h] = [t]
    else:
        _templates[h] = [t, *[x for x in found if x.key != t.key][: _PER_HINT - 1]]


def _file_stale(t: Template, stale: int) -> None:
    """File `t` under a stale recorded hint too, in place of the one it had: a loop whose
    recorded hints differ every round (a chain that grows) files nothing more per round."""
    old = t.stale
    if old is not None:
        found = _templates.get(old)
        if found is not None:
            rest = [x for x in found if x is not t]
            if rest:
                _templates[old] = rest
            else:
                del _templates[old]
    t.stale = stale
    _offer(stale, t)


def clear() -> None:
    """Forget every template (tests; a template is never wrong, only unused)."""
    _templates.clear()
    KEY_HASHES.clear()
