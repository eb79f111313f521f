"""C with OpenMP for the CPU: one `lg_kernel` function per fused region.

Assignment to OpenMP: Blocks is `parallel for` (one chunk of iterations per core), Threads is
`simd` (vector lanes), BlocksAndThreads is `parallel for simd`, Sequential a plain loop.
Vector math (exp, log, tanh, ...) comes from glibc's libmvec where the toolchain has it. Its
functions differ from the scalar libm's in the last bit for some inputs (acosf near 0), so by
default a loop that calls them runs in fixed blocks that send every element through the vector
function (jit/render_block.py); other loops call the scalar libm for every element. Fast math
declares the plain names `declare simd`, so any loop may vectorise them, tails scalar.

Reductions whose result is the same in any order (integer sums and products, max, min, any,
all) carry OpenMP `reduction` clauses. Float sums and products are written in NumPy's order
instead (`OrderedStages`): a sum along a unit-stride innermost axis is NumPy's pairwise
summation (8 accumulators over blocks of at most 128 elements, combined as its recursion
combines them), every other float sum and every float product adds (multiplies) one element
after another in loop order, as NumPy's reduction loops do; outer reduced loops run in
order. No order depends on the thread count: threads split kept loops, or, for a sum with
no kept loop, whole subtrees of the pairwise recursion whose partial sums are combined in
the recursion's order. LAZYGRAPH_FAST_MATH=1 goes back to OpenMP's reductions.
"""

from __future__ import annotations

from jit.complex_c import prelude as complex_prelude
from jit.complex_c import uses_complex
from jit.ir import Par
from jit.render import Renderer
from jit.render_block import MVEC, VectorBlocks, vector_declarations
from jit.render_columns import ColumnRenderer, remaining_finals, stage_stores, wants_columns
from jit.render_order import OrderedStages
from jit.render_rows import PRELUDE as ROWS_PRELUDE
from jit.render_rows import RowStreams, chunk_lines

PRELUDE = r"""#include <stdint.h>
#include <tgmath.h>

#define LG_INT_HELPERS(T, t) \
static inline T lg_floordiv_##t(T a, T b) { \
  if (b == 0) return 0; \
  if (b == -1) return (T)(0 - (uint64_t)a); \
  T q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1; return q; } \
static inline T lg_remainder_##t(T a, T b) { \
  if (b == 0 || b == -1) return 0; \
  T r = a % b; if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; } \
static inline T lg_shl_##t(T a, T b) { return (b < 0 || b >= (T)(8 * sizeof(T))) ? 0 : (T)((uint64_t)a << b); } \
static inline T lg_shr_##t(T a, T b) { \
  return (b < 0 || b >= (T)(8 * sizeof(T))) ? (a < 0 ? -1 : 0) : (T)(a >> b); }
#define LG_UINT_HELPERS(T, t) \
static inline T lg_floordiv_##t(T a, T b) { return b == 0 ? 0 : a / b; } \
static inline T lg_remainder_##t(T a, T b) { return b == 0 ? 0 : a % b; } \
static inline T lg_shl_##t(T a, T b) { return b >= 8 * sizeof(T) ? 0 : (T)(a << b); } \
static inline T lg_shr_##t(T a, T b) { return b >= 8 * sizeof(T) ? 0 : (T)(a >> b); }
#define LG_FLOAT_HELPERS(T, t) \
static inline T lg_floordiv_##t(T a, T b) { \
  if (b == 0) return a / b; \
  T mod = fmod(a, b); T div = (a - mod) / b; \
  if (mod != 0) { if ((b < 0) != (mod < 0)) { div -= 1; } } \
  if (div != 0) { T f = floor(div); if (div - f > (T)0.5) f += 1; return f; } \
  return copysign((T)0, a / b); } \
static inline T lg_remainder_##t(T a, T b) { \
  T mod = fmod(a, b); if (b == 0) return mod; \
  if (mod != 0) { if ((b < 0) != (mod < 0)) mod += b; } else { mod = copysign((T)0, b); } \
  return mod; } \
static inline T lg_sigmoid_##t(T x) { T e = exp(-fabs(x)); return x >= 0 ? (T)1 / ((T)1 + e) : e / ((T)1 + e); } \
static inline T lg_round_##t(T x, int d) { \
  if (d == 0) return rint(x); \
  T p = (T)pow(10.0, (double)(d > 0 ? d : -d)); \
  return d > 0 ? rint(x * p) / p : rint(x / p) * p; }
LG_INT_HELPERS(int8_t, i8) LG_INT_HELPERS(int16_t, i16) LG_INT_HELPERS(int32_t, i32) LG_INT_HELPERS(int64_t, i64)
LG_UINT_HELPERS(uint8_t, u8) LG_UINT_HELPERS(uint16_t, u16) LG_UINT_HELPERS(uint32_t, u32)
LG_UINT_HELPERS(uint64_t, u64)
LG_FLOAT_HELPERS(float, f32) LG_FLOAT_HELPERS(double, f64)
#define lg_sigmoid(x) _Generic((x), float: lg_sigmoid_f32, default: lg_sigmoid_f64)(x)
#define lg_round(x, d) _Generic((x), float: lg_round_f32, default: lg_round_f64)((x), (d))
/* Negation flips the sign bit: gcc folds -fma(a, b, c) into one fnmsub, which gives +0 where
   the negated sum is -0 (an exact zero sum); complex products end in fma (jit/complex_c.py). */
static inline float lg_fneg_f32(float x) { union { float f; uint32_t u; } t; t.f = x; t.u ^= 0x80000000u; return t.f; }
static inline double lg_fneg_f64(double x) {
  union { double f; uint64_t u; } t; t.f = x; t.u ^= 0x8000000000000000ull; return t.f; }
#define lg_fneg(x) _Generic((x), float: lg_fneg_f32, default: lg_fneg_f64)(x)
#define lg_max_(a, b) (((a) >= (b) || (a) != (a)) ? (a) : (b))
#define lg_min_(a, b) (((a) <= (b) || (a) != (a)) ? (a) : (b))
#define lg_clip(x, lo, hi) lg_min_(lg_max_((x), (lo)), (hi))
/* NumPy's pairwise summation tree over [start, start + n): a node of more than `leaf`
   elements splits at n2 = n / 2 - (n / 2) % 8; lg_pw_next gives the leaves left to right,
   each with the number of pending partial sums that close after it (post-order). */
typedef struct { int64_t s[64], n[64]; int c[64]; int top; int64_t leaf; } lg_pw_t;
static inline void lg_pw_init(lg_pw_t *it, int64_t start, int64_t n, int64_t leaf) {
  it->top = 0; it->leaf = leaf;
  if (n > 0) { it->s[0] = start; it->n[0] = n; it->c[0] = 0; it->top = 1; } }
static inline int lg_pw_next(lg_pw_t *it, int64_t *s, int64_t *n, int *c) {
  while (it->top > 0) {
    const int t = --it->top;
    const int64_t ts = it->s[t], tn = it->n[t]; const int tc = it->c[t];
    if (tn <= it->leaf) { *s = ts; *n = tn; *c = tc; return 1; }
    int64_t n2 = tn / 2; n2 -= n2 % 8;
    it->s[t] = ts + n2; it->n[t] = tn - n2; it->c[t] = tc + 1;
    it->s[t + 1] = ts; it->n[t + 1] = n2; it->c[t + 1] = 0;
    it->top = t + 2;
  }
  return 0; }
"""


#: loop iterations (all loops' extents multiplied) from which a kernel forks OpenMP threads
PARALLEL_MIN = 1 << 15


def mvec_declarations() -> str:
    """`declare simd` prototypes so any loop calling these functions vectorises (fast math)."""
    out = []
    for f, arity in MVEC.items():
        for t, suffix in (("float", "f"), ("double", "")):
            params = ", ".join([t] * arity)
            out.append(f"#pragma omp declare simd notinbranch\n{t} ({f}{suffix})({params});")
    return "\n".join(out) + "\n"


class CRenderer(RowStreams, VectorBlocks, OrderedStages, Renderer):
    """OpenMP C (see the module docstring)."""

    def _plan_stash(self) -> dict[int, tuple[int, int]]:
        """Values parked for the final stage, plus the final outputs a stage stores itself."""
        self.stash = super()._plan_stash()
        if self.nr:
            self.stash.update(stage_stores(self))
        return self.stash

    def open_loop(self, li: int, par: Par, reds: list[int], kept: bool) -> None:
        """`for` with the pragma the assignment asks for."""
        if kept and li == self.nk - 1 and self.blocked_elementwise():
            self._inner_par = par  # final() prints this loop as a block loop
            return
        clause = self.reduction_clause(reds)
        # chunks handed out on demand (jit/render_rows.py): a thread whose core is taken
        # leaves its rows to the others; no value depends on the schedule. A loop with an
        # OpenMP reduction keeps static shares: fast math's float sums then still add in an
        # order fixed by the thread count, not by which thread ran first.
        sched = "static"
        if par in (Par.BLOCKS, Par.BLOCKS_AND_THREADS) and not clause:
            for line in chunk_lines(li, self.layout.nloops):
                self.emit(line)
            sched = f"dynamic, lg_ch{li}"
        if par is Par.BLOCKS and kept and li == 0 and self.streamed:
            # a region of its own so that each thread fences its streaming stores once
            self.emit("#pragma omp parallel")
            self.emit("{")
            self.depth += 1
            self.emit(f"#pragma omp for schedule({sched}) nowait")
        elif par is Par.BLOCKS:
            self.emit(f"#pragma omp parallel for schedule({sched}){clause}")
        elif par is Par.THREADS:
            self.emit(f"#pragma omp simd{clause}")
        elif par is Par.BLOCKS_AND_THREADS:
            self.emit(f"#pragma omp parallel for simd schedule({sched}){clause}")
        self.emit(f"for (int64_t i{li} = 0; i{li} < n{li}; i{li}++) {{")
        self.depth += 1

    def close_loop(self, li: int, kept: bool) -> None:
        """`}`, except for a block loop (closed by itself)."""
        if not (kept and li == self.nk - 1 and self.blocked_elementwise()):
            super().close_loop(li, kept)
        if kept and li == 0 and self.streamed and self.kpar[0] is Par.BLOCKS:
            self.emit("if (lg_nt) lg_sfence();")
            self.depth -= 1
            self.emit("}")

    def final(self, done: set[int]) -> None:
        """Outputs; a loop computing vector math becomes a block loop."""
        if self.nr:
            self.finals = remaining_finals(self)
            if not self.finals:
                return  # every output that varies along the reduced axes was stored by a stage
        if self.blocked_elementwise():
            self.elementwise_block(self._inner_par)
        elif self.nr and self.calls_vmath(self.final_values() - set(self.stash)):
            self.final_block()
        elif self.direct:
            self.direct_final()  # streaming launches store the rows themselves (jit/render_rows.py)
            super().final(done)
            self.direct_final_end()
        else:
            super().final(done)


def render_c(  # noqa: ANN001
    spec, layout, assign: tuple[Par, ...], mvec: bool = True, exact: bool = True, short: bool = False
) -> str:
    """The complete C source of one kernel; `exact` keeps NumPy's order, `mvec`: libmvec is there.

    `short`: the blocked loop (render_block.blocked_extent) may run fewer than LG_W iterations,
    so block loops need their padded-block branch (a second, costly-to-compile body).
    """
    if wants_columns(spec, layout):
        r: CRenderer | ColumnRenderer = ColumnRenderer(spec, layout, assign)
    else:
        r = CRenderer(spec, layout, assign)
        r.exact = exact
        r.vmath = mvec and exact
        r.short = short
        r.plan_streams()
    body = r.body()
    head = [PRELUDE, (vector_declarations() if exact else mvec_declarations()) if mvec else ""]
    if r.streamed:
        head.append(ROWS_PRELUDE)
    if uses_complex(spec):
        head.append(complex_prelude(cuda=False))
    head.append("void lg_kernel(void **ptrs, const int64_t *dims, const double *fs, const int64_t *is) {")
    nl = layout.nloops
    for li in range(nl):
        head.append(f"  const int64_t n{li} = dims[{li}];")
    k = nl
    for ai, ref in enumerate(spec.arrays):
        t = r.ct(ref.dtype)
        if ref.output:
            head.append(f"  {t} *restrict a{ai} = ({t} *)ptrs[{ai}];")
        else:
            # gcc does not vectorize loops that load _Bool to select between values (mandelbrot's
            # masks: 2x slower); NumPy's bools are bytes holding 0 or 1, read alike as unsigned char
            t = "unsigned char" if ref.dtype.kind == "b" else t
            head.append(f"  const {t} *restrict a{ai} = (const {t} *)ptrs[{ai}];")
        for li in range(nl):
            if layout.moves[ai][li]:
                head.append(f"  const int64_t s{ai}_{li} = dims[{k}];")
                k += 1
    for i, v in enumerate(spec.values):
        if v.kind == "scalar":
            src = f"fs[{v.index}]" if v.dtype.kind == "f" else f"is[{v.index}]"
            head.append(f"  const {r.ct(v.dtype)} v{i} = ({r.ct(v.dtype)}){src};")
    count = " * ".join(f"n{spec_li}" for spec_li in range(len(layout.kloops), nl)) or "1"
    head.append(f"  const int64_t lg_count = {count};")
    head.append("  (void)lg_count; (void)fs; (void)is;")
    # Waking OpenMP's sleeping threads costs more than a small kernel's whole work: below
    # PARALLEL_MIN iterations in all, every parallel region runs on the calling thread alone.
    # The clause names `parallel`: a bare if() on `parallel for simd` also applies to its simd
    # part (OpenMP 5), and gcc then runs the serial loop one element at a time (2-4x slower).
    work = " * ".join(f"n{li}" for li in range(nl)) or "1"
    head.append(f"  const int lg_par = {work} >= {PARALLEL_MIN};")
    head.append("  (void)lg_par;")
    if r.streamed:
        head.extend(r.stream_header())
    body = [
        ln + " if(parallel: lg_par)" if ln.lstrip().startswith("#pragma omp parallel") else ln for ln in body
    ]
    return "\n".join(head) + "\n" + "\n".join(body) + "\n}\n"
