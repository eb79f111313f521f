"""Vector math for every element: loops that call libm functions run in fixed blocks (C only).

glibc's libmvec functions (exp, tanh, ...) differ from the scalar libm in the last bit for
some inputs, and a vectorised loop of n iterations runs its body with the vector function
and its remainder (the tail, each thread's chunk edge, an alignment prologue) with the
scalar one: a value would depend on its position, the array's length and the thread count.
So by default the vector functions are reachable only under their own names (`lg_vexp`,
`lg_vtanh`, ...: `declare simd` aliases of the libm symbols, so the compiler calls
`_ZGV..._expf` when it vectorises and plain `expf` never vectorises), and only inside a
block loop:

- the iteration range is cut into blocks of exactly LG_W (64) elements, a multiple of every
  vector length; threads take whole blocks, so a thread's share ends on a block edge;
- a full block runs one `omp simd` loop of LG_W iterations, which the compiler vectorises
  with no scalar remainder;
- the last, partial block is shifted back to end at the range's end, so it recomputes a few
  elements of the block before it (the same values, through the same code: outputs never
  share memory with inputs) and the loop body exists once: gcc's register allocation time
  grows fast with function size, and a second body made kernels 3-20x slower to compile;
- only where the range can be shorter than LG_W (a kernel variant built for such a call, see
  `blocked_extent`) does the last block copy its inputs into local arrays of LG_W, padded with
  the last valid element's inputs (a real input, so no new special case), run the same
  LG_W-iteration vector loop on them and copy the valid results out.

Every element therefore goes through the same vector function. float32 exp is the exception to
the aliases: it is lazygraph's own inline C (jit/expf_c.py), faster than the call and within
1 ULP of the correctly rounded value. Loops that cannot be blocked
this way (a reduction that is exact in any order, a value computed once per row, a sum over
a strided axis) call the math functions by their plain names: scalar libm for every element
of that value, never mixed. Tests check the built kernels' machine code for scalar calls.
"""

from __future__ import annotations

import re

from jit import expf_c
from jit.ir import Par
from jit.render_order import LEAF
from jit.render_rows import CHUNK

#: elements per block: a multiple of the widest vector length (16 floats, 64 bytes in AVX-512)
W = 64

#: functions glibc's libmvec vectorises (float and double variants), and their arity
MVEC = {
    "exp": 1, "log": 1, "sin": 1, "cos": 1, "tan": 1, "tanh": 1, "sinh": 1, "cosh": 1, "asin": 1,
    "acos": 1, "atan": 1, "erf": 1, "expm1": 1, "log1p": 1, "log2": 1, "log10": 1, "exp2": 1,
    "atan2": 2, "pow": 2,
}  # fmt: skip

#: a call of a vectorisable function in a kernel expression (lg_sigmoid calls exp)
CALL = re.compile(r"(?<![\w.])(" + "|".join(sorted(MVEC, key=len, reverse=True)) + r"|lg_sigmoid)\(")


def vector_declarations() -> str:
    """The `lg_v*` aliases: `declare simd` prototypes bound to libm's own symbols (float exp: inline C)."""
    out = [f"#define LG_W {W}", expf_c.SOURCE]
    for f, arity in MVEC.items():
        for t, suffix, tag in (("float", "f", "f32"), ("double", "", "f64")):
            if (f, t) == ("exp", "float"):
                continue  # jit/expf_c.py
            params = ", ".join([t] * arity)
            out.append(
                f"#pragma omp declare simd notinbranch\n"
                f'__attribute__((const, nothrow)) {t} lg_v{f}_{tag}({params}) __asm__("{f}{suffix}");'
            )
        args = "(x)" if arity == 1 else "(x, y)"
        sel = "(x)" if arity == 1 else "(x) + (y)"
        out.append(f"#define lg_v{f}{args} _Generic({sel}, float: lg_v{f}_f32, default: lg_v{f}_f64){args}")
    for t, tag in (("float", "f32"), ("double", "f64")):
        out.append(
            f"static inline {t} lg_vsigmoid_{tag}({t} x) {{ {t} e = lg_vexp_{tag}(-fabs(x)); "
            f"return x >= 0 ? ({t})1 / (({t})1 + e) : e / (({t})1 + e); }}"
        )
    out.append("#define lg_vsigmoid(x) _Generic((x), float: lg_vsigmoid_f32, default: lg_vsigmoid_f64)(x)")
    return "\n".join(out) + "\n"


def vectorize(line: str) -> str:
    """A value line with its math calls renamed to the vector aliases."""
    return CALL.sub(
        lambda m: ("lg_vsigmoid" if m.group(1) == "lg_sigmoid" else "lg_v" + m.group(1)) + "(", line
    )


class VectorBlocks:
    """Mixin for the C renderer: block loops for values that call vector math (module docstring)."""

    #: set by render_c: vector math in block loops (exact mode with libmvec available)
    vmath = False
    #: set by render_c: a blocked range may be shorter than LG_W (the padded-block branch)
    short = False

    def calls_vmath(self, ids) -> bool:  # noqa: ANN001
        """Whether any of the values `ids` calls a vectorisable math function."""
        if not self.vmath:
            return False
        vals = self.spec.values
        return any(vals[i].kind == "elem" and CALL.search(vals[i].expr) for i in ids)

    def load_source(self, i: int) -> str:
        """The memory read of load value i at the current loop point."""
        ai = self.spec.values[i].index
        return self.elem(ai)

    def block_loop(
        self,
        li: int,
        start: str,
        count: str,
        parallel: bool,
        ids: list[int],
        loads: dict[int, str],
        stores: list[tuple[str, int]],
    ) -> None:
        """Values `ids` for i{li} in [start, start + count), LG_W at a time through vector math.

        `loads` maps value ids to the memory they read (in terms of i{li}); `stores` lists
        (destination, value) pairs; a destination may use lg_q + lg_j (the position in the range).
        """
        t = {i: self.ct(self.spec.values[i].dtype) for i in ids}
        compute = []
        for i in ids:
            if i in loads:
                continue
            line = self.value_line(i)
            if line:
                compute.append(vectorize(line))
        if parallel:
            # blocks handed out on demand, CHUNK elements at a time (jit/render_rows.py)
            self.emit(f"#pragma omp parallel for schedule(dynamic, {CHUNK // W})")
        self.emit(f"for (int64_t lg_q = 0; lg_q < {count}; lg_q += LG_W) {{")
        self.depth += 1
        if not self.short:
            # the last block ends at the range's end (count >= LG_W here): one loop body
            self.emit(f"const int64_t lg_p = {count} - lg_q >= LG_W ? lg_q : {count} - LG_W;")
            self._simd_open(f"const int64_t i{li} = {start} + lg_p + lg_j;")
            for i, src in loads.items():
                self.emit(f"const {t[i]} v{i} = {src};")
            self._simd_close(
                compute, [f"{dest.replace('lg_q + lg_j', 'lg_p + lg_j')} = v{v};" for dest, v in stores]
            )
            self.depth -= 1
            self.emit("}")
            return
        self.emit(f"if ({count} - lg_q >= LG_W) {{")
        self.depth += 1
        self._simd_open(f"const int64_t i{li} = {start} + lg_q + lg_j;")
        for i, src in loads.items():
            self.emit(f"const {t[i]} v{i} = {src};")
        self._simd_close(compute, [f"{dest} = v{v};" for dest, v in stores])
        self.depth -= 1
        self.emit("} else {")
        self.depth += 1
        self.emit(f"const int64_t lg_m = {count} - lg_q;")
        for i in loads:
            self.emit(f"{t[i]} lg_in{i}[LG_W];")
        for k, (_, v) in enumerate(stores):
            self.emit(f"{t[v]} lg_out{k}[LG_W];")
        self.emit("for (int64_t lg_j = 0; lg_j < LG_W; lg_j++) {")
        self.emit(f"  const int64_t i{li} = {start} + lg_q + (lg_j < lg_m ? lg_j : lg_m - 1);")
        for i, src in loads.items():
            self.emit(f"  lg_in{i}[lg_j] = {src};")
        self.emit("}")
        self._simd_open("")
        for i in loads:
            self.emit(f"const {t[i]} v{i} = lg_in{i}[lg_j];")
        self._simd_close(compute, [f"lg_out{k}[lg_j] = v{v};" for k, (_, v) in enumerate(stores)])
        self.emit("for (int64_t lg_j = 0; lg_j < lg_m; lg_j++) {")
        self.emit(f"  const int64_t i{li} = {start} + lg_q + lg_j; (void)i{li};")
        for k, (dest, _) in enumerate(stores):
            self.emit(f"  {dest} = lg_out{k}[lg_j];")
        self.emit("}")
        self.depth -= 1
        self.emit("}")
        self.depth -= 1
        self.emit("}")

    def _simd_open(self, first: str) -> None:
        self.emit("#pragma omp simd")
        self.emit("for (int64_t lg_j = 0; lg_j < LG_W; lg_j++) {")
        self.depth += 1
        if first:
            self.emit(first)

    def _simd_close(self, compute: list[str], stores: list[str]) -> None:
        for line in compute + stores:
            self.emit(line)
        self.depth -= 1
        self.emit("}")

    # -- the loops that are blocked ----------------------------------------------------------
    def blocked_elementwise(self) -> bool:
        """An elementwise kernel whose innermost loop computes vector math."""
        return not self.nr and self.nk > 0 and self.calls_vmath(self.needed)

    def elementwise_block(self, par: Par) -> None:
        """The innermost kept loop of an elementwise kernel as a block loop."""
        li = self.nk - 1
        ids = sorted(i for i in self.needed if self.spec.values[i].kind in ("load", "elem"))
        self._open_r.append(li)  # lets index() see i{li} (the same term as for a kept loop)
        loads = {i: self.load_source(i) for i in ids if self.spec.values[i].kind == "load"}
        stores = [(self.elem(a), v) for v, a in self.spec.outputs]
        self._open_r.pop()
        self.block_loop(li, "0", f"n{li}", par in (Par.BLOCKS, Par.BLOCKS_AND_THREADS), ids, loads, stores)

    def final_block(self) -> None:
        """The final stage of a reduction kernel with its innermost reduced loop as a block loop."""
        st = self.final_stage
        for j in range(self.nr - 1):
            li = self.nk + j
            self.open_loop(li, self.rpar[st][j], [], kept=False)
            self._open_r.append(li)
        li = self.nk + self.nr - 1
        self._open_r.append(li)
        ids = sorted(self.final_values())
        loads = {}
        for i in ids:
            if i in self.stash:
                a = self.stash[i][0]
                loads[i] = self.elem(a)
            elif self.spec.values[i].kind == "load":
                loads[i] = self.load_source(i)
        stores = [(self.elem(a), v) for v, a in self.finals]
        par = self.rpar[st][self.nr - 1]
        self.block_loop(li, "0", f"n{li}", par in (Par.BLOCKS, Par.BLOCKS_AND_THREADS), ids, loads, stores)
        self._open_r.pop()
        for j in reversed(range(self.nr - 1)):
            self._open_r.pop()
            self.close_loop(self.nk + j, kept=False)

    def leaf_buffer(
        self, st: int, vals: set[int], reds: list[int], b: str, m: str, size: int = LEAF
    ) -> list[int] | None:
        """Reduction arguments of one pairwise block [b, b + m) computed into lg_x buffers.

        Returns the buffered values (None when the stage calls no vector math): the sums then
        read them back in NumPy's order, so only the math moves into the block loop.
        """
        if not self.calls_vmath(vals):
            return None
        li = self.nk + self.nr - 1
        args = sorted({self.spec.values[r].args[0] for r in reds} & vals)
        for a in args:
            self.emit(f"{self.ct(self.spec.values[a].dtype)} lg_x{a}[{size}];")
        self._open_r.append(li)
        ids = sorted(vals)
        loads = {i: self.load_source(i) for i in ids if self.spec.values[i].kind == "load"}
        stores = [(f"lg_x{a}[lg_q + lg_j]", a) for a in args]
        for i in ids:
            if self.stash.get(i, (0, -1))[1] == st:
                s = self.stash[i][0]
                stores.append((self.elem(s), i))
        self._open_r.pop()
        self.emit("{")
        self.depth += 1
        self.block_loop(li, b, m, False, ids, loads, stores)
        self.depth -= 1
        self.emit("}")
        return args


def blocked_extent(nk: int, nr: int, dims: list[int]) -> int:
    """The iteration count of the loop block loops run over (the innermost reduced loop, else
    the innermost kept loop); pairwise leaves of a reduced row are never shorter than
    min(row, 64), so this one extent decides whether any block range can be short."""
    if nr:
        return dims[nk + nr - 1]
    return dims[nk - 1] if nk else W
