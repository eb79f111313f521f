"""Monte Carlo tree search over e-graph construction (the PACT'24 design, on lazygraph's rules).

The main e-graph grows one action at a time; an action is a rule applied at its matches: a
library rule at its e-matches on the e-graph itself (up to the saturation's `match_limit`),
a structural merge at up to `matches` matches on the input graph and the e-graph's current
greedy extraction (each of those costs a rewrite of a whole graph). Before each action an MCTS
runs from the main e-graph: selection descends by UCB1 (v/n + c sqrt(ln N / n)) and stops at
each node with probability 1/2 to widen the tree; expansion applies a random rule not on the
node's blacklist (rules that changed nothing there: saturated children are pruned);
simulation applies random rules up to `depth` steps, and the reward is the sum of the
extracted cost's decreases, max(cost_{i-1} - cost_i, 0), relative to the input's cost (the
cost: the full cost model on the greedy extraction, or on the cheapest graph the action made
when that is lower: the linear costs the greedy uses miss the merges' fused epilogues);
update adds the reward and a visit along the path; before those iterations every applicable
rule is tried once at the root, its immediate improvement its first reward. The root's child with the best average value is applied to the main e-graph, and the
next search continues from that child's subtree (the paper's reuse). Construction stops at the e-node budget, when no rule
changes the e-graph, or at the time limit or the saturation's work limit (`Saturation.over`); the final graph is extracted by ILP (greedy when
the ILP finds nothing in time).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field

from optimizer.eqsat.egraph import EGraph
from optimizer.eqsat.saturate import Saturation
from optimizer.superopt.adapt import matcher_of
from optimizer.superopt.apply import SGraph
from optimizer.superopt.match import Context

#: MCTS steps between checks of every rule for a match (the others check the last allowed set)
RECHECK = 4


@dataclass
class TreeNode:
    """A search-tree node: the e-graph after its action, statistics, pruned actions."""

    eg: EGraph
    cost: float
    action: int = -1
    parent: TreeNode | None = None
    children: dict[int, TreeNode] = field(default_factory=dict)
    value: float = 0.0
    visits: int = 0
    blacklist: set[int] = field(default_factory=set)
    saturated: bool = False
    made: tuple[float, SGraph] | None = None


class MCTS:
    """MCTS-guided construction of a `Saturation`'s e-graph."""

    def __init__(
        self,
        sat: Saturation,
        budget: int = 6,
        depth: int = 2,
        c: float = math.sqrt(2.0),
        seed: int = 0,
        matches: int | None = 8,
    ) -> None:
        self.sat = sat
        self.budget = budget
        self.depth = depth
        self.c = c
        self.rng = random.Random(seed)
        self.matches = matches  # matches absorbed per action: cheaper actions, more iterations
        self.start = max(sat.model.graph_cost(sat.sg), 1e-30)
        self.actions_applied: list[str] = []
        self.max_size = sat.eg.size
        self.made: list[SGraph] = []
        self.allowed: list[int] = list(range(len(sat.rules)))
        self._graphs: dict[int, tuple[EGraph, list]] = {}
        #: the structural rules' rewrites of the input graph are all in the e-graph already
        #: (the merges stage saturated): actions match them on extractions only
        self.input_done = False
        #: the cheapest extraction any tree node or rollout reached (full model): a rollout
        #: can find the best graph under a child that the average value does not choose, and
        #: the budget can end before the main e-graph gets there
        self.best_seen: tuple[float, SGraph] | None = None
        #: the e-graph best_seen was drawn from (a tree node's: the main e-graph may have left it)
        self.best_seen_eg: EGraph | None = None
        self._checked = 0  # MCTS steps since every rule was checked for a match (`applicable`)

    def cost(self, eg: EGraph) -> float:
        """The reward's runtime: the full model's cost of eg's greedy extraction or of the
        cheapest graph the last action made (both are in eg), whichever is lower."""
        g = self.graphs(eg)[-1][0]
        got = self.sat.model.graph_cost(g)
        if self.best_seen is None or got < self.best_seen[0]:
            self.best_seen, self.best_seen_eg = (got, g), eg
        for g in self.made:
            got = min(got, self.sat.model.graph_cost(g))
        return got

    def graphs(self, eg: EGraph) -> list[tuple[SGraph, dict[int, int]]]:
        """The graphs a rule is matched on in eg: the input and eg's greedy extraction (cached)."""
        got = self._graphs.get(id(eg))
        if got is None or got[0] is not eg:
            best = self.sat.best_graph(eg)
            pairs = [(self.sat.sg, self.sat.base)]
            if best is not self.sat.sg:
                pairs.append((best, {i: eg.find(c) for i, c in eg.add_graph(best).items()}))
            got = (eg, pairs)
            self._graphs[id(eg)] = got
        return got[1]

    def structural_graphs(self, eg: EGraph) -> list[tuple[SGraph, dict[int, int]]]:
        """The graphs a structural rule may still change eg from (`graphs` less the input
        when its rewrites are all in the e-graph)."""
        return [p for p in self.graphs(eg) if not (self.input_done and p[0] is self.sat.sg)]

    def act(self, eg: EGraph, rule: int, deadline: float) -> EGraph | None:
        """A copy of eg with one rule applied at its matches; None when nothing changed.

        A library rule is e-matched on eg itself (no concrete graph is drawn); a structural
        rule runs its matcher on the input and eg's greedy extraction.
        """
        r = self.sat.rules[rule]
        if r.name in self.sat.ematchers:
            ms = self.sat.ematch_matches(eg, r, limit=self.sat.match_limit)
            if not ms:
                return None
            new = eg.copy()
            changed = self.sat.instantiate(new, r, ms, deadline, limit=self.sat.match_limit)
            if new.dirty:
                new.rebuild()
            self.max_size = max(self.max_size, new.size)
            self.made = []
            return new if changed else None
        graphs = self.structural_graphs(eg)
        if not graphs:
            return None
        new = eg.copy()
        made = self.sat.apply_rule(new, r, graphs, deadline, seen=set(), limit=self.matches)
        self.max_size = max(self.max_size, new.size)
        self.made = [g for g, _ in made]
        return new if made else None

    def applicable(self, eg: EGraph, deadline: float, among: list[int] | None = None) -> set[int]:
        """Rules with a match on eg (the paper's pruning of rules that cannot change it);
        `among`: only those rules are checked."""
        out: set[int] = set()
        ks = range(len(self.sat.rules)) if among is None else among
        for k in ks:
            if time.perf_counter() > deadline:
                break  # NASNet-A's 865 rules take 0.1-0.4 s: past the deadline the step is cut
            rule = self.sat.rules[k]
            if rule.name in self.sat.ematchers and self.sat.ematch_exists(eg, rule):
                out.add(k)
        if time.perf_counter() > deadline:
            return out  # the structural rules' check draws the greedy extraction first: not past it
        for g, _ in self.structural_graphs(eg):
            ctx = Context(g, g.topo() or [])
            for k in ks:
                rule = self.sat.rules[k]
                if k in out or rule.name in self.sat.ematchers or time.perf_counter() > deadline:
                    continue
                if next(iter(matcher_of(rule).rewrites(ctx)), None) is not None:
                    out.add(k)
        return out

    def _free(self, node: TreeNode) -> list[int]:
        return [r for r in self.allowed if r not in node.blacklist and r not in node.children]

    def _select(self, root: TreeNode) -> TreeNode:
        node = root
        while True:
            live = [ch for ch in node.children.values() if not ch.saturated]
            if not live or (self._free(node) and self.rng.random() < 0.5):
                return node
            total = math.log(max(node.visits, 1))
            node = max(
                live,
                key=lambda ch: ch.value / max(ch.visits, 1) + self.c * math.sqrt(total / max(ch.visits, 1)),
            )

    def prior(self, rule: int) -> tuple[int, int]:
        """The order the root tries rules in: the structural merges (the benchmark models'
        gains), then library rules by how many operators they add (shrinking ones first)."""
        em = self.sat.ematchers.get(self.sat.rules[rule].name)
        return (0, 0) if em is None else (1, em.growth)

    def _expand(self, node: TreeNode, deadline: float, ordered: bool = False) -> TreeNode | None:
        while self._free(node) and not self.sat.over(deadline):
            free = self._free(node)
            rule = min(free, key=self.prior) if ordered else self.rng.choice(free)
            if node.eg.size >= self.sat.node_limit:
                node.saturated = True
                return None
            new = self.act(node.eg, rule, deadline)
            if new is None:
                node.blacklist.add(rule)  # changes nothing here: a saturated child, pruned
                continue
            child = TreeNode(new, self.cost(new), rule, node)
            # the cheapest concrete graph the action made (full model): held by child's e-graph
            for g in self.made:
                c = self.sat.model.graph_cost(g)
                if child.made is None or c < child.made[0]:
                    child.made = (c, g)
            node.children[rule] = child
            return child
        if not self._free(node) and not any(not ch.saturated for ch in node.children.values()):
            node.saturated = True
        return None

    def _simulate(self, node: TreeNode, deadline: float) -> float:
        reward = max((node.parent.cost if node.parent else node.cost) - node.cost, 0.0)
        eg, cost = node.eg, node.cost
        for _ in range(self.depth):
            if eg.size >= self.sat.node_limit or self.sat.over(deadline):
                break
            new = self.act(eg, self.rng.choice(self.allowed), deadline)
            if new is None:
                continue
            c = self.cost(new)
            reward += max(cost - c, 0.0)
            eg, cost = new, c
        return reward / self.start

    def choose(self, deadline: float, root: TreeNode | None = None) -> TreeNode | None:
        """One MCTS from the main e-graph; the root's child with the best average value.

        `root`: the previous step's chosen child, whose subtree (statistics, children) the
        search continues from (the paper's reuse of the subtree below the best child)."""
        self.made = []
        if root is None or root.eg is not self.sat.eg:
            root = TreeNode(self.sat.eg, self.cost(self.sat.eg))
        self._graphs.clear()
        # rules with no match on the root's graphs are pruned for this search (children inherit:
        # a rewrite rarely enables a rule that had no match anywhere)
        # every rule is checked at the first step and every RECHECK-th after; in between only
        # the rules that matched last time (on NASNet-A checking all 865 takes 0.4 s, most of
        # an MCTS step at small budgets; a rule with no match rarely gains one in a few steps)
        full = self._checked % RECHECK == 0
        self._checked += 1
        self.allowed = sorted(self.applicable(root.eg, deadline, None if full else self.allowed))
        if not self.allowed:
            return None
        # every applicable rule is first tried once at the root, rewarded by its immediate
        # improvement: under a budget of seconds the search then does not miss a rule it had
        # no time to expand (the rollouts below refine these values). They are tried in the
        # order of `prior`, not at random: a budget that ends inside this loop (a loaded
        # machine, a short budget: BERT's six rules take 0.15 s quiet) has then tried the
        # likeliest gains (BERT's reassociation, NASNet-A's conv-837 shrink the graph), and
        # what they reached is kept (`best_seen`)
        while self._free(root) and not self.sat.over(deadline):
            child = self._expand(root, deadline, ordered=True)
            if child is None:
                break
            child.value += max(root.cost - child.cost, 0.0) / self.start
            child.visits += 1
            root.visits += 1
        for _ in range(self.budget):
            if self.sat.over(deadline) or root.saturated:
                break
            node = self._select(root)
            child = self._expand(node, deadline)
            if child is None:
                continue
            reward = self._simulate(child, deadline)
            walk: TreeNode | None = child
            while walk is not None:
                walk.value += reward
                walk.visits += 1
                walk = walk.parent
        if not root.children:
            return None
        return max(root.children.values(), key=lambda ch: (ch.value / max(ch.visits, 1), -ch.cost))

    def run(self, seconds: float) -> str:
        """Grow the main e-graph by MCTS-chosen actions; returns why it stopped."""
        deadline = time.perf_counter() + seconds
        root: TreeNode | None = None
        extracted = self.sat.eg.size
        while True:
            if self.sat.eg.size >= 1.25 * extracted and not self.sat.over(deadline):
                # the main e-graph is extracted (ILP) whenever it has grown by a quarter (as
                # eqsat_search's stages do, by half there): the final ILP, on the e-graph later
                # actions grew, may not reach in its time the optimum this one held (BERT:
                # 1.224 instead of 1.284)
                extracted = self.sat.eg.size
                got, _ = self.sat.extract("ilp", (deadline - time.perf_counter()) / 2)
                cost = self.sat.model.graph_cost(got)
                if self.best_seen is None or cost < self.best_seen[0]:
                    self.best_seen, self.best_seen_eg = (cost, got), self.sat.eg
            if self.sat.full:
                return "nodes"
            if self.sat.over(deadline):
                return self.sat.stop_reason()
            best = self.choose(deadline, root)
            if best is None:
                return self.sat.stop_reason() if self.sat.over(deadline) else "saturated"
            best.parent = None  # the next search starts from its subtree
            root = best
            self.sat.eg = best.eg
            seen = self.sat.seen_best
            if best.made is not None and (seen is None or best.made[0] < seen[0]):
                self.sat.seen_best = best.made
            self.sat.steps += 1
            name = self.sat.rules[best.action].name
            self.sat.applied[name] += 1
            self.actions_applied.append(name)
