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
The gradient rules are in ops/linalg_grad.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ops.base import Op, fmt_shape, register, type_error
from ops.namespace import is_device, namespace, on_host
from ops.node import Node

LinAlgError = np.linalg.LinAlgError


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
        if is_device(a) and (hermitian or rtol):  # CuPy's pinv has neither keyword
            return on_host(np.linalg.pinv, a, rcond=rcond, hermitian=hermitian, **rtol)
        if is_device(a):
            return namespace(a).linalg.pinv(a, rcond=1e-15 if rcond is None else rcond)
        return np.linalg.pinv(a, rcond=rcond, hermitian=hermitian, **rtol)


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
        if is_device(a) and (hermitian or rtol):  # CuPy's matrix_rank has neither keyword
            return on_host(np.linalg.matrix_rank, a, tol=tol, hermitian=hermitian, **rtol).astype(np.int64)
        fn = namespace(a).linalg.matrix_rank
        return (fn(a, tol=tol) if is_device(a) else fn(a, tol=tol, hermitian=hermitian, **rtol)).astype(
            np.int64
        )


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
        xp = namespace(a, b)
        if xp is np or a.ndim == 2:
            return xp.linalg.solve(a, b)
        # CuPy's batched solve wants b stacked like a: broadcast both (NumPy's rule), as NumPy
        # treats a 1-d b as one vector for every matrix
        vec = b.ndim == 1
        bm = b[:, None] if vec else b
        batch = tuple(np.broadcast_shapes(a.shape[:-2], bm.shape[:-2]))
        a = xp.ascontiguousarray(xp.broadcast_to(a, batch + a.shape[-2:]))
        bm = xp.ascontiguousarray(xp.broadcast_to(bm, batch + bm.shape[-2:]))
        x = xp.linalg.solve(a, bm)
        return x[..., 0] if vec else x


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


def svd_parts(F: Any, packed: Any, m: int, n: int, full: bool) -> tuple[Any, Any, Any]:
    """U, S, Vh as views of a packed svd value (or of its cotangent)."""
    ku, k, kv = svd_sizes(m, n, full)
    batch = packed.shape[:-1]
    u = F.reshape(packed[..., : m * ku], batch + (m, ku))
    s = packed[..., m * ku : m * ku + k]
    vh = F.reshape(packed[..., m * ku + k :], batch + (kv, n))
    return u, s, vh


def qr_parts(F: Any, packed: Any, m: int, n: int, mode: str) -> tuple[Any, Any]:
    """Q, R as views of a packed qr value (or of its cotangent), modes 'reduced' and 'complete'."""
    kq = m if mode == "complete" else min(m, n)
    batch = packed.shape[:-1]
    return F.reshape(packed[..., : m * kq], batch + (m, kq)), F.reshape(
        packed[..., m * kq :], batch + (kq, n)
    )
