"""Average pooling as a depthwise convolution with a constant kernel (TASO's conv-pool-kernel axiom).

avg_pool2d(x, k, s, p) with the window's full size as divisor (count_include_pad, or no
padding) is conv2d(x, W, stride s, padding p, groups C) with W = (C, 1, kH, kW) filled with
1 / (kH * kW). On a GPU the rewrite only trades one kernel for another; here it pays because
lazygraph's average pooling (a strided NumPy window sum, `ops/nn.py`) runs 2-3x slower than
its grouped convolution on the same image (NASNet-A's 36 pools are a third of its time at the
quick size): measured, the rewritten NASNet-A ran 1.37x (summed step minima) and 1.48x (run
minima) faster than the input graph (docs/superopt.md). The kernel W is built by a `full`
node with no inputs, so it is a folded constant (computed once, free to the cost model).

The rule's declared instance, `(avg_pool2d 3 1 same ?x)` -> `(conv2d 1 same none ?x
(pool_kernel 3 ?x))`, is the library's proven `conv-16`, an instance of the axiom
conv-pool-kernel, which z3 states for any group count; the matcher generalizes it to every
window, stride, padding and channel count, as the merges of `match.py` generalize theirs.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from optimizer.rewrite.rules import Rule
from optimizer.superopt.apply import RewriteError, SGraph
from optimizer.superopt.match import Context, Matcher, rewrite
from optimizer.superopt.rulefile import term_rule


class PoolAsConv(Matcher):
    """avg_pool2d(x) -> conv2d(x, full(1/k^2), groups=C): one rewrite per average pooling."""

    name = "pool-as-conv"
    roots = ("avg_pool2d",)

    def rewrites(self, ctx: Context) -> Iterator[SGraph]:
        """Every float average pooling whose divisor is the whole window: all of them at once
        first (the pools are independent: one step of the TASO search, not one per pool),
        then the pools of each configuration (input shape and window) together: a rewrite's
        cost depends on its configuration only, so the pools of one either all pay or none
        does (NASNet-A: 36 pools, 7 configurations; one graph per pool cost 0.2 s a step)."""
        sg = ctx.sg
        by_config: dict[tuple, list[int]] = {}
        for u in ctx.by_op.get("avg_pool2d", []):
            if self._fits(sg, u):
                n = sg.nodes[u]
                key = (sg.nodes[n.inputs[0]].shape, n.dtype.str, repr(sorted(n.attrs.items())))
                by_config.setdefault(key, []).append(u)
        groups = list(by_config.values())
        every = [u for members in groups for u in members]
        for members in ([every] if len(groups) > 1 else []) + groups:
            g = rewrite(sg, self.name, lambda g, m=members: {u: self._build(g, u) for u in m})
            if g is not None:
                yield g

    @staticmethod
    def _fits(sg: SGraph, u: int) -> bool:
        n = sg.nodes[u]
        if n.dtype.kind != "f" or sg.nodes[n.inputs[0]].dtype != n.dtype:
            return False
        # a divisor counting the real elements only is not a fixed kernel
        return bool(n.attrs.get("count_include_pad", True)) or tuple(n.attrs["padding"]) == (0, 0)

    @staticmethod
    def _build(g: SGraph, u: int) -> int:
        n = g.nodes[u]
        x = n.inputs[0]
        shape = g.nodes[x].shape
        if len(shape) != 4 or shape[1] == 0:
            raise RewriteError("not an NCHW image with channels")
        c = shape[1]
        kh, kw = n.attrs["kernel_size"]
        attrs = {"shape": (c, 1, kh, kw), "fill_value": 1.0 / (kh * kw), "dtype": np.dtype(n.dtype)}
        w = g.add("full", [], attrs)
        conv = {"stride": n.attrs["stride"], "padding": n.attrs["padding"], "dilation": (1, 1), "groups": c}
        return g.add("conv2d", [x, w], conv)


def pool_rules() -> list[Rule]:
    """The pooling rewrite as a rule record whose patterns state the instance it generalizes."""
    return [
        term_rule(
            PoolAsConv.name,
            {"?x": {"kind": "tensor", "rank": 4}},
            ["(avg_pool2d 3 1 same ?x)"],
            ["(conv2d 1 same none ?x (pool_kernel 3 ?x))"],
            [],
            [{"?x": (1, 2, 3, 3)}],
            matcher=PoolAsConv(),
            origin="builtin",
        )
    ]
