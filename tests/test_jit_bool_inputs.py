"""Compiled kernels read bool inputs as bytes (jit/render_c.py: gcc vectorizes those selects):
every use of a bool operand keeps NumPy's values, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
from ops.settings import SETTINGS

N = 50_000  # above the JIT's size threshold: the fused region runs compiled


def _inputs():
    rng = np.random.default_rng(7)
    m = rng.random(N) < 0.4
    k = rng.random(N) < 0.7
    x = rng.standard_normal(N)
    i = rng.integers(-5, 5, N).astype(np.int32)
    return m, k, x, i


PROGRAMS = {
    "select": lambda ns, m, k, x, i: ns.where(m, x * 2.0, x - 1.0),
    "select_nested": lambda ns, m, k, x, i: ns.where(m, ns.where(k, x, -x), 0.5),
    "logic": lambda ns, m, k, x, i: (m & ~k) | (k ^ m),
    "bool_add": lambda ns, m, k, x, i: m + k,
    "bool_times_float": lambda ns, m, k, x, i: m * x + k,
    "bool_to_int": lambda ns, m, k, x, i: m.astype(np.int32) + i,
    "bool_compare": lambda ns, m, k, x, i: (m == k) & (x > 0),
    "count_masked": lambda ns, m, k, x, i: ns.where(m & (x > 0), i, 0).sum(),
    "mandelbrot_step": lambda ns, m, k, x, i: ns.where(m, x * x + 0.25, x) * ns.where(k, 1.0, 0.0),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("jit", [False, True])
def test_bool_operands_keep_numpys_values(name: str, jit: bool) -> None:
    m, k, x, i = _inputs()
    want = PROGRAMS[name](np, m, k, x, i)
    with SETTINGS.override(jit=jit):
        got = PROGRAMS[name](lg, *(lg.asarray(a) for a in (m, k, x, i))).numpy()
    assert got.dtype == np.asarray(want).dtype
    np.testing.assert_array_equal(got, want, strict=False)
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
