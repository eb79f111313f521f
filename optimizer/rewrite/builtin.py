"""The built-in rule set: exact algebraic clean-ups (bit-for-bit the reference value).

Each entry is plain data, in the same form as a rule file. Why each condition is there:
x + 0 turns -0.0 into 0.0 (integers only); x * 1 on complex multiplies inf by 0; x / 1 on
integers changes the dtype; x * 0 and x - x are 0 only where nan and inf cannot occur.
Reshapes and transposes compose at record time (a view of a view is one view; a copying
reshape's result is contiguous, so reshaping it again is a view), and reshapes/casts to their
own shape/dtype are the `identity` pass's: no rules needed for them here.
"""

from __future__ import annotations

BUILTIN_RULES: list[dict] = [
    {"name": "mul-one", "lhs": "(multiply ?x 1)", "rhs": "?x", "when": ["(kind ?x biuf)", "(array ?x)"]},
    {"name": "div-one", "lhs": "(divide ?x 1)", "rhs": "?x", "when": ["(kind ?x f)", "(array ?x)"]},
    {"name": "sub-zero", "lhs": "(subtract ?x 0)", "rhs": "?x", "when": ["(kind ?x iuf)", "(array ?x)"]},
    {"name": "add-zero-int", "lhs": "(add ?x 0)", "rhs": "?x", "when": ["(kind ?x iu)", "(array ?x)"]},
    {"name": "pow-one", "lhs": "(pow ?x 1)", "rhs": "?x", "when": ["(kind ?x iuf)", "(array ?x)"]},
    {
        "name": "mul-zero-int",
        "lhs": "(multiply ?x 0)",
        "rhs": "(full :shape (shape ?root) :fill_value (typed 0 ?root) :dtype (dtype ?root))",
        # an integer result only: int * 0.0 is a float, -0.0 for negative x
        "when": ["(kind ?x biu)", "(kind ?root biu)", "(array ?x)"],
    },
    {
        "name": "pow-zero",
        "lhs": "(pow ?x 0)",
        "rhs": "(full :shape (shape ?root) :fill_value (typed 1 ?root) :dtype (dtype ?root))",
        "when": ["(kind ?x iuf)", "(array ?x)"],
    },
    {
        "name": "sub-self-int",
        "lhs": "(subtract ?x ?x)",
        "rhs": "(full :shape (shape ?root) :fill_value (typed 0 ?root) :dtype (dtype ?root))",
        "when": ["(finite_int ?x)", "(array ?x)"],
    },
    {"name": "neg-neg", "lhs": "(negative (negative ?x))", "rhs": "?x", "when": ["(kind ?x iuf)"]},
    {"name": "not-not", "lhs": "(logical_not (logical_not ?x))", "rhs": "?x", "when": ["(kind ?x b)"]},
    {"name": "invert-invert", "lhs": "(bitwise_invert (bitwise_invert ?x))", "rhs": "?x", "when": []},
    {"name": "astype-self", "lhs": "(astype ?x)", "rhs": "?x", "when": ["(same_dtype ?root ?x)"]},
    {
        "name": "broadcast-full",
        "lhs": "(view (full@?f))",
        "rhs": "(full@?f :shape (shape ?root))",
        "when": [],
    },
]
