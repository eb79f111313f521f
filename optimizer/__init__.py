"""Graph optimization: the pass registry, the passes, and memory-aware scheduling.

`optimize(graph)` rewrites a `cache.graph.Graph` (P) into Q with the registered passes, in
priority order; `register_pass` adds one. Built in: algebraic identities (rewrite rules,
optimizer/rewrite/), constant folding (fold.py), library substitution (library.py), identity ops,
common-subexpression elimination, dead-code elimination (optimizer/passes.py), the superoptimizer's
search (optimizer/superopt/, pass `superopt`).
"""

from optimizer import eqsat as _eqsat  # noqa: F401  (registers the e-graph searches with the pass)
from optimizer import fold as _fold  # noqa: F401  (registers constant folding)
from optimizer import library as _library  # noqa: F401  (registers library substitution)
from optimizer import passes as _passes  # noqa: F401  (registers the built-in passes)
from optimizer import rewrite as _rewrite  # noqa: F401  (registers the rewrite-rule pass)
from optimizer.registry import PASSES, Pass, fingerprint, optimize, ordered, register_pass, unregister_pass
from optimizer.superopt import pass_ as _superopt  # noqa: F401  (registers the superoptimizer pass)

__all__ = ["PASSES", "Pass", "fingerprint", "optimize", "ordered", "register_pass", "unregister_pass"]
