"""Gradients through complex values (PyTorch's convention), against finite differences.

Real inputs pass through complex intermediates (x * (1 + 1j) + 0.5j) and a real loss; each
operator's rule must conjugate where the derivative is complex (g * conj(f'(x))). Bilinear and
other holomorphic operators (matmul, einsum, prod, cumprod, inv, det, solve) once silently used
f'(x) unconjugated; the non-holomorphic linalg rules refuse complex input rather than guess.
"""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_grad

import lazygraph as lg

L = lg.linalg
RNG = np.random.default_rng(3)
X = RNG.standard_normal((3, 3))
Y = RNG.standard_normal((3, 3))
W = RNG.standard_normal((3, 3)) + 1j * RNG.standard_normal((3, 3))


def c(x):
    return x * (1 + 1j) + 0.5j


CASES = {
    "prod": lambda x: lg.real(lg.prod(c(x), axis=0) * (2 - 1j)),
    "cumprod": lambda x: lg.real(lg.cumprod(c(x), axis=1) * (2 - 1j)),
    "cumsum": lambda x: lg.real(lg.cumsum(c(x), axis=1) * (2 - 1j)),
    "mean": lambda x: lg.real(lg.mean(c(x), axis=1) * (2 - 1j)),
    "var": lambda x: lg.var(c(x), axis=1),
    "einsum": lambda x: lg.real(lg.einsum("ij,jk->ik", W, c(x)) * (2 - 1j)),
    "matmul-right": lambda x: lg.real((W @ c(x)) * (2 - 1j)),
    "matmul-left": lambda x: lg.real((c(x) @ W) * (2 - 1j)),
    "matmul-both": lambda x: lg.real((c(x) @ (x * (1 - 2j))) * (2 - 1j)),
    "matvec": lambda x: lg.real((c(x) @ W[0]) * (2 - 1j)),
    "tensordot": lambda x: lg.real(lg.tensordot(W, c(x), axes=1) * (2 - 1j)),
    "vdot": lambda x: lg.real(lg.vdot(W, c(x)) * (2 - 1j)),
    "outer": lambda x: lg.real(lg.outer(W[0], c(x)[1]) * (2 - 1j)),
    "trace": lambda x: lg.real(lg.trace(c(x) @ c(x)) * (2 - 1j)),
    "transpose": lambda x: lg.real((c(x).T @ W) * (2 - 1j)),
    "sqrt-abs": lambda x: lg.real(lg.sqrt(c(x)) * (2 - 1j)) + lg.abs(c(x)),
    "fft2": lambda x: lg.real(lg.fft.fft2(c(x)) * W),
    "inv": lambda x: lg.real(L.inv(c(x) + 2.0 * lg.eye(3)) * (1 + 2j)),
    "det": lambda x: lg.real(L.det(c(x))) + lg.imag(L.det(c(x))),
    "solve": lambda x: lg.abs(L.solve(c(x) + 2.0 * lg.eye(3), W)),
    "solve-vector": lambda x: lg.real(L.solve(W, c(x)[0]) * (1 - 1j)),
    "norm": lambda x: L.norm(c(x) * W),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_complex_gradients_match_finite_differences(name: str) -> None:
    check_grad(CASES[name], X)


def test_two_complex_operands() -> None:
    check_grad(
        lambda x, y: lg.real(L.solve(x + 1j * y, (y + 1j * x) @ lg.ones((3, 2)))), X + 3 * np.eye(3), Y
    )


@pytest.mark.parametrize("fn", ["cholesky", "eigh", "eigvalsh", "svdvals", "pinv", "qr", "slogdet"])
def test_non_holomorphic_linalg_refuses_complex_input(fn: str) -> None:
    def herm(x):
        m = c(x)
        return m @ lg.conj(m).T + 3.0 * lg.eye(3)

    a = lg.asarray(X)
    out = getattr(L, fn)(herm(a))
    part = out[-1] if isinstance(out, tuple) else out
    with pytest.raises(TypeError, match=f"{fn} gradient is defined for real input only"):
        lg.grad(lg.sum(lg.abs(part)), [a])


def test_untracked_input_through_complex_values_is_differentiated() -> None:
    """grad() with respect to an array not marked requires_grad walks complex values too
    (it once stopped at them and returned zeros)."""
    a = lg.asarray(X[0])
    got = lg.grad(lg.sum(lg.abs(a * (1 + 1j) + 0.5j)), [a])[0].numpy()
    z = X[0] * (1 + 1j) + 0.5j
    np.testing.assert_allclose(got, np.real(np.conj(z) / np.abs(z) * (1 + 1j)), rtol=1e-12)
