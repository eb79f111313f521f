"""The superoptimizer (TASO-style): a vocabulary of tensor operators, term graphs, generated and
z3-verified substitution rules, and a cost-based search that applies them.

See docs/superopt.md. Rule side: opset and opset_conv (operators), term (term graphs, text
form), rulefile (the rule JSON format and the library rules.json), convert (lazygraph graphs
<-> term graphs), axioms (operator properties and their numeric check), verify (z3), generate
(enumeration, fingerprints, pruning), user (user rules). Search side: match, apply, adapt,
cost, search, pass_.
"""
