"""Reductions over a strided axis as column blocks: the kept axis innermost (C only).

A kernel that keeps the columns of a row-major array and reduces its rows (the bias
gradient `g.sum(axis=0)`, a ReLU gradient fused with it, `x.max(axis=0)`) would, in the
shared structure (jit/render.py: kept loops around reduced loops), walk each column with
the row stride: every read a new cache line, and a 4 KB stride maps every line of a column
to the same few cache sets. That ran 30x slower than the same bytes read in order.

Here the innermost kept loop is cut into blocks of LG_C consecutive columns. A block keeps
its accumulators and its per-column values in small arrays, and every stage walks the
reduced loops in order, outermost first, with a `simd` loop over the block's columns
innermost: each row's slice of the block is read with unit stride, and one row's slice
of every input stays in cache. Each column still accumulates its rows one after another
in loop order, which is NumPy's order for a sum along a non-contiguous axis
(jit/render_order.py), so the values are the same bits as the row-wise structure's.

Used when every array that moves along the innermost kept loop has unit stride there and
no input read by a reduction moves with unit stride along the innermost reduced loop (then
the row-wise structure, with its pairwise sums, is the fast one). Threads split the blocks
(or the outer kept loops where the search made one parallel). Math functions keep their
plain names: scalar libm for every element, as in any loop that is not a block loop
(jit/render_block.py), so no element's value depends on its position in a vector.
"""

from __future__ import annotations

from jit.ir import Par
from jit.layout import Layout
from jit.render import Renderer
from jit.spec import Spec

#: columns per block: 1 KB of float32 per row and input, a few KB of accumulators
C = 256


def stage_stores(r: Renderer) -> dict[int, tuple[int, int]]:
    """Final outputs a reduction stage computes anyway: value -> (its output array, that stage).

    The ReLU gradient fused with the bias gradient computes the masked gradient for the sum
    and is also an output: the stage stores it as it goes, and the final stage, which would
    read the inputs once more to recompute it, has nothing left to do for it. Arrays already
    holding a value parked for the final stage (`Renderer._plan_stash`) are left alone.
    """
    first: dict[int, int] = {}
    for st in r.stages:
        for red in r.reds[st]:
            for v in r.need_full[r.spec.values[red].args[0]]:
                first.setdefault(v, st)
    taken = {a for a, _ in r.stash.values()}
    out: dict[int, tuple[int, int]] = {}
    for v, a in r.finals:
        if v in first and v not in out and v not in r.stash and a not in taken:
            out[v] = (a, first[v])
            taken.add(a)
    return out


def remaining_finals(r: Renderer) -> list[tuple[int, int]]:
    """The final outputs no stage stored (see `stage_stores`)."""
    return [(v, a) for v, a in r.finals if r.stash.get(v, (-1, -1))[0] != a]


def wants_columns(spec: Spec, layout: Layout) -> bool:
    """Whether the column-block structure suits this layout (module docstring)."""
    nk, nr = len(layout.kloops), len(layout.rloops)
    if not nk or not nr:
        return False
    k, inner = nk - 1, nk + nr - 1
    movers = [ai for ai in range(len(spec.arrays)) if layout.moves[ai][k]]
    if not movers or not all(layout.unit[ai][k] for ai in movers):
        return False
    read = {v.index for v in spec.values if v.kind == "load" and spec.full(v)}
    # An input broadcast along the kept axis (trend[:, None]) is read once per row whatever
    # the loop order: it must not veto column blocks that the other inputs need.
    strided = [ai for ai in read if layout.moves[ai][inner] and layout.moves[ai][k]]
    return bool(strided) and not any(layout.unit[ai][inner] for ai in strided)


class ColumnRenderer(Renderer):
    """C source of the column-block structure (module docstring)."""

    def __init__(self, spec: Spec, layout: Layout, assign: tuple[Par, ...]) -> None:
        super().__init__(spec, layout, assign)
        # no value parked for a read-back (every stage recomputes what it needs), but the
        # outputs a stage computes anyway are stored by that stage
        self.stash = {}
        self.stash = stage_stores(self)
        self.finals = remaining_finals(self)
        self.k = self.nk - 1
        self._in_block = False  # inside the loop over a block's columns: i{k} is defined

    # -- indexing -----------------------------------------------------------------------
    def index(self, ai: int) -> str:
        """Offset of array `ai`: outer kept loops, the block's column, the open reduced loops."""
        moves, unit, k = self.layout.moves[ai], self.layout.unit[ai], self.k
        terms = [f"o{ai}"] if any(moves[:k]) else []
        if moves[k] and self._in_block:
            terms.append(f"i{k}" if unit[k] else f"i{k} * s{ai}_{k}")
        terms += [f"i{li} * s{ai}_{li}" for li in self._open_r if moves[li]]
        return " + ".join(terms) or "0"

    # -- structure ----------------------------------------------------------------------
    def body(self) -> list[str]:
        """Outer kept loops, the block loop, and each stage over the block's columns."""
        self._open_r: list[int] = []
        k = self.k
        outer_par = False
        for li in range(k):
            par = self.kpar[li] if self.kpar[li] in (Par.BLOCKS, Par.SEQUENTIAL) else Par.BLOCKS
            par = Par.SEQUENTIAL if outer_par else par
            outer_par = outer_par or par is Par.BLOCKS
            if par is Par.BLOCKS:
                self.emit("#pragma omp parallel for schedule(static)")
            self.emit(f"for (int64_t i{li} = 0; i{li} < n{li}; i{li}++) {{")
            self.depth += 1
        for ai in range(len(self.spec.arrays)):
            outer = [f"i{li} * s{ai}_{li}" for li in range(k) if self.layout.moves[ai][li]]
            if outer:
                self.emit(f"const int64_t o{ai} = {' + '.join(outer)};")
        if not outer_par:
            self.emit("#pragma omp parallel for schedule(static)")
        self.emit(f"for (int64_t lg_c = 0; lg_c < n{k}; lg_c += {C}) {{")
        self.depth += 1
        self.emit(f"const int64_t lg_nc = n{k} - lg_c < {C} ? n{k} - lg_c : {C};")
        self.kept: list[int] = []  # per-column values held in lg_k arrays
        done: set[int] = set()
        self.block_values(0, done)
        for st in self.stages:
            self.stage(st, done)
            self.block_values(st, done)
        if self.finals:
            self.final(done)
        self.depth -= 1
        self.emit("}")
        for _ in range(k):
            self.depth -= 1
            self.emit("}")
        return self.lines

    def _columns_open(self, body_reads: set[int]) -> None:
        """`simd` loop over the block's columns, with the per-column values it reads."""
        self.emit("#pragma omp simd")
        self.emit("for (int64_t lg_j = 0; lg_j < lg_nc; lg_j++) {")
        self.depth += 1
        self.emit(f"const int64_t i{self.k} = lg_c + lg_j; (void)i{self.k};")
        self._in_block = True
        for i in self.kept:
            if i in body_reads:
                self.emit(f"const {self.ct(self.spec.values[i].dtype)} v{i} = lg_k{i}[lg_j];")

    def _columns_close(self) -> None:
        self._in_block = False
        self.depth -= 1
        self.emit("}")

    def _reads(self, ids: set[int]) -> set[int]:
        """Values the lines of `ids` name (their operands and centres)."""
        out: set[int] = set()
        for i in ids:
            v = self.spec.values[i]
            out |= set(v.args)
            if v.center >= 0:
                out.add(v.center)
        return out

    def _hold(self, ids: list[int]) -> None:
        for i in ids:
            self.emit(f"{self.ct(self.spec.values[i].dtype)} lg_k{i}[{C}];")
            self.kept.append(i)

    def _columns_hold_open(self, ids: list[int], reads: set[int]) -> None:
        """Arrays for the values `ids` the next column loop computes, then that loop."""
        for i in ids:
            self.emit(f"{self.ct(self.spec.values[i].dtype)} lg_k{i}[{C}];")
        self._columns_open(reads - set(ids))
        self.kept += ids

    def block_values(self, level: int, done: set[int]) -> None:
        """Per-column values of `level` into lg_k arrays, and the outputs among them."""
        ids = []
        for i, v in enumerate(self.spec.values):
            if i in done or i not in self.needed or self.is_full(i) or v.kind in ("reduce", "scalar"):
                continue
            if v.level == level:
                ids.append(i)
        outs = [
            (v, a) for v, a in self.spec.outputs if not self.is_full(v) and self.spec.values[v].level == level
        ]
        outs = [(v, a) for v, a in outs if v in done or v in ids]
        if not ids and not outs:
            return
        self._columns_hold_open(ids, self._reads(set(ids)) | {v for v, _ in outs})
        for i in ids:
            line = self.value_line(i)
            if line:
                self.emit(line)
            self.emit(f"lg_k{i}[lg_j] = v{i};")
            done.add(i)
        for v, a in outs:
            self.store(a, v, reduced=True)
        self._columns_close()

    def stage(self, st: int, done: set[int]) -> None:
        """Reductions of level `st`: accumulator arrays, reduced loops in order, columns inside."""
        reds = self.reds[st]
        vals: set[int] = set()
        for r in reds:
            vals |= self.need_full[self.spec.values[r].args[0]]
        self._hold(list(reds))
        for r in reds:
            self.emit(f"{self.acc_type(r)} lg_a{r}[{C}];")
            if self.nan_flag(r):
                self.emit(f"int lg_n{r}[{C}];")
        self._columns_open(set())
        for r in reds:
            self.declare_acc(r)
            self.emit(f"lg_a{r}[lg_j] = acc{r};")
            if self.nan_flag(r):
                self.emit(f"lg_n{r}[lg_j] = 0;")
        self._columns_close()
        for j in range(self.nr):
            li = self.nk + j
            self.emit(f"for (int64_t i{li} = 0; i{li} < n{li}; i{li}++) {{")
            self.depth += 1
            self._open_r.append(li)
        self._columns_open(self._reads(vals | set(reds)))
        for r in reds:
            self.emit(f"{self.acc_type(r)} acc{r} = lg_a{r}[lg_j];")
            if self.nan_flag(r):
                self.emit(f"int nan{r} = lg_n{r}[lg_j];")
        self.stage_values(st, vals)
        for r in reds:
            self.accumulate(r)
            self.emit(f"lg_a{r}[lg_j] = acc{r};")
            if self.nan_flag(r):
                self.emit(f"lg_n{r}[lg_j] = nan{r};")
        self._columns_close()
        for _ in range(self.nr):
            self._open_r.pop()
            self.depth -= 1
            self.emit("}")
        self._columns_open(set())
        for r in reds:
            self.emit(f"{self.acc_type(r)} acc{r} = lg_a{r}[lg_j];")
            if self.nan_flag(r):
                self.emit(f"int nan{r} = lg_n{r}[lg_j];")
            self.finish(r)
            self.emit(f"lg_k{r}[lg_j] = v{r};")
            done.add(r)
        self._columns_close()

    def final(self, done: set[int]) -> None:
        """Outputs that vary along the reduced axes: the reduced loops once more."""
        for j in range(self.nr):
            li = self.nk + j
            self.emit(f"for (int64_t i{li} = 0; i{li} < n{li}; i{li}++) {{")
            self.depth += 1
            self._open_r.append(li)
        ids = self.final_values()
        self._columns_open(self._reads(ids) | {v for v, _ in self.finals})
        for i in sorted(ids):
            if i in self.stash:  # stored by a stage: read back
                a = self.stash[i][0]
                self.emit(f"const {self.ct(self.spec.values[i].dtype)} v{i} = a{a}[{self.index(a)}];")
                continue
            line = self.value_line(i)
            if line:
                self.emit(line)
        for v, a in self.finals:
            self.store(a, v, reduced=False)
        self._columns_close()
        for _ in range(self.nr):
            self._open_r.pop()
            self.depth -= 1
            self.emit("}")

    def open_loop(self, li: int, par: Par, reds: list[int], kept: bool) -> None:
        """Unused: body() prints every loop itself."""
        raise AssertionError("ColumnRenderer prints its own loops")
