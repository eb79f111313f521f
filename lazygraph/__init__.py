"""lazygraph: NumPy-style arrays that record a graph and run it at evaluation points.

import lazygraph as lg
x = lg.asarray(np.arange(12.0).reshape(3, 4))
v = x[1:, ::2]; v += 1             # a view and an in-place write, recorded
y = lg.tanh(x @ x.T) * 2           # nothing computed yet
print(y.numpy(), float(x.sum()))   # evaluation points
"""

from __future__ import annotations

import math as _math
import sys as _sys

import numpy as _np

from lazygraph import cachectl as cache  # noqa: F401  (lg.cache.stats(), lg.cache.clear())
from lazygraph import elements as _elements  # noqa: F401  (installs a[i], a[i] = v, a op= b on Array)
from lazygraph import fft, linalg, random  # noqa: E402, F401  (lg.fft, lg.linalg)
from lazygraph import methods as _methods  # noqa: F401  (installs Array operators)
from lazygraph import transfer as _transfer  # noqa: F401  (installs Array.to)
from lazygraph.api import *  # noqa: F403
from lazygraph.api import eval, explain, realize, to_dot  # noqa: F401
from lazygraph.array import Array, mark_static  # noqa: F401
from lazygraph.array_api import *  # noqa: F403  (namespace info, dtype functions, DLPack)
from lazygraph.creation import (  # noqa: F401
    arange,
    empty,
    empty_like,
    eye,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    zeros,
    zeros_like,
)
from lazygraph.device import Device, DeviceMismatchError, device, devices  # noqa: F401  (lg.device("cuda-emulated"))
from lazygraph.engine import EvaluationError  # noqa: F401
from lazygraph.nnops import avg_pool2d, conv2d, log_softmax, logsumexp, max_pool2d, one_hot, softmax  # noqa: F401
from lazygraph.numlib import *  # noqa: F403  (NumPy functions composed of the operators above)
from lazygraph.numlib_histogram import *  # noqa: F403  (histogramdd, histogram2d)
from lazygraph.numlib_linalg import *  # noqa: E402, F403  (polyfit, diagflat, hanning and the other windows)
from lazygraph.numlib_sort import *  # noqa: F403  (sorting, searching, counting, sets, quantiles)
from lazygraph.shape import (  # noqa: F401
    array,
    asarray,
    broadcast_arrays,
    broadcast_to,
    concat,
    concatenate,
    copy,
    expand_dims,
    flatten,
    flip,
    matrix_transpose,
    moveaxis,
    pad,
    permute_dims,
    ravel,
    reshape,
    split,
    squeeze,
    stack,
    swapaxes,
    transpose,
)
from lazygraph.version import __version__  # noqa: F401

bool_ = _np.bool_
bool = _np.bool_  # noqa: A001 - array API dtype name
int8, int16, int32, int64 = _np.int8, _np.int16, _np.int32, _np.int64
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64
float16, float32, float64 = _np.float16, _np.float32, _np.float64
complex64, complex128 = _np.complex64, _np.complex128
dtype = _np.dtype
newaxis = None
pi, e, inf, nan = _math.pi, _math.e, _math.inf, _math.nan

from lazygraph import array_methods as _array_methods  # noqa: E402, F401  (NumPy's ndarray methods on Array)
from lazygraph import autograd as _autograd  # noqa: E402  (installs Array.backward, .grad)
from lazygraph import datasets, distributed, nn, optim, superopt  # noqa: E402
from lazygraph import masked as _masked  # noqa: E402, F401  (x[mask] deferred until its count is needed)
from lazygraph import ufuncs as _ufuncs  # noqa: E402  (lazy ufunc methods: lg.add.at, lg.maximum.accumulate)
from lazygraph.autograd import backward, grad  # noqa: E402, F401
from lazygraph.engine.tiered import wait as jit_wait  # noqa: E402, F401  (background optimization and compiles done)
from lazygraph.fallback import LazygraphFallbackWarning  # noqa: E402, F401
from lazygraph.fallback import module_getattr as _numpy_getattr  # noqa: E402  (lg.<NumPy function we lack>: NumPy's, warned)
from lazygraph.gradmode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled  # noqa: E402, F401
from lazygraph.numlib_complex import *  # noqa: E402, F403  (real, imag, conj, angle, iscomplex, ...)
from lazygraph.numlib_index import *  # noqa: E402, F403  (fill_diagonal, put, insert, delete, triu_indices, unravel_index)
from lazygraph.numlib_tricks import *  # noqa: E402, F403  (mgrid, ogrid, r_, c_, ix_, block, select, isin, lexsort, ...)
from lazygraph.random import manual_seed  # noqa: E402
from lazygraph.superopt import rule as register_rule  # noqa: E402, F401  (user rules, proven by z3)
from ops.settings import SETTINGS as settings  # noqa: E402, F401  (lg.settings.update(jit=False), .override, .reload)

# NumPy's functions on lazy arrays (`np.mean(x)`) and the operators' gradient rules call the
# names defined here; handed over, so that no module below this one imports it back
_methods.install_array_function(_sys.modules[__name__])
_autograd.F.namespace = _sys.modules[__name__]


def __getattr__(name: str) -> object:
    """`lg.dask` imports lazygraph.dask on first use (importing lazygraph never imports Dask)."""
    if name == "dask":
        import importlib

        return importlib.import_module("lazygraph.dask")
    return _numpy_getattr(name)
