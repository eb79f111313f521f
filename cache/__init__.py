"""Structural keys, transformation graphs, replay, and the in-process and on-disk stores.

An evaluation's graph P is numbered and keyed by structure in one walk (`key.walk`). The
first graph with a key is optimized into Q (by `optimizer/`, on a `graph.Graph`), and Q is
kept as a transformation graph (`plan.TransformationGraph`: Copy / New recovery per node)
together with its executable `plan.Plan`. Every later graph with the same key replays the
plan: it binds its leaves and runs the steps, with no pass running. `store` keeps entries in
this process, `disk` keeps them across processes, `stats` counts, `explain` says why a
lookup missed. This package imports only `ops`.
"""

from cache.graph import Graph, PassError, QNode
from cache.key import Uncacheable, Walk, walk
from cache.plan import EvaluationError, Plan, Step, TransformationGraph
from cache.recipe import CONSTRUCTORS, Recipe, register_constructor
from cache.store import Entry, MemoryStore

__all__ = [
    "CONSTRUCTORS",
    "Entry",
    "EvaluationError",
    "Graph",
    "MemoryStore",
    "PassError",
    "Plan",
    "QNode",
    "Recipe",
    "Step",
    "TransformationGraph",
    "Uncacheable",
    "Walk",
    "register_constructor",
    "walk",
]
