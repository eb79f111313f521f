"""Kernel source from a spec, a layout and an A* assignment: the parts C and CUDA share.

A kernel is the kept-axis loops (K) around a sequence of stages. Stage s runs the reduced
loops (R) accumulating the reductions of level s; after it, values that depend only on
kept axes are computed once per K iteration (the finished reductions, their shifts and
scales). A last stage runs the R loops again to store outputs that vary along R. Values
that vary along R are recomputed in every stage that needs them (fusion only allows that
when it is cheaper than storing them). Elementwise kernels have no R loops: everything
happens in the innermost K loop. Subclasses print loop headers, reductions and guards.
"""

from __future__ import annotations

import numpy as np

from jit import types
from jit.ir import Par
from jit.layout import Layout, _cost, deps_full, final_outputs, stage_reductions
from jit.spec import Spec


class Renderer:
    """Shared structure; `cuda` selects type spellings, subclasses the loop syntax."""

    cuda = False
    #: outputs written through row buffers (jit/render_rows.py; the C row renderer sets them)
    streamed: list[int] = []

    def __init__(self, spec: Spec, layout: Layout, assign: tuple[Par, ...]) -> None:
        self.spec = spec
        self.layout = layout
        self.nk = len(layout.kloops)
        self.nr = len(layout.rloops)
        self.lines: list[str] = []
        self.depth = 1
        self.need_full = deps_full(spec)
        self.reds = stage_reductions(spec)
        self.finals = final_outputs(spec)
        self.stages = sorted(self.reds)
        self.final_stage = max(self.stages, default=0) + 1
        self.needed = self._needed()
        self.stash = self._plan_stash()
        # Parallelism per stage: kept loops are fused across stages (same assignment).
        per = self.nk + self.nr
        self.kpar = list(assign[: self.nk])
        self.rpar: dict[int, list[Par]] = {}
        all_stages = self.stages + ([self.final_stage] if self.finals or not self.nr else [])
        for i, st in enumerate(all_stages):
            self.rpar[st] = list(assign[i * per + self.nk : (i + 1) * per])

    # -- helpers ------------------------------------------------------------------------
    def ct(self, dtype: np.dtype) -> str:
        """C type name."""
        return types.ctype(dtype, self.cuda)

    def emit(self, line: str) -> None:
        """Append one indented line."""
        self.lines.append("  " * self.depth + line)

    def _needed(self) -> set[int]:
        need: set[int] = set()
        stack = [v for v, _ in self.spec.outputs]
        while stack:
            v = stack.pop()
            if v in need:
                continue
            need.add(v)
            val = self.spec.values[v]
            stack.extend(val.args)
            if val.center >= 0:
                stack.append(val.center)
        return need

    def is_full(self, i: int) -> bool:
        """Varies along a reduced axis."""
        return self.spec.full(self.spec.values[i])

    def operand(self, a: int, dtype: np.dtype) -> str:
        """Value `a` as an operand of loop dtype `dtype`."""
        src = self.spec.values[a].dtype
        if src == dtype:
            return f"v{a}"
        if types.is_complex(dtype):
            return f"lg_cvt_{types.suffix(dtype)}(v{a})"  # NumPy's promotion: (x, +0)
        if types.is_complex(src):
            return f"(({self.ct(dtype)})lg_real(v{a}))"  # astype to a real: the real part
        return f"(({self.ct(dtype)})v{a})"

    def stage_values(self, st: int, vals: set[int]) -> None:
        """Stage st's values at the current loop point, stashing those later stages read."""
        for i in sorted(vals):
            line = self.value_line(i)
            if line:
                self.emit(line)
            if self.stash.get(i, (0, -1))[1] == st:
                self.emit(f"{self.elem(self.stash[i][0])} = v{i};")

    def value_line(self, i: int) -> str | None:
        """The declaration computing value i (loads, elementwise); None for others."""
        v = self.spec.values[i]
        t = self.ct(v.dtype)
        if v.kind == "load":
            return f"const {t} v{i} = a{v.index}[{self.index(v.index)}];"
        if v.kind == "elem":
            ops = [self.operand(a, dt) for a, dt in zip(v.args, v.loops)]
            if types.is_complex(v.dtype):
                # a struct cannot be cast: complex templates give the value's own type
                return f"const {t} v{i} = {v.expr.format(*ops)};"
            return f"const {t} v{i} = ({t})({v.expr.format(*ops)});"
        return None

    def index(self, ai: int) -> str:
        """Element offset of array `ai` at the current loop nest point."""
        terms = []
        if any(self.layout.moves[ai][: self.nk]):
            terms.append(f"o{ai}")
        for li in self._open_r:
            if self.layout.moves[ai][li]:
                terms.append(self._term(ai, li))
        if not self.nr and self.nk:
            return self._koffset(ai, inline_last=True) or "0"
        return " + ".join(terms) or "0"

    def elem(self, ai: int) -> str:
        """The element of array `ai` at the current loop nest point (an output may live in a row buffer)."""
        return f"a{ai}[{self.index(ai)}]"

    def row_begin(self) -> None:
        """Hook at the start of each kept iteration of a reduction kernel (after the offsets)."""

    def row_end(self) -> None:
        """Hook at the end of each kept iteration of a reduction kernel (after the final stage)."""

    def _term(self, ai: int, li: int) -> str:
        inner = li == self.nk + self.nr - 1 or (not self.nr and li == self.nk - 1)
        if inner and self.layout.unit[ai][li]:
            return f"i{li}"
        return f"i{li} * s{ai}_{li}"

    def _koffset(self, ai: int, inline_last: bool) -> str:
        return " + ".join(self._term(ai, li) for li in range(self.nk) if self.layout.moves[ai][li])

    # -- structure ----------------------------------------------------------------------
    def body(self) -> list[str]:
        """Kernel body lines (after the argument unpacking)."""
        self._open_r: list[int] = []
        spec = self.spec
        for li in range(self.nk):
            self.open_loop(li, self.kpar[li], [], kept=True)
        if self.nr:
            for ai in range(len(spec.arrays)):
                off = self._koffset(ai, inline_last=False)
                if off:
                    self.emit(f"const int64_t o{ai} = {off};")
            self.row_begin()
        done: set[int] = set()
        self.k_values(0, done)
        for st in self.stages:
            self.stage(st, done)
            self.k_values(st, done)
        if self.finals or not self.nr:
            self.final(done)
        if self.nr:
            self.row_end()
        for li in range(self.nk):
            self.close_loop(li, kept=True)
        return self.lines

    def k_values(self, level: int, done: set[int]) -> None:
        """Kept-axis values of `level` (and outputs among them)."""
        if not self.nr:
            return
        for i, v in enumerate(self.spec.values):
            if i in done or i not in self.needed or self.is_full(i) or v.kind == "reduce":
                continue
            if v.level != level:
                continue
            line = self.value_line(i)
            if line:
                self.emit(line)
            done.add(i)
        for v, a in self.spec.outputs:
            if v in done and not self.is_full(v) and self.spec.values[v].level == level:
                self.store(a, v, reduced=True)

    #: whether each element of a row is handled by the same thread in every stage (true for
    #: the C loops), so a stage may park a value in an output and the final stage read it back
    stash_ok = True

    def _plan_stash(self) -> dict[int, tuple[int, int]]:
        """Values the final stage reads back from an output instead of recomputing them.

        A value computed for a reduction (exp(x - max) for softmax's sum) and needed again
        by the final stage is stored into a final output of the same axes and dtype while
        that row is in cache, then read back: a load instead of a second exp. Returns value
        -> (output array, stage that stores it).
        """
        if not self.stash_ok or not self.finals:
            return {}
        first: dict[int, int] = {}
        for st in self.stages:
            for r in self.reds[st]:
                for v in self.need_full[self.spec.values[r].args[0]]:
                    first.setdefault(v, st)
        need = set().union(*(self.need_full[v] for v, _ in self.finals))
        cost = {v: sum(_cost(self.spec.values[u]) for u in self.need_full[v]) for v in first}
        free = {a for _, a in self.finals}
        out: dict[int, tuple[int, int]] = {}
        for v in sorted(first, key=lambda u: -cost[u]):
            val = self.spec.values[v]
            if v not in need or val.kind != "elem" or cost[v] < 8 or any(v in self.need_full[u] for u in out):
                continue
            for a in sorted(free):
                ref = self.spec.arrays[a]
                if ref.dtype == val.dtype and {r for r in ref.roots if r >= 0} == set(val.axes):
                    out[v] = (a, first[v])
                    free.discard(a)
                    break
        return out

    def final_values(self) -> set[int]:
        """Full-space values the final stage computes (stopping at values read back)."""
        out: set[int] = set()
        stack = [v for v, _ in self.finals]
        while stack:
            v = stack.pop()
            val = self.spec.values[v]
            if v in out or not self.is_full(v) or val.kind == "reduce":
                continue
            out.add(v)
            if v not in self.stash:
                stack.extend(val.args)
        return out

    def stage(self, st: int, done: set[int]) -> None:
        """Accumulate the reductions of level `st` over the reduced loops."""
        reds = self.reds[st]
        for r in reds:
            self.declare_acc(r)
        self.open_rloops(st, reds)
        vals: set[int] = set()
        for r in reds:
            vals |= self.need_full[self.spec.values[r].args[0]]
        self.stage_values(st, vals)
        for r in reds:
            self.accumulate(r)
        self.close_rloops(st)
        for r in reds:
            self.finish(r)
            done.add(r)

    def final(self, done: set[int]) -> None:
        """Store the outputs (all of them for elementwise kernels)."""
        if not self.nr:
            for i in sorted(self.needed):
                line = self.value_line(i)
                if line:
                    self.emit(line)
            for v, a in self.spec.outputs:
                self.store(a, v, reduced=False)
            return
        self.open_rloops(self.final_stage, [])
        for i in sorted(self.final_values()):
            if i in self.stash:
                a = self.stash[i][0]
                self.emit(f"const {self.ct(self.spec.values[i].dtype)} v{i} = {self.elem(a)};")
                continue
            line = self.value_line(i)
            if line:
                self.emit(line)
        for v, a in self.finals:
            self.store(a, v, reduced=False)
        self.close_rloops(self.final_stage)

    def open_rloops(self, st: int, reds: list[int]) -> None:
        """Open the reduced loops of a stage."""
        for j in range(self.nr):
            li = self.nk + j
            self.open_loop(li, self.rpar[st][j], reds, kept=False)
            self._open_r.append(li)

    def close_rloops(self, st: int) -> None:
        """Close them (innermost first)."""
        for j in reversed(range(self.nr)):
            self._open_r.pop()
            self.close_loop(self.nk + j, kept=False)

    # -- reductions ---------------------------------------------------------------------
    def acc_type(self, r: int) -> str:
        """Accumulator C type of reduction r."""
        return self.ct(types.acc_dtype(self.spec.values[r].dtype))

    def declare_acc(self, r: int) -> None:
        """Accumulator (and NaN flag) of reduction r, at its identity."""
        v = self.spec.values[r]
        acc = types.acc_dtype(v.dtype)
        self.emit(f"{self.acc_type(r)} acc{r} = {types.literal(v.identity, acc)};")
        if self.nan_flag(r):
            self.emit(f"int nan{r} = 0;")

    def nan_flag(self, r: int) -> bool:
        """Float max/min track NaNs apart (vector max instructions drop them)."""
        v = self.spec.values[r]
        return v.combine in ("max", "min") and v.dtype.kind == "f" and not self.cuda

    def update(self, r: int) -> str:
        """The statement folding the current element into accumulator r."""
        v = self.spec.values[r]
        x = f"v{v.args[0]}"
        if v.center >= 0:
            return f"{{ const {self.acc_type(r)} d{r} = {x} - v{v.center}; acc{r} += d{r} * d{r}; }}"
        c = v.combine
        if c == "add":
            return f"acc{r} += {x};"
        if c == "mul":
            return f"acc{r} *= {x};"
        if c == "or":
            return f"acc{r} = acc{r} || {x};"
        if c == "and":
            return f"acc{r} = acc{r} && {x};"
        cmp = ">" if c == "max" else "<"
        if self.nan_flag(r):
            return f"acc{r} = {x} {cmp} acc{r} ? {x} : acc{r}; nan{r} |= ({x} != {x});"
        return f"acc{r} = ({x} {cmp} acc{r} || {x} != {x}) ? {x} : acc{r};"

    def accumulate(self, r: int) -> None:
        """Fold one element into reduction r."""
        self.emit(self.update(r))

    def finish_expr(self, r: int) -> str:
        """The reduction's result from its accumulator."""
        v = self.spec.values[r]
        t = self.ct(v.dtype)
        ddof = repr(float(v.ddof))
        divisor = f"(((double)lg_count - {ddof}) > 0 ? ((double)lg_count - {ddof}) : 0.0)"
        return (
            v.finish.replace("{acc}", f"acc{r}")
            .replace("{T}", t)
            .replace("{count}", "lg_count")
            .replace("{divisor}", divisor)
        )

    def finish(self, r: int) -> None:
        """Turn accumulator r into value v{r}."""
        if self.nan_flag(r):
            self.emit(f"if (nan{r}) acc{r} = NAN;")
        t = self.ct(self.spec.values[r].dtype)
        self.emit(f"const {t} v{r} = ({t})({self.finish_expr(r)});")

    # -- target hooks -------------------------------------------------------------------
    def open_loop(self, li: int, par: Par, reds: list[int], kept: bool) -> None:
        """Print a loop header for loop `li`."""
        raise NotImplementedError

    def close_loop(self, li: int, kept: bool) -> None:
        """Print a loop end."""
        self.depth -= 1
        self.emit("}")

    def store(self, ai: int, v: int, reduced: bool) -> None:
        """Write value v to output array ai at the current point."""
        self.emit(f"{self.elem(ai)} = v{v};")

    def reduction_clause(self, reds: list[int]) -> str:
        """OpenMP reduction clauses for the accumulators of `reds`."""
        ops = {"add": "+", "mul": "*", "max": "max", "min": "min", "or": "||", "and": "&&"}
        parts = []
        for r in reds:
            v = self.spec.values[r]
            op = "+" if v.center >= 0 else ops[v.combine]
            parts.append(f"reduction({op}:acc{r})")
            if self.nan_flag(r):
                parts.append(f"reduction(|:nan{r})")
        return (" " + " ".join(parts)) if parts else ""
