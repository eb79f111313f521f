"""Gradient rules of the numpy.linalg operators (ops/linalg_ext.py): standard matrix calculus.

Real input, except for the holomorphic `inv`, `det` and `solve` (complex input through
`ops.base.holomorphic`: PyTorch's convention), and `eig`/`eigvals`, whose outputs are complex
for real input: their cotangents follow PyTorch's convention for complex values (dL/d re +
i dL/d im, what `real(w)` of a complex `w` passes back), and a real input receives the real part.
The others (slogdet, cholesky, eigh, svd, qr, pinv, lstsq) involve conjugate transposes or
moduli, not holomorphic: they refuse complex input with a TypeError rather than guess. Rules assume what the
derivative needs: distinct eigenvalues (eigh, eig), distinct nonzero singular values (svd), a
full-rank R (qr), a rank that does not change under perturbation (pinv, lstsq).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ops.base import defvjp, fmt_shape, holomorphic
from ops.linalg_ext import qr_parts, svd_parts


def _real_only(op: str, x: Any) -> None:
    if x.dtype.kind == "c":
        raise TypeError(f"grad: the {op} gradient is defined for real input only, got {x.dtype}")


def _mT(F: Any, x: Any) -> Any:
    return F.matrix_transpose(x)


def _masks(n: int, dtype: Any, lower: bool) -> tuple[np.ndarray, np.ndarray]:
    """(strict triangle the reference reads, identity) as constants."""
    tri = np.tri(n, k=-1, dtype=dtype)
    return (tri if lower else tri.T.copy()), np.eye(n, dtype=dtype)


def _read_triangle(F: Any, G: Any, lower: bool) -> Any:
    """Cotangent of a matrix of which only one triangle is read as a symmetric one."""
    strict, eye = _masks(G.shape[-1], G.dtype, lower)
    return (G + _mT(F, G)) * F.asarray(strict) + G * F.asarray(eye)


def _off_diagonal_inverse(F: Any, diff: Any) -> Any:
    """1 / diff off the diagonal, 0 on it."""
    eye = F.asarray(np.eye(diff.shape[-1], dtype=bool))
    return F.where(eye, 0.0, 1.0 / F.where(eye, 1.0, diff))


@defvjp("inv")
@holomorphic
def _inv_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    t = _mT(F, out)
    return (-(t @ g @ t),)


@defvjp("det")
@holomorphic
def _det_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    return ((g * out)[..., None, None] * _mT(F, F.record("inv", xs[0])),)


@defvjp("slogdet")
def _slogdet_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    _real_only("slogdet", xs[0])  # the sign is locally constant: only logabsdet has a gradient
    return (g[..., 1][..., None, None] * _mT(F, F.record("inv", xs[0])),)


@defvjp("solve")
@holomorphic
def _solve_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    a, b = xs
    at = _mT(F, a)
    if b.ndim == 1:
        gb = F.record("solve", at, g[..., None])[..., 0]
        return -(gb[..., :, None] * out[..., None, :]), gb
    gb = F.record("solve", at, g)
    return -(gb @ _mT(F, out)), gb


@defvjp("cholesky")
def _cholesky_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    _real_only("cholesky", xs[0])
    upper = attrs["upper"]
    low, gl = (_mT(F, out), _mT(F, g)) if upper else (out, g)
    n = low.shape[-1]
    strict, eye = _masks(n, low.dtype, True)
    phi = (_mT(F, low) @ gl) * F.asarray(strict + 0.5 * eye)
    linv = F.record("inv", low)
    return (_read_triangle(F, _mT(F, linv) @ phi @ linv, not upper),)


def _eigh_grad(F: Any, w: Any, v: Any, gw: Any, gv: Any | None, lower: bool) -> Any:
    eye = F.asarray(np.eye(w.shape[-1], dtype=w.dtype))
    inner = gw[..., None, :] * eye
    if gv is not None:
        finv = _off_diagonal_inverse(F, w[..., None, :] - w[..., :, None])
        inner = inner + finv * (_mT(F, v) @ gv)
    return _read_triangle(F, v @ inner @ _mT(F, v), lower)


@defvjp("eigh")
def _eigh_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    _real_only("eigh", xs[0])
    return (
        _eigh_grad(F, out[..., 0, :], out[..., 1:, :], g[..., 0, :], g[..., 1:, :], attrs["UPLO"] == "L"),
    )


@defvjp("eigvalsh")
def _eigvalsh_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    _real_only("eigvalsh", xs[0])
    v = F.record("eigh", xs[0], UPLO=attrs["UPLO"])[..., 1:, :]
    return (_eigh_grad(F, out, v, g, None, attrs["UPLO"] == "L"),)


@defvjp("svd")
def _svd_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    a = xs[0]
    _real_only("svd", a)
    m, n = a.shape[-2:]
    if attrs["full_matrices"] and m != n:
        raise TypeError(
            f"grad: svd(full_matrices=True) of a non-square {fmt_shape(a.shape)} input has no gradient "
            "(the extra singular vectors are not unique): use full_matrices=False"
        )
    u, s, vh = svd_parts(F, out, m, n, attrs["full_matrices"])
    gu, gs, gvh = svd_parts(F, g, m, n, attrs["full_matrices"])
    v, gv = _mT(F, vh), _mT(F, gvh)
    eye = F.asarray(np.eye(s.shape[-1], dtype=s.dtype))
    s2 = s * s
    finv = _off_diagonal_inverse(F, s2[..., None, :] - s2[..., :, None])
    utgu, vtgv = _mT(F, u) @ gu, _mT(F, v) @ gv
    inner = (
        (finv * (utgu - _mT(F, utgu))) * s[..., None, :]
        + gs[..., None, :] * eye
        + s[..., :, None] * (finv * (vtgv - _mT(F, vtgv)))
    )
    ga = u @ inner @ vh
    if m > s.shape[-1]:
        ga = ga + ((gu - u @ utgu) / s[..., None, :]) @ vh
    if n > s.shape[-1]:
        ga = ga + (u / s[..., None, :]) @ (gvh - _mT(F, vtgv) @ vh)
    return (ga,)


@defvjp("svdvals")
def _svdvals_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    a = xs[0]
    _real_only("svdvals", a)
    m, n = a.shape[-2:]
    u, _, vh = svd_parts(F, F.record("svd", a, full_matrices=False), m, n, False)
    return ((u * g[..., None, :]) @ vh,)


# -- qr -------------------------------------------------------------------------------------


def _right_inverse_t(F: Any, x: Any, r: Any) -> Any:
    """x @ inv(r).T, by a solve (r square, invertible)."""
    return _mT(F, F.record("solve", r, _mT(F, x)))


def _qr_deep(F: Any, q: Any, r: Any, gq: Any, gr: Any) -> Any:
    """Cotangent of a (m >= n) from those of its reduced Q (m, n) and R (n, n)."""
    qdq = _mT(F, q) @ gq
    rdr = r @ _mT(F, gr)
    lower = F.asarray(np.tril(np.ones((r.shape[-1],) * 2, dtype=r.dtype)))
    skew = (qdq - _mT(F, qdq) + rdr - _mT(F, rdr)) * lower
    return q @ (gr + _right_inverse_t(F, skew, r)) + _right_inverse_t(F, gq - q @ qdq, r)


@defvjp("qr")
def _qr_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    a = xs[0]
    _real_only("qr", a)
    m, n = a.shape[-2:]
    mode = attrs["mode"]
    if mode == "complete" and m > n:
        raise TypeError(
            f"grad: qr(mode='complete') of a tall {fmt_shape(a.shape)} input has no gradient (the extra "
            "columns of Q are not unique): use mode='reduced'"
        )
    if mode == "r":
        q, r = qr_parts(F, F.record("qr", a, mode="reduced"), m, n, "reduced")
        gq, gr = F.zeros_like(q), g
    else:
        (q, r), (gq, gr) = qr_parts(F, out, m, n, mode), qr_parts(F, g, m, n, mode)
    if m >= n:
        return (_qr_deep(F, q, r, gq, gr),)
    # a wide a = [x | y] with r = [u | v]: x = q u is a square QR, y = q v
    u, gu, gv = r[..., :, :m], gr[..., :, :m], gr[..., :, m:]
    gx = _qr_deep(F, q, u, gq + a[..., :, m:] @ _mT(F, gv), gu)
    return (F.concat([gx, q @ gv], axis=-1),)


# -- eig, eigvals (complex outputs) ----------------------------------------------------------


def _complex_cotangent(F: Any, g: Any, dtype: Any) -> Any:
    return g if g.dtype == dtype else F.astype(g, dtype)


def _eig_grad(F: Any, a: Any, w: Any, v: Any, gw: Any, gv: Any | None) -> Any:
    vh = F.conj(_mT(F, v))
    eye = F.asarray(np.eye(w.shape[-1], dtype=bool))
    inner = gw[..., None, :] * F.asarray(np.eye(w.shape[-1], dtype=w.dtype))
    if gv is not None:
        vhgv = vh @ gv
        # eigenvectors are unit vectors up to a phase: only the part of gv that changes them counts
        along = F.real(F.diagonal(vhgv, 0, -2, -1))
        vhgv = vhgv - vh @ (v * F.astype(along, v.dtype)[..., None, :])
        diff = F.conj(w[..., None, :] - w[..., :, None])
        inner = F.where(eye, inner, vhgv / F.where(eye, 1.0, diff))
    ga = F.record("solve", vh, inner @ vh)
    return F.real(ga) if a.dtype.kind != "c" else ga


@defvjp("eig")
def _eig_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    g = _complex_cotangent(F, g, out.dtype)
    return (_eig_grad(F, xs[0], out[..., 0, :], out[..., 1:, :], g[..., 0, :], g[..., 1:, :]),)


@defvjp("eigvals")
def _eigvals_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    packed = F.record("eig", xs[0])
    g = _complex_cotangent(F, g, packed.dtype)
    return (_eig_grad(F, xs[0], packed[..., 0, :], packed[..., 1:, :], g, None),)


# -- pinv, lstsq -------------------------------------------------------------------------------


def _pinv_grad(F: Any, a: Any, p: Any, gp: Any) -> Any:
    """Cotangent of a from that of p = pinv(a) (constant rank), in the smaller of the two shapes."""
    m, n = a.shape[-2:]
    pt, gpt = _mT(F, p), _mT(F, gp)
    if m <= n:
        k = gpt @ p
        kpt = k @ pt
        return -_mT(F, p @ k) + kpt - (a @ p) @ kpt + (pt @ p) @ (gpt - k @ a)
    k = p @ gpt
    ptk = pt @ k
    return -_mT(F, k @ p) + (gpt - a @ k) @ p @ pt + ptk - ptk @ p @ a


@defvjp("pinv")
def _pinv_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    _real_only("pinv", xs[0])
    ga = _pinv_grad(F, xs[0], out, g)
    # hermitian=True reads the lower triangle only (NumPy's eigh), as a symmetric matrix
    return (_read_triangle(F, ga, True) if attrs["hermitian"] else ga,)


@defvjp("lstsq")
def _lstsq_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    # x = pinv(a) @ b (the minimum-norm least-squares solution); residuals |b - a x|^2 have the
    # envelope gradient (x is optimal); s as svdvals; the rank is piecewise constant
    a, b = xs
    _real_only("lstsq", a)
    m, n = a.shape
    vec = b.ndim == 1
    k = 1 if vec else b.shape[1]
    rcond = attrs["rcond"]
    rcond = float(np.finfo(out.dtype).eps) * max(m, n) if rcond is None else rcond
    p = F.record("pinv", a, rcond=rcond, hermitian=False)
    gx = F.reshape(g[: n * k], (n, k))
    gres, gs = g[n * k : n * k + k], g[n * k + k + 1 :]
    b2 = F.reshape(b, (m, k))
    x = p @ b2
    resid = b2 - a @ x
    gb = _mT(F, p) @ gx + 2.0 * resid * gres
    ga = _pinv_grad(F, a, p, gx @ _mT(F, b2)) - 2.0 * (resid * gres) @ _mT(F, x)
    u, _, vh = svd_parts(F, F.record("svd", a, full_matrices=False), m, n, False)
    ga = ga + (u * gs) @ vh
    return ga, (F.reshape(gb, (m,)) if vec else gb)
