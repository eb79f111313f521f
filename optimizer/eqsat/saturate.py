"""Equality saturation with the proven rules: e-graph construction under node and time limits.

The library's rules (term vocabulary) are e-matched on the e-graph (ematch.py: every
combination it represents); the structural merges (Python matchers over shapes and
consumers, match.py) run on concrete graphs drawn from it and are absorbed
(`EGraph.absorb`). One step (`Saturation.step`) applies the structural rules to the frontier
(the graphs the previous step made, cheapest first, and the current greedy extraction), then
matches every library rule on one snapshot of the e-graph and instantiates at most
`match_limit` matches per rule, rules that add fewer operators first, until the node limit;
the run stops when a step changes nothing (saturated) or at a limit. A round is a generator
that yields after each candidate, e-match lookup and instantiation: a step stops at the
deadline or the work limit (`work_limit`, candidates and e-matches tried) wherever it is,
leaves a congruent e-graph holding what it absorbed, and the next step resumes the round; the
graphs a round makes are costed as they come (`seen_best`: the best so far at every moment). `ematch=False` keeps the
first version's behaviour (the library matched on the drawn graphs too), for comparison.
`graph_of` turns a selection back into an `SGraph` whose `replaced` maps the input's node ids
to their replacements, which is what the pass emits.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
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
from optimizer.superopt.pool_conv import PoolAsConv

#: the least time (seconds) an ILP extraction is started with
ILP_LEAST = 0.03
#: the time the first ILP of an extraction gets when the extraction has it, however many runs
#: follow (the least limit `ilp` gives HiGHS anyway; NasRNN's merged e-graph needs 0.035-0.05 s
#: quiet for its optimum)
ILP_FIRST = 0.1
#: candidates per step that changed nothing (the e-graph held them) costed as concrete graphs
KNOWN_PER_STEP = 16
#: structural rules a round applies after the others: rewrites that pay only in combination
#: (no benchmark's pool-as-conv candidate beats its input: NASNet-A 0.967-0.9997, Inception-v3
#: 0.990-0.9996, SqueezeNet 0.979), which the extraction combines wherever they come in the
#: round; first, they took the first 0.02 s of NASNet-A's round quiet, 0.2 s at a load of 8
LAST_IN_ROUND = frozenset({PoolAsConv.name})


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
    #: candidates and e-matches tried at most (`generated`): a budget of work beside the deadline,
    #: the same on a loaded machine as on a quiet one
    work_limit: int | None = None
    rounds: int = 0  # rounds completed (a round stopped at a limit resumes at the next step)
    cut: bool = False  # the last step stopped inside its round (deadline or work limit)
    input_done: bool = False  # a whole round ran on the input under the node limit
    #: how long the first whole round took per graph it drew from (a later round draws from the
    #: frontier, up to `frontier_size` + 1 graphs: `_grow` weighs another round by it)
    graph_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.sg.topo() is None:
            raise ValueError("eqsat: the input graph has a cycle")
        self.eg, self.base = from_graph(self.sg)
        self.frontier = [(self.sg, self.base)]
        self.seen = {self.sg.key()}
        self.ematchers: dict[str, EMatcher] = ematchers(list(self.rules)) if self.ematch else {}
        self._round: Iterator[None] | None = None  # the round in progress (a generator)
        self._round_changed = 0
        self._round_t0 = 0.0
        self._round_graphs = 1  # graphs the round in progress draws from
        # the last ILP selection by cost kind, with the e-graph and version it was solved on
        self._ilp_memo: dict[str, tuple[EGraph, int, Choice]] = {}

    def set_rules(self, rules: Sequence[Rule]) -> None:
        """Change the rule set (a stage), compiling the new rules for e-matching; a round left
        unfinished by the previous stage is dropped (what it absorbed stays)."""
        self.rules = rules
        self._round = None
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
        """Apply e-matches of one rule into eg (until `limit` changed it, the deadline or the
        work limit); how many changed it."""
        n = 0
        for m in ms:
            if eg.size >= self.node_limit or self.over(deadline):
                break
            if self._instantiate_one(eg, rule, m):
                n += 1
                if limit is not None and n >= limit:
                    break
        return n

    def _instantiate_one(self, eg: EGraph, rule: Rule, m: Match) -> bool:
        """Apply one e-match (once per e-graph: `EGraph.done`); whether it changed eg."""
        key = _done_key(eg, rule.name, m)
        if key in eg.done:
            return False
        eg.done.add(key)
        self.generated += 1
        if self.ematchers[rule.name].apply(eg, m):
            self.applied[rule.name] += 1
            return True
        return False

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
        into eg until the deadline or the work limit; the new graphs."""
        made: list[tuple[SGraph, dict[int, int]]] = []
        for _ in self._absorbing(eg, rule, graphs, made, seen, limit):
            if self.over(deadline):
                break
        if eg.dirty:  # one rebuild per rule application (the union-find answers meanwhile)
            eg.rebuild()
        return made

    def _absorbing(
        self,
        eg: EGraph,
        rule: Rule,
        graphs: Sequence[tuple[SGraph, dict[int, int]]],
        made: list[tuple[SGraph, dict[int, int]]],
        seen: set[str] | None = None,
        limit: int | None = None,
    ) -> Iterator[None]:
        """Absorb one rule's candidates on the graphs into eg, appending the ones that changed it
        to `made`; yields after each candidate, so that the caller can stop (or pause) between
        any two: every absorbed candidate is a proven rewrite, whatever is left undone."""
        seen = self.seen if seen is None else seen
        tried = 0  # candidates built (each a graph copy): a limited action stops at 2 * limit
        for g, gmap in graphs:
            order = g.topo()
            if order is None or eg.size >= self.node_limit:
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
                    yield
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
                yield
                if eg.size >= self.node_limit:
                    break
                if limit is not None and len(made) >= limit:
                    break

    def step(self, deadline: float) -> int:
        """One round of every rule on the frontier, or the rest of a round the previous step
        left at its limit; how many rewrites changed the e-graph (the round's count so far when
        it stops at the deadline or the work limit: `cut` then says so, and the next step
        resumes the round where it stopped instead of starting another)."""
        if self._round is None:
            self.steps += 1
            self._round = self._rounding()
            self._round_t0 = time.perf_counter()
        self.cut = True
        try:
            while True:
                next(self._round)
                if self.over(deadline):
                    break
        except StopIteration as done:
            self._round = None
            self.cut = False
            self.rounds += 1
            # the first round's duration per drawn graph: how long a pass of the rules over a
            # whole graph takes on this machine now (`_grow` weighs another round by it)
            if self.graph_seconds is None:
                self.graph_seconds = (time.perf_counter() - self._round_t0) / max(1, self._round_graphs)
            return int(done.value)
        # stopped inside the round: what it absorbed stays (every union a proven rewrite), the
        # e-graph is made congruent again so that it can be extracted now
        if self.eg.dirty:
            self.eg.rebuild()
        return self._round_changed

    def _cost_made(self, g: SGraph) -> float:
        """The full model's cost of a graph the round made, kept as the best so far when lower:
        costed as it comes (as the TASO search does), a stopped round still has its best."""
        cost = self.model.graph_cost(g)
        if self.seen_best is None or cost < self.seen_best[0]:
            self.seen_best = (cost, g)
        return cost

    def _rounding(self) -> Iterator[None]:
        """One round as a generator: yields after each candidate absorbed, e-match looked up or
        match instantiated; returns how many rewrites changed the e-graph."""
        self.known = []
        self._round_changed = 0
        prior = None if self.seen_best is None else self.seen_best[0]
        graphs = list(self.frontier)
        if self.rounds:  # before the first round the greedy extraction is the input itself
            best = self.best_graph()
            if best.key() not in {g.key() for g, _ in graphs}:
                graphs.append((best, self.eg.add_graph(best)))
        on_input = any(g is self.sg for g, _ in graphs)
        self._round_graphs = len(graphs)
        made: list[tuple[SGraph, dict[int, int]]] = []
        costs: list[float] = []  # the full model's cost of each made graph, as it came
        # the structural merges first (few, and the gains of the benchmark models), on the
        # drawn graphs; then the library, e-matched: every rule matched on one snapshot of
        # the e-graph, then instantiated, rules that add fewer operators than they match
        # first, so that when the node budget runs out it is the growing rewrites that wait
        changed = 0
        lead_cost = None
        # (a stopped round then holds merges: NASNet-A after 16 candidates, extracted, 1.011
        # instead of 1.001; the whole round's e-graph and optimum, 1.022, are the same)
        for rule in sorted(self.rules, key=lambda r: r.name in LAST_IN_ROUND):
            if self.full:
                break
            if rule.name not in self.ematchers:
                first = len(made)
                for _ in self._absorbing(self.eg, rule, graphs, made):
                    while len(costs) < len(made):
                        costs.append(self._cost_made(made[len(costs)][0]))
                    self._round_changed = len(made)
                    yield
                if self.eg.dirty:
                    self.eg.rebuild()
                if len(made) > first:
                    # a rule's first candidate (pool-as-conv's: every pool at once) when it beats
                    # the cheapest drawn graph leads for the rules after it in this round, so that
                    # the merges also apply to it now rather than a round later (a round of
                    # NASNet-A takes 0.15 s quiet, 0.6 s loaded: at a 0.5 s budget there is no later one)
                    if lead_cost is None:
                        lead_cost = self.model.graph_cost(graphs[0][0])
                    if costs[first] < lead_cost:
                        lead_cost = costs[first]
                        graphs = [made[first], *graphs]
        ordered = sorted(
            (r for r in self.rules if r.name in self.ematchers), key=lambda r: self.ematchers[r.name].growth
        )
        found = []
        for r in ordered:
            found.append((r, self.ematch_matches(self.eg, r)))
            yield
        for rule, ms in found:
            for m in ms[: self.match_limit]:
                if self.full:
                    break
                changed += self._instantiate_one(self.eg, rule, m)
                self._round_changed = len(made) + changed
                yield
        if self.eg.dirty:
            self.eg.rebuild()
        if on_input and not self.full:
            # every structural rewrite of the input is in the e-graph (MCTS need not redo them)
            self.input_done = True
        drawn = [g for g, _ in made] + [g for g, _ in self.known]
        costs += [self._cost_made(g) for g, _ in self.known]
        costed = sorted((c, k) for k, c in enumerate(costs))
        if costed and costed[0][1] >= len(made) and (prior is None or costed[0][0] < prior):
            # a cheaper held graph is progress too: the next round draws from it
            changed += 1
        # the next frontier: the cheapest graphs, made or held (a held one's classes looked up)
        self.frontier = [
            made[k] if k < len(made) else (drawn[k], self.eg.add_graph(drawn[k]))
            for _, k in costed[: self.frontier_size]
        ]
        return len(made) + changed

    def over(self, deadline: float) -> bool:
        """Past the deadline, or the work limit (candidates and e-matches tried) spent."""
        if self.work_limit is not None and self.generated >= self.work_limit:
            return True
        return time.perf_counter() > deadline

    def run(self, seconds: float, max_steps: int = 50) -> str:
        """Steps until saturated or a limit; returns why it stopped ("saturated" only after a
        whole round that changed nothing: a round stopped early says "time" or "work")."""
        deadline = time.perf_counter() + seconds
        for _ in range(max_steps):
            if self.full:
                return "nodes"
            if self.over(deadline):
                return self.stop_reason()
            changed = self.step(deadline)
            if self.cut:
                return "nodes" if self.full else self.stop_reason()
            if changed == 0:
                return "saturated"
        return "steps"

    def stop_reason(self) -> str:
        """Which limit `over` found spent: "work" or "time"."""
        return "work" if self.work_limit is not None and self.generated >= self.work_limit else "time"

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
        bounds the extraction as a whole (the ILP runs get what the costs and the greedy left,
        the first at least ILP_FIRST of it; an ILP optimal on this e-graph is not solved again)."""
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
            runs = ([("fused", fused, choices[1])] if fused != costs else []) + [("plain", costs, choices[0])]
            for k, (kind, cs, start) in enumerate(runs):
                memo = self._ilp_memo.get(kind)
                if memo is not None and memo[0] is self.eg and memo[1] == self.eg.version:
                    if memo[2].method == "ilp":
                        # optimal on this very e-graph (an MCTS stage that changed nothing):
                        # not solved again, its time is the final stages'
                        choices.append(memo[2])
                        continue
                    if memo[2].cost < start.cost:
                        start = memo[2]  # a time-limited solve's incumbent: the next starts there
                # the first run (fusion-credited costs when they differ) gets up to ILP_FIRST
                # whatever follows: split evenly, a short extraction ran no ILP at all and kept
                # the greedy's selection (NasRNN at 0.25 s: 1.032 where the ILP's is 1.073)
                left = seconds - (time.perf_counter() - t0)
                share = left / (len(runs) - k)
                if k == 0:
                    share = max(share, min(left, ILP_FIRST))
                if share < ILP_LEAST:
                    continue  # building the program alone takes longer: the greedy stands
                exact = ilp(self.eg, cs, share, start=start)
                if exact is not None:
                    choices.append(exact)
                    self._ilp_memo[kind] = (self.eg, self.eg.version, exact)
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
