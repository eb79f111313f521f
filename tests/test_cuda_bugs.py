"""The emulated CUDA device catches real kernel bugs, not only runs correct kernels.

The generated CUDA source of a block reduction (shared memory, `__syncthreads`, warp shuffles)
and of an elementwise grid-stride loop is edited to carry a classic bug — a missing barrier, an
off-by-one in a grid-stride loop, a wrong shuffle offset — and launched with the real launch
shape on the emulated backend (jit/backend/cuda_emulated.py): each run must raise or give values
that differ from NumPy, while the unedited source matches NumPy.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import lazygraph as lg
from jit import backend, generate
from jit import layout as lay
from jit.backend import cuda_emulated
from jit.fusion import find_regions
from jit.kernel import FusedKernel
from lazygraph.engine.evaluate import schedule

pytestmark = [
    pytest.mark.skipif(cuda_emulated.toolchain() is None, reason="needs a C++ compiler"),
    pytest.mark.host_backend,
]

EMU = backend.get("cuda-emulated")
PAD = 512  # elements past each buffer's end (more than a row): an out-of-bounds access lands there
SENTINEL = -7777.0  # what the padding past an output holds until a stray store overwrites it


def _padded(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A contiguous copy of `a` at the start of a NaN-padded buffer (the view, the buffer)."""
    base = np.full(a.size + PAD, np.nan, dtype=a.dtype)
    base[: a.size] = a.ravel()
    return base[: a.size].reshape(a.shape), base


def launch_edited(out: lg.Array, edit: Callable[[str], str]) -> tuple[np.ndarray, np.ndarray]:
    """The one fused region computing `out`, its CUDA source edited, run on the emulated device.

    Returns the output and its padded buffer; outputs start as NaN so an element no thread
    writes shows, and the padding past the output holds SENTINEL so a store past its end shows.
    """
    order = schedule([out.node])
    (region,) = find_regions(order, [out.node])
    kernel = FusedKernel(region)
    spec = kernel.spec
    arrays: list[np.ndarray] = []
    fs = [0.0] * len(spec.scalars)
    is_ = [0] * len(spec.scalars)
    for (kind, k), c in zip(spec.arg_of_input, region.inputs):
        assert c.buffer is not None
        if kind == "scalar":
            if np.dtype(c.dtype).kind == "f":
                fs[k] = float(c.buffer)
            else:
                is_[k] = int(c.buffer)
        else:
            arrays.append(_padded(np.asarray(c.buffer))[0])
    ((_, ai),) = spec.outputs
    res, base = _padded(np.full(out.shape, np.nan, dtype=spec.arrays[ai].dtype))
    base[res.size :] = SENTINEL
    sizes = {
        root: a.shape[d]
        for ref, a in zip(spec.arrays, arrays)
        for d, root in enumerate(ref.roots)
        if root >= 0
    }
    strides = lay.axis_strides(spec, [*arrays, res])
    layout = lay.make_layout(spec, sizes, strides)
    ints = lay.loop_args(spec, layout, sizes, strides)
    gen = generate.GENERATORS["cuda"]
    src = gen.render(spec, layout, gen.mode(layout, ints))
    program = EMU.load(EMU.compile(edit(src.text)), "lg_kernel", src.scalars)
    grid, block = src.launch(ints)
    program([*arrays, res], ints, fs, is_, grid, block)
    return res, base


def replace_once(old: str, new: str, nth: int = 0) -> Callable[[str], str]:
    """An edit replacing the `nth` occurrence of `old` (which must occur) by `new`."""

    def edit(text: str) -> str:
        at = -1
        for _ in range(nth + 1):
            at = text.find(old, at + 1)
            assert at >= 0, f"the generated source has no occurrence {nth} of {old!r}"
        return text[:at] + new + text[at + len(old) :]

    return edit


def unchanged(text: str) -> str:
    """No edit: the generated source as the CUDA backend would compile it."""
    return text


RNG = np.random.default_rng(7)
X = RNG.standard_normal((9, 300)).astype(np.float32)


# block reductions over rows: more than one warp per block, more rows than one pass
def _np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# name -> (the lazy output, its NumPy value)
REDUCTIONS: dict[str, tuple[Callable[[lg.Array], lg.Array], Callable[[np.ndarray], np.ndarray]]] = {
    "row-sum": (lambda x: x.sum(axis=1), lambda x: x.sum(axis=1)),
    "softmax": (lambda x: lg.softmax(x, axis=1), _np_softmax),
}

REDUCTION_BUGS: dict[str, Callable[[str], str]] = {
    # the barrier between the warps' partials in shared memory and thread 0 reading them
    "missing-barrier-after-partials": replace_once("__syncthreads();", "", 0),
    # the barrier between thread 0 writing the block's result and every thread reading it
    "missing-barrier-before-result": replace_once("__syncthreads();", "", 1),
    "wrong-shuffle-offset": replace_once(
        "__shfl_xor_sync(0xffffffffu, v, o)", "__shfl_xor_sync(0xffffffffu, v, o >> 1)"
    ),
}


def fails(out: lg.Array, edit: Callable[[str], str], ref: np.ndarray) -> bool:
    """Whether the edited kernel raises on the emulated device or its values differ from `ref`."""
    try:
        got, base = launch_edited(out, edit)
    except RuntimeError:
        return True
    if not (base[got.size :] == SENTINEL).all():
        return True  # a store past the output's end
    return not np.allclose(got, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_the_unedited_block_reduction_matches_numpy(name: str) -> None:
    build, ref = REDUCTIONS[name]
    got, base = launch_edited(build(lg.asarray(X)), unchanged)
    np.testing.assert_allclose(got, ref(X), rtol=1e-4, atol=1e-5)
    assert (base[got.size :] == SENTINEL).all()


# a row sum stores thread 0's value only, which the missing second barrier leaves right: the
# race shows where every thread uses the block's result (softmax)
CASES = [
    (n, b)
    for n in REDUCTIONS
    for b in REDUCTION_BUGS
    if (n, b) != ("row-sum", "missing-barrier-before-result")
]


@pytest.mark.parametrize(("name", "bug"), CASES)
def test_an_injected_block_reduction_bug_fails(name: str, bug: str) -> None:
    build, ref = REDUCTIONS[name]
    assert fails(build(lg.asarray(X)), REDUCTION_BUGS[bug], ref(X))


def _elementwise() -> lg.Array:
    x = lg.asarray(X)
    return x * x - lg.exp(x)


def _np_elementwise() -> np.ndarray:
    return X * X - np.exp(X)


GRID_STRIDE = "for (int64_t i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i0 < n0;"
ELEMENTWISE_BUGS: dict[str, Callable[[str], str]] = {
    "loop-bound-le": replace_once(GRID_STRIDE, GRID_STRIDE.replace("i0 < n0", "i0 <= n0")),
    "start-index-plus-one": replace_once(
        GRID_STRIDE, GRID_STRIDE.replace("threadIdx.x;", "threadIdx.x + 1;")
    ),
}


def test_the_unedited_grid_stride_loop_matches_numpy() -> None:
    got, base = launch_edited(_elementwise(), unchanged)
    np.testing.assert_allclose(got, _np_elementwise(), rtol=1e-6, atol=1e-6)
    assert (base[got.size :] == SENTINEL).all()


@pytest.mark.parametrize("bug", list(ELEMENTWISE_BUGS))
def test_an_injected_grid_stride_bug_fails(bug: str) -> None:
    assert fails(_elementwise(), ELEMENTWISE_BUGS[bug], _np_elementwise())


def test_a_grid_stride_off_by_one_in_the_reduction_rows_fails() -> None:
    edit = replace_once("i0 < n0; i0 += gridDim.x", "i0 <= n0; i0 += gridDim.x")
    assert fails(lg.asarray(X).sum(axis=1), edit, X.sum(axis=1))
