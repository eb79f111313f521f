"""The benchmark models: op counts against the published scripts; the superoptimizer keeps values."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import lazygraph as lg
from optimizer.superopt import pass_

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from models import MODELS, PUBLISHED  # noqa: E402

#: small sizes: every model evaluates in well under a second here
SMALL = {
    "bert": 0.125,
    "nasrnn": 0.125,
    "resnext50": 0.25,
    "squeezenet": 0.25,
    "inception_v3": 0.3,
    "resnet50": 0.25,
    "vgg19": 0.25,
    "nasnet_a": 0.3,
}


@pytest.fixture(autouse=True)
def uncached(monkeypatch):
    """Every evaluation optimizes afresh (the superopt setting changes between evaluations)."""
    monkeypatch.setenv("LAZYGRAPH_CACHE", "0")
    monkeypatch.delenv("LAZYGRAPH_SUPEROPT", raising=False)
    errors = pass_.COUNTS["errors"]
    yield
    assert pass_.COUNTS["errors"] == errors, pass_.LAST.get("error")  # the pass hides its failures


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_op_counts_match_the_published_scripts(name: str) -> None:
    with lg.no_grad():
        model = MODELS[name](SMALL[name])
    for kind, n in PUBLISHED[name].items():
        if kind in ("total", "relu"):
            continue  # the scripts fuse ReLU into conv2d; we count it as its own op
        if (name, kind) == ("resnet50", "conv"):
            assert model.counts[kind] == n + 1  # a projection shortcut in the first block as well
        else:
            assert model.counts[kind] == n, kind


def test_bert_and_nasrnn_totals() -> None:
    with lg.no_grad():
        assert MODELS["nasrnn"](0.125).total_ops == PUBLISHED["nasrnn"]["total"]
        assert MODELS["bert"](0.125).total_ops == PUBLISHED["bert"]["total"] - 1  # their input op


def test_full_size_shapes() -> None:
    with lg.no_grad():
        assert MODELS["bert"]().outputs[0].shape == (64, 1024)
        assert MODELS["inception_v3"]().outputs[0].shape == (1, 2048, 8, 8)
        assert MODELS["resnet50"]().outputs[0].shape == (1, 2048, 7, 7)
        assert MODELS["vgg19"]().outputs[0].shape == (1, 512, 7, 7)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_superoptimized_model_matches_the_plain_one(name: str, monkeypatch) -> None:
    values = []
    for setting in ("0", "1"):
        monkeypatch.setenv("LAZYGRAPH_SUPEROPT", setting)
        with lg.no_grad():
            model = MODELS[name](SMALL[name], seed=1)
            values.append(lg.eval(*model.outputs)[0] if len(model.outputs) > 1 else model.outputs[0].numpy())
    plain, optimized = values
    scale = float(np.abs(plain).max()) or 1.0
    np.testing.assert_allclose(optimized, plain, rtol=1e-4, atol=1e-4 * scale)
