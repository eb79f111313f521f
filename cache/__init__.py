"""Structural keys, transformation graphs, replay, and the in-process and on-disk stores.

An evaluation's graph P is numbered and keyed by structure in one walk (`key.walk`). The
first graph with a key is optimized into Q (by `optimizer/`, on a `graph.Graph`), and Q is
kept as a transformation graph (`tgraph.TransformationGraph`: Copy / New recovery per node)
together with whatever executable form the engine (lazygraph/engine/) built from it, which
this package stores without looking into. Every later graph with the same key replays it:
the engine binds its leaves and runs the steps, with no pass running. `store` keeps entries in
this process, `disk` keeps them across processes, `stats` counts, `explain` says why a
lookup missed. This package imports only `ops`.
"""

from cache.graph import Graph, PassError, QNode
from cache.key import Uncacheable, Walk, walk
from cache.recipe import Recipe, RecipeError
from cache.store import Entry, MemoryStore, Variant
from cache.tgraph import TransformationGraph

__all__ = [
    "Entry",
    "Graph",
    "MemoryStore",
    "PassError",
    "QNode",
    "Recipe",
    "RecipeError",
    "TransformationGraph",
    "Uncacheable",
    "Variant",
    "Walk",
    "walk",
]
