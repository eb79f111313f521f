"""The fixed cost of evaluating small cached graphs: what the hit path skips must not change a key.

A loop that evaluates an input after recording its consumer (conjugate gradient's solution
update reads the step size that the convergence check evaluates) leaves the consumer's
recorded hint stale; the full walk recomputes the hints and its template is filed under the
recorded hint too, so later rounds find it at once. Large templates compile their
matcher after more uses (`template.compile_after`). Every key is compared with the full walk's.
"""

from __future__ import annotations

import numpy as np
import pytest
from _support import walked

import lazygraph as lg
from cache import key as keymod
from cache import template

pytestmark = pytest.mark.usefixtures("memory_cache")


def exact(roots: list) -> tuple:
    """The key `walk` gives, checked against the full walk's (nodes and key)."""
    return walked(roots)[0].key


def test_stale_recorded_hint_finds_its_template_without_walking(monkeypatch):
    """x += alpha * p recorded, alpha evaluated by the check, x evaluated at the end."""
    walks = []
    real = keymod.full_walk
    monkeypatch.setattr(keymod, "full_walk", lambda roots: (walks.append(len(roots)), real(roots))[1])
    rehints = walks
    rng = np.random.default_rng(3)
    p0, r0 = rng.normal(size=7), rng.normal(size=7)
    for rnd in range(4):
        rehints.clear()
        x, xn = lg.zeros(7), np.zeros(7)
        p, r = lg.asarray(p0), lg.asarray(r0)
        for _ in range(3):
            alpha = (r @ r) / (p @ p + 1.0)
            x = x + alpha * p  # recorded before alpha is evaluated: its hint goes stale
            assert float(alpha) > -1.0  # evaluates alpha (kept: x's pending chain reads it)
            an = (r0 @ r0) / (p0 @ p0 + 1.0)
            xn = xn + an * p0
        exact([x.node])
        np.testing.assert_allclose(x.numpy(), xn, rtol=1e-12)
        if rnd >= 2:  # the template is filed under the recorded hint: found at once
            assert not rehints, f"round {rnd} walked in full"


def test_stale_hints_that_change_every_round_file_nothing_more():
    """A new stale recorded hint every round replaces the template's alias: nothing accumulates."""
    a0 = np.arange(6.0)
    sizes = []
    for rnd in range(30):
        r = lg.tanh(lg.asarray(a0) * 2.0) + 1.0
        r.node.h = 1_000_003 * (rnd + 1)  # as recorded before an input was evaluated: names nothing
        exact([r.node])
        sizes.append(sum(len(v) for v in template._templates.values()))
        np.testing.assert_allclose(r.numpy(), np.tanh(a0 * 2.0) + 1.0, rtol=1e-12)
    assert sizes[-1] == sizes[5], sizes


def test_distinct_structures_under_a_stale_hint_keep_their_keys():
    """Two structures evaluated alternately after a stale-hint match: each gets the full walk's key."""
    rng = np.random.default_rng(4)
    a0 = rng.normal(size=(3, 4))
    keys = set()
    for rnd in range(4):
        for variant in (0, 1):
            a = lg.asarray(a0)
            s = a.sum() * 2.0
            y = (a * s) if variant == 0 else (a - s)
            float(s)
            keys.add((variant, exact([y.node])))
            want = (a0 * (a0.sum() * 2.0)) if variant == 0 else (a0 - a0.sum() * 2.0)
            np.testing.assert_allclose(y.numpy(), want, rtol=1e-12)
    assert len({k for _, k in keys}) == 2


def test_large_templates_compile_their_matcher_after_more_uses():
    """A 200-slot chain is matched in general until `compile_after` uses, then compiled; same keys.

    With the generated Python matcher: the C one costs little to make at any size (next test).
    """
    with lg.settings.override(native_match=False):
        _large_template_waits()


def test_c_matchers_come_after_three_matches_at_any_size():
    """With the C module loaded a 3,001-slot chain (above the Python matcher's limit) gets its C
    matcher after four general matches (the generated Python: never, above 1,500 slots); the walk's
    key stays the full walk's."""
    from cache import tmatch
    from lazygraph import lean_native

    assert lean_native.match_module() is not None and tmatch.native_ready()
    assert template.compile_after(200) == 3 and template.compile_after(3001) == 4

    a0 = np.linspace(0, 1, 6)
    expected = sin_chain(np, a0, 1000)
    for i in range(6):
        r = sin_chain(lg, lg.asarray(a0), 1000)
        exact([r.node])
        _, t, nodes = template.find([r.node])
        if t is not None:
            assert nodes is not None and t.n == 3001 > tmatch.MAX_SLOTS
            assert (t.fast is None) == (t.uses < 4), f"{t.uses} uses"
    assert type(t.fast).__name__ == "Matcher"
    np.testing.assert_allclose(r.numpy(), expected, rtol=1e-12)


def sin_chain(xp, x, rounds: int):
    """`rounds` of sin(x) + 1.0 (two operations and a scalar each), with lazygraph or NumPy."""
    for _ in range(rounds):
        x = xp.sin(x) + 1.0
    return x


def _large_template_waits():
    a0 = np.linspace(0, 1, 6)
    expected = sin_chain(np, a0, 100)
    n = None
    for i in range(template.compile_after(202) + 2):
        r = sin_chain(lg, lg.asarray(a0), 100)
        exact([r.node])
        _, t, nodes = template.find([r.node])
        if t is not None:
            n = t.n
            assert nodes is not None
            if t.uses < template.compile_after(t.n):
                assert t.fast is None, f"compiled after {t.uses} uses"
    assert n is not None and template.compile_after(n) > 3
    assert t.fast is not None
    np.testing.assert_allclose(r.numpy(), expected, rtol=1e-12)
