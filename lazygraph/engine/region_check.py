"""Fused regions read from disk are checked against the key they are stored under.

A graph entry describes each fused region (operators, attributes, dtypes, unit axes, how the
members connect: lower_fusion.py `describe`) and the kernel is built from that description,
so an edited description whose digest and entry checksum were recomputed would compute
something else, silently. The fusion pass also records which P node each member copies;
`check_regions` (run by compile.py on every transformation graph read from disk) compares the
description with those nodes' tokens in the structural key, which the loader has already
compared with the live graph. A mismatch is a RecipeError: the entry is dropped and rebuilt.
"""

from __future__ import annotations

import json
from typing import Any

from cache.key import attrs_key, is_leaf_token
from cache.recipe import RecipeError
from lazygraph.engine.lower_fusion import decode_attr
from ops.base import REGISTRY


def _ones(shape_cls: Any) -> list[bool]:
    return [d == 1 for d in shape_cls]


def _form(pairs: Any) -> str:
    """(name, key form) pairs as text: stored lists and live tuples compare alike."""
    return json.dumps(sorted(dict(pairs).items()))


def _same_structure(tokens: tuple, s: int, t: int) -> bool:
    """P nodes s and t compute the same thing up to leaves of one kind (what CSE merges)."""
    stack, seen = [(s, t)], set()
    while stack:
        a, b = stack.pop()
        if a == b or (a, b) in seen:
            continue
        seen.add((a, b))
        ta, tb = tokens[a], tokens[b]
        if is_leaf_token(ta) or is_leaf_token(tb):
            if not (is_leaf_token(ta) and is_leaf_token(tb) and tuple(ta[:5]) == tuple(tb[:5])):
                return False
            continue
        if tuple(ta[:4]) != tuple(tb[:4]) or len(ta[4]) != len(tb[4]):
            return False
        stack.extend(zip(ta[4], tb[4]))
    return True


def _check_input(desc: dict, tokens: tuple, tg: Any, q: int) -> None:
    """A region input's kind, dtype and unit axes must be those of the Q node feeding it."""
    node = tg.nodes[q]
    if node[0] in ("new", "out"):
        dtype = node[1].dtype if node[0] == "new" else node[4]
        if dtype != desc["dtype"]:
            raise RecipeError("a JIT region input's dtype differs from its producer's")
        return
    tok = tokens[node[1]]
    if (tok[0] == "<S>") != (desc["kind"] == "scalar"):
        raise RecipeError("a JIT region input's kind differs from the key's")
    if tok[0] != "<S>" and (tok[1] != desc["dtype"] or _ones(tok[2]) != list(desc["ones"])):
        raise RecipeError("a JIT region input's dtype or shape differs from the key's")


def check_regions(tg: Any, tokens: tuple) -> None:
    """Each fused region's stored description must be the structure of the P nodes it replaces.

    The description is what the kernel is built from, so an edited one (with its digest and the
    entry's checksum recomputed) would compute something else. Every member that copies a P
    node is compared with that node's token (operator, dtype, unit axes, attributes) and its
    inputs with the token's inputs (through `pmap`: a region input is the Q node holding that P
    node; an inner member's P node is held by no step and is that member, the same structure,
    or a node no other live member copies); each member's P node must be held by the step of its
    output (or by none). Members a pass made (no P node) are not checked further: their
    recipes are as trusted as every other New node's (the store's ownership is the defence).
    """
    regions = tg.artifacts.get("jit_regions")
    leaders = {q: n[1].data for q, n in enumerate(tg.nodes) if n[0] == "new" and n[1].ctor == "jit_region"}
    further = tg.further_outputs()
    if not leaders:
        return
    if not isinstance(regions, dict):
        raise RecipeError("JIT region steps without region descriptions")
    try:
        for q, data in leaders.items():
            if not isinstance(data, dict):
                raise RecipeError("JIT region recipe without its data")
            desc = regions[data["region"]]
            members, ins = data["members"], tg.nodes[q][2]
            inputs, dmembers, outputs = desc["inputs"], desc["members"], desc["outputs"]
            n_in = len(inputs)
            if len(ins) != n_in or not isinstance(members, list) or len(members) != len(dmembers):
                raise RecipeError("a JIT region's inputs or members do not match its description")
            if any(type(p) is not int or not -1 <= p < len(tokens) for p in members):
                raise RecipeError("a JIT region names P nodes outside the key")
            for d, qi in zip(inputs, ins):
                _check_input(d, tokens, tg, qi)
            steps = {0: q, **{tg.nodes[r][2]: r for r in further.get(q, ())}}
            out_of = {idx: j for j, idx in enumerate(outputs)}
            origin = {p: n_in + m for m, p in enumerate(members) if p >= 0}
            used = {i for d in dmembers for i in d["ins"]} | set(outputs)
            for m, (p, d) in enumerate(zip(members, dmembers)):
                if p < 0:
                    continue
                tok = tokens[p]
                if is_leaf_token(tok) or tok[0] != d["op"] or tok[1] != d["dtype"]:
                    raise RecipeError(f"JIT region member {m} is not the key's {tok[0]} node")
                if _ones(tok[2]) != list(d["ones"]) or len(tok[4]) != len(d["ins"]):
                    raise RecipeError(f"JIT region member {m}'s shape or inputs differ from the key's")
                attrs = {str(k): decode_attr(v) for k, v in d["attrs"].items()}
                if _form(attrs_key(REGISTRY[d["op"]], attrs)) != _form(tok[3]):
                    raise RecipeError(f"JIT region member {m}'s attributes differ from the key's")
                for s, ref in zip(tok[4], d["ins"]):
                    if type(ref) is not int or not 0 <= ref < n_in + m:
                        raise RecipeError(f"JIT region member {m} reads a later member")
                    if ref < n_in:
                        ok = tg.pmap[s] == ins[ref]
                    elif ref in out_of:
                        ok = tg.pmap[s] == steps.get(out_of[ref], tg.pmap[s])
                    else:  # an inner member: s is absorbed, and no other member's node
                        src = members[ref - n_in]
                        other = origin.get(s, ref)  # a rewrite may have bypassed s (x * 1 -> x)
                        ok = tg.pmap[s] == -1 and (
                            src < 0 or other == ref or other not in used or _same_structure(tokens, s, src)
                        )
                    if not ok:
                        raise RecipeError(f"JIT region member {m}'s inputs differ from the key's")
            for m, p in enumerate(members):
                # a member's own P node is held by the step of its output, or by nothing
                j = out_of.get(n_in + m)
                if p >= 0 and tg.pmap[p] != (steps.get(j, tg.pmap[p]) if j is not None else -1):
                    raise RecipeError(f"JIT region member {m} is not where the key's node is held")
            if any(not n_in <= i < n_in + len(members) for i in outputs) or set(steps) != set(
                range(len(outputs))
            ):
                raise RecipeError("a JIT region output is not one of its members")
    except (KeyError, TypeError, IndexError, AttributeError, ValueError) as e:
        if isinstance(e, RecipeError):
            raise
        raise RecipeError(f"bad JIT region description: {type(e).__name__}: {e}") from None
