"""Structural keys, hits and misses, the on-disk store, statistics, debug output."""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
from cache import key as keymod
from cache.explain import explain_miss
from cache.key import walk
from cache.store import Entry, MemoryStore
from lazygraph.engine import ENGINE


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """Each test starts with an empty cache in its own directory."""
    monkeypatch.setenv("LAZYGRAPH_CACHE_DIR", str(tmp_path / "cache"))
    for var in ("LAZYGRAPH_CACHE", "LAZYGRAPH_OPTIMIZE", "LAZYGRAPH_EXPLAIN_MISSES", "LAZYGRAPH_DEBUG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LAZYGRAPH_JIT", "0")  # the built-in passes only: counts below are theirs
    lg.cache.clear(disk=False)
    yield
    lg.cache.clear(disk=False)


def key_of(*arrays: lg.Array) -> tuple:
    """The key an evaluation of these arrays would look up (this process's flat form)."""
    return walk([a.node for a in arrays]).key


def skey_of(*arrays: lg.Array) -> tuple:
    """The same key in its process-independent form (tokens, root slots)."""
    return walk([a.node for a in arrays]).structural_key


def entry_for(*arrays: lg.Array) -> Entry:
    """A cache entry (without variants) for these arrays' key."""
    w = walk([a.node for a in arrays])
    return Entry(w.key, w.structural_key)


def counts() -> tuple[int, int]:
    """(hits, misses) so far."""
    s = lg.cache.stats()
    return s["hits"], s["misses"]


def lazy(a) -> lg.Array:
    """An unevaluated copy of a NumPy array."""
    return lg.positive(lg.asarray(np.asarray(a)))


def program(x: lg.Array, y: lg.Array) -> lg.Array:
    """A small program with views, a reshape, a write and a reduction."""
    z = lg.tanh(x @ y.T) * 2 + 1
    z[0] = 0.0
    w = z[1:, ::2].reshape(-1)
    return w.sum() + z.mean(axis=0).max()


# -- keys ---------------------------------------------------------------------------------


def test_same_structure_with_other_data_and_sizes_hits():
    rng = np.random.default_rng(0)
    values = []
    for n, m in ((3, 4), (5, 2), (7, 9)):
        xn, yn = rng.normal(size=(n, m)), rng.normal(size=(n, m))
        got = program(lazy(xn), lazy(yn)).numpy()
        z = np.tanh(xn @ yn.T) * 2 + 1
        z[0] = 0.0
        expected = z[1:, ::2].reshape(-1).sum() + z.mean(axis=0).max()
        np.testing.assert_allclose(got, expected, rtol=1e-12)
        values.append(got)
    assert counts() == (2, 1)
    assert lg.cache.stats()["distinct_graphs"] == 1


def test_slices_and_reshape_sizes_are_not_in_the_key():
    a, b = lazy(np.arange(10.0)), lazy(np.arange(20.0))
    assert key_of(a[2:5] * 2) == key_of(b[1:9] * 2)
    assert key_of(lg.reshape(a * 1.5, (2, 5))) == key_of(lg.reshape(b * 1.5, (4, 5)))
    assert key_of(lg.zeros((3, 4)) + a[:4]) == key_of(lg.zeros((6, 8)) + b[:8])


F64, F32 = np.arange(6.0), np.arange(6.0, dtype=np.float32)


@pytest.mark.parametrize(
    "make_a, make_b, what",
    [
        (lambda: lazy(F64) + lazy(F64), lambda: lazy(F64) * lazy(F64), "op add here, multiply cached"),
        (lambda: lazy(F64) + 1, lambda: lazy(F32) + 1, "dtype"),
        (lambda: lazy(F64).reshape(2, 3) + 1, lambda: lazy(F64).reshape(1, 2, 3) + 1, "rank"),
        (lambda: lazy(F64).reshape(6, 1) + 1, lambda: lazy(F64).reshape(3, 2) + 1, "unit dimensions"),
        (lambda: lazy(F64) + 1, lambda: lazy(F64) + 1.0, "Python scalar type"),
        (lambda: lazy(F64) + 1.0, lambda: lazy(F64) + lg.asarray(1.0), "scalar vs array"),
        (lambda: lazy(F64).reshape(2, 3).sum(0), lambda: lazy(F64).reshape(2, 3).sum(1), "attribute axis"),
    ],
)
def test_structure_changes_miss_and_are_explained(make_a, make_b, what, monkeypatch, capsys):
    monkeypatch.setenv("LAZYGRAPH_EXPLAIN_MISSES", "1")
    make_b().numpy()
    capsys.readouterr()
    make_a().numpy()
    assert counts() == (0, 2)
    err = capsys.readouterr().err
    assert "cache miss" in err and what in err, err


def test_aliasing_of_leaves_is_structure():
    base = lg.asarray(np.arange(8.0))
    other = lg.asarray(np.arange(8.0))
    shared = key_of(base[:4] + base[4:])  # two windows onto one buffer
    separate = key_of(base[:4] + other[4:])
    assert shared != separate
    assert "aliasing" in explain_miss(skey_of(base[:4] + base[4:]), [entry_for(base[:4] + other[4:])])


def test_requested_outputs_and_broadcast_leaves_are_structure():
    x = lazy(np.arange(3.0))
    y = x * 2
    assert key_of(y, y + 1) != key_of(y + 1, y)
    row = lg.broadcast_to(lg.asarray(np.arange(3.0)), (4, 3))  # a stride-0 window: a leaf
    dense = lg.asarray(np.ones((4, 3)))
    assert row.node.buffer.strides[0] == 0
    assert key_of(row + 1) != key_of(dense + 1)
    assert "stride 0" in explain_miss(skey_of(row + 1), [entry_for(dense + 1)])


def test_same_program_twice_in_one_graph_is_one_key_per_position():
    x = lazy(np.arange(4.0))
    k1 = key_of(x * 2, x * 2)
    k2 = key_of(x * 2, x * 3)
    assert k1 == k2  # scalar values are data (their Python type is structure)


# -- hits replay without optimizing, values stay right ---------------------------------------


def test_a_hit_runs_no_pass(monkeypatch):
    calls = []
    import optimizer.registry as reg

    real = reg.optimize
    monkeypatch.setattr(
        "lazygraph.engine.compile.optimizer.optimize",
        lambda g, t=None, p=None: calls.append(1) or real(g, t, p),
    )
    for n in (3, 4, 5, 6):
        np.testing.assert_allclose((lazy(np.arange(float(n))) * 2).sum().numpy(), n * (n - 1))
    assert calls == [1]


def test_cache_off_memory_only_and_optimizer_off(monkeypatch, tmp_path):
    monkeypatch.setenv("LAZYGRAPH_CACHE", "0")
    for _ in range(2):
        assert float((lazy(np.ones(3)) * 2).sum()) == 6.0
    s = lg.cache.stats()
    assert s["hits"] == s["misses"] == 0 and s["uncached"] == 2
    monkeypatch.setenv("LAZYGRAPH_CACHE", "memory")
    for _ in range(2):
        assert float((lazy(np.ones(3)) * 2).sum()) == 6.0
    assert counts() == (1, 1)
    assert not (tmp_path / "cache" / "graphs").exists()
    monkeypatch.setenv("LAZYGRAPH_OPTIMIZE", "0")
    assert float((lazy(np.ones(3)) * 1).sum()) == 3.0
    entry = max(ENGINE.stats.used.values(), key=lambda e: e.last_used)
    assert entry.variants[0].tgraph.passes == []


def test_uncacheable_attribute_still_evaluates():
    from fractions import Fraction

    from lazygraph.array import from_node
    from ops.base import REGISTRY
    from ops.node import Node

    x = lazy(np.arange(3.0))
    attrs = {"pad_width": ((1, 1),), "mode": "constant", "constant_values": Fraction(1, 2)}
    node = Node(REGISTRY["pad"], (x.node,), attrs, (5,), x.dtype)
    assert not walk([node]).cacheable
    for _ in range(2):
        np.testing.assert_array_equal(from_node(node).numpy(), [0.5, 0.0, 1.0, 2.0, 0.5])
        node = Node(REGISTRY["pad"], (lazy(np.arange(3.0)).node,), attrs, (5,), x.dtype)
    s = lg.cache.stats()
    assert s["uncached"] == 2 and s["misses"] == 0 and s["hits"] == 0


def test_autograd_training_steps_hit_after_the_first():
    # The first two steps have structures of their own (the first step's weights are the
    # initial leaf; the second reads values the first evaluation memoized); every later step
    # has the steady structure and hits. The final `w.numpy()` is one more structure.
    rng = np.random.default_rng(1)
    xn, tn = rng.normal(size=(16, 4)), rng.normal(size=16)
    wn = np.zeros(4)
    w = lg.asarray(wn.copy())
    w.requires_grad = True
    x, t = lg.asarray(xn), lg.asarray(tn)
    for _ in range(6):
        loss = ((x @ w - t) ** 2).mean()
        (g,) = lg.grad(loss, [w])
        with lg.no_grad():
            w -= 0.1 * g
        ln = ((xn @ wn - tn) ** 2).mean()
        wn -= 0.1 * (2 * xn.T @ (xn @ wn - tn) / 16)
        np.testing.assert_allclose(float(loss), ln, rtol=1e-12)
    np.testing.assert_allclose(w.numpy(), wn, rtol=1e-12)
    s = lg.cache.stats()
    assert s["misses"] <= 4 and s["hits"] >= 3, s


# -- the stores ---------------------------------------------------------------------------


def test_forced_hash_collisions_never_mix_up_entries(monkeypatch):
    monkeypatch.setattr(keymod, "key_hash", lambda key: 0)
    monkeypatch.setattr("cache.disk.digest_of", lambda text: "0" * 32)
    programs = [lambda xp, x: x * 2, lambda xp, x: x + 2, lambda xp, x: xp.tanh(x), lambda xp, x: x.sum(0)]
    for round_ in range(3):
        if round_ == 2:
            lg.cache.clear(disk=False)  # the third round reads (one colliding file) from disk
        for f in programs:
            xn = np.arange(6.0).reshape(2, 3) + round_
            np.testing.assert_allclose(f(lg, lazy(xn)).numpy(), f(np, xn))
    assert lg.cache.stats()["distinct_graphs"] == len(programs)


def test_memory_store_buckets_and_capacity():
    store = MemoryStore(capacity=8)
    keys = [((("k", i),), (0,)) for i in range(20)]
    for i, k in enumerate(keys):
        e = Entry(k, ((), ()))
        e.last_used = i
        store.put(e)
        assert store.get(k) is e
    assert len(store) <= 8
    assert store.get(keys[-1]) is not None and store.get(keys[0]) is None


def test_warm_start_from_disk_in_a_new_process_state():
    xn = np.arange(12.0).reshape(3, 4)
    first = program(lazy(xn), lazy(xn)).numpy()
    assert lg.cache.stats()["disk_writes"] == 1
    lg.cache.clear(disk=False)  # as if this were the next run of the program
    again = program(lazy(xn), lazy(xn)).numpy()
    s = lg.cache.stats()
    assert s["disk_hits"] == 1 and s["misses"] == 0
    np.testing.assert_array_equal(first, again)
    rows = lg.cache.entries()
    assert len(rows) == 1 and rows[0]["status"] == "current"


def test_stats_fields_and_clear():
    for n in (2, 3):
        (lazy(np.ones(n)) * 2).numpy()
    s = lg.cache.stats()
    for k in (
        "hits",
        "misses",
        "hit_rate",
        "distinct_graphs",
        "optimize_seconds",
        "replay_seconds",
        "hash_seconds",
    ):
        assert k in s
    assert s["hit_rate"] == 0.5 and s["distinct_graphs"] == 1
    (entry,) = s["entries"]
    assert entry["hits"] == 1 and entry["misses"] == 1 and entry["p_nodes"] >= 4
    assert len(lg.cache.history()) == 2
    assert lg.cache.clear() >= 1
    assert lg.cache.stats()["hits"] == 0 and lg.cache.entries() == []


def test_debug_levels_report_hits_misses_and_passes(monkeypatch, capsys):
    monkeypatch.setenv("LAZYGRAPH_DEBUG", "2")
    (lazy(np.ones(3)) * 1 + 2).numpy()
    err = capsys.readouterr().err
    assert "cache miss" in err and "pass algebraic: fired" in err and "pass dce" in err
    monkeypatch.setenv("LAZYGRAPH_DEBUG", "1")
    (lazy(np.ones(4)) * 1 + 2).numpy()
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "cache hit" in lines[0] and "replay" in lines[0]


def test_explain_shows_p_q_and_passes(capsys):
    x = lazy(np.arange(4.0))
    lg.explain(x * 1 + x * 1)
    out = capsys.readouterr().out
    assert "P = recorded graph" in out and "Q = optimized graph" in out
    assert "passes fired: algebraic, cse, dce" in out


def test_superoptimizer_settings_are_part_of_the_key():
    # a structure compiled under one search (or none) is not replayed under another
    from ops.settings import SETTINGS

    lg.cache.clear(disk=False)
    x = np.linspace(-1.0, 1.0, 12).reshape(3, 4)

    def run() -> np.ndarray:
        return (lg.tanh(lg.asarray(x)) * 2.0 + 1.0).numpy()

    want = np.tanh(x) * 2.0 + 1.0
    seen = []
    for settings in ({}, {"superopt": False}, {"superopt_search": "mcts"}, {"superopt_cost": "measured"}, {}):
        with SETTINGS.override(**settings):
            before = lg.cache.stats()["misses"]
            np.testing.assert_allclose(run(), want)
            seen.append(lg.cache.stats()["misses"] - before)
    assert seen == [1, 1, 1, 1, 0]
