"""Seeded layered graphs like those of "Neural Topological Ordering for Computation Graphs".

    python3 benchmarks/layered_graphs.py 500 --seed 3     # print one graph's statistics

The generator follows the paper's appendix A: a fixed number of nodes arranged in layers (the
target layer count set by a random width factor), layer widths varying around the target,
edges only between adjacent layers (each node gets at least one in and one out, more with
the edge density, spread in a cone below the node), skip connections that jump at least one
layer (a fraction of the edges so far), and per-layer output and parameter memory costs drawn
from a 3-component Gaussian mixture projected onto the positive reals. The paper's exact
parameter values did not survive in our copy, so the defaults below are our own choices; the
structure of the algorithm is the paper's.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from optimizer.schedule import Dag  # noqa: E402


@dataclass(frozen=True)
class LayeredParams:
    """The generator's knobs (the paper's names in parentheses)."""

    width_factor: tuple[float, float] = (0.2, 0.8)  # range of the per-graph width factor (alpha)
    variability: float = 0.5  # spread of layer widths around the target (sigma)
    density: float = 0.1  # edge density between adjacent layers (rho)
    skip_density: float = 0.1  # skip connections as a fraction of the adjacent-layer edges (gamma)
    means: tuple[float, float, float] = (0.5, 2.0, 8.0)  # memory mixture, in MiB
    stds: tuple[float, float, float] = (0.15, 0.6, 2.4)
    weights: tuple[float, float, float] = (0.5, 0.3, 0.2)
    param_scale: float = 0.25  # parameter (scratch) memory relative to the output mixture


def _layer_sizes(n: int, rng: np.random.Generator, p: LayeredParams) -> list[int]:
    alpha = rng.uniform(*p.width_factor)
    target_layers = math.ceil(n ** (1.0 - alpha))
    width = n / target_layers
    lo = max(1, math.floor((1.0 - p.variability) * width))
    hi = max(lo, math.floor((1.0 + p.variability) * width))
    sizes: list[int] = []
    while sum(sizes) < n:
        sizes.append(min(int(rng.integers(lo, hi + 1)), n - sum(sizes)))
    return sizes


def _adjacent_edges(
    top: list[int], bottom: list[int], rng: np.random.Generator, density: float
) -> list[tuple[int, int]]:
    """Edges top -> bottom: the budget goes to the larger layer's nodes, fanned out in a cone."""
    big, small = (top, bottom) if len(top) >= len(bottom) else (bottom, top)
    nb, ns = len(big), len(small)
    budget = nb + round(density * (nb * ns - nb))
    # The node with the fewest edges so far takes the next one, ties broken at random: every
    # node gets budget // nb, and a random subset one more.
    per_node = np.full(nb, budget // nb)
    per_node[rng.permutation(nb)[: budget % nb]] += 1
    pairs = set()
    for i, d in enumerate(per_node):
        d = int(min(d, ns))
        centre = (i + 0.5) / nb * ns  # the point right below node i
        span = min(ns, 2 * d)  # d destinations evenly spread over a cone ~2d wide
        left = min(max(0.0, centre - span / 2), ns - span)
        for k in range(d):
            pairs.add((i, min(ns - 1, int(left + (k + 0.5) * span / d))))
    covered = {j for _, j in pairs}
    for j in range(ns):  # a node the cones missed connects to the node right above it
        if j not in covered:
            pairs.add((int((j + 0.5) / ns * nb), j))
    if big is top:
        return sorted((big[i], small[j]) for i, j in pairs)
    return sorted((small[j], big[i]) for i, j in pairs)


def layered_graph(n: int, seed: int, params: LayeredParams = LayeredParams()) -> Dag:
    """One layered graph of exactly n nodes; the same (n, seed, params) gives the same graph."""
    rng = np.random.default_rng(seed)
    widths = _layer_sizes(n, rng, params)
    layers, start = [], 0
    for w in widths:
        layers.append(list(range(start, start + w)))
        start += w
    edges: set[tuple[int, int]] = set()
    for a, b in zip(layers, layers[1:]):
        edges.update(_adjacent_edges(a, b, rng, params.density))
    n_skip = round(params.skip_density * len(edges))
    if len(layers) >= 3:
        for _ in range(n_skip):
            ls = int(rng.integers(0, len(layers) - 2))
            lt = int(rng.integers(ls + 2, len(layers)))
            src = layers[ls][int(rng.integers(len(layers[ls])))]
            x = (layers[ls].index(src) + 0.5) / len(layers[ls])
            dst = layers[lt][min(len(layers[lt]) - 1, int(x * len(layers[lt])))]
            edges.add((src, dst))
    layer_out = _mixture(rng, len(layers), params, 1.0)
    layer_par = _mixture(rng, len(layers), params, params.param_scale)
    sizes, temp = [0] * n, [0] * n
    for k, layer in enumerate(layers):
        for v in layer:
            sizes[v], temp[v] = layer_out[k], layer_par[k]
    inputs: list[list[int]] = [[] for _ in range(n)]
    for a, b in sorted(edges):
        inputs[b].append(a)
    return Dag(sizes, inputs, temp=temp)


def _mixture(rng: np.random.Generator, k: int, p: LayeredParams, scale: float) -> list[int]:
    """k draws from the Gaussian mixture, clipped at 0, in bytes."""
    comp = rng.choice(3, size=k, p=np.asarray(p.weights) / sum(p.weights))
    x = rng.normal(np.asarray(p.means)[comp], np.asarray(p.stds)[comp])
    return [int(v) for v in np.round(np.maximum(x, 0.0) * scale * 2**20)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nodes", type=int)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    dag = layered_graph(args.nodes, args.seed)
    edges = sum(len(p) for p in dag.preds)
    sources = sum(1 for p in dag.preds if not p)
    sinks = sum(1 for s in dag.succs if not s)
    print(f"{dag.n} nodes, {edges} edges, {sources} sources, {sinks} sinks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
