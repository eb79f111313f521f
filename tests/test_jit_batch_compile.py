"""A program's kernels compile together: few compiler runs, in parallel, same values, same errors.

Observed through compile_c.RUNS (compiler processes started, kernels they built), never timing.
"""

from __future__ import annotations

import numpy as np
import pytest

import lazygraph as lg
from jit import background, c_program, compile_c, kernel, launch, store
from jit.backend import get as get_backend
from lazygraph.engine.state import ENGINE

pytestmark = [pytest.mark.skipif(not compile_c.available(), reason="no C compiler"), pytest.mark.host_backend]

# one elementwise chain per stage, each of another structure (so each is its own kernel);
# the matmuls between them are region boundaries
STAGES = [
    lambda x: lg.tanh(x) * 0.5 + x,
    lambda x: lg.exp(-x * x) - 0.25 * x,
    lambda x: lg.sin(x) * lg.cos(x) + 1.5,
    lambda x: lg.sqrt(x * x + 1.0) / (x + 3.0),
    lambda x: lg.maximum(x, 0.1) * 2.0 - lg.abs(x),
]
NP_STAGES = [
    lambda x: np.tanh(x) * np.float32(0.5) + x,
    lambda x: np.exp(-x * x) - np.float32(0.25) * x,
    lambda x: np.sin(x) * np.cos(x) + np.float32(1.5),
    lambda x: np.sqrt(x * x + np.float32(1.0)) / (x + np.float32(3.0)),
    lambda x: np.maximum(x, np.float32(0.1)) * np.float32(2.0) - np.abs(x),
]


@pytest.fixture
def cold(tmp_path, monkeypatch):
    """An empty kernel store and no kernel built in this process, jit on, compiled at any size."""
    monkeypatch.setenv("LAZYGRAPH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LAZYGRAPH_JIT", "1")
    monkeypatch.setenv("LAZYGRAPH_OPTIMIZE", "1")
    monkeypatch.setenv("LAZYGRAPH_JIT_MIN_SIZE", "1")
    monkeypatch.setattr(compile_c, "MAX_JOBS", 2)
    launch.prepare()  # the launcher extension is built once per process: not counted below
    _forget()
    yield
    _forget()


def _forget() -> None:
    lg.cache.clear(disk=False)
    ENGINE.regions.clear()
    with kernel._kernels_lock:
        kernel._kernels.clear()
    c_program.drop_loaded()
    background.forget_failures()


def _program(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    x, wl = lg.asarray(a), lg.asarray(w)
    for f in STAGES:
        x = f(x) @ wl
    return x.numpy()


def _numpy(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    x = a
    for f in NP_STAGES:
        x = f(x) @ w
    return x


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((16, 16)).astype(np.float32), (rng.standard_normal((16, 16)) / 8).astype(
        np.float32
    )


def _runs() -> dict:
    return dict(compile_c.RUNS)


def _delta(before: dict) -> dict:
    return {k: compile_c.RUNS[k] - before[k] for k in before}


def test_a_programs_kernels_compile_in_few_parallel_runs(cold) -> None:
    a, w = _inputs()
    before = _runs()
    got = _program(a, w)
    d = _delta(before)
    assert d["kernels"] == len(STAGES)  # every stage's kernel, each compiled once
    assert d["invocations"] == 2  # one translation unit per job (MAX_JOBS = 2)
    assert d["batches"] == 2 and d["batch_failures"] == 0
    np.testing.assert_allclose(got, _numpy(a, w), rtol=2e-5, atol=1e-6)
    # the same structure again: every kernel is there, no compiler runs
    before = _runs()
    lg.cache.clear(disk=False)
    np.testing.assert_array_equal(_program(a, w), got)
    assert _delta(before)["invocations"] == 0


def test_batched_values_equal_kernel_by_kernel_values(cold, monkeypatch) -> None:
    a, w = _inputs()
    batched = _program(a, w)
    _forget()
    store.clear()
    monkeypatch.setattr(compile_c, "MAX_BATCH", 1)
    monkeypatch.setattr(compile_c, "MAX_JOBS", 1)
    before = _runs()
    single = _program(a, w)
    d = _delta(before)
    assert d["invocations"] == len(STAGES) and d["batches"] == 0
    np.testing.assert_array_equal(batched, single)


def test_a_later_process_finds_each_batched_kernel_in_the_store(cold) -> None:
    a, w = _inputs()
    first = _program(a, w)
    _forget()  # what a new process has: the store only
    before = _runs()
    np.testing.assert_array_equal(_program(a, w), first)
    assert _delta(before)["invocations"] == 0
    # kernels of one batch share one library, loaded once
    libs = {getattr(v.program, "lib", None) for k in kernel._kernels.values() for v in k.variants.values()}
    assert 1 <= len(libs) <= 2


def test_a_record_with_a_foreign_entry_is_compiled_again(cold, monkeypatch) -> None:
    monkeypatch.setattr(compile_c, "MAX_JOBS", 1)  # both in one unit
    srcs = [_kernel_source("2.0"), _kernel_source("3.0")]
    bins = compile_c.compile_libraries(srcs)
    assert all(isinstance(b, compile_c.EntryBinary) for b in bins)
    data, info = store.read_info(bins[0].key, "so")
    store.put(bins[0].key, "so", data, {**info, "entry": "system"})
    before = _runs()
    again = compile_c.compile_library(srcs[0])
    assert _delta(before)["invocations"] == 1
    assert type(again) is compile_c.Binary  # compiled alone: the plain entry
    assert _call(again, 4.0) == 8.0


def _kernel_source(factor: str, broken: bool = False) -> str:
    """A tiny kernel with the fused kernels' prelude and ABI: out[0] = in[0] * factor."""
    body = "not C at all;" if broken else f"((double *)ptrs[1])[0] = ((double *)ptrs[0])[0] * {factor};"
    return (
        "#include <stdint.h>\n"
        + f"void lg_kernel(void **ptrs, const int64_t *dims, const double *fs, const int64_t *is) {{\n  {body}\n}}\n"
    )


def _call(binary, x: float) -> float:
    prog = get_backend("cpu").load(binary, "lg_kernel")
    a, out = np.array([x]), np.zeros(1)
    prog([a, out], [0])
    return float(out[0])


def test_a_failing_kernel_is_reported_alone_and_the_others_work(cold, monkeypatch) -> None:
    srcs = [_kernel_source("2.0"), _kernel_source("0", broken=True), _kernel_source("5.0")]
    monkeypatch.setattr(compile_c, "MAX_JOBS", 1)  # one unit holding all three
    before = _runs()
    res = compile_c.compile_libraries(srcs)
    d = _delta(before)
    assert d["batch_failures"] == 1
    assert d["invocations"] == 1 + len(srcs)  # the unit, then kernel by kernel
    assert isinstance(res[1], compile_c.CompileError)
    msg = str(res[1])
    assert "   3    not C at all;" in msg  # its own numbered source, its own line numbers
    assert "* 2.0" not in msg and "* 5.0" not in msg
    assert _call(res[0], 1.5) == 3.0 and _call(res[2], 1.5) == 7.5
    # the kernels that compiled are stored; the failing one is not
    assert store.read(res[0].key, "so") is not None
    tc = compile_c.toolchain()
    key = store.make_key(srcs[1], tc["id"], compile_c.flags() + tc["libs"], tc["arch"])
    assert store.read(key, "so") is None


def test_batch_source_keeps_each_kernels_line_numbers(cold) -> None:
    srcs = [_kernel_source("2.0"), _kernel_source("3.0")]
    unit = [(f"{i}" * 64, s) for i, s in enumerate(srcs)]
    text, entries = compile_c.batch_source(unit)
    assert entries == ["lg_k_" + "0" * 16, "lg_k_" + "1" * 16]
    assert text.count("#include <stdint.h>") == 1 and text.count("lg_kernel") == 0
    assert '#line 2 "kernel-1111111111111111.c"' in text


def test_a_kernel_compile_error_names_the_kernel(cold, monkeypatch) -> None:
    real = compile_c.build_shared

    def failing(compiler, fl, source, libs, *args, **kw):
        if "lg_kernel" in source or "lg_k_" in source:  # a fused kernel (or a batch of them)
            source += "\nnot C;\n"
        return real(compiler, fl, source, libs, *args, **kw)

    monkeypatch.setattr(compile_c, "build_shared", failing)
    a, _ = _inputs()
    with pytest.raises(Exception) as e:
        (lg.tanh(lg.asarray(a)) * 3.0 + 1.0).numpy()
    msg = str(e.value)
    assert "JIT kernel (3 ops: tanh, multiply, add)" in msg
    assert "--- kernel source ---" in msg


def test_tiered_mode_compiles_the_batch_in_the_background(cold, monkeypatch) -> None:
    monkeypatch.setenv("LAZYGRAPH_JIT_BACKGROUND", "1")
    monkeypatch.setenv("LAZYGRAPH_OPTIMIZE_BUDGET_MS", "0")  # fused now; kernels in the background
    a, w = _inputs()
    before = _runs()
    first = _program(a, w)  # runs op by op on NumPy while the batch compiles
    assert lg.jit_wait(timeout=120)
    d = _delta(before)
    # one unit: of the two cores, one is left to the evaluating thread
    assert d["kernels"] == len(STAGES) and d["invocations"] == 1
    np.testing.assert_allclose(first, _numpy(a, w), rtol=2e-5, atol=1e-6)
    lg.cache.clear(disk=False)
    before = _runs()
    np.testing.assert_allclose(_program(a, w), first, rtol=2e-5, atol=1e-6)
    assert lg.jit_wait(timeout=120)
    assert _delta(before)["invocations"] == 0


def test_debug_output_shows_each_kernel_once_and_the_batch(cold, monkeypatch, capsys) -> None:
    monkeypatch.setenv("LAZYGRAPH_DEBUG", "3")
    a, w = _inputs()
    _program(a, w)
    err = capsys.readouterr().err
    assert err.count("JIT kernel for cpu") == len(STAGES)  # rendered once each, before the run
    assert f"JIT prefetch: {len(STAGES)} of {len(STAGES)} kernel variants ready, 2 compiler runs" in err


@pytest.mark.parametrize("const", ["folded", "view"])
def test_regions_reading_a_constant_or_a_view_compile_in_the_batch(cold, monkeypatch, const) -> None:
    """A memo step's value (a folded constant) is planned as C-contiguous, a view of a
    C-contiguous value with the view's strides: the regions reading them are built with the
    program's other kernels, none at its launch."""
    at_launch = []
    build = kernel.FusedKernel._build
    monkeypatch.setattr(
        kernel.FusedKernel, "_build", lambda k, be, key: at_launch.append(k) or build(k, be, key)
    )
    a, w = _inputs()

    def prog(xp, a, w):  # noqa: ANN001, ANN202
        if const == "folded":
            ws = xp.asarray(w)
            if xp is lg:
                lg.mark_static(ws)  # model state: what only it reads is folded into a memo step
            c = xp.sin(ws) * xp.float32(0.5)
        else:
            c = xp.arange(256, dtype=xp.float32).reshape(16, 16)[:, ::-1] * xp.float32(0.01)
        y = (xp.tanh(xp.asarray(a)) + c) @ w
        return xp.exp(-y * y) * c - y

    before = _runs()
    got = prog(lg, a, w).numpy()
    d = _delta(before)
    assert at_launch == [] and d["kernels"] == 2, (len(at_launch), d)
    np.testing.assert_allclose(got, prog(np, a, w), rtol=2e-5, atol=1e-6)
