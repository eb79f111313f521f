"""`lg.linalg`: numpy.linalg and the Array API linalg extension, recorded lazily.

The solvers and decompositions are operators of ops/linalg_ext.py (NumPy's linalg is their
reference), batched over leading dimensions as NumPy 2 does; the multi-output ones (slogdet,
eigh, eig, svd, qr, lstsq) are one operator each whose packed value the results here are views
of. `norm`, `matrix_power` and `multi_dot` are compositions of existing operators, and the
Array API's `cross`, `diagonal`, `outer`, `tensordot`, `trace`, `vecdot`, `matmul` and
`matrix_transpose` are the main namespace's functions with the extension's signatures.

Where lazygraph differs from NumPy: `eig`/`eigvals` always return complex arrays (NumPy
returns real ones when every eigenvalue happens to be real, a dtype that depends on the values);
`svd(hermitian=True)` computes the general SVD (the same singular values; singular vectors may
differ in sign); `lstsq` is an evaluation point only when its residuals are read (their shape
depends on the rank: `lstsq(a, b)[0]` stays lazy, unpacking all four evaluates the rank).
A singular or non-positive-definite matrix raises `LinAlgError` at evaluation, naming the op
and the line that recorded it. Gradients: solve, inv, det, slogdet, cholesky, eigh, eigvalsh,
svd, svdvals, qr, pinv, lstsq (real input), eig and eigvals (real or complex eigenvalues of a
real input, read through `real`), and whatever is composed of differentiable operators.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

import ops.linalg_ext  # noqa: F401  (registers the operators)
import ops.linalg_grad  # noqa: F401  (their gradient rules)
from lazygraph import api, numlib, txn
from lazygraph.array import Array, record
from lazygraph.creation import eye, zeros
from lazygraph.numlib_math import _conj, _real
from lazygraph.shape import _arr, expand_dims, matrix_transpose, moveaxis, ravel, reshape
from ops.base import fmt_shape, normalize_axis
from ops.linalg_ext import FALLIBLE, LinAlgError, svd_parts

matmul = api.matmul
outer = api.outer
__all__ = ["LinAlgError", "matmul", "matrix_transpose", "outer"]


def _export(fn: Any) -> Any:
    __all__.append(fn.__name__)
    return fn


class EighResult(NamedTuple):
    eigenvalues: Array
    eigenvectors: Array


class EigResult(NamedTuple):
    eigenvalues: Array
    eigenvectors: Array


class SlogdetResult(NamedTuple):
    sign: Array
    logabsdet: Array


class SVDResult(NamedTuple):
    U: Array
    S: Array
    Vh: Array


class QRResult(NamedTuple):
    Q: Array
    R: Array


def _rec(op: str, *xs: Any, **attrs: Any) -> Array:
    out = record(op, *(_arr(x) for x in xs), **attrs)
    if op in FALLIBLE:  # a LinAlgError at evaluation names this line
        txn.note_origin(out.node)
    return out


def _re(z: Array) -> Array:
    return _real(z) if z.dtype.kind == "c" else z


@_export
def inv(a: Any) -> Array:
    """Inverse of each square matrix (LinAlgError at evaluation if singular)."""
    return _rec("inv", a)


@_export
def det(a: Any) -> Array:
    """Determinant of each square matrix."""
    return _rec("det", a)


@_export
def slogdet(a: Any) -> SlogdetResult:
    """(sign, log|det|) of each square matrix: determinants without overflow."""
    p = _rec("slogdet", a)
    return SlogdetResult(p[..., 0], _re(p[..., 1]))


@_export
def solve(a: Any, b: Any) -> Array:
    """x with a @ x = b: b is (M,) or a (broadcast) stack (..., M, K), as NumPy 2."""
    return _rec("solve", a, b)


@_export
def cholesky(a: Any, /, *, upper: bool = False) -> Array:
    """Cholesky factor L (a = L @ L^H), or U = L^H with upper=True."""
    return _rec("cholesky", a, upper=upper)


@_export
def eigh(a: Any, UPLO: str = "L") -> EighResult:
    """Ascending eigenvalues and orthonormal eigenvectors of Hermitian matrices (one triangle read)."""
    p = _rec("eigh", a, UPLO=UPLO)
    return EighResult(_re(p[..., 0, :]), p[..., 1:, :])


@_export
def eigvalsh(a: Any, UPLO: str = "L") -> Array:
    """Ascending eigenvalues of Hermitian matrices."""
    return _rec("eigvalsh", a, UPLO=UPLO)


@_export
def eig(a: Any) -> EigResult:
    """Eigenvalues and right eigenvectors of general square matrices (always complex)."""
    p = _rec("eig", a)
    return EigResult(p[..., 0, :], p[..., 1:, :])


@_export
def eigvals(a: Any) -> Array:
    """Eigenvalues of general square matrices (always complex)."""
    return _rec("eigvals", a)


@_export
def svd(a: Any, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False) -> Any:
    """Singular value decomposition U, S, Vh (or S alone with compute_uv=False)."""
    a = _arr(a)
    if not compute_uv:
        return _rec("svdvals", a)
    p = _rec("svd", a, full_matrices=full_matrices)
    m, n = a.shape[-2:]
    u, s, vh = svd_parts(_Reshaper, p, m, n, full_matrices)
    return SVDResult(u, _re(s), vh)


class _Reshaper:
    reshape = staticmethod(reshape)


@_export
def svdvals(x: Any, /) -> Array:
    """Singular values, descending (Array API)."""
    return _rec("svdvals", x)


@_export
def qr(a: Any, mode: str = "reduced") -> Any:
    """QR factorization: Q, R (mode 'reduced' or 'complete'), or R alone (mode 'r')."""
    a = _arr(a)
    p = _rec("qr", a, mode=mode)
    if mode == "r":
        return p
    m, n = a.shape[-2:]
    kq = m if mode == "complete" else min(m, n)
    batch = p.shape[:-1]
    return QRResult(reshape(p[..., : m * kq], batch + (m, kq)), reshape(p[..., m * kq :], batch + (kq, n)))


class LstsqResult(Sequence):
    """(x, residuals, rank, s) of lstsq; x, rank and s are lazy, residuals is an evaluation point.

    NumPy gives residuals of shape (K,) only when a is tall and of full rank, else (0,): that
    shape depends on the rank, so reading `residuals` (or unpacking all four) evaluates the rank.
    """

    def __init__(self, x: Array, res: Array, rank: Array, s: Array, tall: bool, n: int) -> None:
        self.x, self.rank, self.s = x, rank, s
        self._res, self._tall, self._n = res, tall, n

    @property
    def residuals(self) -> Array:
        """Squared residual norms per column: shape (K,) for a tall full-rank a, else (0,)."""
        if self._tall and int(self.rank) == self._n:
            return self._res
        return zeros((0,), self._res.dtype)

    def __getitem__(self, i: Any) -> Any:
        items = (self.x, None, self.rank, self.s)
        if isinstance(i, slice):
            return tuple(self[j] for j in range(4)[i])
        i = operator.index(i)
        return self.residuals if i in (1, -3) else items[i]

    def __len__(self) -> int:
        return 4

    def __repr__(self) -> str:
        return f"LstsqResult(x={self.x!r}, rank={self.rank!r}, s={self.s!r})"


@_export
def lstsq(a: Any, b: Any, rcond: float | None = None) -> LstsqResult:
    """Least-squares solution of a @ x = b, with residuals, rank and singular values (see LstsqResult)."""
    a, b = _arr(a), _arr(b)
    p = _rec("lstsq", a, b, rcond=rcond)
    m, n = a.shape
    k = 1 if b.ndim == 1 else b.shape[1]
    x = p[: n * k] if b.ndim == 1 else reshape(p[: n * k], (n, k))
    res = _re(p[n * k : n * k + k])
    rank = api.astype(_re(p[n * k + k]), np.int32)
    return LstsqResult(x, res, rank, _re(p[n * k + k + 1 :]), m > n, n)


@_export
def pinv(a: Any, rcond: Any = None, hermitian: bool = False, *, rtol: Any = None) -> Array:
    """Moore-Penrose pseudo-inverse of each matrix."""
    tol = rtol if rcond is None else rcond
    if isinstance(tol, Array) or np.ndim(tol) > 0:
        return _pinv_array_rtol(_arr(a), tol)
    return _rec("pinv", a, rcond=rcond, hermitian=hermitian, rtol=rtol)


def _pinv_array_rtol(a: Array, tol: Any) -> Array:
    # the Array API lets rtol be an array broadcast over the stack: composed from svd so the
    # per-matrix cutoff stays lazy
    if a.size == 0:
        return _rec("pinv", a)
    u, s, vh = svd(a, full_matrices=False)
    cutoff = api.max(s, axis=-1, keepdims=True) * _arr(tol)[..., None]
    large = s > cutoff
    sinv = api.where(large, 1 / api.where(large, s, 1), 0)
    vt, ut = _conj(matrix_transpose(vh)), _conj(matrix_transpose(u))
    return api.matmul(vt * api.astype(sinv, vt.dtype)[..., None, :], ut)


@_export
def matrix_rank(
    A: Any, tol: float | None = None, hermitian: bool = False, *, rtol: float | None = None
) -> Array:
    """Numerical rank of each matrix (int64); 0-d/1-d input: 1 unless all zero, as NumPy."""
    A = _arr(A)
    if A.ndim < 2:
        return api.astype(api.any(api.not_equal(A, 0)), np.int64)
    if _number(tol) and _number(rtol):
        return _rec("matrix_rank", A, tol=tol, hermitian=hermitian, rtol=rtol)
    # a tolerance per matrix (an array broadcast against the batch): NumPy's formula, composed
    S = api.abs(eigvalsh(A)) if hermitian else svdvals(A)
    if tol is None:
        if rtol is None:
            rtol = max(A.shape[-2:]) * np.finfo(S.dtype).eps
        else:
            rtol = expand_dims(_arr(rtol), -1)
        tol = api.multiply(api.max(S, axis=-1, keepdims=True), rtol)
    else:
        tol = expand_dims(_arr(tol), -1)
    return api.sum(api.astype(api.greater(S, tol), np.int64), axis=-1)


def _number(v: Any) -> bool:
    """Whether a tolerance is None or one plain number (the operator's attribute)."""
    return v is None or (isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool))


@_export
def matrix_power(a: Any, n: int) -> Array:
    """a multiplied by itself n times (inverse first for n < 0), by repeated squaring as NumPy."""
    a = _arr(a)
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError("matrix_power: exponent must be an integer") from None
    ops.linalg_ext.matrix("matrix_power", a.node)
    if n == 0:
        return api.add(zeros(a.shape, a.dtype), eye(a.shape[-1], dtype=a.dtype))
    if n < 0:
        a, n = inv(a), -n
    if n == 1:
        return api.astype(a, a.dtype, copy=True)
    result = z = None
    while n > 0:
        z = a if z is None else api.matmul(z, z)
        n, bit = divmod(n, 2)
        if bit:
            result = z if result is None else api.matmul(result, z)
    return result


def _chain_order(dims: list[int]) -> list[list[int]]:
    """Matrix-chain split points (the cheapest order, ties to the first split, as NumPy)."""
    n = len(dims) - 1
    cost = [[0.0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = math.inf
            for k in range(i, j):
                q = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if q < cost[i][j]:
                    cost[i][j], split[i][j] = q, k
    return split


@_export
def multi_dot(arrays: Sequence[Any], *, out: Array | None = None) -> Array:
    """Product of several matrices in the cheapest order (first/last may be 1-d), as NumPy."""
    xs = [_arr(x) for x in arrays]
    if len(xs) < 2:
        raise ValueError("multi_dot: Expecting at least two arrays.")
    if len(xs) == 2:
        result = api.dot(xs[0], xs[1])
    else:
        first, last = xs[0].ndim, xs[-1].ndim
        if first == 1:
            xs[0] = reshape(xs[0], (1, -1))
        if last == 1:
            xs[-1] = reshape(xs[-1], (-1, 1))
        for x in xs:
            if x.ndim != 2:
                raise ValueError(
                    f"multi_dot: {x.ndim}-dimensional array given. Array must be two-dimensional"
                )
        if len(xs) == 3:
            (a0, a1b0), (b1c0, c1) = xs[0].shape, xs[2].shape
            if a0 * b1c0 * (a1b0 + c1) < a1b0 * c1 * (a0 + b1c0):
                result = api.matmul(api.matmul(xs[0], xs[1]), xs[2])
            else:
                result = api.matmul(xs[0], api.matmul(xs[1], xs[2]))
        else:
            split = _chain_order([x.shape[0] for x in xs] + [xs[-1].shape[1]])

            def chain(i: int, j: int) -> Array:
                if i == j:
                    return xs[i]
                return api.matmul(chain(i, split[i][j]), chain(split[i][j] + 1, j))

            result = chain(0, len(xs) - 1)
        if first == 1 and last == 1:
            result = result[0, 0]
        elif first == 1 or last == 1:
            result = ravel(result)
    if out is not None:
        out[...] = result
        return out
    return result


# -- norms --------------------------------------------------------------------------------------


def _sq_abs(x: Array) -> Array:
    return _real(api.multiply(x, _conj(x))) if x.dtype.kind == "c" else api.multiply(x, x)


def _vector(x: Array, ord: Any, axis: Any, keepdims: bool) -> Array:  # noqa: A002 - NumPy's name
    if ord is None or ord == 2:
        return api.sqrt(api.sum(_sq_abs(x), axis=axis, keepdims=keepdims))
    if isinstance(ord, str):
        raise ValueError(f"norm: Invalid norm order '{ord}' for vectors")
    if ord == math.inf:
        return api.max(api.abs(x), axis=axis, keepdims=keepdims)
    if ord == -math.inf:
        return api.min(api.abs(x), axis=axis, keepdims=keepdims)
    real = np.finfo(x.dtype).dtype
    if ord == 0:
        return api.sum(api.astype(api.not_equal(x, 0), real), axis=axis, keepdims=keepdims)
    if ord == 1:
        return api.sum(api.abs(x), axis=axis, keepdims=keepdims)
    total = api.sum(api.pow(api.abs(x), np.asarray(ord, real)), axis=axis, keepdims=keepdims)
    return api.pow(total, api.astype(api.reciprocal(np.asarray(ord, real)), total.dtype))


def _matrix(x: Array, ord: Any, row: int, col: int, keepdims: bool) -> Array:  # noqa: A002 - NumPy's name
    if row == col:
        raise ValueError("norm: Duplicate axes given.")
    if ord in (2, -2, "nuc"):
        s = svdvals(moveaxis(x, (row, col), (-2, -1)))
        ret = api.max(s, axis=-1) if ord == 2 else api.min(s, axis=-1) if ord == -2 else api.sum(s, axis=-1)
    elif ord in (1, -1, math.inf, -math.inf):
        red = api.max if ord in (1, math.inf) else api.min
        along, other = (row, col) if ord in (1, -1) else (col, row)
        if other > along:
            other -= 1
        ret = red(api.sum(api.abs(x), axis=along), axis=other)
    elif ord in (None, "fro", "f"):
        ret = api.sqrt(api.sum(_sq_abs(x), axis=(row, col)))
    else:
        raise ValueError(f"norm: Invalid norm order {ord!r} for matrices.")
    if keepdims:
        shape = list(x.shape)
        shape[row] = shape[col] = 1
        ret = reshape(ret, tuple(shape))
    return ret


def _inexact(x: Any) -> Array:
    x = _arr(x)
    return x if x.dtype.kind in "fc" else api.astype(x, np.float64)


@_export
def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Array:  # noqa: A002 - NumPy's name
    """Vector or matrix norm (NumPy's orders: None, 'fro', 'nuc', inf, -inf, 0, 1, -1, 2, -2, p)."""
    x = _inexact(x)
    nd = x.ndim
    if axis is None:
        if ord is None or (ord in ("f", "fro") and nd == 2) or (ord == 2 and nd == 1):
            ret = api.sqrt(api.sum(_sq_abs(ravel(x))))
            return reshape(ret, (1,) * nd) if keepdims else ret
        axis = tuple(range(nd))
    elif not isinstance(axis, tuple):
        try:
            axis = (operator.index(axis),)
        except TypeError:
            raise TypeError("norm: 'axis' must be None, an integer or a tuple of integers") from None
    if len(axis) == 1:
        return _vector(x, ord, normalize_axis("norm", axis[0], nd), keepdims)
    if len(axis) == 2:
        return _matrix(
            x, ord, normalize_axis("norm", axis[0], nd), normalize_axis("norm", axis[1], nd), keepdims
        )
    raise ValueError(
        f"norm: Improper number of dimensions to norm (axis {axis}, shape {fmt_shape(x.shape)})."
    )


@_export
def vector_norm(x: Any, /, *, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Array:  # noqa: A002 - NumPy's name
    """Array API vector norm over all axes, one axis or several (treated as one flattened vector)."""
    x = _inexact(x)
    if isinstance(ord, str):
        raise ValueError(f"vector_norm: Invalid norm order '{ord}' for vectors")
    if axis is None:
        ret = _vector(ravel(x), ord, 0, False)
        return reshape(ret, (1,) * x.ndim) if keepdims else ret
    axes = tuple(
        normalize_axis("vector_norm", a, x.ndim) for a in (axis if isinstance(axis, tuple) else (axis,))
    )
    return _vector(x, ord, axes, keepdims)


@_export
def matrix_norm(x: Any, /, *, keepdims: bool = False, ord: Any = "fro") -> Array:  # noqa: A002 - NumPy's name
    """Array API matrix norm over the last two axes."""
    x = _inexact(x)
    if x.ndim < 2:
        raise ValueError(f"matrix_norm: needs at least 2 dimensions, got {fmt_shape(x.shape)}")
    return _matrix(x, ord, x.ndim - 2, x.ndim - 1, keepdims)


# -- the Array API extension's other functions --------------------------------------------------


@_export
def cross(x1: Any, x2: Any, /, *, axis: int = -1) -> Array:
    """Cross product of 3-vectors along an axis, broadcasting the others (Array API)."""
    a, b = _arr(x1), _arr(x2)
    for v in (a, b):
        if v.ndim == 0 or v.shape[axis if -v.ndim <= axis < v.ndim else -1] != 3:
            raise ValueError(
                f"cross: axis {axis} must have size 3 in both operands, got {fmt_shape(a.shape)} and "
                f"{fmt_shape(b.shape)}"
            )
    return numlib.cross(a, b, axis=axis)


@_export
def diagonal(x: Any, /, *, offset: int = 0) -> Array:
    """Diagonal of each matrix over the last two axes (Array API)."""
    return numlib.diagonal(x, offset, -2, -1)


@_export
def trace(x: Any, /, *, offset: int = 0, dtype: Any = None) -> Array:
    """Sum of each matrix's diagonal over the last two axes (Array API)."""
    return numlib.trace(x, offset, -2, -1, dtype)


@_export
def tensordot(x1: Any, x2: Any, /, *, axes: Any = 2) -> Array:
    """Tensor contraction over the given axes (Array API keyword form)."""
    return api.tensordot(x1, x2, axes)


@_export
def vecdot(x1: Any, x2: Any, /, *, axis: int = -1) -> Array:
    """Conjugated dot product along an axis, broadcasting the others (Array API)."""
    return api.vecdot(x1, x2, axis=axis)
