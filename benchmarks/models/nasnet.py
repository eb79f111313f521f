"""NASNet-A as TASO's nasnet_a script builds it: 5 normal cells then a reduction cell, 3 times."""

from __future__ import annotations

import lazygraph as lg

from .common import Builder, Model, size


def _squeeze(b: Builder, x: lg.Array, c: int) -> lg.Array:
    return b.conv(x, c, 1, relu=True)


def _fit(b: Builder, cur: lg.Array, prev: lg.Array) -> lg.Array:
    """prev brought to cur's channels (and size: a strided 3x3 when it is twice as large)."""
    if prev.shape[2] == cur.shape[2]:
        return _squeeze(b, prev, cur.shape[1])
    return b.conv(prev, cur.shape[1], 3, stride=2, relu=True)


def _sep(b: Builder, x: lg.Array, c: int, k: int, stride: int = 1) -> lg.Array:
    """Separable convolution: a grouped k x k (groups = c) then a 1x1."""
    return b.conv(b.conv(x, c, k, stride=stride, groups=c), c, 1)


def _normal(b: Builder, prev: lg.Array, cur: lg.Array, c: int) -> lg.Array:
    cur = _squeeze(b, cur, c)
    prev = _fit(b, cur, prev)
    ts = [
        _sep(b, cur, c, 3),
        cur,
        _sep(b, prev, c, 3),
        _sep(b, cur, c, 3),
        b.avgpool(cur, 3, 1),
        prev,
        b.avgpool(prev, 3, 1),
        b.avgpool(prev, 3, 1),
        _sep(b, prev, c, 3),
        _sep(b, prev, c, 3),
    ]
    return b.concat([b.add(ts[2 * i], ts[2 * i + 1]) for i in range(5)])


def _reduction(b: Builder, prev: lg.Array, cur: lg.Array, c: int) -> lg.Array:
    cur = _squeeze(b, cur, c)
    prev = _fit(b, cur, prev)
    a0 = b.add(_sep(b, prev, c, 7, 2), _sep(b, cur, c, 5, 2))
    a1 = b.add(b.maxpool(cur, 3, 2), _sep(b, prev, c, 7, 2))
    a2 = b.add(b.avgpool(cur, 3, 2), _sep(b, prev, c, 5, 2))
    a3 = b.add(b.avgpool(a0, 3, 1), a1)
    a4 = b.add(_sep(b, a0, c, 3), b.maxpool(cur, 3, 2))
    return b.concat([a1, a2, a3, a4])


def nasnet_a(scale: float = 1.0, seed: int = 0, like: Model | None = None) -> Model:
    """Input 1x3x224x224; stem conv 7x7/2 + max pool; cells of 128, 256, 512 channels."""
    b = Builder(seed, like)
    side = size(224, scale, multiple=32, least=64)
    t = b.maxpool(b.conv(b.input(1, 3, side, side), 64, 7, stride=2, relu=True), 3, 2)
    c = size(128, min(scale, 1.0) ** 0.5, multiple=8, least=8)
    for _ in range(3):
        prev, cur = t, t
        for _ in range(5):
            prev, cur = cur, _normal(b, prev, cur, c)
        c *= 2
        t = _reduction(b, prev, cur, c)
    return b.model("NASNet-A", [t])
