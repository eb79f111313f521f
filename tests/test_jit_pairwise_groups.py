"""Pairwise sums with several blocks added side by side (jit/render_order.py, GROUP) against NumPy.

Each pairwise block keeps its own accumulators, so a row's sum must have NumPy's bits whatever
the blocks' lengths (equal or not, rows that leave a partial group of blocks), and the same
bits as the kernel rendered one block at a time (GROUP = 1).
"""

from __future__ import annotations

import numpy as np
import pytest
from _support import run_kernels

import lazygraph as lg
import lazygraph.nn.functional as F
from jit import compile_c, render_order

pytestmark = [
    pytest.mark.skipif(not compile_c.available(), reason="needs a C compiler"),
    pytest.mark.host_backend,
]

#: row lengths: under one group of 8, one block, blocks of equal and of unequal lengths, partial groups
LENGTHS = [1, 7, 8, 127, 128, 129, 513, 1000, 1031, 2048, 4097]


def run(fn, *arrays: np.ndarray, group: int) -> tuple[list[np.ndarray], list[str]]:  # noqa: ANN001
    """fn(lg, ...) through fused kernels rendered with `group` blocks side by side, and their sources."""
    return run_kernels(fn, arrays, render_order, "GROUP", group)


def row_sum(xp, a):  # noqa: ANN001, ANN201
    """A row sum of squares (a computed value summed pairwise)."""
    return (a * a).sum(axis=1)


def row_mean(xp, a):  # noqa: ANN001, ANN201
    """Row means."""
    return a.mean(axis=1)


def row_var(xp, a):  # noqa: ANN001, ANN201
    """Row variances (squared deviations from the mean: two pairwise stages)."""
    return a.var(axis=1)


def centred(xp, a):  # noqa: ANN001, ANN201
    """Rows divided by their sums: a sum stage and a final stage in one kernel."""
    return a / a.sum(axis=1, keepdims=True)


PROGRAMS = {"sum": row_sum, "mean": row_mean, "var": row_var, "centred": centred}


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal shape, dtype and bits (NaN positions equal, payloads not compared)."""
    assert got.shape == want.shape and got.dtype == want.dtype
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert got[~nan].tobytes() == want[~nan].tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_grouped_sums_have_numpys_bits(name: str, dtype: type) -> None:
    fn = PROGRAMS[name]
    rng = np.random.default_rng(7)
    for n in LENGTHS:
        x = (rng.standard_normal((5, n)) * 3 + 1).astype(dtype)
        (got,), srcs = run(fn, x, group=4)
        (alone,), _ = run(fn, x, group=1)
        with np.errstate(all="ignore"):
            want = fn(np, x)
        same_bits(got, want)
        same_bits(got, alone)
        if n >= 4 * render_order.LEAF:
            assert any("lg_gk" in s for s in srcs), n  # the grouped path was rendered


def test_grouped_sums_edge_rows() -> None:
    """One row, no rows, strided rows, NaN and infinite rows: NumPy's bits."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 1031)).astype(np.float32)
    x[1, 700] = np.nan
    x[2, 5] = np.inf
    x[3, 900] = -np.inf
    x[4, 3], x[4, 600] = np.inf, -np.inf
    cases = [x, x[:1], x[:0], x[::2], x[:, 3:]]
    for fn in PROGRAMS.values():
        for a in cases:
            (got,), _ = run(fn, a, group=4)
            with np.errstate(all="ignore"):
                want = fn(np, a)
            same_bits(got, want)


def test_layernorm_and_softmax_rows_unchanged_by_grouping() -> None:
    """The row kernels the benchmark times: grouped and one-block renderings give the same bytes."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((9, 1000)).astype(np.float32)
    w, b = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    for fn in (
        lambda xp, a, w_, b_: F.layer_norm(a, 1000, w_, b_),
        lambda xp, a, w_, b_: lg.softmax(a, axis=1),
        lambda xp, a, w_, b_: lg.log_softmax(a, axis=1),
    ):
        (g4,), srcs = run(fn, x, w, b, group=4)
        (g1,), _ = run(fn, x, w, b, group=1)
        assert g4.tobytes() == g1.tobytes()
        assert any("lg_gk" in s for s in srcs)
