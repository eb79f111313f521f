"""float32 exp for vector loops, written out in C so the compiler inlines it (exact mode).

Why not libmvec's `_ZGVeN16v_expf`: in a softmax over 4096 x 4096 float32 the call took a
third of the kernel's time (7.6 ms against a 5.5 ms copy; the same kernel without exp runs at
copy speed), and inlined the same work takes 1.26x a copy instead of 1.37x. The function is
branch-free, so a `simd` loop vectorises it with no call:

- no clamp: k = rint(x / ln2) is read as an integer by adding 1.5 * 2^23 and taking the
  float's bits (exact for |k| < 2^22), and 2^k is built in unsigned arithmetic, so every
  input is defined behaviour (a float-to-int conversion of a huge k would not be). Outside
  [-103.97, 88.72] the final selects decide the value; NaN stays NaN through r. A clamp of k
  to [-150, 128] cost more than it looks: gcc if-converted it into eight compare-and-blends
  of the integers derived from k (AVX2, 4096 x 4096 softmax kernel, two threads: 10.3-11.0 ms
  with a clamp, 8.2-8.3 ms without, the same bits);
- range reduction x = k ln2 + r, |r| <= ln2/2, with ln2 split in two and fused multiply-adds;
- e^r = 1 + r + r^2 q(r), q of degree 4 fitted for relative error (3e-9 before rounding);
- 2^k applied as two powers of two, so results down to the smallest subnormal round once;
- overflow (x > 88.72283) gives inf, underflow (x < -103.97) gives 0, NaN stays NaN.

Accuracy, checked over all 2^32 float32 inputs, scalar and vectorised: at most 1 ULP from
`(float)exp((double)x)`, the same value in scalar and vector loops, NaN exactly where the
input is NaN (tests/reliability/test_expf.py; its exhaustive sweep is marked slow).
Only in block loops (jit/render_block.py): every element of a value goes through it.
"""

from __future__ import annotations

#: the C definition of `lg_vexp_f32`; fmaf is contracted by hand (kernels build with
#: -ffp-contract=off), so the value does not depend on the compiler's choices
SOURCE = r"""static inline __attribute__((always_inline, const)) float lg_vexp_f32(float x) {
  const float kf = __builtin_rintf(x * 0x1.715476p+0f);
  float r = __builtin_fmaf(kf, -0x1.62e43p-1f, x);
  r = __builtin_fmaf(kf, 0x1.05c61p-29f, r);
  float p = 0x1.6a2434p-10f;
  p = __builtin_fmaf(p, r, 0x1.1239e2p-7f);
  p = __builtin_fmaf(p, r, 0x1.5558f2p-5f);
  p = __builtin_fmaf(p, r, 0x1.555492p-3f);
  p = __builtin_fmaf(p, r, 0x1.fffffcp-2f);
  p = __builtin_fmaf(p, r, 1.0f);
  p = __builtin_fmaf(p, r, 1.0f);
  union { float f; uint32_t u; } t = { kf + 0x1.8p23f };
  const uint32_t k = t.u - 0x4b400000u, k1 = (uint32_t)((int32_t)k >> 1), k2 = k - k1;
  union { uint32_t i; float f; } s1 = { (k1 + 127u) << 23 }, s2 = { (k2 + 127u) << 23 };
  float y = (p * s1.f) * s2.f;
  y = x > 0x1.62e42ep+6f ? __builtin_inff() : y;
  return x < -0x1.9fe368p+6f ? 0.0f : y;
}
"""
