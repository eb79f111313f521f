"""Small integer arrays compared with Python ints compare in int16/int32 inside compiled
kernels (jit/domain.weak_compare_bounds clamps the int): every answer stays NumPy's, for ints
inside, at the edge of and far outside the array's range."""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
from jit.domain import weak_compare_bounds
from lazygraph.array import as_node
from ops.settings import SETTINGS

N = 40_000  # above the JIT's size threshold: the fused region runs compiled
OPS = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
# inside, at the edges of and far outside the 1- and 2-byte ranges
VALUES = (0, 1, 3, -1, 127, 128, -128, -129, 255, 256, 300, 32767, 32768, 65535, 65536)
VALUES += (-40000, 2**40, -(2**40))


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16"])
@pytest.mark.parametrize("jit", [False, True])
def test_comparisons_with_python_ints_keep_numpys_answers(dtype: str, jit: bool) -> None:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(5)
    x = rng.integers(info.min, int(info.max) + 1, N, dtype=dtype)
    x[:4] = (info.min, info.max, 0, 1)
    for v in VALUES:
        for op in OPS:
            # the array operand on either side, and inside a fused chain (+ 1 wraps in dtype)
            want = getattr(np, op)(x + 1, v) ^ getattr(np, op)(v, x)
            with SETTINGS.override(jit=jit):
                a = lg.asarray(x)
                got = (getattr(lg, op)(a + 1, v) ^ getattr(lg, op)(v, a)).numpy()
            assert got.tobytes() == want.tobytes(), (dtype, op, v)


def test_bounds_apply_only_to_small_integer_arrays_against_python_ints() -> None:
    u8 = lg.asarray(np.arange(4, dtype=np.uint8))
    assert weak_compare_bounds(as_node(u8 == 3, "test")) == (-1, 256)
    i16 = lg.asarray(np.arange(4, dtype=np.int16))
    assert weak_compare_bounds(as_node(i16 < 3, "test")) == (-32769, 32768)
    assert weak_compare_bounds(as_node(lg.asarray(np.arange(4, dtype=np.int32)) < 3, "test")) is None
    assert weak_compare_bounds(as_node(u8 < 3.5, "test")) is None
    assert weak_compare_bounds(as_node(u8 == u8, "test")) is None


def test_jit_on_and_off_are_separate_cache_entries() -> None:
    """A structure first run with the JIT off is compiled when the JIT is on (and back), so
    tests comparing the two compare two plans, not one plan with itself."""
    x = np.arange(N, dtype=np.uint8)
    lg.cache.clear()
    lg.cache.reset_stats()
    results = []
    for jit in (False, True, False, True):
        with SETTINGS.override(jit=jit):
            a = lg.asarray(x)
            results.append(((a + 7) == 3).numpy())
    s = lg.cache.stats()
    assert (s["misses"], s["hits"]) == (2, 2)
    for r in results:
        assert r.tobytes() == ((x + 7) == 3).tobytes()
