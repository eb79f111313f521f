"""Transformation graphs: Q as recovery information over P, plain data the stores keep.

A `TransformationGraph` records what optimizing P produced, in terms any P' with the same
structural key can be rebuilt from. Node q of Q is one of

    ("leaf", p)                      P''s leaf p (a held buffer or a Python scalar)
    ("copy", p, inputs)              P''s node p: its operator and attributes, read from P' on replay
    ("new", recipe, inputs)          a node the passes created, rebuilt from P' with its recipe
    ("out", q, j, shape, dtype)      value j >= 1 of the New node q, which computes several at once
                                     (a fused region with several outputs); `shape` an expression

where `inputs` are indices of earlier Q nodes, and p is a node's slot in the key's
canonical order (a compressed form of Dali's path of argument indices from the roots).
`order` lists the copy and new nodes (the steps) in execution order: a scheduler may choose
another topological order once per structure. `pmap` says which Q node holds each P node's
value (-1: none), `guards` what must hold on P' for the transformation to apply, `artifacts`
extra JSON a pass stores with the entry (e.g. fused regions' descriptions).

This is data: the engine (lazygraph/engine/) builds the executable program from it; this
module only checks that a stored graph is well formed (what a recipe's constructor stores is
checked by the engine, which knows the constructors).
"""

from __future__ import annotations

import numpy as np

from cache.recipe import Recipe, RecipeError, compile_expr


class TransformationGraph:
    """Q as recovery information over P (see the module docstring)."""

    __slots__ = ("nodes", "order", "pmap", "guards", "passes", "artifacts", "p_size")

    def __init__(
        self,
        nodes: list[tuple],
        order: list[int],
        pmap: list[int],
        guards: list,
        passes: list[str],
        p_size: int,
        artifacts: dict | None = None,
    ) -> None:
        self.nodes = nodes
        self.order = order
        self.pmap = pmap
        self.guards = guards
        self.passes = passes
        self.p_size = p_size
        self.artifacts = artifacts or {}

    def to_json(self) -> dict:
        """A JSON-ready dict (recipes as dicts)."""
        nodes = []
        for n in self.nodes:
            if n[0] == "new":
                nodes.append(["new", n[1].to_json(), list(n[2])])
            elif n[0] == "out":
                nodes.append(["out", n[1], n[2], n[3], n[4]])
            elif n[0] == "copy":
                nodes.append(["copy", n[1], list(n[2])])
            else:
                nodes.append(["leaf", n[1]])
        return {
            "nodes": nodes,
            "order": self.order,
            "pmap": self.pmap,
            "guards": self.guards,
            "passes": self.passes,
            "p_size": self.p_size,
            "artifacts": self.artifacts,
        }

    @staticmethod
    def from_json(d: dict, tokens: tuple) -> TransformationGraph:
        """Decode and validate against the key's tokens (a bad entry raises RecipeError)."""
        p_size = d["p_size"]
        if p_size != len(tokens):
            raise RecipeError("transformation graph does not match the key's node count")
        nodes: list[tuple] = []
        for q, n in enumerate(d["nodes"]):
            kind = n[0]
            if kind == "leaf":
                p = n[1]
                if type(p) is not int or not 0 <= p < p_size or not tokens[p][0].startswith("<"):
                    raise RecipeError(f"node {q}: bad leaf slot {p!r}")
                nodes.append(("leaf", p))
                continue
            if kind == "out":
                nodes.append(_decode_out(q, n, nodes))
                continue
            ins = tuple(n[2])
            if any(type(i) is not int or not 0 <= i < q for i in ins):
                raise RecipeError(f"node {q}: inputs {ins!r} are not earlier nodes")
            if kind == "copy":
                p = n[1]
                if type(p) is not int or not 0 <= p < p_size or tokens[p][0].startswith("<"):
                    raise RecipeError(f"node {q}: bad copy slot {p!r}")
                nodes.append(("copy", p, ins))
            elif kind == "new":
                nodes.append(("new", Recipe.from_json(n[1]), ins))
            else:
                raise RecipeError(f"node {q}: unknown kind {kind!r}")
        order = [int(i) for i in d["order"]]
        pmap = [int(i) for i in d["pmap"]]
        if len(pmap) != p_size or any(not -1 <= i < len(nodes) for i in pmap):
            raise RecipeError("bad pmap")
        tg = TransformationGraph(
            nodes, order, pmap, list(d["guards"]), [str(s) for s in d["passes"]], p_size, d.get("artifacts")
        )
        tg.validate_order(order)
        return tg

    def validate_order(self, order: list[int]) -> None:
        """Raise unless `order` runs every step (copy or new node) once, after its inputs."""
        interior = [q for q, n in enumerate(self.nodes) if n[0] in ("copy", "new")]
        if sorted(order) != interior:
            raise RecipeError("order must list every step exactly once")
        done = {q for q, n in enumerate(self.nodes) if n[0] == "leaf"}
        further = self.further_outputs()
        for q in order:
            if any(i not in done for i in self.nodes[q][2]):
                raise RecipeError(f"order runs node {q} before one of its inputs")
            done.add(q)
            done.update(further.get(q, ()))

    def further_outputs(self) -> dict[int, list[int]]:
        """New node -> the Q nodes of its values 1, 2, ... in that order (multi-output steps only).

        Raises RecipeError unless each such node's values are numbered 1 to k, once each.
        """
        by_j: dict[int, dict[int, int]] = {}
        for r, n in enumerate(self.nodes):
            if n[0] == "out":
                by_j.setdefault(n[1], {})[n[2]] = r
        out: dict[int, list[int]] = {}
        for q, js in by_j.items():
            if sorted(js) != list(range(1, len(js) + 1)):
                raise RecipeError(f"node {q}: its further outputs are not numbered 1 to {len(js)}")
            out[q] = [js[j] for j in range(1, len(js) + 1)]
        return out


def _decode_out(q: int, n: list, nodes: list[tuple]) -> tuple:
    """An ("out", step, j, shape, dtype) node: value j >= 1 of an earlier New node."""
    if len(n) != 5:
        raise RecipeError(f"node {q}: an output node has five fields")
    first, j = n[1], n[2]
    if type(first) is not int or not 0 <= first < q or nodes[first][0] != "new":
        raise RecipeError(f"node {q}: output of {first!r}, which is not an earlier New node")
    if type(j) is not int or j < 1:  # numbered 1 to k per step: checked by `further_outputs`
        raise RecipeError(f"node {q}: bad output number {j!r} of node {first}")
    compile_expr(n[3])
    try:
        dtype = np.dtype(str(n[4])).str
    except (TypeError, ValueError):
        raise RecipeError(f"node {q}: bad dtype {n[4]!r}") from None
    return ("out", first, j, n[3], dtype)
