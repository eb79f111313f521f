"""SqueezeNet (v1.1 fire modules), VGG-19 and Inception-v3 (299x299), batch 1, with ReLUs."""

from __future__ import annotations

import lazygraph as lg

from .common import Builder, Model, size


def _image(b: Builder, side: int, scale: float) -> lg.Array:
    s = size(side, scale, multiple=16, least=32)
    return b.input(1, 3, s, s)


def squeezenet(scale: float = 1.0, seed: int = 0, like: Model | None = None) -> Model:
    """Fire modules: a 1x1 squeeze, then 1x1 and 3x3 expands of it, concatenated."""
    b = Builder(seed, like)
    t = b.maxpool(b.conv(_image(b, 224, scale), 64, 3, stride=2, relu=True), 3, 2)

    def fire(x: lg.Array, s: int, e: int) -> lg.Array:
        sq = b.conv(x, s, 1, bias=True, relu=True)
        return b.concat([b.conv(sq, e, 1, bias=True, relu=True), b.conv(sq, e, 3, bias=True, relu=True)])

    for i, (s, e) in enumerate(
        ((16, 64), (16, 64), (32, 128), (32, 128), (48, 192), (48, 192), (64, 256), (64, 256))
    ):
        t = fire(t, s, e)
        if i in (1, 3):
            t = b.maxpool(t, 3, 2)
    t = b.conv(t, 1000, 1, bias=True, relu=True)
    return b.model("SqueezeNet", [b.avgpool(t, 3, 1)])


def vgg19(scale: float = 1.0, seed: int = 0, like: Model | None = None) -> Model:
    """16 3x3 convolutions with ReLU in 5 blocks, max pooling between (no classifier)."""
    b = Builder(seed, like)
    t = _image(b, 224, scale)
    for reps, ch in ((2, 64), (2, 128), (4, 256), (4, 512), (4, 512)):
        for _ in range(reps):
            t = b.conv(t, ch, 3, bias=True, relu=True)
        t = b.maxpool(t, 2, 2, pad=0)
    return b.model("VGG-19", [t])


def _cbr(
    b: Builder, x: lg.Array, c: int, kh: int, kw: int | None = None, stride: int = 1, pad: bool = True
) -> lg.Array:
    """Convolution + bias + ReLU with a kh x kw kernel ('same' unless pad is False)."""
    kw = kh if kw is None else kw
    w = b.weight(c, x.shape[1], kh, kw)
    bias = b.weight(c, fan_in=x.shape[1])
    padding = (kh // 2, kw // 2) if pad else 0
    y = b._n("conv", lg.nn.functional.conv2d(x, w, bias, stride=stride, padding=padding))
    return b.relu(y)


def inception_v3(scale: float = 1.0, seed: int = 0, like: Model | None = None) -> Model:
    """Inception-v3's stem and modules A x3, B, C x4, D, E x2 (94 convolutions, 11 concats)."""
    b = Builder(seed, like)
    t = _image(b, 299, scale)
    t = _cbr(b, t, 32, 3, stride=2, pad=False)
    t = _cbr(b, t, 32, 3, pad=False)
    t = b.maxpool(_cbr(b, t, 64, 3), 3, 2, pad=0)
    t = _cbr(b, t, 80, 1)
    t = b.maxpool(_cbr(b, t, 192, 3, pad=False), 3, 2, pad=0)
    for pool_c in (32, 64, 64):  # A
        t = b.concat(
            [
                _cbr(b, t, 64, 1),
                _cbr(b, _cbr(b, t, 48, 1), 64, 5),
                _cbr(b, _cbr(b, _cbr(b, t, 64, 1), 96, 3), 96, 3),
                _cbr(b, b.avgpool(t, 3, 1), pool_c, 1),
            ]
        )
    t = b.concat(  # B (reduction)
        [
            _cbr(b, t, 384, 3, stride=2, pad=False),
            _cbr(b, _cbr(b, _cbr(b, t, 64, 1), 96, 3), 96, 3, stride=2, pad=False),
            b.maxpool(t, 3, 2, pad=0),
        ]
    )
    for c7 in (128, 160, 160, 192):  # C
        a = _cbr(b, _cbr(b, _cbr(b, t, c7, 1), c7, 1, 7), 192, 7, 1)
        d = _cbr(b, t, c7, 1)
        for c, (kh, kw) in ((c7, (7, 1)), (c7, (1, 7)), (c7, (7, 1)), (192, (1, 7))):
            d = _cbr(b, d, c, kh, kw)
        t = b.concat([_cbr(b, t, 192, 1), a, d, _cbr(b, b.avgpool(t, 3, 1), 192, 1)])
    a = _cbr(b, _cbr(b, t, 192, 1), 320, 3, stride=2, pad=False)  # D (reduction)
    d = _cbr(b, _cbr(b, _cbr(b, t, 192, 1), 192, 1, 7), 192, 7, 1)
    t = b.concat([a, _cbr(b, d, 192, 3, stride=2, pad=False), b.maxpool(t, 3, 2, pad=0)])
    for _ in range(2):  # E
        a = _cbr(b, t, 384, 1)
        d = _cbr(b, _cbr(b, t, 448, 1), 384, 3)
        parts = [_cbr(b, t, 320, 1), _cbr(b, a, 384, 1, 3), _cbr(b, a, 384, 3, 1)]
        parts += [_cbr(b, d, 384, 1, 3), _cbr(b, d, 384, 3, 1), _cbr(b, b.avgpool(t, 3, 1), 192, 1)]
        t = b.concat(parts)
    return b.model("Inception-v3", [t])
