"""The settings object: parsed once, changed through the API, never read from os.environ on the way."""

from __future__ import annotations

import os

import numpy as np
import pytest

import lazygraph as lg
from ops.settings import FIELDS, SETTINGS, SettingError


def test_update_override_and_reload():
    assert SETTINGS.jit is True
    with lg.settings.override(jit=False, jit_min_size=10):
        assert SETTINGS.jit is False and SETTINGS.jit_min_size == 10
    assert SETTINGS.jit is True and SETTINGS.jit_min_size == 1
    old = lg.settings.update(schedule_budget=0.5)
    try:
        assert SETTINGS.schedule_budget == 0.5
    finally:
        lg.settings.update(**old)
    assert SETTINGS.schedule_budget == 0.2


def test_api_values_are_validated_like_the_environment():
    with pytest.raises(SettingError, match="LAZYGRAPH_JIT_MIN_SIZE='-3'"):
        lg.settings.update(jit_min_size=-3)
    with pytest.raises(SettingError, match="LAZYGRAPH_FAST_MATH"):
        lg.settings.update(fast_math="maybe")
    with pytest.raises(AttributeError, match="no setting 'jitt'"):
        lg.settings.update(jitt=True)
    assert SETTINGS.jit_min_size == 1  # a rejected update changes nothing


def test_environment_is_read_once_until_reload(monkeypatch):
    assert SETTINGS.jit_min_size == 1
    os.environ["LAZYGRAPH_JIT_MIN_SIZE"] = "12"  # behind the settings' back: not seen yet
    try:
        assert SETTINGS.jit_min_size == 1
        SETTINGS.reload()
        assert SETTINGS.jit_min_size == 12
    finally:
        del os.environ["LAZYGRAPH_JIT_MIN_SIZE"]
        SETTINGS.reload()


def test_user_values_win_over_the_environment(monkeypatch):
    monkeypatch.setenv("LAZYGRAPH_OPTIMIZE", "0")
    assert SETTINGS.optimize is False
    with lg.settings.override(optimize=True):
        SETTINGS.reload()  # a reload keeps what the user set through the API
        assert SETTINGS.optimize is True
    assert SETTINGS.optimize is False


class _Watched(dict):
    """os.environ stand-in that records reads of our settings' variables."""

    def __init__(self, data: dict, reads: list) -> None:
        super().__init__(data)
        self.reads = reads

    def get(self, key, default=None):
        if key.startswith("LAZYGRAPH_") or key in ("CC", "XDG_CACHE_HOME"):
            self.reads.append(key)
        return super().get(key, default)

    def __getitem__(self, key):
        if key.startswith("LAZYGRAPH_"):
            self.reads.append(key)
        return super().__getitem__(key)


def test_evaluations_do_not_read_the_environment(monkeypatch):
    SETTINGS.as_dict()  # every field parsed once
    reads: list[str] = []
    monkeypatch.setattr(os, "environ", _Watched(dict(os.environ), reads))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 300)).astype(np.float32)
    for _ in range(2):  # a miss (passes, lowering, scheduling, disk) and a hit
        a = lg.asarray(x)
        y = lg.softmax(a * 2.0 + 1.0, axis=1) @ a
        got = y.numpy()
    e = np.exp(2 * x + 1 - (2 * x + 1).max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, (e / e.sum(axis=1, keepdims=True)) @ x, rtol=1e-4, atol=1e-5)
    assert reads == []


def test_every_field_has_a_variable_and_a_meaning():
    for name, field in FIELDS.items():
        assert field.env and field.doc, name
        getattr(SETTINGS, name)  # parses with the test environment


def test_gc_freeze_is_a_process_policy_that_can_be_turned_off() -> None:
    """`import lazygraph` freezes the objects alive then (gc.freeze) unless LAZYGRAPH_GC_FREEZE=0."""
    import subprocess
    import sys

    code = "import gc, lazygraph; print(gc.get_freeze_count())"
    counts = []
    for value in ("1", "0"):
        env = dict(os.environ, LAZYGRAPH_GC_FREEZE=value)
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        counts.append(int(out.stdout.split()[-1]))
    assert counts[0] > 1000 and counts[1] == 0


def test_the_engines_settings_tuple_follows_every_change(monkeypatch, memory_cache):
    """Evaluations read their settings from one tuple (`ops.settings.HOT`): every way of changing a
    setting drops it, and the next evaluation acts on the new value."""
    from lazygraph.engine.evaluate import settings_now
    from ops import settings as S

    def hot() -> tuple:
        return S.hot(settings_now)

    x = np.arange(6.0)

    def misses() -> int:
        lg.eval(lg.asarray(x) * 2.0 + 1.0)
        return lg.cache.stats(per_entry=False)["misses"]

    first = misses()
    assert S.HOT[0] is not None and misses() == first  # the same structure hits
    with lg.settings.override(optimize=False):
        assert S.HOT[0] is None
        assert misses() == first + 1  # the optimizer off is another entry
        assert S.HOT[0][2] is False
    assert S.HOT[0] is None and hot()[2] is True and misses() == first + 1
    monkeypatch.setenv("LAZYGRAPH_DEBUG", "2")  # a reload (tests/conftest.py): the same as the API
    assert S.HOT[0] is None and hot()[0] == 2
    monkeypatch.setenv("LAZYGRAPH_JIT", "1")  # memory_cache turned it off
    assert hot()[4] is True  # every default: the structural key alone
    monkeypatch.setenv("LAZYGRAPH_JIT_MIN_SIZE", "7")
    assert hot()[4] is False  # the JIT's variant marks the key
