"""Complex values in fused kernels: a struct of two reals and NumPy's own arithmetic on it.

A complex64 (complex128) value is `lg_c64` (`lg_c128`), `{float re, im}` (`{double re, im}`):
the interleaved layout NumPy and CuPy store, so a kernel reads and writes complex arrays
directly. C has no operators on structs, so every complex operator is a helper function
(`lg_mul_c128(a, b)`), the same text in the C and the CUDA kernels; the renderers never cast a
complex value (jit/render.py) and convert reals to complex with `lg_cvt_c64/c128` (NumPy
promotes a real operand to (x, +0) before a complex loop, which gives its signed zeros and
its 0 * inf NaNs).

Bits follow NumPy's loops (numpy/_core/src/umath/loops_arithm_fp.dispatch.c.src,
loops_unary_complex.dispatch.c.src). On a machine with FMA its vector loops multiply with
`fmaddsub`: re = fma(ar, br, -(ai * bi)), im = fma(ar, bi, ai * br) (square is x * x), and
take |z| as sqrt(fma(s/l, s/l, 1)) * l with l, s the larger and smaller magnitude (infinities
and NaNs settled first). Without FMA the same formulas round each product. Which one this
NumPy runs is probed once, on arrays long enough for its vector loops (`numpy_fuses`); the
probe's answer is part of every complex kernel's source, hence of its store key. Helpers call
fma explicitly, so `-ffp-contract=off` / `--fmad=false` still hold for everything else; they
negate by flipping the sign bit (`lg_fneg`), because gcc 12 folds a negated single-use fma into
one fnmsub, which loses the sign of an exact zero (-(0 * 0 - 0) is -0, fnmsub gives +0).
Left to NumPy: division (Smith's algorithm with its own special cases), exp, log, sqrt,
power other than squares (libm's c* functions), reductions, and complex Python scalars (a
scalar slot carries one real).
"""

from __future__ import annotations

from fractions import Fraction
from functools import cache, lru_cache

import numpy as np


def _fma(a: float, b: float, c: float, ftype: type) -> float:
    """a * b + c rounded once (exact rational arithmetic; probes only)."""
    return ftype(float(Fraction(a) * Fraction(b) + Fraction(c)))


@cache
def numpy_fuses(dtype: str) -> tuple[bool, str]:
    """(complex multiply fuses, how |z| is computed: "fma", "plain" or "hypot") in this NumPy."""
    cdt = np.dtype(dtype)
    ft = np.dtype(cdt.char.lower()).type  # F -> f, D -> d
    e = 2.0**-13 if cdt == np.complex64 else 2.0**-30
    n = 64  # long enough for NumPy's vector loops
    a = np.full(n, complex(1 + e, 1), dtype=cdt)
    b = np.full(n, complex(1 - e, 1), dtype=cdt)
    fused = bool((a * b).real[0] != 0)
    # a fixed sample: about one |z| in 25 differs between a fused and a rounded q * q + 1
    parts = np.random.default_rng(16).standard_normal((2, 256))
    z = (parts[0] + 1j * parts[1]).astype(cdt)
    got = np.abs(z)
    re, im = np.abs(z.real), np.abs(z.imag)
    big, small = np.maximum(re, im), np.minimum(re, im)
    ratio = small / big
    plain = np.sqrt(ratio * ratio + ft(1)) * big
    fma = np.array([_fma(float(r), float(r), 1.0, ft) for r in ratio], dtype=ft)
    fma = np.sqrt(fma) * big
    if np.array_equal(got, fma) and not np.array_equal(got, plain):
        return fused, "fma"
    if np.array_equal(got, plain):
        return fused, "plain"
    return fused, "hypot"


def _helpers(t: str, real: str, suf: str, fused: bool, absmode: str, fn: str) -> str:
    """The helpers of one complex type (`t` lg_c64, real float, libm suffix `suf`)."""
    k = t.removeprefix("lg_")
    if fused:
        mul = f"return lg_mk_{k}(fma{suf}(a.re, b.re, -(a.im * b.im)), fma{suf}(a.re, b.im, a.im * b.re));"
    else:
        mul = f"return lg_mk_{k}(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re);"
    if absmode == "hypot":
        ab = f"return hypot{suf}(z.re, z.im);"
    else:
        one = "1.0f" if suf else "1.0"
        tail = f"fma{suf}(q, q, {one})" if absmode == "fma" else f"q * q + {one}"
        # NumPy's order of cases (infinities, then NaNs, then the ratio) as selects at the end,
        # so gcc vectorises the loop (branches on the parts made it give up)
        ab = (
            f"const {real} r = fabs{suf}(z.re), i = fabs{suf}(z.im), inf = ({real})INFINITY;\n"
            f"  const {real} l = r > i ? r : i, s = i < r ? i : r;\n"
            f"  const {real} q = l == 0 ? ({real})0 : s / l;\n"
            f"  const {real} h = sqrt{suf}({tail}) * l;\n"
            f"  const {real} h2 = r + i != r + i ? ({real})NAN : h;  /* r, i >= 0: NaN iff one is */\n"
            f"  const {real} h3 = r == inf ? inf : h2;\n"
            f"  return i == inf ? inf : h3;"
        )
    one = "1.0f" if suf else "1.0"
    # NumPy's complex division (loops.c.src, a scalar loop: no fma): Smith's algorithm after
    # its NaN/infinity cases, in its order of operations
    div = (
        f"const {real} ar = a.re, ai = a.im, br = b.re, bi = b.im, inf = ({real})INFINITY;\n"
        f"  const {real} bra = fabs{suf}(br), bia = fabs{suf}(bi);\n"
        f"  const int arn = ar != ar, ain = ai != ai;\n"
        f"  if (br == br && bi == bi && (arn || ain) && ((((!arn && fabs{suf}(ar) == inf) ||\n"
        f"      (!ain && fabs{suf}(ai) == inf)) && (br != 0 || bi != 0)) || (bra == inf && bia == inf))) {{\n"
        f"    const {real} n = arn ? ar : ai; return lg_mk_{k}(n, n); }}\n"
        f"  if (bra >= bia) {{\n"
        f"    if (bra == 0 && bia == 0) {{\n"
        f"      if ((arn && (ai == 0 || ain)) || (ar == 0 && ain)) return lg_mk_{k}(arn ? ar : ai, ain ? ai : ar);\n"
        f"      return lg_mk_{k}(ar / bra, ai / bia); }}\n"
        f"    const {real} rat = bi / br, scl = {one} / (br + bi * rat);\n"
        f"    return lg_mk_{k}((ar + ai * rat) * scl, (ai + lg_fneg(ar * rat)) * scl); }}\n"
        f"  const {real} rat = br / bi, scl = {one} / (bi + br * rat);\n"
        f"  return lg_mk_{k}((ar * rat + ai) * scl, (ai * rat + lg_fneg(ar)) * scl);"
    )
    return f"""{fn} {t} lg_mk_{k}({real} r, {real} i) {{ {t} z; z.re = r; z.im = i; return z; }}
{fn} {t} lg_add_{k}({t} a, {t} b) {{ return lg_mk_{k}(a.re + b.re, a.im + b.im); }}
{fn} {t} lg_sub_{k}({t} a, {t} b) {{ return lg_mk_{k}(a.re - b.re, a.im - b.im); }}
{fn} {t} lg_mul_{k}({t} a, {t} b) {{ {mul} }}
{fn} {t} lg_sq_{k}({t} a) {{ return lg_mul_{k}(a, a); }}
{fn} {t} lg_div_{k}({t} a, {t} b) {{
  {div}
}}
{fn} {t} lg_neg_{k}({t} a) {{ return lg_mk_{k}(lg_fneg(a.re), lg_fneg(a.im)); }}
{fn} {t} lg_conj_{k}({t} a) {{ return lg_mk_{k}(a.re, lg_fneg(a.im)); }}
{fn} int lg_eq_{k}({t} a, {t} b) {{ return a.re == b.re && a.im == b.im; }}
{fn} int lg_ne_{k}({t} a, {t} b) {{ return a.re != b.re || a.im != b.im; }}
{fn} {real} lg_re_{k}({t} z) {{ return z.re; }}
{fn} {real} lg_im_{k}({t} z) {{ return z.im; }}
{fn} {real} lg_abs_{k}({t} z) {{
  {ab}
}}
"""


def uses_complex(spec) -> bool:  # noqa: ANN001
    """Whether a kernel needs the complex helpers (only then the prelude grows).

    Complex values, arrays, or real and imag of a real value (their templates are the
    generic `lg_real` / `lg_imag`, whose real case is defined here too).
    """
    if any(v.dtype.kind == "c" for v in spec.values) or any(a.dtype.kind == "c" for a in spec.arrays):
        return True
    return any(v.kind == "elem" and ("lg_real(" in v.expr or "lg_imag(" in v.expr) for v in spec.values)


@lru_cache(maxsize=4)
def prelude(cuda: bool) -> str:
    """Types and helpers every kernel source starts with (C: `_Generic`, CUDA: overloads)."""
    fn = "__device__ __forceinline__" if cuda else "static inline"
    f64, a64 = numpy_fuses("complex128")
    f32, a32 = numpy_fuses("complex64")
    out = [
        f"/* complex: NumPy multiplies with fma: {int(f64)}/{int(f32)}; |z|: {a64}/{a32} */",
        "typedef struct { float re, im; } lg_c64;",
        "typedef struct { double re, im; } lg_c128;",
        _helpers("lg_c64", "float", "f", f32, a32, fn),
        _helpers("lg_c128", "double", "", f64, a64, fn),
        f"{fn} lg_c64 lg_c64_of_c128(lg_c128 z) {{ return lg_mk_c64((float)z.re, (float)z.im); }}",
        f"{fn} lg_c128 lg_c128_of_c64(lg_c64 z) {{ return lg_mk_c128((double)z.re, (double)z.im); }}",
    ]
    if cuda:
        out += [
            "template <typename T> __device__ __forceinline__ lg_c64 lg_cvt_c64(T x) "
            "{ return lg_mk_c64((float)x, 0.0f); }",
            "template <typename T> __device__ __forceinline__ lg_c128 lg_cvt_c128(T x) "
            "{ return lg_mk_c128((double)x, 0.0); }",
            f"{fn} lg_c64 lg_cvt_c64(lg_c64 z) {{ return z; }}",
            f"{fn} lg_c64 lg_cvt_c64(lg_c128 z) {{ return lg_c64_of_c128(z); }}",
            f"{fn} lg_c128 lg_cvt_c128(lg_c128 z) {{ return z; }}",
            f"{fn} lg_c128 lg_cvt_c128(lg_c64 z) {{ return lg_c128_of_c64(z); }}",
            "template <typename T> __device__ __forceinline__ T lg_real(T x) { return x; }",
            "template <typename T> __device__ __forceinline__ T lg_imag(T x) { return (T)0; }",
            f"{fn} float lg_real(lg_c64 z) {{ return z.re; }}",
            f"{fn} double lg_real(lg_c128 z) {{ return z.re; }}",
            f"{fn} float lg_imag(lg_c64 z) {{ return z.im; }}",
            f"{fn} double lg_imag(lg_c128 z) {{ return z.im; }}",
        ]
    else:
        out += [
            f"{fn} lg_c64 lg_c64_of_c64(lg_c64 z) {{ return z; }}",
            f"{fn} lg_c128 lg_c128_of_c128(lg_c128 z) {{ return z; }}",
            f"{fn} lg_c64 lg_c64_of_r(float x) {{ return lg_mk_c64(x, 0.0f); }}",
            f"{fn} lg_c128 lg_c128_of_r(double x) {{ return lg_mk_c128(x, 0.0); }}",
            # float and double parts go through unchanged (float -> double -> float is exact)
            f"{fn} double lg_real_r(double x) {{ return x; }}",
            f"{fn} double lg_imag_r(double x) {{ (void)x; return 0.0; }}",
            "#define lg_cvt_c64(x) _Generic((x), lg_c64: lg_c64_of_c64, lg_c128: lg_c64_of_c128, "
            "default: lg_c64_of_r)(x)",
            "#define lg_cvt_c128(x) _Generic((x), lg_c64: lg_c128_of_c64, lg_c128: lg_c128_of_c128, "
            "default: lg_c128_of_r)(x)",
            "#define lg_real(x) _Generic((x), lg_c64: lg_re_c64, lg_c128: lg_re_c128, default: lg_real_r)(x)",
            "#define lg_imag(x) _Generic((x), lg_c64: lg_im_c64, lg_c128: lg_im_c128, default: lg_imag_r)(x)",
        ]
    return "\n".join(out) + "\n"
