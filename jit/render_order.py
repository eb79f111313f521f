"""Float sums and products in NumPy's order, whatever the thread count (C renderer only).

NumPy adds a float reduction along its innermost (unit-stride) axis pairwise: blocks of at
most 128 elements go into 8 accumulators combined as ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)),
blocks under 8 elements one by one, and longer runs split at n2 = n/2 - (n/2)%8 and add the
two halves' sums; the result is 0 + that sum. Along any other axis it adds element after
element, and it multiplies element after element always. A stage holding such a reduction
is rendered here in exactly that order: outer reduced loops in order, the innermost reduced
loop pairwise when every array it reads steps through it with unit stride, else in order.

Threads never split an ordered reduction: they split the kept loops (A* is told that an
ordered reduced loop is sequential), and a sum with no kept loop splits into whole subtrees
of the pairwise recursion (nodes of at most max(16384, n/64) elements, so at most 256 of
them), summed in parallel and combined in the recursion's order: the same bits for any
thread count. Reductions that are exact in any order (integers, max, min, any, all) keep
their OpenMP clauses, also inside an ordered stage.

Rows are read from memory by the first stage and then served from cache to the later ones,
so without help the first stage waits for memory while the later ones leave it idle. Each
pairwise block of the last stage therefore prefetches the same block of the next row (the
next iteration of the innermost kept loop) of every input the kernel reads with unit stride
(`prefetch_rows`): the next row arrives while this one is computed (a softmax of 4096-float
rows ran 20% faster on one core). Prefetches change no value.
"""

from __future__ import annotations

from jit import types
from jit.spec import Spec

#: NumPy's pairwise block (PW_BLOCKSIZE)
LEAF = 128
#: pairwise blocks summed side by side (independent add chains: one chain waits on the adder's
#: latency, four keep it busy)
GROUP = 4
#: smallest subtree a thread sums alone when a sum has no kept loop
TOP_LEAF = 16384
#: elements per cache line of the narrowest dtype prefetched (float32: 16 per 64 bytes)
LINE = 16


def is_ordered(spec: Spec, r: int, exact: bool = True) -> bool:
    """Whether reduction value r must run in NumPy's order (a float sum or product)."""
    v = spec.values[r]
    if not exact or v.kind != "reduce":
        return False
    return types.acc_dtype(v.dtype).kind == "f" and (v.center >= 0 or v.combine in ("add", "mul"))


def ordered_levels(spec: Spec, exact: bool = True) -> set[int]:
    """Stages (levels) that hold an ordered reduction; their reduced loops stay sequential."""
    return {v.level for i, v in enumerate(spec.values) if is_ordered(spec, i, exact)}


class OrderedStages:
    """Mixin for the C renderer: `stage` renders ordered stages itself (module docstring)."""

    exact = True

    def _is_add(self, r: int) -> bool:
        v = self.spec.values[r]
        return v.center >= 0 or v.combine == "add"

    def stage(self, st: int, done: set[int]) -> None:
        """Accumulate the reductions of level `st`, ordered ones in NumPy's order."""
        reds = self.reds[st]
        if not self.nr or not any(is_ordered(self.spec, r, self.exact) for r in reds):
            super().stage(st, done)
            return
        for r in reds:
            self.declare_acc(r)
        vals: set[int] = set()
        for r in reds:
            vals |= self.need_full[self.spec.values[r].args[0]]
        adds = [r for r in reds if is_ordered(self.spec, r) and self._is_add(r)]
        muls = [r for r in reds if is_ordered(self.spec, r) and not self._is_add(r)]
        inner = self.nk + self.nr - 1
        for j in range(self.nr - 1):
            self._plain_open(self.nk + j)
        if adds and self._unit(vals, inner):
            self._prefetch = self.prefetch_rows() if st == max(self.stages) else []
            if self.nk == 0 and self.nr == 1 and not muls:
                self._parallel_pairwise(st, vals, reds, adds)
            else:
                self._pairwise(st, vals, reds, adds, not muls, "0", f"n{inner}", "acc{r} += {v};")
        else:
            self._plain_open(inner)
            self.stage_values(st, vals)
            for r in reds:
                self.accumulate(r)
            self._plain_close()
        for _ in range(self.nr - 1):
            self._plain_close()
        for r in reds:
            self.finish(r)
            done.add(r)

    # -- pieces -----------------------------------------------------------------------------
    _prefetch: list[int] = []

    def prefetch_rows(self) -> list[int]:
        """Inputs whose next row the last stage prefetches (see the module docstring)."""
        if not self.nk or self.nr != 1:
            return []
        k, inner = self.nk - 1, self.nk
        loaded = {v.index for v in self.spec.values if v.kind == "load" and self.spec.full(v)}
        return [a for a in sorted(loaded) if self.layout.moves[a][k] and self.layout.unit[a][inner]]

    def _prefetch_next(self, b: str, m: str) -> None:
        """Prefetch [b, b + m) of the next row of each `_prefetch` array."""
        k = self.nk - 1
        if not self._prefetch:
            return
        self.emit(f"if (i{k} + 1 < n{k}) {{")
        self.emit(f"  for (int64_t lg_g = 0; lg_g < {m}; lg_g += {LINE}) {{")
        for a in self._prefetch:
            self.emit(f"    __builtin_prefetch(a{a} + o{a} + s{a}_{k} + {b} + lg_g, 0, 3);")
        self.emit("  }")
        self.emit("}")

    def _unit(self, vals: set[int], li: int) -> bool:
        arrays = {self.spec.values[v].index for v in vals if self.spec.values[v].kind == "load"}
        return all(self.layout.unit[a][li] for a in arrays if self.layout.moves[a][li])

    def _plain_open(self, li: int) -> None:
        self.emit(f"for (int64_t i{li} = 0; i{li} < n{li}; i{li}++) {{")
        self.depth += 1
        self._open_r.append(li)

    def _plain_close(self) -> None:
        self._open_r.pop()
        self.depth -= 1
        self.emit("}")

    def _leaf_values(self, st: int, vals: set[int], buffered: list[int] | None, b: str) -> None:
        """The values a pairwise block folds in: computed here, or read from the block buffers."""
        if buffered is None:
            self.stage_values(st, vals)
            return
        li = self.nk + self.nr - 1
        for a in buffered:
            self.emit(f"const {self.ct(self.spec.values[a].dtype)} v{a} = lg_x{a}[i{li} - {b}];")

    def _term_into(self, r: int, target: str) -> str:
        """`target` set to the term reduction r adds for the current element."""
        v = self.spec.values[r]
        x = f"v{v.args[0]}"
        if v.center >= 0:
            return f"{{ const {self.acc_type(r)} d{r} = {x} - v{v.center}; {target} = d{r} * d{r}; }}"
        return f"{target} = {x};"

    def _add_into(self, r: int, target: str) -> str:
        v = self.spec.values[r]
        x = f"v{v.args[0]}"
        if v.center >= 0:
            return f"{{ const {self.acc_type(r)} d{r} = {x} - v{v.center}; {target} += d{r} * d{r}; }}"
        return f"{target} += {x};"

    def _pairwise(
        self,
        st: int,
        vals: set[int],
        reds: list[int],
        adds: list[int],
        simd: bool,
        start: str,
        n: str,
        out: str,
    ) -> None:
        """The pairwise sum of [start, start + n) over the innermost reduced loop; `out` stores it.

        Leaves come GROUP at a time from the recursion (`_leaves`); each leaf's sum then enters
        the recursion's stack in order, with its pending combinations, as it would alone.
        """
        self.emit("{")
        self.depth += 1
        self.emit("lg_pw_t lg_it; int64_t lg_b, lg_n; int lg_c, lg_sp = 0;")
        for r in adds:
            self.emit(f"{self.acc_type(r)} lg_v{r}[64];")
        self.emit(f"lg_pw_init(&lg_it, {start}, {n}, {LEAF});")
        group = GROUP if simd else 1
        self.emit(f"int64_t lg_gb[{group}], lg_gn[{group}]; int lg_gc[{group}], lg_gk;")
        self.emit("for (;;) {")
        self.depth += 1
        self.emit("lg_gk = 0;")
        self.emit(
            f"while (lg_gk < {group} && lg_pw_next(&lg_it, &lg_gb[lg_gk], &lg_gn[lg_gk], &lg_gc[lg_gk])) lg_gk++;"
        )
        self.emit("if (!lg_gk) break;")
        self.emit("lg_b = lg_gb[0]; lg_n = lg_gb[lg_gk - 1] + lg_gn[lg_gk - 1] - lg_b;")
        self._leaves(st, vals, reds, adds, group, simd)
        self.depth -= 1
        self.emit("}")
        for r in adds:
            self.emit("if (lg_sp) " + out.format(r=r, v=f"lg_v{r}[0]"))
        self.depth -= 1
        self.emit("}")

    def _leaves(
        self, st: int, vals: set[int], reds: list[int], adds: list[int], group: int, simd: bool
    ) -> None:
        """The lg_gk adjacent pairwise blocks lg_gb[h] + [0, lg_gn[h]), covering [lg_b, lg_b + lg_n).

        Each block keeps its own 8 accumulators (one 8-lane vector: lane j adds elements j,
        j + 8, ... of the block, NumPy's order) and adds its elements in its own order, so every
        block's sum has the bits it has alone. When a full group is there, the groups of 8 that
        all its blocks have are added side by side (independent chains); then, block by block,
        its further groups of 8, its tail, and its sum onto the recursion's stack. Values are
        computed by an `omp simd` loop of 8 into a small array that the vector adds
        (accumulators indexed by the lane were not kept in registers by gcc once several blocks
        were open).
        """
        li = self.nk + self.nr - 1
        self._prefetch_next("lg_b", "lg_n")
        buffered = self.leaf_buffer(st, vals, reds, "lg_b", "lg_n", group * LEAF)
        for r in adds:
            t = self.acc_type(r)
            self.emit(f"typedef {t} lg_a8_{r} __attribute__((vector_size(8 * sizeof({t}))));")
            self.emit(f"lg_a8_{r} lg_ra{r}[{group}];")
        self.emit("int64_t lg_mm = 0;")
        if group > 1:
            for r in adds:
                for h in range(group):
                    self.emit(f"lg_a8_{r} lg_r{r}_{h} = {{0}};")
            self.emit(f"if (lg_gk == {group}) {{")
            self.depth += 1
            self.emit("lg_mm = lg_gn[0] - lg_gn[0] % 8;")
            for h in range(1, group):
                self.emit(f"if (lg_gn[{h}] - lg_gn[{h}] % 8 < lg_mm) lg_mm = lg_gn[{h}] - lg_gn[{h}] % 8;")
            self._groups(
                st,
                vals,
                reds,
                adds,
                buffered,
                [(str(h), f"lg_gb[{h}]") for h in range(group)],
                "0",
                "lg_mm",
                simd,
            )
            self.depth -= 1
            self.emit("}")
            for r in adds:
                for h in range(group):
                    self.emit(f"lg_ra{r}[{h}] = lg_r{r}_{h};")
        else:
            for r in adds:
                self.emit(f"lg_ra{r}[0] = (lg_a8_{r}){{0}};")
        self.emit("for (int lg_h = 0; lg_h < lg_gk; lg_h++) {")
        self.depth += 1
        self.emit("const int64_t lg_hb = lg_gb[lg_h], lg_hn = lg_gn[lg_h], lg_m8 = lg_hn - lg_hn % 8;")
        for r in adds:
            self.emit(f"lg_a8_{r} lg_r{r}_x = lg_ra{r}[lg_h];")
        self._groups(st, vals, reds, adds, buffered, [("x", "lg_hb")], "lg_mm", "lg_m8", simd)
        for r in adds:
            a = [f"lg_r{r}_x[{j}]" for j in range(8)]
            tree = f"(({a[0]} + {a[1]}) + ({a[2]} + {a[3]})) + (({a[4]} + {a[5]}) + ({a[6]} + {a[7]}))"
            self.emit(f"{self.acc_type(r)} lg_l{r} = lg_m8 ? {tree} : 0;")
        self.emit(f"for (int64_t i{li} = lg_hb + lg_m8; i{li} < lg_hb + lg_hn; i{li}++) {{")
        self.depth += 1
        self._open_r.append(li)
        self._leaf_values(st, vals, buffered, "lg_b")
        for r in reds:
            self.emit(self._add_into(r, f"lg_l{r}") if r in adds else self.update(r))
        self._open_r.pop()
        self.depth -= 1
        self.emit("}")
        for r in adds:
            self.emit(f"lg_v{r}[lg_sp] = lg_l{r};")
        self.emit("lg_sp++; lg_c = lg_gc[lg_h];")
        self._close_pending(adds, "lg_v", "lg_c")
        self.depth -= 1
        self.emit("}")

    def _groups(
        self,
        st: int,
        vals: set[int],
        reds: list[int],
        adds: list[int],
        buffered: list[int] | None,
        blocks: list[tuple[str, str]],
        lo: str,
        hi: str,
        simd: bool,
    ) -> None:
        """Groups of 8 at offsets [lo, hi) of each block (accumulator suffix, start), side by side."""
        li = self.nk + self.nr - 1
        others = [r for r in reds if r not in adds]
        self.emit(f"for (int64_t lg_k = {lo}; lg_k < {hi}; lg_k += 8) {{")
        self.depth += 1
        for h, start in blocks:
            # the group's terms go straight into a vector variable: an array copied into one
            # by memcpy was stored as two 16-byte halves and reloaded whole on AVX2 machines
            # (a store-forwarding stall, a third of a 4096-wide softmax's time)
            for r in adds:
                self.emit(f"lg_a8_{r} lg_t{r}_{h};")
            if simd:
                self.emit("#pragma omp simd" + self.reduction_clause(others))
            self.emit("for (int lg_j = 0; lg_j < 8; lg_j++) {")
            self.depth += 1
            self.emit(f"const int64_t i{li} = {start} + lg_k + lg_j;")
            self._open_r.append(li)
            self._leaf_values(st, vals, buffered, "lg_b")
            for r in reds:
                self.emit(self._term_into(r, f"lg_t{r}_{h}[lg_j]") if r in adds else self.update(r))
            self._open_r.pop()
            self.depth -= 1
            self.emit("}")
            for r in adds:
                self.emit(f"lg_r{r}_{h} += lg_t{r}_{h};")
        self.depth -= 1
        self.emit("}")

    def _close_pending(self, adds: list[int], stack: str, count: str) -> None:
        adds_ = " ".join(f"{stack}{r}[lg_sp - 1] += {stack}{r}[lg_sp];" for r in adds)
        self.emit(f"for (; {count} > 0; {count}--) {{ lg_sp--; {adds_} }}")

    def _parallel_pairwise(self, st: int, vals: set[int], reds: list[int], adds: list[int]) -> None:
        """No kept loop: threads sum whole subtrees, combined afterwards in the tree's order."""
        li = self.nk
        self.emit("{")
        self.depth += 1
        self.emit(f"const int64_t lg_T = n{li} / 64 > {TOP_LEAF} ? n{li} / 64 : {TOP_LEAF};")
        # a subtree's parent has more than lg_T elements, so it has at least lg_T / 4: <= 256
        self.emit("lg_pw_t lg_top; int64_t lg_ts[320], lg_tn[320]; int lg_tc[320], lg_nt = 0;")
        self.emit(f"lg_pw_init(&lg_top, 0, n{li}, lg_T);")
        self.emit("while (lg_pw_next(&lg_top, &lg_ts[lg_nt], &lg_tn[lg_nt], &lg_tc[lg_nt])) lg_nt++;")
        for r in adds:
            self.emit(f"{self.acc_type(r)} lg_p{r}[320];")
        others = [r for r in reds if r not in adds]
        self.emit("#pragma omp parallel for schedule(static)" + self.reduction_clause(others))
        self.emit("for (int lg_t = 0; lg_t < lg_nt; lg_t++) {")
        self.depth += 1
        self._pairwise(st, vals, reds, adds, True, "lg_ts[lg_t]", "lg_tn[lg_t]", "lg_p{r}[lg_t] = {v};")
        self.depth -= 1
        self.emit("}")
        self.emit("int lg_sp = 0;")
        for r in adds:
            self.emit(f"{self.acc_type(r)} lg_w{r}[64];")
        self.emit("for (int lg_t = 0; lg_t < lg_nt; lg_t++) {")
        self.depth += 1
        for r in adds:
            self.emit(f"lg_w{r}[lg_sp] = lg_p{r}[lg_t];")
        self.emit("lg_sp++;")
        self.emit("int lg_c = lg_tc[lg_t];")
        self._close_pending(adds, "lg_w", "lg_c")
        self.depth -= 1
        self.emit("}")
        for r in adds:
            self.emit(f"if (lg_sp) acc{r} += lg_w{r}[0];")
        self.depth -= 1
        self.emit("}")
