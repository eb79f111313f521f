"""Inference graphs of the models the graph-substitution papers evaluate, built with lazygraph.

`MODELS` maps a name to a builder `build(scale=1.0, seed=0, like=None) -> Model`: the lazy outputs, the
input and weight arrays, and the operators the builder called by kind (`Model.counts`).
Sizes are those of shared/reference/benchmark_models.md at scale 1; `scale` < 1 shrinks image
sides (CNNs) or hidden sizes (BERT, NasRNN) for tests and quick runs; `like` re-records a
model on another build's input and weight arrays (benchmarks time repeated evaluations of one
model: the same buffers, so the fold pass's memoized weights stay valid). `PUBLISHED` holds the
op counts of the papers' model scripts, to compare with.
"""

from __future__ import annotations

from collections.abc import Callable

from .common import Builder, Model
from .nasnet import nasnet_a
from .resnet import resnet50, resnext50
from .transformer import bert, nasrnn
from .vision import inception_v3, squeezenet, vgg19

MODELS: dict[str, Callable[..., Model]] = {
    "bert": bert,
    "nasrnn": nasrnn,
    "resnext50": resnext50,
    "squeezenet": squeezenet,
    "inception_v3": inception_v3,
    "resnet50": resnet50,
    "vgg19": vgg19,
    "nasnet_a": nasnet_a,
}

#: published op counts (total, then by kind) where benchmark_models.md gives them
PUBLISHED: dict[str, dict[str, int]] = {
    "bert": {"total": 113, "matmul": 48, "reshape": 32, "transpose": 32},
    "nasrnn": {"total": 230, "matmul": 80, "add": 55, "tanh": 40, "sigmoid": 25, "mul": 20, "relu": 10},
    "resnet50": {"total": 84, "conv": 52, "add": 16, "relu": 16},
    "resnext50": {"total": 86, "conv": 53},
    "nasnet_a": {"total": 383, "conv": 217, "add": 90, "avgpool": 51, "concat": 18},
    "inception_v3": {"total": 119, "conv": 94, "concat": 11},
}

__all__ = ["MODELS", "PUBLISHED", "Builder", "Model"]
