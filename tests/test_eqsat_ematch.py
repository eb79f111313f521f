"""E-matching of the library's rules on the e-graph (optimizer/eqsat/ematch.py).

Every check is differential: an alternative the e-matcher put into a class is extracted and
evaluated with the NumPy reference kernels against the input graph.
"""

from __future__ import annotations

import numpy as np
import pytest
from _support import mixed

from optimizer.eqsat.egraph import EGraph, from_graph
from optimizer.eqsat.ematch import EMatcher, Match
from optimizer.eqsat.extract import greedy
from optimizer.eqsat.saturate import Saturation, graph_of
from optimizer.superopt import pass_
from optimizer.superopt.adapt import matcher_of
from optimizer.superopt.apply import SGraph
from optimizer.superopt.cost import CostModel
from optimizer.superopt.match import Context


def lib(name: str):
    """The search's copy of a proven library rule."""
    got = [r for r in pass_.stages()[-1] if r.name == f"lib:{name}"]
    assert got and got[0].status == "proven"
    return got[0]


def feeds(sg: SGraph, seed: int = 0) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        i: rng.standard_normal(n.shape).astype(n.dtype)
        for i, n in sg.nodes.items()
        if n.op in ("input", "weight")
    }


def alternatives(eg: EGraph, sg: SGraph, base: dict[int, int], root: int, rule: str) -> list[SGraph]:
    """Graphs that compute the input with each e-node of `root`'s class that `rule` made."""
    costs = [1.0] * len(eg.enodes)
    pick = greedy(eg, costs).pick
    out = []
    for idx in eg.nodes_of(root):
        if eg.enodes[idx].rule != rule:
            continue
        p = dict(pick)
        p[eg.find(root)] = idx
        for c in _below(eg, idx):
            if c not in p:
                p[c] = eg.nodes_of(c)[0]
        out.append(graph_of(eg, p, sg, base))
    return out


def _below(eg: EGraph, idx: int) -> set[int]:
    seen: set[int] = set()
    stack = list(eg.children(idx))
    while stack:
        c = stack.pop()
        if c not in seen:
            seen.add(c)
            stack.extend(eg.children(eg.nodes_of(c)[0]))
    return seen


def same(a: SGraph, b: SGraph, f: dict[int, np.ndarray]) -> None:
    for x, y in zip(a.evaluate(f), b.evaluate(f)):
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_allclose(y, x, rtol=1e-9, atol=1e-9 * max(1.0, float(np.abs(x).max())))


def test_a_match_only_the_egraph_represents_is_found_and_keeps_values() -> None:
    """(a b) c where `a b` is in the class of a slice of a merged matmul (as merge-matmul
    leaves it): neither concrete graph holds a matmul of a matmul, the e-graph does."""
    a = np.float64
    g1 = SGraph()
    x, w1, w2, c = (g1.leaf("input", s, a) for s in [(3, 4), (4, 5), (4, 2), (5, 6)])
    s = g1.add(
        "slice_axis",
        [g1.add("matmul", [x, g1.add("concat", [w1, w2], {"axis": 1})])],
        {"axis": 1, "start": 0, "stop": 5},
    )
    out = g1.add("matmul", [s, c])
    g1.outputs = [out]
    eg, base = from_graph(g1)
    g2 = SGraph()
    g2.nodes, g2.next_id = {i: g1.nodes[i] for i in (x, w1)}, g1.next_id
    t = g2.add("matmul", [x, w1])
    g2.outputs = [t]
    got = eg.add_graph(g2)
    assert eg.union(base[s], got[t])  # s == x @ w1: the equality a merge's split records
    eg.rebuild()
    rule = lib("matrix-35")  # (matmul (matmul ?t0 ?t1) ?t2) -> (matmul ?t0 (matmul ?t1 ?t2))
    for g in (g1, g2):
        assert not list(matcher_of(rule).rewrites(Context(g, g.topo()))), "a concrete graph already matches"
    em = EMatcher(rule)
    ms = em.matches(eg)
    assert len(ms) == 1 and ms[0].env["?t0"] == eg.find(base[x]) and ms[0].env["?t2"] == eg.find(base[c])
    assert em.apply(eg, ms[0])
    eg.rebuild()
    alts = alternatives(eg, g1, base, base[out], rule.name)
    assert alts and any(rule.name in g.applied for g in alts)
    f = feeds(g1)
    for g in alts:
        same(g1, g, f)


def test_a_multi_output_rule_joins_its_sources_on_the_shared_variable() -> None:
    """matrix-32: (matmul ?t0 ?t1), (matmul ?t0 ?t2) -> the two splits of one matmul."""
    f64 = np.float64
    sg = SGraph()
    x, y = sg.leaf("input", (3, 4), f64), sg.leaf("input", (3, 4), f64)
    w1, w2 = sg.leaf("weight", (4, 5), f64), sg.leaf("weight", (4, 2), f64)
    p, q, r = sg.add("matmul", [x, w1]), sg.add("matmul", [x, w2]), sg.add("matmul", [y, w1])
    sg.outputs = [p, q, r]
    eg, base = from_graph(sg)
    rule = lib("matrix-32")
    em = EMatcher(rule)
    ms = em.matches(eg)
    # p,q in both orders share ?t0 = x; r reads y, so it joins with neither
    assert sorted(m.roots for m in ms) == sorted([(base[p], base[q]), (base[q], base[p])])
    assert all(m.env["?t0"] == base[x] for m in ms)
    for m in ms:
        em.apply(eg, m)
    eg.rebuild()
    f = feeds(sg)
    for root in (p, q):
        alts = alternatives(eg, sg, base, base[root], rule.name)
        assert alts
        for g in alts:
            assert any(n.op == "slice_axis" for n in g.nodes.values())
            same(sg, g, f)


@pytest.mark.parametrize("why", ["rank", "kind"])
def test_a_condition_rejects_the_match(why: str) -> None:
    """matrix-35 holds for rank-2 floats only: a batched or integer product is not rewritten,
    although the source's shape matches (the top-down matcher finds it, the check refuses)."""
    dt = np.int64 if why == "kind" else np.float64
    sg = SGraph()
    a = sg.leaf("input", (2, 3, 4) if why == "rank" else (3, 4), dt)
    b, c = sg.leaf("input", (4, 5), dt), sg.leaf("input", (5, 6), dt)
    out = sg.add("matmul", [sg.add("matmul", [a, b]), c])
    sg.outputs = [out]
    eg, base = from_graph(sg)
    em = EMatcher(lib("matrix-35"))
    from optimizer.eqsat.ematch import index_of

    raw = list(em._match(index_of(eg), em.src.outputs[0], base[out], {}, frozenset()))
    assert raw, "the source's structure matches"
    assert em.matches(eg) == []
    size = eg.size
    sat = Saturation(sg, [lib("matrix-35")], CostModel())
    sat.run(2.0)
    assert sat.eg.size == size and not sat.applied


def test_an_ill_typed_instantiation_is_refused_and_adds_nothing() -> None:
    """A match whose target does not type-check (concat of operands with different row
    counts) raises in `infer`: nothing enters the e-graph."""
    f64 = np.float64
    sg = SGraph()
    x = sg.leaf("input", (3, 4), f64)
    w1, w2 = sg.leaf("weight", (4, 5), f64), sg.leaf("weight", (7, 2), f64)
    p = sg.add("matmul", [x, w1])
    q = sg.add("matmul", [sg.leaf("input", (3, 7), f64), w2])
    sg.outputs = [p, q]
    eg, base = from_graph(sg)
    em = EMatcher(lib("matrix-32"))
    assert em.matches(eg) == []  # different left operands: no match
    forged = Match(
        {"?t0": base[x], "?t1": base[w1], "?t2": base[w2], "#0:0": base[p], "#3:0": base[q]},
        (base[p], base[q]),
        frozenset(),
    )
    size, version = eg.size, eg.version
    assert not em.apply(eg, forged)
    assert eg.size == size and eg.version == version


def test_ematching_finds_what_the_concrete_matcher_finds() -> None:
    """On the input graph, a library rule e-matches exactly where the TASO matcher matches."""
    sg = mixed()
    sat = Saturation(sg, pass_.stages()[-1], CostModel())
    ctx = Context(sg, sg.topo())
    matching = 0
    for rule in pass_.stages()[-1]:
        if rule.name not in sat.ematchers:
            continue
        concrete = sum(1 for _ in matcher_of(rule).rewrites(ctx))
        found = len(sat.ematchers[rule.name].matches(sat.eg, limit=10_000))
        assert (concrete > 0) == (found > 0), rule.name
        matching += found > 0
    assert matching >= 10  # matmul, product-chain, convolution and pooling rules


def test_saturation_by_ematching_keeps_values() -> None:
    """A saturation with the library e-matched: the extraction computes the input's values."""
    sg = mixed()
    sat = Saturation(sg, pass_.stages()[-1], CostModel(), node_limit=800)
    sat.run(3.0, max_steps=3)
    assert any(k.startswith("lib:") for k in sat.applied)
    best, _ = sat.extract("greedy")
    same(sg, best, feeds(sg))
