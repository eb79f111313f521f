"""ResNet-50 (no batch norm) and ResNeXt-50 (32 groups), input 1x3x224x224."""

from __future__ import annotations

import lazygraph as lg

from .common import Builder, Model, size

_STAGES = ((3, 1), (4, 2), (6, 2), (3, 2))  # blocks, stride of the first block


def _stem(b: Builder, scale: float) -> lg.Array:
    x = b.input(1, 3, size(224, scale, multiple=32, least=32), size(224, scale, multiple=32, least=32))
    return b.maxpool(b.conv(x, 64, 7, stride=2, relu=True), 3, 2)


def resnet50(scale: float = 1.0, seed: int = 0, like: Model | None = None) -> Model:
    """Bottleneck blocks [3, 4, 6, 3]; a projection shortcut where the shape changes."""
    b = Builder(seed, like)
    t = _stem(b, scale)
    width = 64
    for blocks, stride in _STAGES:
        for i in range(blocks):
            s = stride if i == 0 else 1
            y = b.conv(t, width, 1, relu=True)
            y = b.conv(y, width, 3, stride=s, relu=True)
            y = b.conv(y, 4 * width, 1)
            if s > 1 or t.shape[1] != 4 * width:
                t = b.conv(t, 4 * width, 1, stride=s)
            t = b.relu(b.add(t, y))
        width *= 2
    return b.model("ResNet-50", [t])


def resnext50(scale: float = 1.0, seed: int = 0, like: Model | None = None) -> Model:
    """ResNeXt blocks (TASO's resnext50): 1x1, grouped 3x3 (32 groups), 1x1, projection shortcut."""
    b = Builder(seed, like)
    t = _stem(b, scale)
    width = 128
    for blocks, stride in _STAGES:
        for i in range(blocks):
            s = stride if i == 0 else 1
            y = b.conv(t, width, 1, relu=True)
            y = b.conv(y, width, 3, stride=s, groups=32, relu=True)
            y = b.conv(y, 2 * width, 1)
            if s > 1 or t.shape[1] != 2 * width:
                t = b.conv(t, 2 * width, 1, stride=s, relu=True)
            t = b.relu(b.add(t, y))
        width *= 2
    return b.model("ResNeXt-50", [t])
