"""The superoptimizer's vocabulary: the `OpSpec` record of a term operator and how it is declared.

An `OpSpec` holds an operator's arity, parameters (with the values the generator enumerates),
its shape rule, its evaluation in two rings (float64 with the reference kernels of ops/, and
exact integers mod a prime for fingerprints, where relu becomes an integer polynomial as in
TASO), its z3 symbol, and how it maps to lazygraph operators: `raises` names the lazygraph
operators whose records it attaches to (their `superopt` facet), each with the rule that
recognizes a node of that operator as this term, `lower` gives the lazygraph operator a term becomes. convert.py
(ops Nodes and Q) and adapt.py (the search's graphs) both raise through these facets, over a
`Site` that says how to read a node's operands. opset.py and opset_conv.py declare the terms.

Shapes travel as `TS` (shape + split stacks): a split has no explicit position in the z3
model (TASO's semantics: `split0(a, concat(a, x, y)) = x`), so every value carries, per axis,
the stack of concat boundaries it inherited; a split cuts at the top of that stack. Two terms
are equal only if their values *and* split stacks agree, which is what makes concat
associativity detectably wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np

import ops  # noqa: F401  (registers the reference operators)
from ops.base import REGISTRY

#: the prime of the fingerprint ring (products stay far below 2**63 before reduction)
PRIME = 16777213


class TS(NamedTuple):
    """A value's type: its shape and, per axis, the stack of concat boundaries (for split)."""

    shape: tuple[int, ...]
    splits: tuple[tuple[int, ...], ...]


def plain(shape: tuple[int, ...]) -> TS:
    """The type of an input: a shape with no split history."""
    return TS(tuple(int(d) for d in shape), tuple(() for _ in shape))


class FloatRing:
    """Real arithmetic in float64 with the reference kernels (the meaning of each operator)."""

    exact = False

    @staticmethod
    def norm(a: np.ndarray) -> np.ndarray:
        """Values are kept as they are."""
        return np.asarray(a, dtype=np.float64)

    @staticmethod
    def relu(a: np.ndarray) -> np.ndarray:
        """The real relu."""
        return np.maximum(a, 0.0)

    @staticmethod
    def scale(a: np.ndarray, num: int, den: int) -> np.ndarray:
        """a * num / den."""
        return a * (num / den)

    @staticmethod
    def random(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """Standard normal values."""
        return rng.standard_normal(shape)


class IntRing:
    """Exact integers mod PRIME: fingerprints that never suffer rounding."""

    exact = True

    @staticmethod
    def norm(a: np.ndarray) -> np.ndarray:
        """Reduce mod PRIME."""
        return np.mod(np.asarray(a, dtype=np.int64), PRIME)

    @staticmethod
    def relu(a: np.ndarray) -> np.ndarray:
        """TASO's trick: an exact stand-in for relu (elementwise, non-linear, not multiplicative)."""
        return np.mod(a * a + 3 * a + 5, PRIME)

    @staticmethod
    def scale(a: np.ndarray, num: int, den: int) -> np.ndarray:
        """a * num / den with the inverse of den mod PRIME."""
        return np.mod(a * (num * pow(den, -1, PRIME) % PRIME), PRIME)

    @staticmethod
    def random(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """Uniform residues."""
        return rng.integers(0, PRIME, size=shape, dtype=np.int64)


Ring = type[FloatRing] | type[IntRing]

#: words parameters may take, and the integers z3 sees for them
WORDS = {"none": 0, "relu": 1, "same": -1, "valid": -2}


@dataclass
class OpSpec:
    """One operator of the vocabulary (see the module docstring)."""

    name: str
    arity: int
    infer: Callable[[tuple, list[TS]], list[TS] | None]
    compute: Callable[[tuple, list[np.ndarray], list[TS], list[TS], Any], list[np.ndarray]]
    params: tuple[str, ...] = ()
    choices: dict[str, tuple] = field(default_factory=dict)  # what the generator enumerates
    n_out: int = 1
    kinds: tuple[str, ...] = ()  # "tensor", "scalar" or "any" per argument (default: tensors)
    commutative: bool = False
    constant: bool = False  # value independent of the arguments' values (shape only)
    out_names: tuple[str, ...] = ()  # names of the projections of a multi-output operator
    lower: Callable[[tuple, list[TS], list[TS]], tuple[str, dict] | None] | None = None
    doc: str = ""
    #: lazygraph operator -> raise(site): the readings of a node of that operator as this term,
    #: (params, argument handles, output); `declare` attaches them to the operators' records
    raises: dict[str, Callable[[Site], list[tuple[tuple, list, int]]]] = field(default_factory=dict)
    #: lowering appends maximum(., 0) when this says so for the params (relu, conv2d ... relu)
    activation: Callable[[tuple], bool] | None = None
    #: the z3 symbol also takes the group count (conv2d: C_in / weight.shape[1])
    grouped: bool = False

    def arg_kind(self, i: int) -> str:
        """The kind an argument must have."""
        return self.kinds[i] if self.kinds else "tensor"

    def z3_extra(self, params: tuple, ins: list[TS]) -> tuple[int, ...]:
        """Integers passed to the z3 symbol before the tensor arguments."""
        out = [WORDS[p] if isinstance(p, str) else int(p) for p in params]
        if self.grouped:
            out.append(ins[0].shape[1] // ins[1].shape[1])  # groups, inferred from the shapes
        return tuple(out)


OPS: dict[str, OpSpec] = {}
#: projection name (split0, split1) -> (operator, output index)
PROJECTIONS: dict[str, tuple[str, int]] = {}


class Site(Protocol):
    """A node being raised, as its reader sees it (convert.py: ops/Q nodes; adapt.py: SGraph ids)."""

    attrs: dict
    shape: tuple[int, ...]
    dtype: np.dtype
    args: list  # argument handles, in order

    def shape_of(self, h: Any) -> tuple[int, ...]:
        """An argument's shape."""

    def dtype_of(self, h: Any) -> np.dtype:
        """An argument's dtype."""

    def is_scalar(self, h: Any) -> bool:
        """Whether an argument is a Python-scalar leaf."""

    def is_zero(self, h: Any) -> bool:
        """Whether an argument is a 0-d leaf holding 0 (a reader that compares a value guards it)."""

    def splits_of(self, h: Any) -> tuple[tuple[int, ...], ...] | None:
        """An argument's split stacks when the reader knows its term type (else None)."""


def declare(spec: OpSpec) -> OpSpec:
    """Add a term operator to the vocabulary and attach it to its source operators' records."""
    if spec.name in OPS:
        raise ValueError(f"superopt operator {spec.name!r} is already declared")
    for src in spec.raises:
        if src not in REGISTRY:
            raise ValueError(f"superopt operator {spec.name!r}: no lazygraph operator {src!r} to attach to")
    OPS[spec.name] = spec
    for k, p in enumerate(spec.out_names):
        PROJECTIONS[p] = (spec.name, k)
    for src, fn in spec.raises.items():
        op = REGISTRY[src]
        op.superopt = tuple(r for r in op.superopt if r[0].name != spec.name) + ((spec, fn),)
    return spec


def readings(op: Any, site: Site) -> list[tuple[str, tuple, list, int]]:
    """Every way a node of lazygraph operator `op` reads as a term: (term, params, args, output)."""
    out = []
    for spec, fn in getattr(op, "superopt", ()):
        out.extend((spec.name, params, args, k) for params, args, k in fn(site))
    return out


def pad_word(padding: Any, k: tuple[int, ...]) -> str | None:
    """A padding as the vocabulary's word: 'valid' (none) or 'same' (half an odd kernel)."""
    p = tuple(padding)
    if p == (0, 0):
        return "valid"
    if len(k) == 2 and k[0] % 2 and k[1] % 2 and p == (k[0] // 2, k[1] // 2):
        return "same"
    return None


# ---------------------------------------------------------------------------------------
# Split stacks


def _merge(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return a if a or not b else b


def _cut(stack: tuple[int, ...], top: int, first: bool) -> tuple[int, ...]:
    rest = stack[:-1]
    return tuple(p for p in rest if p < top) if first else tuple(p - top for p in rest if p > top)


def infer(op: str, params: tuple, ins: list[TS]) -> list[TS] | None:
    """Output types of an application, or None when the shapes or parameters don't fit."""
    spec = OPS[op]
    if len(ins) != spec.arity:
        return None
    for k, t in enumerate(ins):
        kind = spec.arg_kind(k)
        if kind != "any" and (kind == "scalar") != (t.shape == ()):
            return None
    try:
        return spec.infer(tuple(params), ins)
    except (TypeError, ValueError, IndexError, ZeroDivisionError):
        return None
