"""Evaluation points, memoization, one-graph evaluation, and the inspection tools."""

from __future__ import annotations

import contextlib
import copy
import io
import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import arrays, assert_matches, dtypes, reference, shapes

import lazygraph as lg
from lazygraph import debug


def stats() -> dict[str, int]:
    return debug.evaluation_stats()


def program(x: np.ndarray | lg.Array):
    """A small program run identically on NumPy and on lazy arrays."""
    return (x * 2 + 1).sum(axis=0)


# -- .numpy(), np.asarray -------------------------------------------------------------------


@given(x=arrays(dtypes, shapes()))
@settings(max_examples=30)
def test_numpy_and_asarray(x):
    lx = lg.asarray(x)
    value = lx.numpy()
    assert isinstance(value, np.ndarray)
    np.testing.assert_array_equal(value, x, strict=True)
    assert not value.flags.writeable  # evaluated values are shared, hence read-only
    np.testing.assert_array_equal(np.asarray(lx), x, strict=True)
    c = np.array(lx, copy=True)
    assert c.flags.writeable
    if x.size:
        c.flat[0] = c.flat[-1]
    np.testing.assert_array_equal(lx.numpy(), x, strict=True)
    assert np.asarray(lx, dtype=np.float64).dtype == np.float64
    if x.dtype != np.float64:
        with pytest.raises(ValueError):
            np.asarray(lx, dtype=np.float64, copy=False)


def test_numpy_of_views_and_results():
    base = np.arange(24.0).reshape(2, 3, 4)
    lb = lg.asarray(base)
    for lv, nv in [
        (lb[:, ::-1, 1], base[:, ::-1, 1]),
        (lb.T, base.T),
        (lb[None, ..., 2:], base[None, ..., 2:]),
    ]:
        np.testing.assert_array_equal(lv.numpy(), nv, strict=True)
    np.testing.assert_array_equal(program(lb).numpy(), program(base), strict=True)


# -- Python scalars ---------------------------------------------------------------------------


@pytest.mark.parametrize("convert", [float, int, complex, bool, operator.index], ids=lambda f: f.__name__)
@given(x=arrays(dtypes, shapes(max_dims=2, max_side=2)))
@settings(max_examples=30)
def test_scalar_conversions_like_numpy(convert, x):
    expected, err = reference(lambda: convert(x))
    lx = lg.asarray(x)
    if err is not None:
        with pytest.raises(type(err)):
            convert(lx)
        return
    got = convert(lx)
    assert type(got) is type(expected)
    if isinstance(expected, float) and expected != expected:
        assert got != got
    else:
        assert got == expected


def test_scalar_conversion_of_larger_arrays_does_not_evaluate():
    x = lg.asarray(np.arange(6.0)) * 2
    before = stats()["evaluations"]
    with pytest.raises(TypeError):
        float(x)
    with pytest.raises(TypeError):
        int(x)
    with pytest.raises(ValueError):
        bool(x)
    with pytest.raises(ValueError):
        bool(lg.zeros((0,)))
    assert stats()["evaluations"] == before


def test_scalar_of_computed_value():
    x = lg.asarray(np.arange(5.0))
    assert float(x.sum()) == 10.0
    assert int(x.max()) == 4
    assert bool(x.any())
    assert complex(x.mean()) == 2 + 0j
    assert [1, 2, 3][lg.asarray(np.arange(3)).argmax()] == 3  # __index__


# -- item, tolist, repr, str, print, format ------------------------------------------------------


@given(x=arrays(dtypes, shapes(max_dims=3)), data=st.data())
@settings(max_examples=40)
def test_item_and_tolist(x, data):
    lx = lg.asarray(x) + 0 if x.dtype != np.bool_ else lg.asarray(x) & True
    expected = (x + 0) if x.dtype != np.bool_ else (x & True)
    assert lx.tolist() == expected.tolist()
    if x.size:
        i = data.draw(st.integers(0, x.size - 1))
        assert lx.item(i) == expected.item(i)
        if x.ndim:
            idx = tuple(data.draw(st.integers(0, d - 1)) for d in x.shape)
            assert lx.item(*idx) == expected.item(*idx)
    exp, err = reference(lambda: expected.item())
    if err is not None:
        with pytest.raises(type(err)):
            lx.item()
    else:
        got = lx.item()
        assert type(got) is type(exp)
        assert got == exp or (got != got and exp != exp)


@given(x=arrays(dtypes, shapes(max_dims=3), special=True))
@settings(max_examples=30)
def test_str_repr_print(x):
    lx = lg.asarray(x)
    assert str(lx) == str(x)
    r = repr(lx)
    assert r.startswith("Array(") and r.endswith(f"dtype={x.dtype})")
    assert np.array2string(x, separator=", ", prefix="Array(") in r
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print(lx)
    assert buf.getvalue() == str(x) + "\n"


def test_format():
    x = lg.asarray(np.float64(3.14159))
    assert f"{x:.2f}" == "3.14"
    assert f"{lg.asarray(7):>3}" == "  7"
    v = lg.asarray(np.arange(3))
    assert f"{v}" == str(np.arange(3))


def test_repr_of_lazy_result_evaluates():
    x = lg.asarray(np.array([1.5, -2.0])) * 2
    before = stats()["evaluations"]
    text = repr(x)
    assert "3." in text and "-4." in text and "float64" in text
    assert stats()["evaluations"] == before + 1


# -- iteration and len ----------------------------------------------------------------------------


@given(x=arrays(dtypes, shapes(max_dims=3)))
@settings(max_examples=30)
def test_iteration_and_len(x):
    lx = lg.asarray(x)
    exp, err = reference(lambda: len(x))
    if err is not None:
        with pytest.raises(TypeError):
            len(lx)
        with pytest.raises(TypeError):
            iter(lx).__next__()
        return
    assert len(lx) == exp
    rows = list(lx)
    assert len(rows) == len(list(x))
    for r, e in zip(rows, x):
        assert_matches(r, e)


def test_iterating_then_writing_rows_writes_the_base():
    base = np.arange(12).reshape(3, 4)
    nb, lb = base.copy(), lg.asarray(base)
    for i, (nrow, lrow) in enumerate(zip(nb, lb)):
        nrow[0] = -i
        lrow[0] = -i
        lrow[1:] *= 10
        nrow[1:] *= 10
    assert_matches(lb, nb)


def test_iteration_is_one_evaluation():
    x = lg.asarray(np.arange(12.0).reshape(4, 3)) * 3
    before = stats()["evaluations"]
    rows = [r.numpy() for r in x]
    assert stats()["evaluations"] == before + 1
    np.testing.assert_array_equal(np.stack(rows), np.arange(12.0).reshape(4, 3) * 3)


# -- lg.eval and memoization ----------------------------------------------------------------------


def test_eval_runs_one_graph():
    base = np.arange(6.0).reshape(2, 3)
    x = lg.asarray(base)
    shared = lg.exp(x) + 1
    a = shared.sum(axis=0)
    b = shared * 2
    c = lg.tanh(x)
    before = stats()
    va, vb, vc = lg.eval(a, b, c)
    after = stats()
    assert after["evaluations"] == before["evaluations"] + 1
    ref_shared = np.exp(base) + 1
    np.testing.assert_allclose(va, ref_shared.sum(axis=0))
    np.testing.assert_allclose(vb, ref_shared * 2)
    np.testing.assert_allclose(vc, np.tanh(base))
    # everything is memoized now: reading again runs nothing
    mid = stats()
    for arr in (a, b, c):
        arr.numpy()
    assert stats() == mid


@pytest.mark.host_backend  # the CPU's log lines (a device adds its transfers)
def test_eval_single_evaluation_logged(monkeypatch, capsys):
    monkeypatch.setenv("LAZYGRAPH_DEBUG", "1")
    x = lg.asarray(np.ones((2, 2)))
    lg.eval(x + 1, x * 3, (x - 1).sum())
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err


def test_memoization_does_not_recompute():
    x = lg.asarray(np.arange(10.0))
    y = (lg.sin(x) * 2 + x).sum()
    v1 = y.numpy()
    s1 = stats()
    v2 = y.numpy()
    f = float(y)
    np.testing.assert_array_equal(np.asarray(y), v1)
    assert stats() == s1
    assert v1 is v2 or np.array_equal(v1, v2)
    assert f == float(v1)
    # a new computation from a memoized value runs only the new nodes
    z = y + 1
    z.numpy()
    s2 = stats()
    assert s2["evaluations"] == s1["evaluations"] + 1
    assert s2["kernels"] - s1["kernels"] == 1


def test_shared_subexpression_evaluates_once_per_graph(monkeypatch):
    monkeypatch.setenv("LAZYGRAPH_JIT", "0")  # one step per op: the count below is theirs
    x = lg.asarray(np.arange(4.0))
    s = x * 2
    before = stats()
    t = (s + s).numpy()
    after = stats()
    np.testing.assert_array_equal(t, np.arange(4.0) * 4)
    assert after["kernels"] - before["kernels"] == 2  # multiply once, add once


def test_writes_after_evaluation_are_seen():
    base = np.arange(4.0)
    x = lg.asarray(base)
    y = x * 2
    np.testing.assert_array_equal(y.numpy(), base * 2)
    x[0] = 100.0
    np.testing.assert_array_equal(y.numpy(), base * 2)  # recorded before the write
    np.testing.assert_array_equal((x * 2).numpy(), np.array([200.0, 2.0, 4.0, 6.0]))


def test_copy_module_makes_independent_copies():
    x = lg.asarray(np.arange(3))
    for c in (copy.copy(x), copy.deepcopy(x)):
        c[0] = 9
        np.testing.assert_array_equal(x.numpy(), np.arange(3))
        np.testing.assert_array_equal(c.numpy(), np.array([9, 1, 2]))


# -- inspection ------------------------------------------------------------------------------------


def test_explain_prints_the_graph(capsys):
    x = lg.asarray(np.arange(6.0).reshape(2, 3))
    y = lg.tanh(x @ x.T) * 2
    before = stats()["evaluations"]
    lg.explain(y)
    out = capsys.readouterr().out
    assert stats()["evaluations"] == before  # explaining does not evaluate
    assert "matmul" in out and "tanh" in out and "multiply" in out
    assert "float64[2,2]" in out
    lines = out.strip().splitlines()
    assert lines[-1].startswith("return")
    assert all(" = " in ln for ln in lines[:-1] if not ln.startswith("return"))


def test_explain_to_file_and_several_arrays():
    x = lg.asarray(np.ones(3))
    buf = io.StringIO()
    lg.explain(x + 1, x * 2, file=buf)
    text = buf.getvalue()
    assert "add" in text and "multiply" in text
    assert text.strip().splitlines()[-1].count("%") == 2


def test_to_dot():
    x = lg.asarray(np.ones((2, 2)))
    y = lg.exp(x) + x.sum()
    src = lg.to_dot(y)
    assert isinstance(src, str)
    assert src.lstrip().startswith("digraph")
    assert src.rstrip().endswith("}")
    assert "exp" in src and "sum" in src and "->" in src


@pytest.mark.host_backend  # the CPU's log lines (a device adds its transfers)
def test_debug_logs_one_line_per_evaluation(monkeypatch, capsys):
    monkeypatch.setenv("LAZYGRAPH_DEBUG", "1")
    x = lg.asarray(np.arange(4.0))
    y = x * 2 + 1
    capsys.readouterr()
    y.numpy()
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "nodes" in lines[0] and "ms" in lines[0]
    # memoized: no new evaluation, no new line
    y.numpy()
    assert capsys.readouterr().err.strip() == ""
    float((y * 3).sum())
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "nodes" in lines[0] and "ms" in lines[0]


def test_debug_quiet_by_default(monkeypatch, capsys):
    monkeypatch.delenv("LAZYGRAPH_DEBUG", raising=False)
    (lg.asarray(np.arange(3)) + 1).numpy()
    assert capsys.readouterr().err == ""


def test_recording_is_lazy():
    before = stats()["evaluations"]
    x = lg.asarray(np.arange(12.0).reshape(3, 4))
    v = x[1:, ::2]
    v += 1
    y = lg.tanh(x @ x.T) * 2
    z = lg.concat([y, y], axis=0).mean(axis=1)
    assert stats()["evaluations"] == before
    base = np.arange(12.0).reshape(3, 4)
    base[1:, ::2] += 1
    ref = np.tanh(base @ base.T) * 2
    np.testing.assert_allclose(z.numpy(), np.concatenate([ref, ref], axis=0).mean(axis=1))
