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
        # (A @ B)^T = B^T @ A^T: the GEMM writes the transposed layout itself (B^T and A^T are
        # strided views BLAS reads through a transpose flag), so readers of the result get
        # a contiguous array instead of a strided one. Exact in real arithmetic; BLAS may
        # block the sums differently, so float rounding can differ in the last bits.
        "name": "matmul-transpose",
        "lhs": "(view@?t (matmul@?m ?a ?b))",
        "rhs": "(matmul@?m (view ?b :view (transposed ?b)) (view ?a :view (transposed ?a)))",
        "when": ["(transpose ?t)", "(single_use ?m)", "(rank ?a 2)", "(rank ?b 2)"],
    },
    {
        # A transpose of a transpose (gradients of x @ w.T record one) is the original.
        "name": "transpose-transpose",
        "lhs": "(view@?o (view@?i ?x))",
        "rhs": "?x",
        "when": ["(transpose ?o)", "(transpose ?i)"],
    },
    {
        "name": "broadcast-full",
        "lhs": "(view (full@?f))",
        "rhs": "(full@?f :shape (shape ?root))",
        "when": [],
    },
    # x op broadcast(s) for a 0-d s: NumPy broadcasts the 0-d operand itself, so the
    # materialized broadcast (often a whole tensor of one value) is not needed.
    {
        "name": "add-scalar-broadcast",
        "lhs": "(add ?x (view@?v ?s))",
        "rhs": "(add@?root ?x ?s)",
        "when": ["(rank ?s 0)", "(same_shape ?x ?root)", "(array ?x)"],
    },
    {
        "name": "multiply-scalar-broadcast",
        "lhs": "(multiply ?x (view@?v ?s))",
        "rhs": "(multiply@?root ?x ?s)",
        "when": ["(rank ?s 0)", "(same_shape ?x ?root)", "(array ?x)"],
    },
    {
        "name": "subtract-scalar-broadcast",
        "lhs": "(subtract ?x (view@?v ?s))",
        "rhs": "(subtract@?root ?x ?s)",
        "when": ["(rank ?s 0)", "(same_shape ?x ?root)", "(array ?x)"],
    },
    {
        "name": "subtract-scalar-broadcast-left",
        "lhs": "(subtract (view@?v ?s) ?x)",
        "rhs": "(subtract@?root ?s ?x)",
        "when": ["(rank ?s 0)", "(same_shape ?x ?root)", "(array ?x)"],
    },
    {
        "name": "divide-scalar-broadcast",
        "lhs": "(divide ?x (view@?v ?s))",
        "rhs": "(divide@?root ?x ?s)",
        "when": ["(rank ?s 0)", "(same_shape ?x ?root)", "(array ?x)"],
    },
    {
        "name": "divide-scalar-broadcast-left",
        "lhs": "(divide (view@?v ?s) ?x)",
        "rhs": "(divide@?root ?s ?x)",
        "when": ["(rank ?s 0)", "(same_shape ?x ?root)", "(array ?x)"],
    },
    {
        "name": "maximum-scalar-broadcast",
        "lhs": "(maximum ?x (view@?v ?s))",
        "rhs": "(maximum@?root ?x ?s)",
        "when": ["(rank ?s 0)", "(same_shape ?x ?root)", "(array ?x)"],
    },
    {
        "name": "minimum-scalar-broadcast",
        "lhs": "(minimum ?x (view@?v ?s))",
        "rhs": "(minimum@?root ?x ?s)",
        "when": ["(rank ?s 0)", "(same_shape ?x ?root)", "(array ?x)"],
    },
]
