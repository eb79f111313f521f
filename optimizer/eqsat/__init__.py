"""Equality saturation for the superoptimizer: an e-graph over the search's graphs, the proven
rules applied into it, MCTS-guided construction under an e-node budget, and extraction that
counts shared subgraphs once (greedy with history; exact ILP with HiGHS). See docs/superopt.md.

Importing the package registers the searches `eqsat`, `mcts` and `auto` with the superopt
pass (`LAZYGRAPH_SUPEROPT_SEARCH`).
"""

from optimizer.eqsat.search import register

register()
