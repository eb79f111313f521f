"""Fusion: group a scheduled graph's elementwise ops and reductions into JIT regions.

Walking nodes in topological order, a fusable node joins the region of a producer when the
region's domain accepts it (jit/domain.py: one set of reduced axes, no diagonal reads,
recomputation cheaper than storing) and joining makes no cycle (no path from the region to
the node through a node outside it). A node whose producers sit in several regions merges
them when that is acyclic and one kernel, so two chains that meet end in one region.
Everything else — library calls (matmul, conv2d), data movement, views of intermediates —
is a region boundary and runs its own kernel. Regions whose arrays are all small stay with
NumPy: a kernel launch through ctypes costs more than NumPy's per-op overhead there.

Nodes are read through one protocol: `op`, `inputs`, `attrs`, `shape`, `dtype` (and, for
operands, `ops.base.is_weak_scalar`), so the optimizer's Q nodes are fused as they are.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from math import prod

from jit.domain import Domain, NotFusable, check_node
from jit.kernel import Region
from ops.base import is_weak_scalar
from ops.node import Node

#: members per region at most. It bounds compile time, which grows much faster than a kernel's
#: size (gcc's register allocation on one long loop body): the 2000-link tanh chain of
#: tests/reliability/test_plan_scale.py compiled in 85 s with 256 (four 57 KB kernels, 20 s
#: each), 12.9 s with 128, 7.0 s with 64; its 200-link warm run on 2^20 float32 values took
#: 1.63, 1.46 and 1.36 s (the smaller kernels keep fewer values live: fewer spills), on this
#: 2-core machine under load. Past 64 members a further split costs one more pass over memory.
MAX_MEMBERS = 64


def complex_ok(n: Node) -> bool:
    """Whether a node that touches complex values has a complex form in kernels (jit/complex_c.py).

    Elementwise operators with a JIT template keyed "c" only (not reductions, composites or
    complex Python scalars, whose scalar slot holds one real); `where` with a real condition;
    a conversion from complex to a real kind only where a key names "c" and that kind.
    """
    ins = [c.dtype.kind == "c" for c in n.inputs]
    if n.dtype.kind != "c" and not any(ins):
        return True
    op = n.op
    if op.kind != "elementwise" or op.decompose is not None or not op.jit_expr:
        return False
    if any(flag and is_weak_scalar(c) for flag, c in zip(ins, n.inputs)):
        return False
    keys = [k for k in op.jit_expr if "c" in k]
    if op.jit_loop == "select":
        return bool(keys) and not ins[0]
    if op.jit_loop == "convert" and ins[0] and n.dtype.kind != "c":
        return any(n.dtype.kind in k for k in keys)
    return bool(keys)


class _Group:
    __slots__ = ("gid", "members", "domain", "first", "ordered", "empty")

    def __init__(self, gid: int, domain: Domain, first: Node, pos: int) -> None:
        self.gid = gid
        self.members: list[Node] = [first]
        self.domain = domain
        self.first = pos  # position of the earliest member: nothing before it depends on the group
        self.ordered = True  # members joined the domain in topological order (no merge since)
        # A region loops over its members' common domain: fused with an empty member, a
        # non-empty one (a 0-d value beside a (0, 3) one) would sit in a loop with no iterations
        # and never be computed. So empty and non-empty values never share a region.
        self.empty = 0 in first.shape


class _Fuser:
    def __init__(self, order: Sequence[Node]) -> None:
        self.pos = {id(n): i for i, n in enumerate(order)}
        self.group_of: dict[int, _Group] = {}
        self.parent: dict[int, int] = {}
        self.groups: dict[int, _Group] = {}
        self.merge_adds = 0  # nodes added to domains while merging groups (work counter)
        self.expanded: dict[int, object] = {}  # composites' decompositions, shared by every domain

    def find(self, g: int) -> int:
        while self.parent[g] != g:
            self.parent[g] = self.parent[self.parent[g]]
            g = self.parent[g]
        return g

    def gid(self, c: Node) -> int | None:
        g = self.group_of.get(id(c))
        return None if g is None else self.find(g.gid)

    def depends_on(self, c: Node, gids: set[int], first: int) -> bool:
        """Whether `c`'s value is computed from a member of the groups `gids`.

        Depth-first through inputs, never below position `first` (the groups' earliest
        member): in a topological order nothing earlier can depend on them.
        """
        stack = [c]
        seen: set[int] = set()
        while stack:
            x = stack.pop()
            p = self.pos.get(id(x))
            if p is None or p < first or id(x) in seen:
                continue
            seen.add(id(x))
            if self.gid(x) in gids:
                return True
            stack.extend(x.inputs)
        return False

    def run(self, order: Sequence[Node]) -> None:
        for n in order:
            if not complex_ok(n):
                continue
            try:
                check_node(n)
            except NotFusable:
                continue
            cands: list[_Group] = []
            empty = 0 in n.shape
            for c in n.inputs:
                g = self.gid(c)
                if g is not None and self.groups[g] not in cands and self.groups[g].empty == empty:
                    cands.append(self.groups[g])
            joined = self.join(n, cands)
            if joined is None:
                dom = Domain(self.expanded)
                try:
                    dom.add(n)
                except NotFusable:
                    continue
                gid = len(self.parent)
                self.parent[gid] = gid
                joined = _Group(gid, dom, n, self.pos[id(n)])
                self.groups[gid] = joined
            self.group_of[id(n)] = joined

    def join(self, n: Node, cands: list[_Group]) -> _Group | None:
        """Add n to a candidate group (merging several when possible); None if none fits."""
        if len(cands) > 1:
            merged = self.merge(n, cands)
            if merged is not None:
                return merged
        for g in sorted(cands, key=lambda g: -len(g.members)):
            if len(g.members) >= MAX_MEMBERS:
                continue
            outside = [c for c in n.inputs if self.gid(c) != g.gid]
            if any(self.depends_on(c, {g.gid}, g.first) for c in outside):
                continue  # n reads a value computed from g outside g: joining makes a cycle
            d = g.domain.copy()
            try:
                d.add(n)
            except NotFusable:
                continue
            g.domain = d
            g.members.append(n)
            return g
        return None

    def merge(self, n: Node, cands: list[_Group]) -> _Group | None:
        ids = {g.gid for g in cands}
        members = sorted((m for g in cands for m in g.members), key=lambda m: self.pos[id(m)])
        if len(members) >= MAX_MEMBERS:
            return None
        first = min(g.first for g in cands)
        # No path between the groups, or from them to n, through nodes outside them.
        for m in members + [n]:
            for c in m.inputs:
                if self.gid(c) not in ids and self.depends_on(c, ids, first):
                    return None
        dom = self._merged_domain(cands, n)
        if dom is None:
            return None
        keep = cands[0]
        for g in cands[1:]:
            self.parent[g.gid] = keep.gid
            del self.groups[g.gid]
        keep.members = members + [n]
        keep.domain = dom
        keep.first = first
        keep.ordered = False
        return keep

    def _merged_domain(self, cands: list[_Group], n: Node) -> Domain | None:
        """The domain of the candidates' members and n together, or None when they are not one kernel.

        Growing a copy of one group's domain by the others' members costs their size, where
        rebuilding from nothing costs the whole region's (quadratic over a long chain that
        keeps merging into one region). The base must read no member of the other groups:
        its domain saw those as external inputs, and their axes and stages would disagree.
        """
        others_ids = {id(m) for g in cands for m in g.members}
        base = None
        for g in sorted(cands, key=lambda g: -len(g.members)):
            own = {id(m) for m in g.members}
            if not any(k in others_ids and k not in own for k in g.domain.amap):
                base = g
                break
        if base is None:
            dom = Domain(self.expanded)
            rest = sorted((m for g in cands for m in g.members), key=lambda m: self.pos[id(m)])
        else:
            dom = base.domain.copy()
            rest = sorted(
                (m for g in cands if g is not base for m in g.members), key=lambda m: self.pos[id(m)]
            )
        self.merge_adds += len(rest) + 1
        try:
            for m in rest + [n]:
                dom.add(m)
        except NotFusable:
            return None
        return dom


def find_regions(
    order: Sequence[Node], needed_outside: Iterable[Node] = (), min_size: int = 0
) -> list[Region]:
    """Regions of `order` (a topological order of unevaluated nodes), in a runnable order.

    `needed_outside` are nodes whose values must be materialized whatever consumes them (the
    evaluation's roots and memoized nodes). Nodes in no region run on their own.
    """
    f = _Fuser(order)
    f.run(order)
    needed = {id(n) for n in needed_outside}
    used_outside: set[int] = set()
    for n in order:
        gid = f.gid(n)
        for c in n.inputs:
            cg = f.gid(c)
            if cg is not None and cg != gid:
                used_outside.add(id(c))
    out: list[Region] = []
    for g in f.groups.values():
        members = g.members
        if min_size and max(prod(m.shape) for m in members) < min_size:
            continue
        mids = {id(m) for m in members}
        outputs = [m for m in members if id(m) in needed or id(m) in used_outside]
        if not outputs:
            continue
        inputs: list[Node] = []
        seen: set[int] = set()
        for m in members:
            for c in m.inputs:
                if id(c) not in mids and id(c) not in seen:
                    seen.add(id(c))
                    inputs.append(c)
        ordered = sorted(members, key=lambda m: f.pos[id(m)])
        dom = g.domain
        if not g.ordered:
            # The domain's checks depend on the order members joined; a cached region is rebuilt
            # in topological order (kernel.make_region), so that order must accept it too.
            try:
                dom = Domain(f.expanded)
                for m in ordered:
                    dom.add(m)
            except NotFusable:
                continue  # its members run one by one
        out.append(Region(ordered, inputs, outputs, dom))
    out = _break_cycles(order, out)
    out.sort(key=lambda r: f.pos[id(r.nodes[-1])])
    return out


def _break_cycles(order: Sequence[Node], regions: list[Region]) -> list[Region]:
    """Drop regions until running each region as one kernel leaves the graph acyclic.

    The join test follows node dependencies; a region is one kernel, so a node outside it
    may depend on one member while another member depends on that node (through different
    members of two regions). Kahn's algorithm on the contracted graph finds what is left on
    a cycle; the smallest region there goes back to op-by-op, and the check repeats.
    """
    while True:
        unit: dict[int, int] = {}
        for k, r in enumerate(regions):
            for m in r.nodes:
                unit[id(m)] = k
        n_units = len(regions)
        for n in order:
            if id(n) not in unit:
                unit[id(n)] = n_units
                n_units += 1
        succ: list[set[int]] = [set() for _ in range(n_units)]
        indeg = [0] * n_units
        for n in order:
            u = unit[id(n)]
            for c in n.inputs:
                v = unit.get(id(c))
                if v is not None and v != u and u not in succ[v]:
                    succ[v].add(u)
                    indeg[u] += 1
        ready = [u for u in range(n_units) if indeg[u] == 0]
        done = 0
        while ready:
            v = ready.pop()
            done += 1
            for u in succ[v]:
                indeg[u] -= 1
                if indeg[u] == 0:
                    ready.append(u)
        if done == n_units:
            return regions
        stuck = [k for k in range(len(regions)) if indeg[k] > 0]
        drop = min(stuck, key=lambda k: len(regions[k].nodes))
        regions = regions[:drop] + regions[drop + 1 :]


def units(order: Sequence[Node], regions: Sequence[Region]) -> list[Node | Region]:
    """`order` with each region's members replaced by the region, in a runnable order.

    A node outside a region may read a member's value, so regions cannot simply run at the
    place of their last member: the contracted graph is sorted again (depth first).
    """
    unit_of: dict[int, Region] = {}
    for r in regions:
        for m in r.nodes:
            unit_of[id(m)] = r
    in_order = {id(n) for n in order}
    done: set[int] = set()
    out: list[Node | Region] = []

    def preds(u: Node | Region) -> list[Node]:
        if isinstance(u, Region):
            return u.inputs
        return list(u.inputs)

    for n in order:
        u0: Node | Region = unit_of.get(id(n), n)
        if id(u0) in done:
            continue
        stack = [(u0, iter(preds(u0)))]
        done.add(id(u0))
        while stack:
            u, it = stack[-1]
            for c in it:
                if id(c) not in in_order:
                    continue
                cu: Node | Region = unit_of.get(id(c), c)
                if id(cu) not in done:
                    done.add(id(cu))
                    stack.append((cu, iter(preds(cu))))
                    break
            else:
                stack.pop()
                out.append(u)
    return out
