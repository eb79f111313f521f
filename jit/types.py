"""Dtypes as C and CUDA types, and the per-dtype facts kernels need (identities, suffixes)."""

from __future__ import annotations

import numpy as np

#: dtypes fused kernels handle; float16 stays with the NumPy kernels. Complex values are
#: pairs of reals in C (jit/complex_c.py); only the operators with a complex JIT form take them
SUPPORTED = frozenset(
    np.dtype(t)
    for t in (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float32,
        np.float64,
        np.complex64,
        np.complex128,
    )
)

_C = {
    "b1": "_Bool",
    "i1": "int8_t",
    "i2": "int16_t",
    "i4": "int32_t",
    "i8": "int64_t",
    "u1": "uint8_t",
    "u2": "uint16_t",
    "u4": "uint32_t",
    "u8": "uint64_t",
    "f4": "float",
    "f8": "double",
    "c8": "lg_c64",
    "c16": "lg_c128",
}


def supported(dtype: np.dtype) -> bool:
    """True when fused kernels can load, compute and store this dtype."""
    return np.dtype(dtype) in SUPPORTED


def code(dtype: np.dtype) -> str:
    """Short code of a dtype: kind and item size (f4, i8, b1)."""
    dt = np.dtype(dtype)
    return f"{dt.kind}{dt.itemsize}"


def ctype(dtype: np.dtype, cuda: bool = False) -> str:
    """The C type of a dtype (CUDA spells bool `bool`)."""
    name = _C[code(dtype)]
    if cuda and name == "_Bool":
        return "bool"
    return name


def suffix(dtype: np.dtype) -> str:
    """The helper-function suffix for a dtype (lg_floordiv_i8 is for int64)."""
    dt = np.dtype(dtype)
    kind = {"b": "u", "i": "i", "u": "u", "f": "f", "c": "c"}[dt.kind]
    return f"{kind}{dt.itemsize * 8}"


def is_complex(dtype: np.dtype) -> bool:
    """Complex values are structs in C: no casts, no arithmetic operators, only lg_* helpers."""
    return np.dtype(dtype).kind == "c"


def acc_dtype(dtype: np.dtype) -> np.dtype:
    """Accumulator dtype of a reduction: small integers and bools widen to 32 bits.

    Warp shuffles and OpenMP reductions need at least 32-bit operands; results are cast
    back to the reduction's dtype, which is exact for max/min/any/all.
    """
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return np.dtype(np.int32)
    if dt.kind in "iu" and dt.itemsize < 4:
        return np.dtype(np.int32 if dt.kind == "i" else np.uint32)
    return dt


def literal(value: str, dtype: np.dtype) -> str:
    """A reduction identity ("0", "1", "lowest", "highest") as a C literal of `dtype`."""
    dt = np.dtype(dtype)
    if value not in ("lowest", "highest"):
        return f"(({ctype(dt)}){value})" if dt.kind != "b" else value
    if dt.kind == "f":
        return "(-INFINITY)" if value == "lowest" else "INFINITY"
    if dt.kind == "b":
        return "0" if value == "lowest" else "1"
    info = np.iinfo(dt)
    v = info.min if value == "lowest" else info.max
    if dt == np.int64 and v == info.min:
        return "(-9223372036854775807LL - 1)"
    return f"(({ctype(dt)}){v}{'ULL' if dt.kind == 'u' else 'LL'})"


def simd_lanes(dtype: np.dtype, vector_bytes: int = 32) -> int:
    """Values of `dtype` in one SIMD register (the CPU cost model's thread count)."""
    return max(1, vector_bytes // max(1, np.dtype(dtype).itemsize))
