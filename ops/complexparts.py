"""Complex parts: real, imag, conj, angle, and building a complex value from two parts.

Each is a pointwise operator with NumPy's reference and dtype rule. real, imag and conj have
complex JIT forms (jit/complex_c.py); angle and make_complex of complex values run NumPy's.
Gradients are written for real floating-point operands, the only ones autograd tracks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ops.base import defvjp
from ops.declare import declare_elementwise
from ops.namespace import namespace


def _real(x: Any) -> Any:
    return np.real(namespace(x).asarray(x)).copy()


def _imag(x: Any) -> Any:
    x = namespace(x).asarray(x)
    return np.imag(x).copy() if x.dtype.kind == "c" else np.zeros_like(x)


def _angle(x: Any) -> Any:
    xp = namespace(x)
    x = xp.asarray(x)
    if x.dtype.kind != "c" and xp is not np:  # NumPy's definition; CuPy's angle(nan) is pi, not nan
        # in NumPy's dtype: arctan2(0, x) with a weak 0 (bool -> float64, int8 -> float16)
        dt = np.angle(np.zeros((), x.dtype)).dtype
        return xp.arctan2(xp.zeros_like(x, dtype=dt), x.astype(dt))
    return xp.asarray(np.angle(x))


def _make_complex(re: Any, im: Any) -> Any:
    """re + i*im exactly (no multiplication: an infinite part stays where it is)."""
    xp = namespace(re, im)
    re, im = xp.asarray(re), xp.asarray(im)
    for part in (re, im):
        if part.dtype.kind not in "biuf":
            raise TypeError(f"make_complex: parts must be real, got {part.dtype}")
    dt = np.promote_types(np.result_type(re, im), np.complex64)
    out = xp.empty(np.broadcast_shapes(re.shape, im.shape), dt)
    out.real = re
    out.imag = im
    return out


# real and imag read their operand in its own dtype (a conversion): of a complex value the
# part (lg_real/lg_imag, jit/complex_c.py), of a real one the value and zero
declare_elementwise(
    "real",
    _real,
    1,
    jit={"iub": "{0}", "fc": "lg_real({0})"},
    jit_cost=0,
    jit_loop="convert",
    z3=lambda Z, x: x,
)
declare_elementwise(
    "imag",
    _imag,
    1,
    jit={"iub": "0", "fc": "lg_imag({0})"},
    jit_cost=0,
    jit_loop="convert",
    z3=lambda Z, x: x * 0,
)
# np.conjugate is a ufunc: its loops give bool -> int8, as NumPy does
declare_elementwise(
    "conj", np.conjugate, 1, jit={"fiu": "{0}", "c": "lg_conj_{t}({0})"}, jit_cost=0, z3=lambda Z, x: x
)
declare_elementwise("angle", _angle, 1, jit={"f": "atan2(({T})0, {0})"}, jit_cost=12)
declare_elementwise("make_complex", _make_complex, 2)


# Complex operands follow PyTorch's convention: the cotangent of z is dL/d re(z) + i dL/d im(z).


@defvjp("real")
def _real_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    return (g,)


@defvjp("conj")
def _conj_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    return (F.conj(g) if g.dtype.kind == "c" else g,)


@defvjp("imag")
def _imag_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    # of a real operand imag is 0; of a complex one its cotangent is i g
    return (F.zeros_like(g) if xs[0].dtype.kind != "c" else g * 1j,)


@defvjp("angle")
def _angle_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    # of a real operand angle is 0 or pi (piecewise constant); of a complex z, i z / |z|^2
    z = xs[0]
    if z.dtype.kind != "c":
        return (F.zeros_like(g),)
    mag2 = F.real(z * F.conj(z))
    return (g * 1j * z / F.where(mag2 == 0, 1.0, mag2),)


@defvjp("make_complex")
def _make_complex_vjp(F: Any, g: Any, xs: list, out: Any, attrs: dict) -> tuple:
    return (F.real(g), F.imag(g)) if g.dtype.kind == "c" else (g, F.zeros_like(g))
