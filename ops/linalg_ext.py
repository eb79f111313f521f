"""numpy.linalg's solvers and decompositions: one operator each, batched over leading dimensions.

Every operator here reads its operands' array namespace (NumPy, or CuPy on the GPU) and calls
that namespace's `linalg`, so `numpy.linalg` is the reference. Shapes and dtypes are checked at
record time: a matrix operand needs two dimensions and, for the square-only operators, equal
last two; the dtype rule runs the reference on a 2x2 identity of the operand dtype (float16 and
other types NumPy's linalg refuses fail as NumPy's TypeError does). Failures that depend on the
values (a singular matrix, a matrix that is not positive definite, no convergence) happen at
evaluation and keep NumPy's `LinAlgError`.

Multi-output decompositions (slogdet, eigh, eig, svd, qr, lstsq) are ONE operator each whose
value is a *packed* array: the outputs, in the common dtype, side by side along the last axis(es)
(see each class for the layout). `lazygraph.linalg` hands the user views (slices and reshapes)
of that one value, so a decomposition runs once however many of its outputs are read, and the
gradient rule receives the packed cotangent (zeros where an output was not used). A real part
stored in a complex pack (the eigenvalues of a Hermitian matrix) is read back with a real cast.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ops.base import Op, defvjp, fmt_shape, register, type_error
from ops.node import Node

LinAlgError = np.linalg.LinAlgError


def namespace(x: Any) -> Any:
    """The array module an operand belongs to (numpy, cupy): kernels call its `linalg`/`fft`."""
    mod = sys.modules.get(type(x).__module__.split(".")[0])
    return mod if mod is not None and hasattr(mod, "linalg") else np


_DTYPES: dict[tuple, Any] = {}


def example_dtypes(op: str, fn: Any, inputs: tuple[Node, ...], **kw: Any) -> Any:
    """Output dtype(s) of the reference `fn` on 2x2 identities (vectors: ones) of the input dtypes."""
    key = (op, tuple(n.dtype for n in inputs), tuple(sorted(kw.items())))
    if key not in _DTYPES:
        examples = [np.eye(2, dtype=n.dtype) if n.ndim >= 2 else np.ones(2, n.dtype) for n in inputs]
        try:
            with np.errstate(all="ignore"):
                out = fn(*examples, **kw)
        except TypeError as e:
            names = ", ".join(str(n.dtype) for n in inputs)
            raise type_error(op, f"not supported for input types ({names}): {e}", inputs) from None
        outs = tuple(out) if isinstance(out, tuple) else (out,)
        _DTYPES[key] = tuple(np.asarray(o).dtype for o in outs)
    dts = _DTYPES[key]
    return dts if len(dts) > 1 else dts[0]


def matrix(op: str, node: Node, square: bool = True) -> tuple[int, int]:
    """The last two extents of a (stack of) matrices, or NumPy's LinAlgError naming the op."""
    if node.ndim < 2:
        raise LinAlgError(
            f"{op}: {node.ndim}-dimensional array given. Array must be at least two-dimensional "
            f"(operand {fmt_shape(node.shape)} {node.dtype})"
        )
    m, n = node.shape[-2:]
    if square and m != n:
        raise LinAlgError(
            f"{op}: Last 2 dimensions of the array must be square (operand {fmt_shape(node.shape)} {node.dtype})"
        )
    return m, n


def _complex(dt: np.dtype) -> np.dtype:
    return np.result_type(dt, np.complex64)


class MatrixOp(Op):
    """A function of one (stack of) matrices: `value` gives the output shape from (batch, m, n)."""

    kind = "linalg"

    def __init__(self, name: str, square: bool = True) -> None:
        super().__init__(name)
        self.square = square

    def attrs(self, a: Node, attrs: dict) -> dict:
        """Checked, normalized attributes (none by default)."""
        if attrs:
            raise TypeError(f"{self.name}: unexpected attributes {sorted(attrs)}")
        return {}

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Shape from the matrix extents, dtype from the reference."""
        (a,) = inputs
        m, n = matrix(self.name, a, self.square)
        attrs = self.attrs(a, attrs)
        shape, dtype = self.value(a, a.shape[:-2], m, n, attrs)
        return shape, np.dtype(dtype), attrs

    def value(self, a: Node, batch: tuple, m: int, n: int, attrs: dict) -> tuple[tuple, Any]:
        """(shape, dtype) of the result."""
        raise NotImplementedError


class Inv(MatrixOp):
    """numpy.linalg.inv."""

    def value(self, a, batch, m, n, attrs):
        return a.shape, example_dtypes(self.name, np.linalg.inv, (a,))

    def kernel(self, a: Any) -> Any:
        return namespace(a).linalg.inv(a)


class Det(MatrixOp):
    """numpy.linalg.det."""

    def value(self, a, batch, m, n, attrs):
        return batch, example_dtypes(self.name, np.linalg.det, (a,))

    def kernel(self, a: Any) -> Any:
        return namespace(a).linalg.det(a)


class Slogdet(MatrixOp):
    """numpy.linalg.slogdet packed as (..., 2): [sign, logabsdet] (complex for complex input)."""

    def value(self, a, batch, m, n, attrs):
        return batch + (2,), example_dtypes(self.name, np.linalg.slogdet, (a,))[0]

    def kernel(self, a: Any) -> Any:
        xp = namespace(a)
        sign, logdet = xp.linalg.slogdet(a)
        return xp.stack([sign, logdet.astype(sign.dtype)], axis=-1)


class Cholesky(MatrixOp):
    """numpy.linalg.cholesky (lower factor, or the upper one with upper=True)."""

    def attrs(self, a, attrs):
        return {"upper": bool(attrs.get("upper", False))}

    def value(self, a, batch, m, n, attrs):
        return a.shape, example_dtypes(self.name, np.linalg.cholesky, (a,))

    def kernel(self, a: Any, upper: bool) -> Any:
        xp = namespace(a)
        if xp is np:
            return np.linalg.cholesky(a, upper=upper)
        if not upper:
            return xp.linalg.cholesky(a)
        return xp.conj(xp.linalg.cholesky(xp.conj(a).swapaxes(-1, -2))).swapaxes(-1, -2)


def _uplo(op: str, attrs: dict) -> dict:
    uplo = attrs.get("UPLO", "L")
    if uplo not in ("L", "U"):
        raise ValueError(f"{op}: UPLO argument must be 'L' or 'U', got {uplo!r}")
    return {"UPLO": uplo}


class Eigh(MatrixOp):
    """numpy.linalg.eigh packed as (..., n + 1, n): row 0 the eigenvalues, rows 1.. the eigenvectors."""

    def attrs(self, a, attrs):
        return _uplo(self.name, attrs)

    def value(self, a, batch, m, n, attrs):
        return batch + (n + 1, n), example_dtypes(self.name, np.linalg.eigh, (a,))[1]

    def kernel(self, a: Any, UPLO: str) -> Any:
        xp = namespace(a)
        w, v = xp.linalg.eigh(a, UPLO=UPLO)
        return xp.concatenate([w[..., None, :].astype(v.dtype), v], axis=-2)


class Eigvalsh(MatrixOp):
    """numpy.linalg.eigvalsh: ascending eigenvalues of a Hermitian matrix."""

    def attrs(self, a, attrs):
        return _uplo(self.name, attrs)

    def value(self, a, batch, m, n, attrs):
        return batch + (n,), example_dtypes(self.name, np.linalg.eigvalsh, (a,))

    def kernel(self, a: Any, UPLO: str) -> Any:
        return namespace(a).linalg.eigvalsh(a, UPLO=UPLO)


class Eig(MatrixOp):
    """numpy.linalg.eig packed as (..., n + 1, n), always complex: row 0 eigenvalues, rows 1.. vectors.

    NumPy returns real arrays when every eigenvalue happens to be real, a dtype that depends on
    the values; this operator's dtype is always the complex one (same values).
    """

    def value(self, a, batch, m, n, attrs):
        return batch + (n + 1, n), _complex(example_dtypes(self.name, np.linalg.eig, (a,))[1])

    def kernel(self, a: Any) -> Any:
        xp = namespace(a)
        w, v = xp.linalg.eig(a)
        dt = _complex(v.dtype)
        return xp.concatenate([w[..., None, :].astype(dt), v.astype(dt)], axis=-2)


class Eigvals(MatrixOp):
    """numpy.linalg.eigvals, always complex (see Eig)."""

    def value(self, a, batch, m, n, attrs):
        return batch + (n,), _complex(example_dtypes(self.name, np.linalg.eigvals, (a,)))

    def kernel(self, a: Any) -> Any:
        w = namespace(a).linalg.eigvals(a)
        return w.astype(_complex(w.dtype))


def flat(x: Any) -> Any:
    """A stack of matrices as a stack of rows (explicit extents: a 0-size batch has no -1)."""
    return x.reshape(x.shape[:-2] + (x.shape[-2] * x.shape[-1],))


def svd_sizes(m: int, n: int, full: bool) -> tuple[int, int, int]:
    """(columns of U, singular values, rows of Vh)."""
    k = min(m, n)
    return (m, k, n) if full else (k, k, k)


class Svd(MatrixOp):
    """numpy.linalg.svd packed flat along the last axis: U (m*ku), S (k), Vh (kv*n), in U's dtype."""

    def attrs(self, a, attrs):
        return {"full_matrices": bool(attrs.get("full_matrices", True))}

    def value(self, a, batch, m, n, attrs):
        ku, k, kv = svd_sizes(m, n, attrs["full_matrices"])
        return batch + (m * ku + k + kv * n,), example_dtypes(self.name, np.linalg.svd, (a,))[0]

    def kernel(self, a: Any, full_matrices: bool) -> Any:
        xp = namespace(a)
        u, s, vh = xp.linalg.svd(a, full_matrices=full_matrices)
        return xp.concatenate([flat(u), s.astype(u.dtype), flat(vh)], axis=-1)


class Svdvals(MatrixOp):
    """The singular values alone (numpy.linalg.svd(compute_uv=False)), descending."""

    def value(self, a, batch, m, n, attrs):
        return batch + (min(m, n),), example_dtypes(self.name, np.linalg.svd, (a,), compute_uv=False)

    def kernel(self, a: Any) -> Any:
        return namespace(a).linalg.svd(a, compute_uv=False)


class Qr(MatrixOp):
    """numpy.linalg.qr: mode 'r' gives R itself; 'reduced'/'complete' pack Q (m*kq) and R (kq*n) flat."""

    def attrs(self, a, attrs):
        mode = attrs.get("mode", "reduced")
        if mode not in ("reduced", "complete", "r"):
            raise ValueError(
                f"qr: mode must be 'reduced', 'complete' or 'r' (got {mode!r}; 'raw' is not supported)"
            )
        return {"mode": mode}

    def value(self, a, batch, m, n, attrs):
        kq = m if attrs["mode"] == "complete" else min(m, n)
        dtype = example_dtypes(self.name, np.linalg.qr, (a,))[0]
        if attrs["mode"] == "r":
            return batch + (min(m, n), n), dtype
        return batch + (m * kq + kq * n,), dtype

    def kernel(self, a: Any, mode: str) -> Any:
        xp = namespace(a)
        if mode == "r":
            return xp.linalg.qr(a, mode="r")
        q, r = xp.linalg.qr(a, mode=mode)
        return xp.concatenate([flat(q), flat(r)], axis=-1)


def _tol(op: str, name: str, v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{op}: {name} must be a Python number or None, got {type(v).__name__}")
    return float(v)


class Pinv(MatrixOp):
    """numpy.linalg.pinv (rcond or rtol, hermitian); shape (..., n, m)."""

    def attrs(self, a, attrs):
        out = {"rcond": _tol("pinv", "rcond", attrs.get("rcond")), "hermitian": bool(attrs.get("hermitian"))}
        if attrs.get("rtol") is not None:
            out["rtol"] = _tol("pinv", "rtol", attrs["rtol"])
        return out

    def value(self, a, batch, m, n, attrs):
        return batch + (n, m), example_dtypes(self.name, np.linalg.pinv, (a,))

    def kernel(self, a: Any, rcond: float | None, hermitian: bool, **rtol: Any) -> Any:
        return namespace(a).linalg.pinv(a, rcond=rcond, hermitian=hermitian, **rtol)


class MatrixRank(MatrixOp):
    """numpy.linalg.matrix_rank of a stack of matrices (tol or rtol, hermitian): int64."""

    def attrs(self, a, attrs):
        out = {"tol": _tol("matrix_rank", "tol", attrs.get("tol")), "hermitian": bool(attrs.get("hermitian"))}
        if attrs.get("rtol") is not None:
            out["rtol"] = _tol("matrix_rank", "rtol", attrs["rtol"])
        return out

    def value(self, a, batch, m, n, attrs):
        example_dtypes(self.name, np.linalg.matrix_rank, (a,))
        return batch, np.int64

    def kernel(self, a: Any, tol: float | None, hermitian: bool, **rtol: Any) -> Any:
        return namespace(a).linalg.matrix_rank(a, tol=tol, hermitian=hermitian, **rtol).astype(np.int64)


class Solve(Op):
    """numpy.linalg.solve: b of shape (M,) is one vector, else (..., M, K) stacks broadcast with a."""

    kind = "linalg"

    def __init__(self) -> None:
        super().__init__("solve")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """Batch-broadcast shape; b's rows must match a's order."""
        a, b = inputs
        m, _ = matrix("solve", a)
        dtype = example_dtypes("solve", np.linalg.solve, inputs)
        bad = b.ndim == 0 or (b.shape[0] if b.ndim == 1 else b.shape[-2]) != m
        batch = a.shape[:-2]
        if not bad and b.ndim > 1:
            try:
                batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
            except ValueError:
                bad = True
        if bad:
            raise ValueError(
                f"solve: b of shape {fmt_shape(b.shape)} does not match a of shape {fmt_shape(a.shape)} "
                "(b must be (M,) or (..., M, K) with the batch dimensions broadcasting)"
            )
        return batch + ((m,) if b.ndim == 1 else (m, b.shape[-1])), dtype, {}

    def kernel(self, a: Any, b: Any) -> Any:
        return namespace(a).linalg.solve(a, b)


class Lstsq(Op):
    """numpy.linalg.lstsq packed flat: x (n*K), residuals (K; NaN where NumPy gives none), rank, s (k)."""

    kind = "linalg"

    def __init__(self) -> None:
        super().__init__("lstsq")

    def infer(self, inputs: tuple[Node, ...], attrs: dict):
        """a is (M, N), b (M,) or (M, K); no batching, as NumPy."""
        a, b = inputs
        if a.ndim != 2 or b.ndim not in (1, 2):
            raise LinAlgError(
                f"lstsq: a must be 2-dimensional and b 1- or 2-dimensional, got {fmt_shape(a.shape)} "
                f"and {fmt_shape(b.shape)}"
            )
        m, n = a.shape
        if b.shape[0] != m:
            raise LinAlgError(
                f"lstsq: Incompatible dimensions: a {fmt_shape(a.shape)}, b {fmt_shape(b.shape)}"
            )
        rcond = _tol("lstsq", "rcond", attrs.get("rcond"))
        dtype = example_dtypes("lstsq", np.linalg.lstsq, inputs)[0]
        k = 1 if b.ndim == 1 else b.shape[1]
        return (n * k + k + 1 + min(m, n),), dtype, {"rcond": rcond}

    def kernel(self, a: Any, b: Any, rcond: float | None) -> Any:
        xp = namespace(a)
        x, res, rank, s = xp.linalg.lstsq(a, b, rcond=rcond)
        k = 1 if b.ndim == 1 else b.shape[1]
        if res.size != k:
            res = xp.full(k, np.nan)
        parts = [x.reshape(-1), res, xp.asarray([rank]), s]
        return xp.concatenate([xp.asarray(p).astype(x.dtype) for p in parts])


for _op in (
    Inv("inv"),
    Det("det"),
    Slogdet("slogdet"),
    Cholesky("cholesky"),
    Eigh("eigh"),
    Eigvalsh("eigvalsh"),
    Eig("eig"),
    Eigvals("eigvals"),
    Svd("svd", square=False),
    Svdvals("svdvals", square=False),
    Qr("qr", square=False),
    Pinv("pinv", square=False),
    MatrixRank("matrix_rank", square=False),
    Solve(),
    Lstsq(),
):
    register(_op)

#: operators whose kernels can fail on the values (LinAlgError): recording notes the user's line
FALLIBLE = ("inv", "solve", "cholesky", "eigh", "eigvalsh", "eig", "eigvals", "svd", "svdvals", "qr",
            "pinv", "matrix_rank", "lstsq", "det", "slogdet")  # fmt: skip


# ---------------------------------------------------------------------------------------
# Gradients (real input; the rules below are the standard matrix-calculus results).


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
def _inv_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    _real_only("inv", xs[0])
    t = _mT(F, out)
    return (-(t @ g @ t),)


@defvjp("det")
def _det_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    _real_only("det", xs[0])
    return ((g * out)[..., None, None] * _mT(F, F.record("inv", xs[0])),)


@defvjp("slogdet")
def _slogdet_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    _real_only("slogdet", xs[0])  # the sign is locally constant: only logabsdet has a gradient
    return (g[..., 1][..., None, None] * _mT(F, F.record("inv", xs[0])),)


@defvjp("solve")
def _solve_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    a, b = xs
    _real_only("solve", a)
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


def svd_parts(F: Any, packed: Any, m: int, n: int, full: bool) -> tuple[Any, Any, Any]:
    """U, S, Vh as views of a packed svd value (or of its cotangent)."""
    ku, k, kv = svd_sizes(m, n, full)
    batch = packed.shape[:-1]
    u = F.reshape(packed[..., : m * ku], batch + (m, ku))
    s = packed[..., m * ku : m * ku + k]
    vh = F.reshape(packed[..., m * ku + k :], batch + (kv, n))
    return u, s, vh


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
