"""BERT as the graph-substitution papers build it, and NasRNN."""

from __future__ import annotations

import numpy as np

import lazygraph as lg

from .common import Builder, Model, size


def bert(scale: float = 1.0, seed: int = 0, like: Model | None = None) -> Model:
    """8 attention layers, 16 heads, sequence 64, hidden 1024, batch 1 (no softmax/layernorm).

    Without softmax or normalization a layer is cubic in its input, so values vanish or
    overflow within 8 layers; each output projection is scaled (from a NumPy pass over the
    same weights at build time) so that every layer's output has unit RMS.
    """
    b = Builder(seed, like)
    heads, seq = 16, 64
    hidden = size(1024, scale, multiple=heads, least=heads)
    d = hidden // heads
    t = b.input(seq, hidden)
    tn = t.numpy()
    for _ in range(8):
        ws = [b.weight(hidden, hidden) for _ in range(3)]
        q, k, v = (b.matmul(t, w) for w in ws)
        q = b.transpose(b.reshape(q, (seq, heads, d)), (1, 0, 2))  # heads, seq, d
        k = b.transpose(b.reshape(k, (seq, heads, d)), (1, 2, 0))  # heads, d, seq
        v = b.transpose(b.reshape(v, (seq, heads, d)), (1, 0, 2))
        logits = b.matmul(q, k)
        out = b.matmul(logits, v)  # heads, seq, d
        out = b.reshape(b.transpose(out, (1, 0, 2)), (seq, hidden))
        qn, kn, vn = ((tn @ w.numpy()).reshape(seq, heads, d) for w in ws)
        on = ((qn.transpose(1, 0, 2) @ kn.transpose(1, 2, 0)) @ vn.transpose(1, 0, 2)).transpose(1, 0, 2)
        on = on.reshape(seq, hidden)
        gain = 1.0 / max(float(np.sqrt(np.mean(np.square(on, dtype=np.float64)))), 1e-30)
        wo = b.weight(hidden, hidden, gain=gain)
        t, tn = b.matmul(out, wo), on @ wo.numpy()
    return b.model("BERT", [t])


def _combine(b: Builder, x: lg.Array, h: lg.Array, hidden: int) -> lg.Array:
    return b.add(b.matmul(x, b.weight(x.shape[1], hidden)), b.matmul(h, b.weight(h.shape[1], hidden)))


def nasrnn(scale: float = 1.0, seed: int = 0, like: Model | None = None) -> Model:
    """The NAS recurrent cell, hidden 512, 5 steps, batch 1 (TASO's nasrnn)."""
    b = Builder(seed, like)
    hidden = size(512, scale, multiple=8, least=8)
    xs = [b.input(1, hidden) for _ in range(5)]
    state = b.weight(1, hidden)
    for x in xs:
        t = [_combine(b, x, state, hidden) for _ in range(8)]
        m0 = b.add(b.relu(t[0]), b.sigmoid(t[3]))
        m1 = b.add(b.sigmoid(t[1]), b.tanh(t[2]))
        m2 = b.mul(b.sigmoid(t[4]), b.tanh(t[5]))
        m3 = b.mul(b.sigmoid(t[6]), b.relu(t[7]))
        m4 = b.add(b.sigmoid(m1), b.tanh(m2))
        m5 = b.mul(b.tanh(m0), b.tanh(m3))
        m6 = b.mul(b.tanh(m4), b.tanh(m5))
        state = b.tanh(m6)
    return b.model("NasRNN", [state])
