"""Row kernels near a copy's speed: dynamic schedules, row buffers, streaming stores (C only).

A reduction kernel over rows (softmax, log_softmax, layernorm and their gradients: a kept
loop around one reduced loop) reads each row from memory once and rereads it from cache in
its later stages, so its memory traffic is one read of the input and one write of the output,
like a copy, except for two costs this module removes:

- **Read for ownership.** A plain store to a line not in cache first reads the line, so every
  output byte crossed the memory bus twice. When the outputs are large (`STREAM_MIN_BYTES`
  and more: they would leave the cache before anyone reads them again) and a row fits a
  buffer of `ROW_BYTES`, every output of the row is written into a per-thread row buffer on
  the stack (L1/L2), and the finished row is copied out with non-temporal stores
  (`lg_stream`: `movntps` on 16-, 32- or 64-byte aligned lines, plain stores for the
  unaligned ends of the row), then one `sfence` per thread before the parallel region ends.
  Values are copied byte for byte: no result changes. Outputs of a final stage without
  vector math (layernorm's, log_softmax's) skip the buffer: the stage itself computes each
  line into a small array and stores it with `movntps` (`direct_final`). The choice is made per launch
  (`lg_nt`), so small arrays keep writing in place into lines the next kernel will find in
  cache. Elsewhere than x86-64 `lg_stream` is never used (`LG_STREAMS` 0). Kernels that park
  a value in an output row for the final stage (softmax's exp) are not streamed: there the
  reads for ownership overlap the exp, and the extra pass over the buffer cost more than it
  saved (one core, 4096 x 4096 float32: 15.3 ms streamed, 13.5 ms not; layernorm 11.0 ms
  streamed against 13.5 ms, log_softmax 14.2 against 15.5).
- **A stalled thread.** Threads took equal shares of the rows (`schedule(static)`), so a
  core taken by another process held the whole kernel until its thread's share was done.
  Every parallel loop of the C renderer without an OpenMP reduction clause now hands out
  chunks of about `CHUNK` innermost iterations on demand (`schedule(dynamic, ...)`): a thread
  that runs takes the rows of one that does not. A row's values do not depend on the thread
  that computes it (float sums never split a row: jit/render_order.py), so the bits are the
  same for any schedule. Loops with a reduction clause (fast math's float sums) keep static
  shares, so their order depends on the thread count only.
"""

from __future__ import annotations

from collections.abc import Callable

from jit.ir import Par
from jit.render_columns import remaining_finals

#: bytes of the row buffer of one streamed output (on the stack of each thread)
ROW_BYTES = 1 << 16
#: streamed outputs per kernel at most: their row buffers share a thread's stack (256 KB in all)
MAX_STREAMED = 4
#: outputs of at least this many bytes are streamed (smaller ones may stay in the cache)
STREAM_MIN_BYTES = 1 << 24
#: innermost iterations per chunk of a dynamic schedule
CHUNK = 1 << 14

PRELUDE = r"""/* Non-temporal stores for whole rows (jit/render_rows.py): aligned lines bypass the cache. */
#if defined(__x86_64__) && (defined(__AVX512F__) || defined(__AVX__) || defined(__SSE2__))
#define LG_STREAMS 1
#if defined(__AVX512F__)
#define LG_NTB 64
typedef float lg_ntv __attribute__((vector_size(64), may_alias));
#define LG_NTSTORE(p, v) __asm__ volatile("vmovntps %1, %0" : "=m"(*(lg_ntv *)(p)) : "v"(v))
#elif defined(__AVX__)
#define LG_NTB 32
typedef float lg_ntv __attribute__((vector_size(32), may_alias));
#define LG_NTSTORE(p, v) __asm__ volatile("vmovntps %1, %0" : "=m"(*(lg_ntv *)(p)) : "x"(v))
#else
#define LG_NTB 16
typedef float lg_ntv __attribute__((vector_size(16), may_alias));
#define LG_NTSTORE(p, v) __asm__ volatile("movntps %1, %0" : "=m"(*(lg_ntv *)(p)) : "x"(v))
#endif
static inline void lg_stream(void *restrict dst, const void *restrict src, int64_t bytes) {
  char *d = (char *)dst; const char *s = (const char *)src;
  int64_t h = (int64_t)((0 - (uintptr_t)d) & (LG_NTB - 1));
  if (h > bytes) h = bytes;
  __builtin_memcpy(d, s, (__SIZE_TYPE__)h); d += h; s += h; bytes -= h;
  for (; bytes >= LG_NTB; bytes -= LG_NTB, d += LG_NTB, s += LG_NTB) {
    lg_ntv v; __builtin_memcpy(&v, s, LG_NTB); LG_NTSTORE(d, v);
  }
  __builtin_memcpy(d, s, (__SIZE_TYPE__)bytes); }
#define lg_sfence() __asm__ volatile("sfence" ::: "memory")
#else
#define LG_STREAMS 0
#define LG_NTB 16
typedef float lg_ntv __attribute__((vector_size(16), may_alias));
#define LG_NTSTORE(p, v) __builtin_memcpy((p), &(v), LG_NTB)
static inline void lg_stream(void *restrict dst, const void *restrict src, int64_t bytes) {
  __builtin_memcpy(dst, src, (__SIZE_TYPE__)bytes); }
#define lg_sfence() ((void)0)
#endif
"""


def chunk_lines(li: int, nloops: int) -> list[str]:
    """`lg_ch{li}`: iterations of loop li per dynamic chunk, about CHUNK innermost iterations."""
    inner = " * ".join(f"n{j}" for j in range(li + 1, nloops)) or "1"
    return [
        f"const int64_t lg_w{li} = {inner};",
        f"const int lg_ch{li} = lg_w{li} >= {CHUNK} ? 1 : (int)({CHUNK} / (lg_w{li} > 0 ? lg_w{li} : 1));",
    ]


class RowStreams:
    """Mixin for the C renderer: row buffers and streaming stores (module docstring)."""

    #: output arrays written through row buffers when the launch streams (`plan_streams`)
    streamed: list[int] = []

    def plan_streams(self) -> list[int]:
        """Outputs that vary along the one reduced loop with unit stride, in a kernel whose
        outermost kept loop is the only parallel one (one row per thread at a time)."""
        self.streamed = []
        if self.nr != 1 or not self.nk or self.kpar[0] is not Par.BLOCKS:
            return self.streamed
        if any(p is not Par.SEQUENTIAL for p in self.kpar[1:]):
            return self.streamed
        inner = self.nk
        outs = {v for v, _ in self.spec.outputs}
        if any(v not in outs for v in self.stash):
            # a value parked for the final stage (softmax's exp): the plain stores' reads for
            # ownership overlap the stage's math, and the streamed row cost 13% more time
            # (measured on one core, 4096 x 4096 float32: 15.3 ms against 13.5)
            return self.streamed
        written = {a for _, a in self.finals} | {a for a, _ in self.stash.values()}
        for a in sorted(written):
            ref = self.spec.arrays[a]
            if ref.output and self.layout.moves[a][inner] and self.layout.unit[a][inner]:
                self.streamed.append(a)
        if len(self.streamed) > MAX_STREAMED:
            self.streamed = []
        self.direct = self._plan_direct()
        return self.streamed

    def _plan_direct(self) -> list[int]:
        """Streamed outputs the final stage stores itself (`direct_final`): those of a final
        stage without vector math (a block loop has its own structure), all of one element size."""
        if not self.streamed or self.calls_vmath(self.final_values() - set(self.stash)):  # type: ignore[attr-defined]
            return []
        outs = sorted({a for _, a in remaining_finals(self) if a in self.streamed})  # type: ignore[arg-type]
        if len({self.spec.arrays[a].dtype.itemsize for a in outs}) != 1:
            return []
        return outs

    def stream_header(self) -> list[str]:
        """`lg_nt`: whether this launch writes rows through the buffers (large outputs only)."""
        items = [self.spec.arrays[a].dtype.itemsize for a in self.streamed]
        nl = self.layout.nloops
        work = " * ".join(f"n{li}" for li in range(nl)) or "1"
        row = ROW_BYTES // max(items)
        return [
            f"  const int lg_nt = LG_STREAMS && n{self.nk} <= {row} && "
            f"{work} * {max(items)} >= {STREAM_MIN_BYTES};",
            "  (void)lg_nt;",
        ]

    def elem(self, ai: int) -> str:
        """A streamed output's element is in its row pointer (the buffer or the output row)."""
        if ai in self.streamed and ai not in self.direct and self.nk in self._open_r:
            return f"lg_y{ai}[i{self.nk}]"
        return super().elem(ai)  # type: ignore[misc]

    def _row_base(self, a: int) -> str:
        return f"a{a} + o{a}" if any(self.layout.moves[a][: self.nk]) else f"a{a}"

    def row_begin(self) -> None:
        """Each streamed output's row pointer: its row buffer when streaming, else the row itself."""
        for a in self.streamed:
            if a in self.direct:
                continue  # written by the final stage itself
            t = self.ct(self.spec.arrays[a].dtype)
            n = ROW_BYTES // self.spec.arrays[a].dtype.itemsize
            self.emit(f"{t} lg_row{a}[{n}];")
            self.emit(f"{t} *restrict lg_y{a} = lg_nt ? lg_row{a} : {self._row_base(a)};")

    def row_end(self) -> None:
        """Stream the finished rows out of their buffers (those the final stage did not stream)."""
        rest = [a for a in self.streamed if a not in self.direct]
        if not rest:
            return
        self.emit("if (lg_nt) {")
        for a in rest:
            t = self.ct(self.spec.arrays[a].dtype)
            self.emit(f"  lg_stream({self._row_base(a)}, lg_y{a}, n{self.nk} * (int64_t)sizeof({t}));")
        self.emit("}")

    #: streamed outputs the final stage writes to memory itself (`direct_final`)
    direct: list[int] = []

    def direct_final(self) -> None:
        """Open the final stage that streams its outputs itself; `direct_final_end` closes it.

        For the launches that stream (`lg_nt`) the final stage's values are computed LG_NTB
        bytes at a time into a small array and stored with one `movntps` per line: the row is
        not written into a buffer and copied out again (one pass less over it; layernorm on one
        core, 4096 x 4096 float32 rows from the L3 cache: 0.54-0.59 ns an element, 0.61-0.67
        through the buffer). The elements before the first aligned line and after the last one
        are stored plainly; rows of several outputs whose lines do not start at the same element
        are stored plainly throughout (the plain final stage, which follows in the `else`).
        Same expressions, so the same values.
        """
        item = self.spec.arrays[self.direct[0]].dtype.itemsize
        li, n = self.nk, f"n{self.nk}"
        lanes = f"(LG_NTB / {item})"
        first = self._row_base(self.direct[0])
        same = "".join(
            f" && (((uintptr_t)({self._row_base(a)}) - (uintptr_t)({first})) & (LG_NTB - 1)) == 0"
            for a in self.direct[1:]
        )
        # a row not aligned to its element size (a view of bytes) never reaches a line start
        self.emit(f"if (lg_nt && (uintptr_t)({first}) % {item} == 0{same}) {{")
        self.depth += 1
        self.emit(f"int64_t lg_h = (int64_t)(((0 - (uintptr_t)({first})) & (LG_NTB - 1)) / {item});")
        self.emit(f"if (lg_h > {n}) lg_h = {n};")
        self.emit(f"const int64_t lg_e = lg_h + ({n} - lg_h) / {lanes} * {lanes};")
        # the unaligned ends, one loop over [0, lg_h) and [lg_e, n)
        self.emit(f"for (int64_t lg_r = 0; lg_r < lg_h + {n} - lg_e; lg_r++) {{")
        self.depth += 1
        self.emit(f"const int64_t i{li} = lg_r < lg_h ? lg_r : lg_e + lg_r - lg_h;")
        self._direct_values(lambda a, v: f"{self.elem(a)} = v{v};")
        self.depth -= 1
        self.emit("}")
        self.emit(f"for (int64_t lg_q = lg_h; lg_q < lg_e; lg_q += {lanes}) {{")
        self.depth += 1
        for a in self.direct:
            self.emit(f"{self.ct(self.spec.arrays[a].dtype)} lg_t{a}[LG_NTB / {item}];")
        self.emit("#pragma omp simd")
        self.emit(f"for (int64_t lg_j = 0; lg_j < {lanes}; lg_j++) {{")
        self.depth += 1
        self.emit(f"const int64_t i{li} = lg_q + lg_j;")
        self._direct_values(
            lambda a, v: f"lg_t{a}[lg_j] = v{v};" if a in self.direct else f"{self.elem(a)} = v{v};"
        )
        self.depth -= 1
        self.emit("}")
        for a in self.direct:
            self.emit(
                f"{{ lg_ntv lg_v; __builtin_memcpy(&lg_v, lg_t{a}, LG_NTB); "
                f"LG_NTSTORE({self._row_base(a)} + lg_q, lg_v); }}"
            )
        self.depth -= 1
        self.emit("}")
        self.depth -= 1
        self.emit("} else {")
        self.depth += 1

    def direct_final_end(self) -> None:
        """Close the plain branch of `direct_final`."""
        self.depth -= 1
        self.emit("}")

    def _direct_values(self, store: Callable[[int, int], str]) -> None:
        """The final stage's values at i{nk}, then each final output's `store(array, value)`."""
        self._open_r.append(self.nk)
        for i in sorted(self.final_values()):  # type: ignore[attr-defined]
            if i in self.stash:
                self.emit(f"const {self.ct(self.spec.values[i].dtype)} v{i} = {self.elem(self.stash[i][0])};")
                continue
            line = self.value_line(i)  # type: ignore[attr-defined]
            if line:
                self.emit(line)
        for v, a in remaining_finals(self):  # type: ignore[arg-type]
            self.emit(store(a, v))
        self._open_r.pop()
