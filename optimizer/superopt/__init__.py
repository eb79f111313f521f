"""The superoptimizer (TASO-style): a vocabulary of tensor operators, term graphs, generated and
z3-verified substitution rules, and (search side) a cost-based search that applies them.

See docs/superopt.md. Modules: opset (operators), term (term graphs, text form), rulefile (the
rule JSON format and the library), convert (lazygraph graphs <-> term graphs).
"""
