"""The numeric contract (docs/reliability.md): fused kernels give NumPy's bits, or a stated tolerance.

- Elementwise arithmetic (+, -, *, /, maximum, where, comparisons) is bit-identical to NumPy for
  any array length (both sides of LAZYGRAPH_JIT_MIN_SIZE) and any thread count.
- Float sums (sum, mean, var, std) and products follow NumPy's order (pairwise along a
  unit-stride innermost axis, in order otherwise): bit-identical, for 1 and 2 threads.
- max/min: equal to NumPy's (NaN propagates); only the sign of a zero result may differ when
  both +0 and -0 are reduced.
- Transcendentals use the system libm's vector functions (libmvec; float32 exp: jit/expf_c.py)
  for every element of a blocked loop: within the per-operation ULP bounds of `ULP` below, and a value does not depend
  on its position, the array's length or the thread count (the kernels' machine code is checked
  for scalar calls left in vector loops); softmax, log_softmax and logsumexp inherit exp/log's
  bounds through the relative tolerances of `COMPOSITE_RTOL`.
- Compiler flags: -ffp-contract=off and no fast-math flag; NVRTC gets --fmad=false; both flip
  only with LAZYGRAPH_FAST_MATH=1.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lazygraph as lg
from jit import compile_c, nvrtc
from jit.runner import run_graph
from lazygraph.engine.evaluate import schedule

pytestmark = [
    pytest.mark.skipif(not compile_c.available(), reason="needs a C compiler"),
    pytest.mark.host_backend,
]

#: largest ULP distance from the NumPy path measured on 1M inputs per dtype (all bit patterns,
#: [-10, 10], [-1, 1], N(0, 100)) with glibc's libmvec (512-bit variants) on x86-64 with AVX-512,
#: NumPy 2.4 and glibc 2.36, plus 2 of margin
ULP = {
    "float32": {
        "exp": 6, "expm1": 4, "log": 8, "log1p": 3, "log2": 2, "log10": 2, "sqrt": 0, "sin": 4,
        "cos": 4, "tan": 5, "arcsin": 2, "arccos": 2, "arctan": 2, "sinh": 4, "cosh": 4, "tanh": 2,
        "sigmoid": 7, "erf": 6, "reciprocal": 0,
    },
    "float64": {
        "exp": 5, "expm1": 4, "log": 3, "log1p": 4, "log2": 4, "log10": 4, "sqrt": 0, "sin": 5,
        "cos": 5, "tan": 5, "arcsin": 5, "arccos": 4, "arctan": 5, "sinh": 4, "cosh": 4, "tanh": 2,
        "sigmoid": 6, "erf": 4, "reciprocal": 0,
    },
}  # fmt: skip

#: relative tolerance of softmax / log_softmax / logsumexp against NumPy where NumPy's result is
#: a normal number (exp and log differ; log_softmax loses digits to cancellation in x - max - lse)
COMPOSITE_RTOL = {
    "softmax": {"float32": 1e-6, "float64": 2e-15},
    "log_softmax": {"float32": 1e-5, "float64": 4e-14},
    "logsumexp": {"float32": 4e-7, "float64": 1e-15},
}


# -- helpers ---------------------------------------------------------------------------------
def jit_eval(fn, *arrays: np.ndarray) -> np.ndarray:  # noqa: ANN001
    """`fn(lg, ...)` with every fusable chain compiled, whatever the sizes."""
    lazy = fn(lg, *(lg.asarray(a) for a in arrays))
    roots = [lazy.node]
    return np.asarray(run_graph(schedule(roots), roots)[0])


def numpy_path(fn) -> np.ndarray:  # noqa: ANN001
    """The value of `fn()` evaluated with LAZYGRAPH_JIT=0: the NumPy path, what eager NumPy computes."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAZYGRAPH_JIT", "0")
        return fn().numpy()


def numpy_eval(fn, *arrays: np.ndarray) -> np.ndarray:  # noqa: ANN001
    """`fn(np, ...)` with floating-point warnings silenced."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return np.asarray(fn(np, *arrays))


def assert_same_bits(got: np.ndarray, want: np.ndarray, zero_sign: bool = True) -> None:
    """Equal dtype, shape and bits; NaN where NumPy has NaN (a NaN's payload is not compared)."""
    got, want = np.atleast_1d(got), np.atleast_1d(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), "NaN positions differ"
    g, w = got[~nan], want[~nan]
    if zero_sign:
        bad = np.flatnonzero(g.view(f"u{g.itemsize}") != w.view(f"u{w.itemsize}"))
    else:
        bad = np.flatnonzero(g != w)
    assert bad.size == 0, f"{bad.size} of {g.size} differ, first {g[bad[:3]]} vs {w[bad[:3]]}"


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ULPs between a and b (0 where both are NaN, inf where only one is)."""
    it = np.dtype(f"i{a.itemsize}")
    m = (1 << (8 * a.itemsize - 1)) - 1

    def key(v: np.ndarray) -> np.ndarray:
        i = v.view(it).astype(np.int64)
        return np.where(i < 0, -(i & m), i)

    ka, kb = key(a), key(b)
    same = (ka >= 0) == (kb >= 0)
    d = np.where(
        same, np.abs(np.where(same, ka - kb, 0)).astype(np.float64), np.abs(ka / 1.0) + np.abs(kb / 1.0)
    )
    na, nb = np.isnan(a), np.isnan(b)
    d[na & nb] = 0
    d[na != nb] = np.inf
    return d


def special_array(seed: int, n: int, dtype: str, special: float) -> np.ndarray:
    """Normal values with a fraction `special` of NaN, inf, -0, denormals, huge and tiny values."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 1e3], n)).astype(dtype)
    fi = np.finfo(dtype)
    pool = np.array(
        [np.nan, np.inf, -np.inf, 0.0, -0.0, fi.tiny / 4, -fi.tiny / 8, fi.max / 2, fi.eps], dtype
    )
    mask = rng.random(n) < special
    x[mask] = rng.choice(pool, int(mask.sum()))
    return x


# -- compiler flags ----------------------------------------------------------------------------
def test_default_flags_keep_numpy_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAZYGRAPH_FAST_MATH", raising=False)
    flags = compile_c.flags()
    assert "-ffp-contract=off" in flags
    assert not set(flags) & set(compile_c.VALUE_CHANGING), flags
    assert "--fmad=false" in nvrtc.options() and "--fmad=true" not in nvrtc.options()


def test_fast_math_is_an_opt_in_with_its_own_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    exact = compile_c.flags()
    monkeypatch.setenv("LAZYGRAPH_FAST_MATH", "1")
    assert "-ffp-contract=fast" in compile_c.flags() and compile_c.flags() != exact
    assert "--fmad=true" in nvrtc.options()
    monkeypatch.setenv("LAZYGRAPH_FAST_MATH", "maybe")
    with pytest.raises(ValueError, match="LAZYGRAPH_FAST_MATH='maybe'.*expected 0 or 1"):
        compile_c.flags()


def test_fast_math_kernels_are_separate_and_switch_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's x * y + z: NumPy's bits by default; fast math may contract; default again after."""
    monkeypatch.setenv("LAZYGRAPH_JIT_MIN_SIZE", "0")
    rng = np.random.default_rng(3)
    x, y, z = (rng.standard_normal(4099).astype(np.float32) for _ in range(3))

    def f(F, a, b, c):  # noqa: ANN001, ANN202
        return a * b + c

    assert_same_bits(jit_eval(f, x, y, z), x * y + z)
    monkeypatch.setenv("LAZYGRAPH_FAST_MATH", "1")
    fast = jit_eval(f, x, y, z)
    np.testing.assert_allclose(fast, x * y + z, rtol=1e-4, atol=1e-5)
    monkeypatch.delenv("LAZYGRAPH_FAST_MATH")
    assert_same_bits(jit_eval(f, x, y, z), x * y + z)


# -- elementwise: the issue's reproduction and random expression trees --------------------------
@pytest.mark.parametrize("n", [1_000, 70_000, 300_000])
def test_issue_fma_reproduction(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAZYGRAPH_JIT_MIN_SIZE", raising=False)  # the default threshold
    rng = np.random.default_rng(0)
    x, y, z = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    got = (lg.asarray(x) * lg.asarray(y) + lg.asarray(z)).numpy()
    assert_same_bits(got, x * y + z)


BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]


@st.composite
def trees(draw: st.DrawFn, depth: int = 3) -> tuple:
    """A random expression over inputs 0..2 and Python float constants."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        if draw(st.integers(0, 4)) == 0:
            return ("const", draw(st.sampled_from([0.5, -2.0, 0.1, 3.0, 1e-3])))
        return ("in", draw(st.integers(0, 2)))
    kind = draw(st.sampled_from(BINARY + ["where", "neg", "abs", "clip"]))
    if kind in ("neg", "abs", "clip"):
        return (kind, draw(trees(depth - 1)))
    if kind == "where":
        return (kind, draw(trees(depth - 1)), draw(trees(depth - 1)), draw(trees(depth - 1)))
    return (kind, draw(trees(depth - 1)), draw(trees(depth - 1)))


def build(F, t: tuple, ins: list):  # noqa: ANN001, ANN201
    """Evaluate tree `t` with namespace F (numpy or lazygraph)."""
    kind = t[0]
    if kind == "const":
        return t[1]
    if kind == "in":
        return ins[t[1]]
    if kind == "neg":
        return -build(F, t[1], ins)
    if kind == "abs":
        return F.abs(build(F, t[1], ins))
    if kind == "clip":
        return F.clip(build(F, t[1], ins), -0.0, 0.5)
    if kind == "where":
        return F.where(build(F, t[1], ins) > build(F, t[2], ins), build(F, t[2], ins), build(F, t[3], ins))
    return getattr(F, t[0])(build(F, t[1], ins), build(F, t[2], ins))


@settings(max_examples=25)
@given(
    tree=trees(),
    dtype=st.sampled_from(["float32", "float64"]),
    n=st.sampled_from([1, 7, 200, 255, 256, 257, 1500]),
    seed=st.integers(0, 2**16),
    special=st.sampled_from([0.0, 0.1]),
)
def test_expression_trees_match_numpy_bits_on_both_sides_of_the_threshold(
    tree: tuple, dtype: str, n: int, seed: int, special: float
) -> None:
    ins = [special_array(seed + i, n, dtype, special) for i in range(3)]
    want = numpy_eval(lambda F, *a: F.asarray(build(F, tree, list(a))), *ins)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAZYGRAPH_JIT_MIN_SIZE", "256")  # n below runs on NumPy, n at or above compiles
        lazy = build(lg, tree, [lg.asarray(a) for a in ins])
        got = lazy.numpy() if isinstance(lazy, lg.Array) else np.asarray(lazy)
    assert_same_bits(np.asarray(got, dtype=want.dtype) if want.ndim == 0 else got, want)


# -- reductions ----------------------------------------------------------------------------------
REDUCTIONS = {
    "sum": lambda F, a, ax: F.sum(a * 1.5, axis=ax),
    "mean": lambda F, a, ax: F.mean(a - 0.25, axis=ax),
    "var": lambda F, a, ax: F.var(a * 2, axis=ax),
    "std": lambda F, a, ax: F.std(a + 1, axis=ax, ddof=1),
    "prod": lambda F, a, ax: F.prod(a * 0.01 + 1, axis=ax),
    "sumsq": lambda F, a, ax: F.sum(a * a, axis=ax),
    "max": lambda F, a, ax: F.max(a * 2, axis=ax),
    "min": lambda F, a, ax: F.min(-a, axis=ax),
}


@settings(max_examples=30)
@given(
    op=st.sampled_from(sorted(REDUCTIONS)),
    dtype=st.sampled_from(["float32", "float64"]),
    shape=st.sampled_from([(5, 3), (9, 130), (3, 1031), (40, 33), (2, 7, 129)]),
    axis=st.sampled_from([None, 0, -1]),
    seed=st.integers(0, 2**16),
    special=st.sampled_from([0.0, 0.0, 0.02]),
)
def test_reductions_match_numpy_bits(
    op: str, dtype: str, shape: tuple, axis, seed: int, special: float
) -> None:  # noqa: ANN001
    x = special_array(seed, int(np.prod(shape)), dtype, special).reshape(shape)
    fn = REDUCTIONS[op]
    got = jit_eval(lambda F, a: fn(F, a, axis), x)
    want = numpy_eval(lambda F, a: fn(F, a, axis), x)
    assert_same_bits(got, want, zero_sign=op not in ("max", "min"))


@pytest.mark.parametrize("n", [1, 8, 127, 128, 129, 1000, 65_535, 65_536, 300_007, 2_000_003])
def test_whole_array_sums_are_numpy_pairwise(n: int) -> None:
    """Lengths around NumPy's block sizes, and long ones that threads split into subtrees."""
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    assert_same_bits(jit_eval(lambda F, a: F.sum(a * 3), x), np.sum(x * 3))
    assert_same_bits(jit_eval(lambda F, a: F.mean(a + 1), x), np.mean(x + 1))


def test_sum_of_negative_zeros_and_empty_rows() -> None:
    z = np.full((4, 300), -0.0)
    assert_same_bits(jit_eval(lambda F, a: F.sum(a * 1, axis=1), z), np.sum(z, axis=1))
    e = np.zeros((3, 0), np.float32)
    assert_same_bits(jit_eval(lambda F, a: F.sum(a * 2, axis=1), e), np.sum(e * 2, axis=1))


_THREADS_SCRIPT = r"""
import hashlib, numpy as np, lazygraph as lg
from jit.runner import run_graph
from lazygraph.engine.evaluate import schedule
rng = np.random.default_rng(7)
x = rng.standard_normal((64, 3001)).astype(np.float32)
v = rng.standard_normal(400_003)
rows = [
    lambda a: lg.sum(a * 2, axis=1), lambda a: lg.sum(a * 2, axis=0), lambda a: lg.mean(a, axis=1),
    lambda a: lg.var(a, axis=0), lambda a: lg.prod(a * 1e-3 + 1, axis=1), lambda a: lg.max(a, axis=1),
    lambda a: lg.softmax(a, axis=1), lambda a: lg.log_softmax(a, axis=1), lambda a: lg.logsumexp(a, axis=1),
]
whole = [lambda a: lg.sum(a * 2), lambda a: lg.mean(a - 1), lambda a: lg.std(a), lambda a: lg.prod(a * 1e-6 + 1)]
h = hashlib.sha256()
for arr, progs in ((x, rows + whole), (v, whole)):
    for p in progs:
        roots = [p(lg.asarray(arr)).node]
        h.update(np.ascontiguousarray(run_graph(schedule(roots), roots)[0]).tobytes())
print(h.hexdigest())
"""


def run_with_threads(script: str, threads: str, cache: Path) -> str:
    """The stdout of `script` run in a fresh process with OMP_NUM_THREADS=threads (default math)."""
    env = dict(os.environ, OMP_NUM_THREADS=threads, LAZYGRAPH_CACHE_DIR=str(cache))
    env.pop("LAZYGRAPH_FAST_MATH", None)
    env.pop("LAZYGRAPH_JIT_MIN_SIZE", None)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300, cwd=root
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_reductions_do_not_depend_on_the_thread_count(tmp_path) -> None:  # noqa: ANN001
    """Sums, means, variances, products, softmax: the same bytes with 1 and 2 OpenMP threads."""
    digests = [run_with_threads(_THREADS_SCRIPT, threads, tmp_path) for threads in ("1", "2")]
    assert digests[0] == digests[1]


# -- transcendentals and composites -------------------------------------------------------------
@settings(max_examples=20)
@given(
    op=st.sampled_from(sorted(ULP["float32"])),
    dtype=st.sampled_from(["float32", "float64"]),
    seed=st.integers(0, 2**16),
    scale=st.sampled_from([1e-6, 1.0, 10.0, 100.0, 1e30]),
)
def test_transcendentals_within_stated_ulps(op: str, dtype: str, seed: int, scale: float) -> None:
    with np.errstate(over="ignore"):
        x = (special_array(seed, 3000, dtype, 0.05).astype(np.float64) * scale).astype(dtype)
    f = getattr(lg, op)
    got = jit_eval(lambda F, a: f(a), x)
    want = numpy_path(lambda: f(lg.asarray(x)))
    d = ulp_distance(got, want)
    assert d.max() <= ULP[dtype][op], (op, dtype, d.max(), x[np.argmax(d)])
    # a value does not depend on its position (vector body or loop tail, alignment)
    shifted = jit_eval(lambda F, a: f(a), x[1:])
    assert_same_bits(shifted, got[1:])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
def test_composites_within_tolerance(op: str, dtype: str) -> None:
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((50, 777)) * 5).astype(dtype)
    x[3, 5] = np.inf
    x[4, :] = -np.inf
    x[6, 7] = np.nan
    f = getattr(lg, op)
    got = jit_eval(lambda F, a: f(a, axis=1), x)
    want = numpy_path(lambda: f(lg.asarray(x), axis=1))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    normal = np.abs(want) >= np.finfo(dtype).tiny
    np.testing.assert_allclose(got[normal], want[normal], rtol=COMPOSITE_RTOL[op][dtype], atol=0)
    np.testing.assert_allclose(got[~normal], want[~normal], rtol=0, atol=np.finfo(dtype).tiny)


# -- vector math: every element through the same function -----------------------------------------
_POSITION_SCRIPT = r"""
import hashlib, os, warnings, numpy as np, lazygraph as lg
from tests.reliability.test_numeric import jit_eval, special_array
warnings.simplefilter("ignore")
np.seterr(all="ignore")
from jit import launch
from ops.settings import SETTINGS
launch.prepare()  # the launcher decides the threshold in force (ctypes: at least CTYPES_MIN_SIZE)
threshold = SETTINGS.jit_min_size if launch.FAST else max(SETTINGS.jit_min_size, launch.CTYPES_MIN_SIZE)
h = hashlib.sha256()
bad = []
for dtype in ("float32", "float64"):
    x = special_array(5, 70_001, dtype, 0.02) * 3
    for op in ("tanh", "exp", "arccos", "sigmoid", "erf", "log1p", "sin"):
        f = getattr(lg, op)
        full = jit_eval(lambda F, a: f(a * 0.5), x)
        h.update(full.tobytes())
        for n in (1, 63, 64, 65, 200, 4097, 65_535, 65_536, 65_537):  # JIT threshold 65536
            if jit_eval(lambda F, a: f(a * 0.5), x[:n]).tobytes() != full[:n].tobytes():
                bad.append((op, dtype, "length", n))
            # the default threshold: NumPy below it (NumPy's bits), the kernel from it on
            f(lg.asarray(x[:n]) * 0.5).numpy()  # a first call may run on NumPy while its kernel compiles
            lg.jit_wait()
            got = f(lg.asarray(x[:n]) * 0.5).numpy()
            with lg.settings.override(jit=False):
                want = full[:n] if n >= threshold else f(lg.asarray(x[:n]) * 0.5).numpy()
            if got.tobytes() != want.tobytes():
                bad.append((op, dtype, "threshold", n))
        if jit_eval(lambda F, a: f(a * 0.5), x[1:]).tobytes() != full[1:].tobytes():
            bad.append((op, dtype, "shift"))
    rows = x[: 70_000].reshape(70, 1000)
    for p in (lambda a: lg.softmax(a, axis=1), lambda a: lg.logsumexp(a, axis=1), lambda a: lg.sum(lg.exp(a))):
        h.update(jit_eval(lambda F, a: p(a), rows).tobytes())
print(bad)
print(h.hexdigest())
"""


def test_vector_math_does_not_depend_on_position_length_or_threads(tmp_path) -> None:  # noqa: ANN001
    """Shifted by one, cut to lengths around a block and the JIT threshold, 1 and 2 threads."""
    outs = []
    for threads in ("1", "2"):
        bad, digest = run_with_threads(_POSITION_SCRIPT, threads, tmp_path).splitlines()
        assert bad == "[]", bad
        outs.append(digest)
    assert outs[0] == outs[1]


def _math_calls(fn, x: np.ndarray) -> list[tuple[list[str], set[str]]]:  # noqa: ANN001
    """(op names, libm functions called) of each kernel built for fn(x), read from its machine code."""
    import tempfile

    from jit import kernel

    saved = kernel._kernels
    kernel._kernels = {}  # this program's kernels only (built afresh, not shared with other tests)
    try:
        jit_eval(fn, x)
        built = kernel._kernels
    finally:
        kernel._kernels = saved
    found = []
    for sig in built:
        for variant in built[sig].variants.values():
            tc = compile_c.toolchain()
            data = compile_c.build_shared(tc["cc"], compile_c.flags(), variant.source, tc["libs"])
            with tempfile.NamedTemporaryFile(suffix=".so") as f:
                f.write(data)
                f.flush()
                asm = subprocess.run(["objdump", "-d", f.name], capture_output=True, text=True).stdout
            calls = set(re.findall(r"(?:call|jmp)\s+\S+\s+<([^>@]+)@plt>", asm))
            found.append((built[sig].names, calls))
    return found


@pytest.mark.skipif(not (compile_c.toolchain() or {}).get("mvec"), reason="no libmvec here")
def test_kernels_call_only_vector_math_in_vector_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    """No scalar tanhf/expf left beside the vector calls, and one vector variant per function.

    float32 exp is inline C (jit/expf_c.py): neither libm's `expf` nor libmvec's is called.
    """
    import shutil

    if not shutil.which("objdump"):
        pytest.skip("objdump (binutils) is not installed")
    monkeypatch.delenv("LAZYGRAPH_FAST_MATH", raising=False)
    rng = np.random.default_rng(1)
    x32 = rng.standard_normal((40, 301)).astype(np.float32)
    cases = [
        (lambda F, a: 0.5 * a * (1 + F.tanh(0.79 * (a + 0.044 * a * a * a))), x32, {"tanhf"}),
        (lambda F, a: F.softmax(a, axis=1), x32, {"-expf"}),
        (lambda F, a: F.logsumexp(a, axis=1), x32, {"-expf"}),
        (lambda F, a: F.sum(F.exp(a)), x32, {"-expf"}),
        (lambda F, a: F.sigmoid(a) * 2, x32, {"-expf"}),
        (lambda F, a: F.exp(a - F.logsumexp(a, axis=1, keepdims=True)), x32, {"-expf"}),
        (lambda F, a: F.exp(a) + F.tanh(a), x32, {"-expf", "tanhf"}),
        (lambda F, a: F.exp(a * 2.0), x32.astype(np.float64), {"exp"}),
        (lambda F, a: F.exp(a.astype(np.float64)) + F.log1p(F.abs(a)), x32, {"exp", "log1pf"}),
    ]
    variants: dict[str, set[str]] = {}
    for fn, x, vector in cases:
        kernels = _math_calls(fn, x)
        assert kernels, "no kernel was built"
        called = set().union(*(c for _, c in kernels))
        for f in vector:
            inline = f.startswith("-")  # computed in the kernel: no call of either kind
            f = f.lstrip("-")
            assert f not in called, (f, kernels)  # a scalar call beside the vector loop
            vec = {c for c in called if re.fullmatch(rf"_ZGV[a-z]N\d+v+_{f}", c)}
            if inline:
                assert not vec, (f, kernels)
                continue
            assert vec, (f, kernels)
            variants.setdefault(f, set()).update(vec)
    assert all(len(v) == 1 for v in variants.values()), variants


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_power_one_half_is_numpys_square_root(dtype):
    # NumPy computes x ** 0.5 as sqrt(x): -0.0 stays -0.0 and -inf gives nan (pow: +0, +inf)
    x = np.full(1 << 17, -np.inf, dtype)
    x[:4] = [-0.0, 4.0, 2.0, 0.0]
    with np.errstate(invalid="ignore"):
        want = (x * 2) ** 0.5
    got = ((lg.asarray(x) * 2) ** 0.5).numpy()  # above the JIT's minimum size: one fused kernel
    assert got.tobytes() == want.tobytes()
