"""The engine's memory planner: measured peak == predicted peak, the cached order, buffer reuse."""

from __future__ import annotations

import io
import weakref

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lazygraph as lg
from lazygraph.engine import ENGINE, memory
from lazygraph.engine.meter import Meter

# host_backend: the CPU memory planner's buffers (conftest.py)
pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"), pytest.mark.host_backend]

SHAPE = (6, 8)


@pytest.fixture
def metered(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Meter every evaluation, in this process's cache only; check every write into a planned buffer.

    Returns how many planned buffers each kind of step wrote into (ufunc names, "matmul",
    "jit_region", "library").
    """
    monkeypatch.setenv("LAZYGRAPH_MEASURE", "1")
    monkeypatch.setenv("LAZYGRAPH_CACHE", "memory")
    writes: dict[str, int] = {}
    real = memory.writers

    def checked(plan, nodes):  # noqa: ANN001, ANN202
        kinds = [s.recipe.ctor if s.recipe is not None else s.name for s in plan.steps]
        return [w if w is None else _checked_writer(w, k, writes) for w, k in zip(real(plan, nodes), kinds)]

    monkeypatch.setattr(memory, "writers", checked)
    ENGINE.memory.clear()  # cached plans keep layouts made with another test's writers
    return writes


def _checked_writer(write, kind: str, writes: dict[str, int]):  # noqa: ANN001, ANN202
    """`write` asserting plan_buffers's contract: a fitting C-contiguous buffer no input shares."""

    def run(*args, out: np.ndarray, **attrs):  # noqa: ANN002, ANN003, ANN202
        assert out.flags.c_contiguous and out.flags.writeable
        assert not any(isinstance(a, np.ndarray) and np.may_share_memory(out, a) for a in args), (
            f"{kind}: its planned buffer aliases an input it reads"
        )
        v = write(*args, out=out, **attrs)
        first = v[0] if isinstance(v, tuple) else v  # a multi-output step: its first value
        assert first is out, f"{kind} did not write into its planned buffer"
        writes[kind] = writes.get(kind, 0) + 1
        return v

    return run


# -- random programs: each step is an op on the pool (lazy array, NumPy twin) ------------------

OPS = st.one_of(
    st.tuples(st.just("unary"), st.sampled_from(["exp", "negative", "abs", "tanh"]), st.integers(0, 99)),
    st.tuples(st.just("binary"), st.sampled_from(["add", "multiply", "subtract"]), st.integers(0, 99)),
    st.tuples(st.just("view"), st.sampled_from(["slice", "T", "reshape", "row"]), st.integers(0, 99)),
    st.tuples(st.just("write"), st.sampled_from(["iadd", "setslice", "setrow"]), st.integers(0, 99)),
    st.tuples(st.just("reduce"), st.sampled_from([0, 1]), st.integers(0, 99)),
    st.tuples(st.just("matmul"), st.just(""), st.integers(0, 99)),
    st.tuples(st.just("eval"), st.sampled_from(["one", "all", "drop"]), st.integers(0, 99)),
)


def _apply(op: tuple, pool: list, xp: object) -> None:
    """Run one program step on a pool of (array of module xp) in place."""
    kind, what, k = op
    full = [i for i, a in enumerate(pool) if a.shape == SHAPE]
    a = pool[k % len(pool)]
    if kind == "unary":
        f = getattr(xp, what)
        pool.append(f(a) if what != "exp" else xp.exp(xp.tanh(a)))
    elif kind == "binary" and full:
        b = pool[full[k % len(full)]]
        pool.append(getattr(xp, what)(b, pool[full[(k // 7) % len(full)]]))
    elif kind == "view" and full:
        b = pool[full[k % len(full)]]
        pool.append({"slice": b[1:, ::2], "T": b.T, "reshape": b.reshape(4, 12), "row": b[k % 6]}[what])
    elif kind == "write" and full:
        b = pool[full[k % len(full)]]
        c = pool[full[(k // 3) % len(full)]]
        if what == "iadd":
            b += c
        elif what == "setslice":
            b[1:4, ::3] = c[:3, :3] * 2
        else:
            b[k % 6] = 0.5
    elif kind == "reduce":
        pool.append(a.sum(axis=what % max(a.ndim, 1)) if a.ndim else a + 1)
    elif kind == "matmul" and full:
        b = pool[full[k % len(full)]]
        pool.append(b @ b.T)


def _run_program(ops: list[tuple], seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The program on lazygraph (evaluating where it says) and on NumPy: final values of both."""
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(SHAPE) for _ in range(2)]
    lazy = [lg.asarray(x.copy()) for x in init]
    eager = [x.copy() for x in init]
    for op in ops:
        if op[0] == "eval":
            k = op[2]
            if op[1] == "one":
                lg.eval(lazy[k % len(lazy)])
            elif op[1] == "all":
                lg.eval(*lazy)
            else:  # the user lets go of an array: its value need not be kept
                i = k % len(lazy)
                if len(lazy) > 2:
                    del lazy[i], eager[i]
            continue
        _apply(op, lazy, lg)
        _apply(op, eager, np)
        if len(lazy) > 12:
            del lazy[1], eager[1]
    return [np.array(v) for v in lg.eval(*lazy)], eager


def _check_program(ops: list[tuple], seed: int) -> list[np.ndarray]:
    """Run a program metered: values as NumPy's, every evaluation's measured peak == predicted."""
    stats = ENGINE.stats
    before = (stats.metered, stats.peak_mismatches)
    got, want = _run_program(ops, seed)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    assert stats.peak_mismatches == before[1], (
        "a metered evaluation's measured peak differs from the prediction"
    )
    return got


def _jit_mode(monkeypatch: pytest.MonkeyPatch, jit: str) -> None:
    """JIT off ("0"), regions op by op on NumPy at these sizes ("1"), or compiled at every size."""
    monkeypatch.setenv("LAZYGRAPH_JIT", "0" if jit == "0" else "1")
    monkeypatch.setenv("LAZYGRAPH_JIT_MIN_SIZE", "0" if jit == "compiled" else "65536")


@pytest.mark.parametrize("jit", ["0", "1", "compiled"])
@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, min_size=1, max_size=14), seed=st.integers(0, 3))
def test_measured_peak_equals_prediction(metered: dict, monkeypatch: pytest.MonkeyPatch, jit: str, ops, seed):
    """Random programs with views, writes, held and dropped arrays: prediction == measurement."""
    _jit_mode(monkeypatch, jit)
    _check_program(ops, seed)
    _check_program(ops, seed)  # again: cache hits, now with the learnt buffer layouts


@pytest.mark.slow
@pytest.mark.parametrize("jit", ["0", "1", "compiled"])
@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, min_size=5, max_size=40), seed=st.integers(0, 3))
def test_measured_peak_equals_prediction_long(
    metered: dict, monkeypatch: pytest.MonkeyPatch, jit: str, ops, seed
):
    """The same property on longer programs (the long fuzzing run)."""
    _jit_mode(monkeypatch, jit)
    _check_program(ops, seed)
    _check_program(ops, seed)


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, min_size=1, max_size=14), seed=st.integers(0, 3))
def test_planner_off_same_values(metered: dict, monkeypatch: pytest.MonkeyPatch, ops, seed):
    """LAZYGRAPH_SCHEDULE=0 (recorded order, no reuse) computes bit-identical values."""
    monkeypatch.setenv("LAZYGRAPH_JIT", "0")
    monkeypatch.setenv("LAZYGRAPH_SCHEDULE", "1")  # the examples share the environment
    on = [_check_program(ops, seed) for _ in range(2)][-1]
    monkeypatch.setenv("LAZYGRAPH_SCHEDULE", "0")
    off = _check_program(ops, seed)
    for a, b in zip(on, off):
        np.testing.assert_array_equal(a, b)


def _two_branches(n: int = 64) -> lg.Array:
    """A big value times a scalar made from three big temporaries: computing the operands in the
    recorded order (depth-first, first operand first) holds four big arrays at once, three suffice."""
    x = lg.asarray(np.arange(n * n, dtype=np.float64).reshape(n, n) / (n * n))
    return lg.exp(x) * ((x * 2.0) * (x * 3.0)).sum()


class Counter:
    """Counts calls of the wrapped order search."""

    def __init__(self, fn) -> None:
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


def test_order_chosen_once_and_reused(metered: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """The search runs on the miss; hits run the cached order without searching."""
    monkeypatch.setenv("LAZYGRAPH_JIT", "0")
    search = Counter(memory.best_order)
    monkeypatch.setattr(memory, "best_order", search)
    ENGINE.memory.clear()
    first = np.array(_two_branches().numpy())
    assert search.calls == 1
    for _ in range(3):
        np.testing.assert_array_equal(_two_branches().numpy(), first)
    assert search.calls == 1
    entry = next(
        e for e in ENGINE.memory.entries() if e.hits >= 3 and "schedule" in e.variants[0].tgraph.artifacts
    )
    info = entry.variants[0].tgraph.artifacts["schedule"]
    assert info["peak"] < info["recorded_peak"]  # the planner beat the recorded order here
    assert entry.variants[0].program.memory[0] == entry.variants[0].program.memory[1]


def test_order_survives_disk_cache(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """The chosen order is stored with the entry and replayed from disk without a search."""
    monkeypatch.setenv("LAZYGRAPH_JIT", "0")
    monkeypatch.setenv("LAZYGRAPH_CACHE", "1")
    monkeypatch.setenv("LAZYGRAPH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LAZYGRAPH_MEASURE", "1")
    search = Counter(memory.best_order)
    monkeypatch.setattr(memory, "best_order", search)
    ENGINE.memory.clear()
    value = np.array(_two_branches(48).numpy())
    chosen = [e for e in ENGINE.memory.entries() if "schedule" in e.variants[0].tgraph.artifacts]
    orders = {e.digest: list(e.variants[0].tgraph.order) for e in chosen}
    assert search.calls == 1 and orders
    ENGINE.memory.clear()
    disk_hits = ENGINE.stats.disk_hits
    np.testing.assert_array_equal(_two_branches(48).numpy(), value)
    assert ENGINE.stats.disk_hits == disk_hits + 1
    assert search.calls == 1
    for e in ENGINE.memory.entries():
        if e.digest in orders:
            assert list(e.variants[0].tgraph.order) == orders[e.digest]
            assert [s.outs[0] for s in e.variants[0].program.steps] == orders[e.digest]


def test_buffers_reused_and_in_place(metered: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """A chain of elementwise ops writes into freed buffers; a dying base takes a write in place."""
    monkeypatch.setenv("LAZYGRAPH_JIT", "0")
    x0 = np.linspace(0, 1, 4096).reshape(64, 64)
    stats = ENGINE.stats
    for _ in range(2):
        x = lg.asarray(x0)
        y = ((x * 2.0 + 1.0) * 3.0 - x) * 0.5
        y[1:5] = 7.0
        z = (y * y).sum()
        before = (stats.buffers_reused, stats.inplace_writes)
        np.testing.assert_allclose(float(z.numpy()), _numpy_twin(x0))
    assert stats.buffers_reused > before[0]
    assert stats.inplace_writes > before[1]


def _layers(xp, x, w, bias):  # noqa: ANN001, ANN202
    """Fused elementwise regions between GEMMs (one with a bias and ReLU: a library step)."""
    a = xp.exp(x * 0.5) * 2.0 + 1.0  # a region
    m = a @ w  # a plain matmul; a dies here
    c = (m - 1.0) * m * 0.5  # a region: a's buffer is free
    d = xp.maximum(c @ w + bias, 0.0)  # matmul + bias + ReLU (library); m's buffer is free
    e = xp.tanh(d) * 3.0 - d  # a region
    return (e @ w).sum(axis=0)


@pytest.mark.parametrize("jit", ["1", "compiled"])
def test_jit_regions_and_gemms_take_freed_buffers(metered: dict, monkeypatch: pytest.MonkeyPatch, jit: str):
    """Region kernels (compiled or op by op), library GEMMs and matmuls write into freed buffers."""
    _jit_mode(monkeypatch, jit)
    rng = np.random.default_rng(1)
    x0, w0 = rng.standard_normal((64, 64)) * 0.1, rng.standard_normal((64, 64)) * 0.1
    b0 = rng.standard_normal(64) * 0.1
    want = _layers(np, x0, w0, b0)
    stats = ENGINE.stats
    before = (stats.buffers_reused, stats.peak_mismatches)
    for _ in range(3):  # a miss learns the layout, the hits follow it
        x, w, b = lg.asarray(x0), lg.asarray(w0), lg.asarray(b0)
        np.testing.assert_allclose(_layers(lg, x, w, b).numpy(), want, rtol=1e-10, atol=1e-12)
    assert stats.peak_mismatches == before[1]
    assert stats.buffers_reused > before[0]
    assert {"jit_region", "library", "matmul"} <= set(metered), metered
    monkeypatch.setenv("LAZYGRAPH_MEASURE", "0")  # the hot path (no metering) follows the layout too
    x, w, b = lg.asarray(x0), lg.asarray(w0), lg.asarray(b0)
    np.testing.assert_allclose(_layers(lg, x, w, b).numpy(), want, rtol=1e-10, atol=1e-12)


def _numpy_twin(x0: np.ndarray) -> float:
    y = ((x0 * 2.0 + 1.0) * 3.0 - x0) * 0.5
    y[1:5] = 7.0
    return float((y * y).sum())


def test_debug_and_explain_show_peaks(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """LAZYGRAPH_DEBUG=1 logs both peaks; lg.explain shows the memory plan and the last run."""
    monkeypatch.setenv("LAZYGRAPH_JIT", "0")
    monkeypatch.setenv("LAZYGRAPH_CACHE", "memory")
    monkeypatch.setenv("LAZYGRAPH_DEBUG", "1")
    r = _two_branches(40)
    r.numpy()
    err = capsys.readouterr().err
    assert "predicted /" in err and "measured" in err
    monkeypatch.setenv("LAZYGRAPH_DEBUG", "0")
    r2 = _two_branches(40)
    buf = io.StringIO()
    lg.explain(r2, file=buf)
    text = buf.getvalue()
    assert "memory plan = order by" in text and "last metered run = peak" in text


def test_multi_output_region_writes_its_first_value_into_a_planned_buffer(metered):
    rng = np.random.default_rng(3)
    xn = rng.standard_normal((300, 300)).astype(np.float32)  # above the JIT's minimum size
    wn = rng.standard_normal((300, 300)).astype(np.float32) / 20
    want = np.sin((xn @ wn) @ wn) * 2.0
    for _ in range(3):  # a metered run, then runs with the learnt layout
        x, w = lg.asarray(xn), lg.asarray(wn)
        t2 = (x @ w) @ w  # x @ w dies here: its buffer is free for the region's first value
        y1 = lg.sin(t2) * 2.0
        y2 = y1 + 1.0  # two outputs of one fused region
        lg.eval(y1, y2)
        np.testing.assert_allclose(y1.numpy(), want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(y2.numpy(), want + 1.0, rtol=1e-5, atol=1e-6)
    assert metered.get("jit_region", 0) >= 1, metered


def test_meter_releases_a_buffer_whose_id_came_back():
    """An entry whose buffer died without a drop (its slot written over) is not taken for a new
    buffer at the same address: the new one is counted, the dead one released."""

    class _Program:
        size, n_values, leaves = 2, 2, []

    m = Meter()
    m.start(_Program(), [])
    dead = np.empty(10)
    stale_ref = weakref.ref(dead)
    del dead
    assert stale_ref() is None
    fresh = np.empty(4)
    # the state a reused address leaves: the dead buffer's entry under the new buffer's id
    m.owners[id(fresh)] = [1, 80, stale_ref]
    m.held = 80
    m.value(0, fresh, (), 0, fresh.shape, fresh.dtype)
    assert m.held == fresh.nbytes  # 80 stale bytes released, 32 new counted
    assert m.owners[id(fresh)][0] == 1 and m.aliases[0] == -1
    m.drop(0)
    assert m.held == 0 and not m.owners
