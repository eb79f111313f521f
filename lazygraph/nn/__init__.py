"""Neural-network building blocks: `Module`, `Parameter`, layers, and `functional` (as F).

model = lg.nn.Sequential(lg.nn.Linear(784, 128), lg.nn.ReLU(), lg.nn.Linear(128, 10))
loss = lg.nn.functional.cross_entropy(model(x), y)
"""

from lazygraph.nn import functional, init
from lazygraph.nn.layers import (
    GELU,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Conv2d,
    Dropout,
    Embedding,
    Flatten,
    Identity,
    LayerNorm,
    Linear,
    LogSoftmax,
    MaxPool2d,
    ReLU,
    Sigmoid,
    Softmax,
    Tanh,
)
from lazygraph.nn.module import IncompatibleKeys, Module, ModuleList, Parameter, Sequential
from lazygraph.nn.parallel import DataParallel, DistributedDataParallel

__all__ = [
    "functional",
    "init",
    "Module",
    "ModuleList",
    "Parameter",
    "Sequential",
    "IncompatibleKeys",
    "DataParallel",
    "DistributedDataParallel",
    "Linear",
    "Conv2d",
    "MaxPool2d",
    "AvgPool2d",
    "ReLU",
    "Tanh",
    "Sigmoid",
    "GELU",
    "Softmax",
    "LogSoftmax",
    "Dropout",
    "Flatten",
    "Identity",
    "Embedding",
    "LayerNorm",
    "BatchNorm1d",
    "BatchNorm2d",
]
