"""The engine: the one home of an evaluation, from `lg.eval` to the kernels.

    evaluate.py   orchestration: key, lookup, compile on a miss, run, memoize
    compile.py    P -> passes and lowering -> transformation graph -> program -> order
    program.py    the executable program: steps of kernels (one or several outputs each)
    memory.py     the order of least peak memory and the buffer layout runs follow
    meter.py      memory accounting of a run (a hook of the observed run)
    lower_fusion.py, lower_window.py   lowering passes: fused regions, window kernels
    region_check.py   fused regions read from disk checked against their key
    attempt.py    memoizing values, undoing a failed evaluation
    threads.py    per-thread recording, claims between threads
    state.py      an engine's state (stores, statistics, kernels, constructors), `ENGINE`

`cache/` keeps the keys, stores and transformation graphs and stores the programs it is
handed without importing this package.
"""

from lazygraph.engine.program import EvaluationError
from lazygraph.engine.state import ENGINE, Engine

__all__ = ["ENGINE", "Engine", "EvaluationError"]
