"""Equality saturation with the proven rules: e-graph construction under node and time limits.

The library's rules (term vocabulary) are e-matched on the e-graph (ematch.py: every
combination it represents); the structural merges (Python matchers over shapes and
consumers, match.py) run on concrete graphs drawn from it and are absorbed
(`EGraph.absorb`). One step (`Saturation.step`) applies the structural rules to the frontier
(the graphs the previous step made, cheapest first, and the current greedy extraction), then
matches every library rule on one snapshot of the e-graph and instantiates at most
`match_limit` matches per rule, rules that add fewer operators first, until the node limit;
the run stops when a step changes nothing (saturated) or at a limit. `ematch=False` keeps the
first version's behaviour (the library matched on the drawn graphs too), for comparison.
`graph_of` turns a selection back into an `SGraph` whose `replaced` maps the input's node ids
to their replacements, which is what the pass emits.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from optimizer.eqsat.egraph import EGraph, from_graph
from optimizer.eqsat.ematch import EMatcher, Match, ematchers
from optimizer.eqsat.extract import (
    Choice,
    constant_classes,
    fused_costs,
    greedy,
    ilp,
    node_costs,
    reachable,
)
from optimizer.rewrite.rules import Rule
from optimizer.superopt.adapt import matcher_of
from optimizer.superopt.apply import SGraph, SNode
from optimizer.superopt.cost import CostModel
from optimizer.superopt.match import Context

#: the least time (seconds) an ILP extraction is started with
ILP_LEAST = 0.03
#: candidates per step that changed nothing (the e-graph held them) costed as concrete graphs
KNOWN_PER_STEP = 16


@dataclass
class Saturation:
    """An e-graph under construction from one input graph, with the rules and limits it uses."""

    sg: SGraph
    rules: Sequence[Rule]
    model: CostModel
    node_limit: int = 2000
    frontier_size: int = 8
    ematch: bool = True  # library rules e-matched on the e-graph (False: on drawn graphs only)
    match_limit: int = 64  # matches instantiated per rule and step (a rule cannot take the budget)
    eg: EGraph = field(init=False)
    base: dict[int, int] = field(init=False)
    frontier: list[tuple[SGraph, dict[int, int]]] = field(init=False)
    seen: set[str] = field(init=False)
    applied: Counter = field(default_factory=Counter)
    memo: dict = field(default_factory=dict)  # linear costs by operator, shapes and constness
    seen_best: tuple[float, SGraph] | None = None  # the cheapest concrete graph a step made
    steps: int = 0
    generated: int = 0
    known: list = field(default_factory=list)  # this step's candidates the e-graph already held

    def __post_init__(self) -> None:
        if self.sg.topo() is None:
            raise ValueError("eqsat: the input graph has a cycle")
        self.eg, self.base = from_graph(self.sg)
        self.frontier = [(self.sg, self.base)]
        self.seen = {self.sg.key()}
        self.ematchers: dict[str, EMatcher] = ematchers(list(self.rules)) if self.ematch else {}

    def set_rules(self, rules: Sequence[Rule]) -> None:
        """Change the rule set (a stage), compiling the new rules for e-matching."""
        self.rules = rules
        if self.ematch:
            self.ematchers = ematchers(list(rules))

    def ematch_matches(self, eg: EGraph, rule: Rule, limit: int | None = None) -> list[Match]:
        """The rule's e-matches on eg not yet instantiated there (empty for structural rules)."""
        em = self.ematchers.get(rule.name)
        if em is None:
            return []
        out = []
        for m in em.matches(eg, limit=self.match_limit * 2 if limit is None else limit * 2):
            if _done_key(eg, rule.name, m) not in eg.done:
                out.append(m)
        return out

    def ematch_exists(self, eg: EGraph, rule: Rule) -> bool:
        """Whether the rule has an e-match on eg not yet instantiated there (MCTS's pruning)."""
        em = self.ematchers.get(rule.name)
        return em is not None and em.exists(eg, lambda m: _done_key(eg, rule.name, m) not in eg.done)

    def instantiate(
        self, eg: EGraph, rule: Rule, ms: Sequence[Match], deadline: float, limit: int | None = None
    ) -> int:
        """Apply e-matches of one rule into eg (until `limit` changed it); how many changed it."""
        em = self.ematchers[rule.name]
        n = 0
        for m in ms:
            if eg.size >= self.node_limit or time.perf_counter() > deadline:
                break
            key = _done_key(eg, rule.name, m)
            if key in eg.done:
                continue
            eg.done.add(key)
            self.generated += 1
            if em.apply(eg, m):
                n += 1
                self.applied[rule.name] += 1
                if limit is not None and n >= limit:
                    break
        return n

    @property
    def full(self) -> bool:
        """The e-node budget is spent."""
        return self.eg.size >= self.node_limit

    def apply_rule(
        self,
        eg: EGraph,
        rule: Rule,
        graphs: Sequence[tuple[SGraph, dict[int, int]]],
        deadline: float,
        seen: set[str] | None = None,
        limit: int | None = None,
    ) -> list[tuple[SGraph, dict[int, int]]]:
        """Every match of one rule on the given graphs (at most `limit` that change eg), absorbed
        into eg; the new graphs."""
        seen = self.seen if seen is None else seen
        made: list[tuple[SGraph, dict[int, int]]] = []
        tried = 0  # candidates built (each a graph copy): a limited action stops at 2 * limit
        for g, gmap in graphs:
            order = g.topo()
            if order is None or eg.size >= self.node_limit or time.perf_counter() > deadline:
                continue
            if limit is not None and len(made) >= limit:
                continue
            for cand in matcher_of(rule).rewrites(Context(g, order)):
                self.generated += 1
                tried += 1
                if limit is not None and tried > 2 * limit:
                    break
                key = cand.key()
                if key in seen:
                    continue
                seen.add(key)
                if eg.absorb(gmap, cand, g.replaced, rule.name, rebuild=False):
                    self.applied[rule.name] += 1
                    made.append((cand, eg.last))
                elif g is graphs[0][0] and len(self.known) < KNOWN_PER_STEP:
                    # its nodes were all there (a merge made on the input, now on the cheapest
                    # graph, whose pools another rule rewrote): the e-graph holds it, the linear
                    # costs may not rank it first, so the step costs it as a concrete graph too
                    self.known.append((cand, gmap))
                if eg.size >= self.node_limit or time.perf_counter() > deadline:
                    break
                if limit is not None and len(made) >= limit:
                    break
        if eg.dirty:  # one rebuild per rule application (the union-find answers meanwhile)
            eg.rebuild()
        return made

    def step(self, deadline: float) -> int:
        """One round of every rule on the frontier; returns how many rewrites changed the e-graph."""
        self.steps += 1
        self.known = []
        graphs = list(self.frontier)
        best = self.best_graph()
        if best.key() not in {g.key() for g, _ in graphs}:
            graphs.append((best, self.eg.add_graph(best)))
        made: list[tuple[SGraph, dict[int, int]]] = []
        # the structural merges first (few, and the gains of the benchmark models), on the
        # drawn graphs; then the library, e-matched: every rule matched on one snapshot of
        # the e-graph, then instantiated, rules that add fewer operators than they match
        # first, so that when the node budget runs out it is the growing rewrites that wait
        changed = 0
        lead_cost = None
        for rule in self.rules:
            if self.full or time.perf_counter() > deadline:
                break
            if rule.name not in self.ematchers:
                new = self.apply_rule(self.eg, rule, graphs, deadline)
                made.extend(new)
                if new:
                    # a rule's first candidate (pool-as-conv's: every pool at once) when it beats
                    # the cheapest drawn graph leads for the rules after it in this step, so that
                    # the merges also apply to it now rather than a step later (a step of NASNet-A
                    # takes 0.7-2 s here: at a 0.5 s budget there is no later step)
                    if lead_cost is None:
                        lead_cost = self.model.graph_cost(graphs[0][0])
                    cost = self.model.graph_cost(new[0][0])
                    if cost < lead_cost:
                        lead_cost = cost
                        graphs = [new[0], *graphs]
        ordered = sorted(
            (r for r in self.rules if r.name in self.ematchers), key=lambda r: self.ematchers[r.name].growth
        )
        found = []
        for r in ordered:
            if time.perf_counter() > deadline:
                break
            found.append((r, self.ematch_matches(self.eg, r)))
        for rule, ms in found:
            if self.full or time.perf_counter() > deadline:
                break
            changed += self.instantiate(self.eg, rule, ms[: self.match_limit], deadline)
        if self.eg.dirty:
            self.eg.rebuild()
        known = [g for g, _ in self.known] if time.perf_counter() < deadline else []
        drawn = [g for g, _ in made] + known
        costed = sorted(((self.model.graph_cost(g), k) for k, g in enumerate(drawn)))
        if costed and (self.seen_best is None or costed[0][0] < self.seen_best[0]):
            self.seen_best = (costed[0][0], drawn[costed[0][1]])
            # a cheaper held graph is progress too: the next step draws from it
            changed += costed[0][1] >= len(made)
        # the next frontier: the cheapest graphs, made or held (a held one's classes looked up)
        self.frontier = [
            made[k] if k < len(made) else (drawn[k], self.eg.add_graph(drawn[k]))
            for _, k in costed[: self.frontier_size]
        ]
        return len(made) + changed

    def run(self, seconds: float, max_steps: int = 50) -> str:
        """Steps until saturated or a limit; returns why it stopped."""
        deadline = time.perf_counter() + seconds
        for _ in range(max_steps):
            if self.full:
                return "nodes"
            if time.perf_counter() > deadline:
                return "time"
            if self.step(deadline) == 0:
                return "saturated"
        return "steps"

    # -- extraction ----------------------------------------------------------------------------

    def costs(self, eg: EGraph | None = None) -> list[float]:
        """Linear e-node costs of an e-graph (this one by default)."""
        eg = eg or self.eg
        return node_costs(eg, self.model, constant_classes(eg), self.memo)

    def best_graph(self, eg: EGraph | None = None) -> SGraph:
        """The greedy (with history) extraction as a graph."""
        eg = eg or self.eg
        try:
            return graph_of(eg, greedy(eg, self.costs(eg)).pick, self.sg, self.base)
        except ValueError:  # a stale history let the greedy close a cycle: the input stands
            return self.sg

    def extract(self, method: str = "greedy", seconds: float = 5.0) -> tuple[SGraph, Choice]:
        """The best graph by `method` (greedy or ilp), never costlier than the input; `seconds`
        bounds the extraction as a whole (the ILP gets what the costs and the greedy left)."""
        t0 = time.perf_counter()
        costs = self.costs()
        fused = fused_costs(self.eg, self.model, constant_classes(self.eg), costs)
        choices = [greedy(self.eg, costs)]
        if fused != costs:
            choices.append(greedy(self.eg, fused))
        if method == "ilp":
            # the ILP under the costs that credit fusion (when they differ from the plain
            # linear costs: the better guide to the full model, so first when time is short),
            # then under the plain ones, each warm-started by its greedy; the full model picks
            runs = ([(fused, choices[1])] if fused != costs else []) + [(costs, choices[0])]
            for k, (cs, start) in enumerate(runs):
                left = (seconds - (time.perf_counter() - t0)) / (len(runs) - k)
                if left < ILP_LEAST:
                    break  # building the program alone takes longer: the greedy stands
                exact = ilp(self.eg, cs, left, start=start)
                if exact is not None:
                    choices.append(exact)
        # the linear costs miss fusion (epilogues, elementwise regions): the full model decides,
        # and the input (always in the e-graph) is kept unless a selection beats it
        best, best_cost, best_choice = self.sg, self.model.graph_cost(self.sg), choices[0]
        if self.seen_best is not None and self.seen_best[0] < best_cost:
            # a graph the e-graph holds as made: the linear costs can rank it below a worse one
            best_cost, best = self.seen_best
        tried: list[dict[int, int]] = []
        for choice in choices:
            if choice.pick in tried:
                continue  # the ILP often confirms the greedy's selection: one graph_of each
            tried.append(choice.pick)
            try:
                g = graph_of(self.eg, choice.pick, self.sg, self.base)
            except ValueError:  # a cyclic greedy selection (stale history): not a graph
                continue
            cost = self.model.graph_cost(g)
            if cost < best_cost:
                best, best_cost, best_choice = g, cost, choice
        return best, best_choice


def _done_key(eg: EGraph, rule: str, m: Match) -> tuple:
    return (rule, tuple(sorted((k, eg.find(c)) for k, c in m.env.items())))


def graph_of(eg: EGraph, pick: dict[int, int], sg: SGraph, base: dict[int, int]) -> SGraph:
    """A selection as a graph over sg's ids: unchanged nodes keep their ids, replaced ones map."""
    order = reachable(eg, pick)
    if order is None:
        raise ValueError("eqsat: the selection has a cycle")
    out = sg.copy()
    out.replaced = {}
    owner: dict[int, list[int]] = {}
    for i, c in base.items():
        owner.setdefault(eg.find(c), []).append(i)
    made: dict[int, int] = {}
    applied: list[str] = []
    for c in order:
        e = eg.enodes[pick[c]]
        ins = tuple(made[d] for d in eg.children(pick[c]))
        for i in owner.get(c, []):
            n = sg.nodes[i]
            if n.sig == e.node.sig and (n.leaf or n.inputs == ins):
                made[c] = i
                break
        else:
            n = e.node
            made[c] = out._put(
                SNode(n.op, ins, n.attrs, n.shape, n.dtype, -1 if not n.leaf else n.src, n.value)
            )
            if e.rule:
                applied.append(e.rule)
    mapping = {}
    for i, c in base.items():
        got = made.get(eg.find(c))
        if got is not None and got != i and not sg.nodes[i].leaf:
            mapping[i] = got
    out.outputs = [made[eg.find(r)] for r in eg.roots]
    out.redirect(mapping)
    out.prune()
    out.applied = applied
    out.value_guards = set(eg.value_guards)
    guarded = {eg.find(c) for c in eg.guard_classes}
    out.value_guards |= {i for i, c in base.items() if sg.nodes[i].leaf and eg.find(c) in guarded}
    return out
