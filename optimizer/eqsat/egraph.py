"""An e-graph over the superoptimizer's search graphs (union-find, hashcons, rebuild).

E-nodes are `SNode`s (lazygraph's own operators, as the TASO search sees them) whose inputs
are e-class ids; leaves are keyed by what they stand for (a Q node, or their id in the graph
they came from), constants by their value. The library's rules are e-matched on the
e-graph itself (ematch.py); the structural merges (Python over shapes and consumers) run on
concrete graphs drawn from the e-graph, and `absorb` adds such a rewritten graph and unions
each replaced node's class with its replacement's class (see docs/superopt.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from optimizer.superopt.apply import SGraph, SNode


@dataclass
class ENode:
    """One e-node: an operation (or leaf) over child e-classes, and the rule that introduced it."""

    node: SNode
    children: tuple[int, ...]
    rule: str = ""
    leaf_key: tuple | None = None


def leaf_key(sg: SGraph, i: int) -> tuple:
    n = sg.nodes[i]
    if n.op in ("scalar", "const") and n.src < 0:
        return ("leaf", n.sig, repr(n.value))
    return ("leaf", n.op, n.src, n.sig, i if n.src < 0 else -1)


class EGraph:
    """E-classes of equivalent values; `roots` are the output classes of the input graph."""

    def __init__(self) -> None:
        self.parent: list[int] = []
        self.enodes: list[ENode] = []
        self.memo: dict[tuple, int] = {}  # canonical key -> e-node index
        self.members: dict[int, list[int]] = {}  # class -> e-node indices
        self.class_of: list[int] = []  # e-node -> class (canonicalize with find)
        self.roots: list[int] = []
        self.value_guards: set[int] = set()
        self.last: dict[int, int] = {}
        self.dirty = False  # unions since the last rebuild
        self.version = 0  # bumped by every change (e-matching indexes are per version)
        self.guard_classes: set[int] = set()  # scalars whose values a rule read (ReLU by value)
        self.raised: dict[int, tuple] = {}  # id(e-node) -> its term readings (ematch.py; shared)
        self.done: set[tuple] = set()  # e-matches already instantiated (rule, bindings)

    def copy(self) -> EGraph:
        """An independent copy (MCTS tree nodes hold their own e-graphs); e-nodes are shared."""
        c = EGraph.__new__(EGraph)
        c.parent = list(self.parent)
        c.enodes = list(self.enodes)
        c.memo = dict(self.memo)
        c.members = {k: list(v) for k, v in self.members.items()}
        c.class_of = list(self.class_of)
        c.roots = list(self.roots)
        c.value_guards = set(self.value_guards)
        c.last = {}
        c.dirty = self.dirty
        c.version = self.version
        c.guard_classes = set(self.guard_classes)
        c.raised = self.raised
        c.done = set(self.done)
        return c

    # -- union-find --------------------------------------------------------------------------

    def find(self, c: int) -> int:
        """The canonical id of class c."""
        p = self.parent
        while p[c] != c:
            p[c] = p[p[c]]
            c = p[c]
        return c

    def union(self, a: int, b: int) -> bool:
        """Merge two classes; True when they were distinct."""
        a, b = self.find(a), self.find(b)
        if a == b:
            return False
        if len(self.members[a]) < len(self.members[b]):
            a, b = b, a
        self.parent[b] = a
        self.members[a].extend(self.members.pop(b))
        self.version += 1
        return True

    @property
    def size(self) -> int:
        """Distinct e-nodes held (the memory budget counts these)."""
        return len(self.memo)

    def classes(self) -> list[int]:
        """Canonical class ids."""
        return list(self.members)

    # -- adding ------------------------------------------------------------------------------

    def _key(self, node: SNode, children: tuple[int, ...], leaf: tuple | None) -> tuple:
        return leaf if leaf is not None else (node.sig, tuple(self.find(c) for c in children))

    def add_node(
        self, node: SNode, children: tuple[int, ...], leaf: tuple | None = None, rule: str = ""
    ) -> int:
        """The class of an e-node, adding it when new (hash-consed on canonical children)."""
        key = self._key(node, children, leaf)
        got = self.memo.get(key)
        if got is not None:
            return self.find(self.class_of[got])
        idx = len(self.enodes)
        self.enodes.append(ENode(node, tuple(self.find(c) for c in children), rule, leaf))
        c = len(self.parent)
        self.parent.append(c)
        self.class_of.append(c)
        self.members[c] = [idx]
        self.memo[key] = idx
        self.version += 1
        return c

    def add_graph(self, sg: SGraph, rule: str = "") -> dict[int, int]:
        """Every live node of sg as e-nodes; returns node id -> class."""
        out: dict[int, int] = {}
        for i in sg.topo() or []:
            n = sg.nodes[i]
            if n.leaf:
                out[i] = self.add_node(n, (), leaf_key(sg, i), rule)
            else:
                out[i] = self.add_node(n, tuple(out[c] for c in n.inputs), None, rule)
        self.value_guards |= sg.value_guards
        return out

    def absorb(
        self, base: dict[int, int], new: SGraph, since: dict[int, int], rule: str, rebuild: bool = True
    ) -> bool:
        """Add a rewrite's result and union what it replaced; True when the e-graph changed.

        `base`: the class of each node of the graph the rewrite started from; `since`: that
        graph's `replaced` (entries the rewrite did not add are skipped). A node the rewrite
        kept (same id) is its base class even when its inputs were redirected: a redirect
        swaps an input for an equal value, so only the target's new nodes become e-nodes.
        `rebuild=False` leaves congruence to the caller's next `rebuild` (one per batch).
        """
        before = (len(self.memo), len(self.members))
        got: dict[int, int] = {}
        for i in new.topo() or []:
            if i in base:
                got[i] = self.find(base[i])
                continue
            n = new.nodes[i]
            if n.leaf:
                got[i] = self.add_node(n, (), leaf_key(new, i), rule)
            else:
                got[i] = self.add_node(n, tuple(got[c] for c in n.inputs), None, rule)
        self.value_guards |= new.value_guards
        merged = False
        for old, nid in new.replaced.items():
            if since.get(old) == nid or old not in base:
                continue
            while nid not in got and nid in new.replaced:
                nid = new.replaced[nid]
            if nid in got:
                merged |= self.union(base[old], got[nid])
        if merged:
            self.dirty = True
            if rebuild:
                self.rebuild()
        self.last = got  # the new graph's node id -> class (callers keep it as a frontier map)
        return merged or (len(self.memo), len(self.members)) != before

    def rebuild(self) -> None:
        """Restore congruence: e-nodes equal up to their children's classes share one class.

        Congruent duplicates are dropped from their class, so `size` counts distinct e-nodes.
        """
        self.dirty = False
        changed = True
        while changed:
            changed = False
            memo: dict[tuple, int] = {}
            for idx, e in enumerate(self.enodes):
                if e.node.leaf:
                    continue
                key = e.node.sig, tuple(self.find(c) for c in e.children)
                prev = memo.get(key)
                if prev is None:
                    memo[key] = idx
                elif self.union(self.class_of[prev], self.class_of[idx]):
                    changed = True
        self.memo = {}
        members: dict[int, list[int]] = {}
        for idx, e in enumerate(self.enodes):
            if e.node.leaf:
                key = e.leaf_key
            else:
                key = (e.node.sig, tuple(self.find(c) for c in e.children))
            if key in self.memo:
                continue  # a congruent duplicate
            self.memo[key] = idx
            members.setdefault(self.find(self.class_of[idx]), []).append(idx)
        self.members = members
        self.version += 1

    def rep(self, c: int) -> SNode:
        """A representative operation of class c (every member has its shape and dtype)."""
        return self.enodes[self.members[self.find(c)][0]].node

    def nodes_of(self, c: int) -> list[int]:
        """E-node indices of class c."""
        return self.members[self.find(c)]

    def children(self, idx: int) -> tuple[int, ...]:
        """Canonical child classes of e-node idx (memoized while the e-graph is unchanged:
        extraction reads them many times)."""
        memo = self.__dict__.get("_kids")
        if memo is None or memo[0] != self.version:
            memo = self._kids = (self.version, {})
        got = memo[1].get(idx)
        if got is None:
            got = memo[1][idx] = tuple(self.find(c) for c in self.enodes[idx].children)
        return got


def from_graph(sg: SGraph) -> tuple[EGraph, dict[int, int]]:
    """The e-graph of one search graph (every class holds one e-node) and node id -> class."""
    eg = EGraph()
    got = eg.add_graph(sg)
    eg.roots = [got[o] for o in sg.outputs]
    return eg, got
