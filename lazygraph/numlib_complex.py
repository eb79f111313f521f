"""Complex parts as NumPy has them: real, imag, conj, angle, the is*complex tests, real_if_close.

`real`, `imag`, `conj` and `angle` record the operators of ops/complexparts.py. Where NumPy gives
a view (`np.real(z)`, `z.real`), lazygraph gives a new lazy value, with these differences:

- `z.real` / `z.imag` of a complex array read the array's current value (a later write to `z`
  shows in them, as in NumPy); writing through them (`z.real = v`, `z.imag[1:] = v`,
  `z.imag += 1`) is a recorded write into `z`. Other arrays derived from them (`z.real[1:]`,
  `z.real + 1`) are ordinary values, not views of `z`.
- `x.real` of a real array is a view of `x` (writable, as in NumPy); `x.imag` is read-only zeros.
- `real_if_close` is an evaluation point: whether the result is real depends on the values.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lazygraph import api
from lazygraph.array import Array, record
from lazygraph.owned_view import OwnedView
from lazygraph.shape import _arr

__all__ = [
    "real",
    "imag",
    "conj",
    "conjugate",
    "angle",
    "iscomplexobj",
    "isrealobj",
    "iscomplex",
    "isreal",
    "real_if_close",
]


def real(x: Any) -> Array:
    """The real part (the value itself for real input): complex data into real arithmetic."""
    return record("real", _arr(x))


def imag(x: Any) -> Array:
    """The imaginary part (zeros of the input's dtype for real input)."""
    return record("imag", _arr(x))


def conj(x: Any) -> Array:
    """The complex conjugate (real input unchanged; bool becomes int8, as np.conjugate)."""
    return record("conj", _arr(x))


conjugate = conj


def angle(z: Any, deg: bool = False) -> Array:
    """The argument of complex values (atan2(imag, real)), in radians or degrees."""
    a = record("angle", _arr(z))
    return api.multiply(a, 180 / math.pi) if deg else a  # NumPy's `a *= 180/pi`: one rounding


def iscomplexobj(x: Any) -> bool:
    """Whether x has a complex dtype (decided by the dtype alone: no evaluation)."""
    dtype = x.dtype if isinstance(x, Array) else None
    return dtype.kind == "c" if dtype is not None else bool(np.iscomplexobj(x))


def isrealobj(x: Any) -> bool:
    """Whether x does not have a complex dtype (no evaluation)."""
    return not iscomplexobj(x)


def iscomplex(x: Any) -> Array:
    """Elementwise: a nonzero imaginary part (False everywhere for real input)."""
    return api.not_equal(imag(x), 0)


def isreal(x: Any) -> Array:
    """Elementwise: a zero imaginary part (True everywhere for real input)."""
    return api.equal(imag(x), 0)


def real_if_close(a: Any, tol: float = 100) -> Array:
    """The real part when every imaginary part is within `tol` machine epsilons of zero.

    An evaluation point: whether the result is real (its dtype) depends on the values.
    """
    a = _arr(a)
    if a.dtype.kind != "c":
        return a
    if tol > 1:
        tol = float(np.finfo(a.dtype).eps) * tol
    if bool(api.all(api.less(api.abs(imag(a)), tol))):
        return real(a)
    return a


# -- Array.real / Array.imag ---------------------------------------------------------------


class ComplexPart(OwnedView):
    """`z.real` / `z.imag` of a complex array: reads follow `z`, writes are recorded into `z`."""

    __slots__ = ("_part",)

    def __init__(self, owner: Array, part: str) -> None:
        self._part = part
        super().__init__(owner)

    @property
    def write_name(self) -> str:  # type: ignore[override]
        """What a write into this part is called in the owner's errors."""
        return f"{self._part} part assignment"

    def _read(self) -> Array:
        return record(self._part, self._owner)

    def _owner_value(self, mine: Array) -> Array:
        other = record("imag" if self._part == "real" else "real", self._owner)
        re, im = (mine, other) if self._part == "real" else (other, mine)
        return record("make_complex", re, im)


def _get_real(self: Array) -> Array:
    if self.dtype.kind == "c":
        return ComplexPart(self, "real")
    return self._derive(self.view_of())  # NumPy: the array itself, as a view


def _set_real(self: Array, value: Any) -> None:
    _get_real(self)[...] = value


def _get_imag(self: Array) -> Array:
    if self.dtype.kind == "c":
        return ComplexPart(self, "imag")
    out = imag(self)
    out._readonly = True  # NumPy: read-only zeros
    return out


def _set_imag(self: Array, value: Any) -> None:
    if self.dtype.kind != "c":
        raise TypeError(f"imag: array of dtype {self.dtype} does not have an imaginary part to set")
    _get_imag(self)[...] = value


Array.real = property(_get_real, _set_real, doc="Real part (writes go into the array).")
Array.imag = property(_get_imag, _set_imag, doc="Imaginary part (writes go into a complex array).")


def _conj_method(self: Array) -> Array:
    """The complex conjugate; a real array itself (as ndarray.conj, not np.conjugate's int8 for bool)."""
    return conj(self) if self.dtype.kind == "c" else self


Array.conj = _conj_method
Array.conjugate = _conj_method
