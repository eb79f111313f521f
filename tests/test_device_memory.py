"""The device backends' ownership checks (`held_only`) and allocation counter.

The device loop reuses a buffer or writes into it only when its backend says nothing but the
engine's own references holds the memory (lazygraph/engine/device_memory.py). A wrong "yes"
would let a write show through a view or a user's array, so every way of holding device
memory is checked here: views made by an array's index and methods, by functions, by
as_strided (whose NumPy base is not an ndarray), another wrapper of the same memory, a
caller's extra reference. The CUDA backend's count (over CuPy's MemoryPointer and its
allocation) is checked on a model of CuPy's arrays, since CI has no CuPy.
"""

from __future__ import annotations

import numpy as np
import pytest

from jit import backend
from jit.backend import cuda as cuda_backend
from jit.backend.emulated_array import EmulatedDeviceArray, emulated_namespace
from ops.namespace import strided_view

EMU = "cuda-emulated"


# (not `assert held_only(...)`: pytest's assertion rewriting keeps the operands in temporaries,
# which are holders of their own)
def _yes(answer: bool) -> None:
    assert answer is True


def _no(answer: bool) -> None:
    assert answer is False


@pytest.fixture
def be() -> backend.Backend:
    return backend.get(EMU)


def test_a_fresh_buffer_held_once_is_free(be: backend.Backend) -> None:
    vals = [be.empty((4, 4), np.float64)]
    _yes(be.held_only(vals[0], 1))
    _no(be.held_only(vals[0], 2))  # the caller claims a reference that does not exist
    x = vals[0]  # a second holder
    _no(be.held_only(vals[0], 1))
    _yes(be.held_only(vals[0], 2))
    del x
    _yes(be.held_only(vals[0], 1))


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a[1:],
        lambda a: a.T,
        lambda a: a.reshape(-1),
        lambda a: np.reshape(a, (16,)),
        lambda a: emulated_namespace.transpose(a),
        lambda a: strided_view(a, (2, 2), (4, 1), 1),
        lambda a: EmulatedDeviceArray(a._data),  # another wrapper of the same memory
    ],
    ids=["index", "T", "method", "function", "namespace", "as_strided", "wrapper"],
)
def test_every_view_is_a_holder(be: backend.Backend, make) -> None:
    vals = [be.empty((4, 4), np.float64)]
    v = make(vals[0])
    _no(be.held_only(vals[0], 1))
    if isinstance(v, EmulatedDeviceArray) and v._data is not vals[0]._data:
        vals.append(v)
        del v
        _yes(be.held_only(vals[0], 1, [vals[1]]))  # named: accounted for
        _no(be.held_only(vals[0], 1, []))
        w = vals[1][1:]  # a view of the view: an unnamed holder again
        _no(be.held_only(vals[0], 1, [vals[1]]))
        del w
        vals.pop()
    else:
        del v
    _yes(be.held_only(vals[0], 1))


def test_a_view_is_never_free_itself(be: backend.Backend) -> None:
    base = be.empty((4, 4), np.float64)
    vals = [base[1:]]
    _no(be.held_only(vals[0], 1))


def test_emulated_allocations_count_fresh_memory_only(be: backend.Backend) -> None:
    def spent(fn) -> int:
        before = backend.allocations(EMU)["count"]
        fn()
        return backend.allocations(EMU)["count"] - before

    x = be.empty((3, 3), np.float32)
    out = be.empty((3, 3), np.float32)
    assert spent(lambda: x + 1.0) == 1
    assert spent(lambda: x[1:]) == 0
    assert spent(lambda: x.reshape(-1)) == 0
    assert spent(lambda: np.add(x, x, out=out)) == 0
    assert np.add(x, x, out=out) is out  # as CuPy returns its `out`
    assert spent(lambda: x.copy()) == 1
    assert spent(lambda: x.astype(np.float32, copy=False)) == 0
    assert spent(lambda: be.to_device(np.ones(2))) == 1
    assert spent(lambda: x.sum()) == 1


# -- the CUDA backend's count, on a model of CuPy's arrays -----------------------------------


class _Mem:
    """cupy.cuda.memory.BaseMemory: the allocation."""


class _Ptr:
    """cupy.cuda.MemoryPointer: an address into an allocation (holds `mem`)."""

    def __init__(self, mem: _Mem) -> None:
        self.mem = mem


class _Flags:
    c_contiguous = True


class _Arr:
    """cupy.ndarray as far as the count reads it: `data` (a pointer), `base`, `flags`."""

    flags = _Flags()

    def __init__(self, data: _Ptr, base: _Arr | None = None) -> None:
        self.data = data
        self.base = base

    def slice(self) -> _Arr:  # x[1:]: a new pointer into the allocation, base x
        return _Arr(_Ptr(self.data.mem), self if self.base is None else self.base)

    def transposed(self) -> _Arr:  # x.T: the same pointer object, base x
        return _Arr(self.data, self if self.base is None else self.base)

    def as_strided(self) -> _Arr:  # cupy's as_strided: ndarray(memptr=x.data), base None
        return _Arr(self.data)


@pytest.mark.parametrize("how", ["slice", "transposed", "as_strided"])
def test_cupy_count_sees_every_array_over_an_allocation(how: str) -> None:
    held = cuda_backend._cupy_held_only
    vals = [_Arr(_Ptr(_Mem()))]
    _yes(held(vals[0], 1, (), 1))
    v = getattr(vals[0], how)()
    _no(held(vals[0], 1, (), 1))
    vals.append(v)
    del v
    _yes(held(vals[0], 1, [vals[1]], 1))
    w = vals[1].slice()  # a view of the view
    _no(held(vals[0], 1, [vals[1]], 1))
    del w
    vals.pop()
    _yes(held(vals[0], 1, (), 1))
    x = vals[0]
    _no(held(vals[0], 1, (), 1))
    del x


def test_cuda_backend_without_cupy_never_claims_a_buffer_free() -> None:
    cuda = backend.get("cuda")
    if cuda.available() and cuda._have_cupy():
        pytest.skip("CuPy is here: the probe decides (tests marked cuda check it)")
    assert not cuda.held_only(object(), 1)
