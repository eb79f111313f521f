"""Between lazygraph graphs and term graphs: recognizing recorded operators, emitting terms into Q."""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
from cache import key as keymod
from cache.graph import Graph
from optimizer.registry import register_pass, unregister_pass
from optimizer.superopt.convert import from_graph, from_nodes, to_graph
from optimizer.superopt.term import parse_terms

RNG = np.random.default_rng(0)


def lazy(*shape):
    """An unevaluated array (positive: a recorded node, so views of it stay view nodes)."""
    return lg.positive(lg.asarray(RNG.standard_normal(shape).astype(np.float32)))


def texts(*arrays):
    tg, binding, _ = from_nodes([a.node for a in arrays], lambda n: n.buffer)
    return tg.texts(), binding


def test_recorded_operators_are_recognized():
    x, y, z = lazy(4, 3), lazy(4, 2), lazy(4, 5)
    (t,), b = texts(lg.maximum(x.T @ y * 2.0, 0))
    assert t.startswith("(relu (smul (matmul (transpose ?v")
    assert {n.op.name for n in b.values()} == {"positive", "scalar"}
    a, c = lg.split(lg.concat([y, z], axis=1), [2], axis=1)
    ts, _ = texts(a + a, c)
    assert ts[0].startswith("(add (split0 1 (concat 1") and ts[1].startswith("(split1 1 (concat 1")


def test_convolution_pooling_and_kernel_padding_are_recognized():
    x, w, u = lazy(1, 2, 5, 5), lazy(3, 2, 3, 3), lazy(3, 2, 1, 1)
    y = lg.conv2d(x, w, padding=1) + lg.conv2d(x, lg.pad(u, ((0, 0), (0, 0), (1, 1), (1, 1))), padding=1)
    (t,), _ = texts(lg.avg_pool2d(y, 3, stride=1, padding=1))
    assert t.count("(conv2d 1 same none") == 2 and "(enlarge 3 " in t and t.startswith("(avg_pool2d 3 1 same")
    # not in the vocabulary: a dilated conv and a non-zero pad stay opaque inputs
    (t,), _ = texts(lg.conv2d(x, w, padding=2, dilation=2))
    assert t.startswith("?v")


def test_unrecognized_shapes_stay_opaque():
    x, y = lazy(3, 4), lazy(1, 4)
    (t,), _ = texts(x + y)  # broadcasting add: not the vocabulary's same-shape add
    assert t.startswith("?v")


@pytest.fixture
def rewrite_pass():
    """A pass applying one rewrite (given per test) to the graph's outputs with to_graph."""
    state = {}

    @register_pass("test_superopt_convert", priority=1000)
    def run(g: Graph) -> bool:
        fn = state.get("fn")
        return bool(fn and fn(g))

    lg.cache.clear(disk=False)
    yield state
    unregister_pass("test_superopt_convert")
    lg.cache.clear(disk=False)


def test_to_graph_emits_a_merged_matmul_with_the_same_values(rewrite_pass):
    seen = {}

    def merge(g: Graph) -> bool:
        tg, binding, _ = from_graph(g, list(g.outputs))
        src = tg.texts()
        if len(src) != 2 or not all(s.startswith("(matmul") for s in src):
            return False
        names = [tg.nodes[tg.outputs[k][0]].args for k in range(2)]
        (x, y), (_, z) = ([tg.nodes[r[0]].params[0] for r in a] for a in names)
        target = parse_terms(
            [f"(split0 1 (matmul {x} (concat 1 {y} {z})))", f"(split1 1 (matmul {x} (concat 1 {y} {z})))"]
        )
        outs = to_graph(g, target, binding)
        g.substitute({id(g.outputs[0]): outs[0], id(g.outputs[1]): outs[1]})
        seen["ops"] = [n.name for n in g.nodes]
        return True

    rewrite_pass["fn"] = merge
    X, W1, W2 = (RNG.standard_normal(s).astype(np.float32) for s in [(4, 5), (5, 3), (5, 6)])
    x = lg.asarray(X)
    a, b = lg.eval(x @ lg.asarray(W1), x @ lg.asarray(W2))
    np.testing.assert_allclose(np.asarray(a), X @ W1, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(b), X @ W2, rtol=1e-5, atol=1e-5)
    assert "concat" in " ".join(seen["ops"]) and seen["ops"].count("superopt") == 2


def test_to_graph_lowers_every_operator_kind(rewrite_pass):
    def replace(g: Graph) -> bool:
        tg, binding, _ = from_graph(g, list(g.outputs))
        if tg.texts()[0].split()[0] != "(relu":
            return False
        x = next(v for v, q in binding.items() if len(q.shape) == 4)
        target = parse_terms(
            [
                f"(max_pool2d 3 1 same (conv2d 1 same relu (avg_pool2d 3 1 same {x}) (enlarge 3 (conv_ident {x}))))"
            ]
        )
        (out,) = to_graph(g, target, binding)
        g.substitute({id(g.outputs[0]): out})
        return True

    X = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    ref = lg.max_pool2d(
        lg.maximum(lg.avg_pool2d(lg.asarray(X), 3, stride=1, padding=1), 0), 3, stride=1, padding=1
    )
    want = ref.numpy()
    rewrite_pass["fn"] = replace
    got = lg.maximum(lg.asarray(X) * 1.0, 0).numpy()  # the pass replaces it with the target above
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_from_graph_on_q_matches_from_nodes():
    x, y = lazy(3, 3), lazy(3, 3)
    out = lg.maximum(x @ y + x, 0)
    g = Graph(keymod.walk([out.node]))
    tg, _, _ = from_graph(g, list(g.outputs))
    tn, _, _ = from_nodes([out.node], lambda n: n.buffer)
    assert tg.key() == tn.key()
