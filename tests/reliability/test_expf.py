"""The kernels' own float32 exp (jit/expf_c.py): within 1 ULP of the correctly rounded value.

The function is compiled as the kernels compile it and swept over float32 bit patterns, in a
scalar loop and in a `simd` loop (the two must agree bit for bit), against `exp` in double
rounded to float. The default sweep takes every 61st pattern (70 million inputs, all
exponents); the slow one takes all 2^32.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

from jit import compile_c, expf_c
from tests.reliability.test_numeric import jit_eval

pytestmark = [
    pytest.mark.skipif(not compile_c.available(), reason="needs a C compiler"),
    pytest.mark.host_backend,
]

_CHECK = r"""
#include <stdint.h>
#include <string.h>
#include <math.h>
static inline int64_t lg_key(float f) {
  int32_t i; memcpy(&i, &f, 4);
  return i < 0 ? -(int64_t)(i & 0x7fffffff) : (int64_t)i;
}
/* out: [0] largest ULP distance, [1] inputs where scalar and vector bits differ,
   [2] NaN results for non-NaN inputs or the reverse, [3] inputs checked */
void lg_check(int64_t start, int64_t stop, int64_t step, int64_t *out) {
  int64_t worst = 0, split = 0, nan = 0, count = 0;
  #pragma omp parallel for reduction(max:worst) reduction(+:split, nan, count)
  for (int64_t b = start; b < stop; b += 64 * step) {
    float xs[64], vs[64];
    for (int j = 0; j < 64; j++) {
      uint32_t u = (uint32_t)(b + j * step); memcpy(&xs[j], &u, 4);
    }
    #pragma omp simd
    for (int j = 0; j < 64; j++) vs[j] = lg_vexp_f32(xs[j]);
    for (int j = 0; j < 64 && b + j * step < stop; j++) {
      volatile float xin = xs[j];
      const float x = xin, s = lg_vexp_f32(x), v = vs[j];
      count++;
      if (memcmp(&s, &v, 4) != 0) split++;
      if (isnan(x) || isnan(s)) { nan += isnan(x) != isnan(s); continue; }
      int64_t d = lg_key(s) - lg_key((float)exp((double)x));
      d = d < 0 ? -d : d;
      worst = d > worst ? d : worst;
    }
  }
  out[0] = worst; out[1] = split; out[2] = nan; out[3] = count;
}
"""


@pytest.fixture(scope="module")
def check(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """lg_check(start, stop, step) -> (max ULP, scalar/vector splits, NaN mismatches, count)."""
    tc = compile_c.toolchain()
    data = compile_c.build_shared(
        tc["cc"], compile_c.flags(), "#include <stdint.h>\n" + expf_c.SOURCE + _CHECK, ["-lm"]
    )
    path = tmp_path_factory.mktemp("expf") / "check.so"
    path.write_bytes(data)
    lib = ctypes.CDLL(str(path))
    lib.lg_check.argtypes = [ctypes.c_int64] * 3 + [ctypes.POINTER(ctypes.c_int64)]

    def run(start: int, stop: int, step: int) -> tuple[int, ...]:
        out = (ctypes.c_int64 * 4)()
        lib.lg_check(start, stop, step, out)
        return tuple(out)

    return run


def test_every_61st_float32_within_one_ulp(check) -> None:  # noqa: ANN001
    worst, split, nan, count = check(0, 1 << 32, 61)
    assert count == -(-(1 << 32) // 61)
    assert worst <= 1 and split == 0 and nan == 0


@pytest.mark.slow
def test_every_float32_within_one_ulp(check) -> None:  # noqa: ANN001
    worst, split, nan, count = check(0, 1 << 32, 1)
    assert count == 1 << 32
    assert worst <= 1 and split == 0 and nan == 0


def test_edges_of_the_range(check) -> None:  # noqa: ANN001
    """Overflow, underflow, the subnormal results and the values around them, densely."""
    edges = [88.72283, 88.7228317, -87.33654, -103.97208, -103.27893, -0.0, 1e-30, 0.34657359, 0.34657362]
    for e in edges:
        bits = int(np.float32(e).view(np.uint32))
        worst, split, nan, count = check(max(bits - 4096, 0), min(bits + 4096, 1 << 32), 1)
        assert count == min(bits + 4096, 1 << 32) - max(bits - 4096, 0)
        assert worst <= 1 and split == 0 and nan == 0, e


def test_special_values_in_a_kernel() -> None:
    """inf, -inf, NaN, the overflow threshold and the smallest results, through a fused kernel."""
    big = np.float32(88.72283)
    vals = [
        0.0,
        -0.0,
        np.inf,
        -np.inf,
        np.nan,
        big,
        np.nextafter(big, np.float32(np.inf)),
        -103.9,
        -104.0,
        1.0,
        -1.0,
    ]
    x = np.resize(np.array(vals, np.float32), 4096)
    got = jit_eval(lambda F, a: F.exp(a * 1.0), x)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(x))
    finite = ~np.isnan(x)
    assert np.array_equal(got[finite] == np.inf, want[finite] == np.inf)
    assert got[x == 0].tolist() == [1.0] * int((x == 0).sum())
    assert (got[x == -np.inf] == 0).all() and (got[x == -104.0] == 0).all()
    tiny = got[x == np.float32(-103.9)][0]  # a subnormal result: within 1 of its ULPs (1.4e-45)
    assert 0 < tiny and abs(float(tiny) - math.exp(np.float32(-103.9))) <= 1.5 * 2.0**-149
