"""Integer dtype edge cases: int8/int32/int64 wraparound, uint8 image arithmetic, floor division, casts."""

from __future__ import annotations

from typing import Any

from numpy.random import default_rng

# image side, repeats of the checksum loop
SIZES = {"small": (32, 10), "medium": (1024, 50), "large": (4096, 50)}


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Exercise wraparound and promotion the way image and hashing code does; returns every result."""
    side, rounds = SIZES[size]
    rng = default_rng(15)
    img = np.asarray(rng.integers(0, 256, (side, side), dtype="uint8"))
    other = np.asarray(rng.integers(0, 256, (side, side), dtype="uint8"))

    i8 = np.array([100, 120, -128, 127, -1], dtype=np.int8)
    i32 = np.array([2**30, 2**31 - 1, -(2**31), 46341, 7], dtype=np.int32)
    i64 = np.array([2**62, -(2**63), 2**63 - 1, 3], dtype=np.int64)
    floats = np.array([-2.7, -0.5, 0.5, 2.7, 1e3])
    ints = np.array([-7, -6, 6, 7])

    h = np.full(side, 2166136261, dtype=np.uint32)  # FNV-1a style row hash, wrapping in uint32
    for r in range(rounds):
        h = (h ^ img[:, r % side].astype(np.uint32)) * np.uint32(16777619)
    return {
        "u8_add": img + other,  # wraps modulo 256
        "u8_sub": img - other,
        "u8_add_scalar": img + 100,  # a Python int stays uint8 (NEP 50)
        "u8_mul_float": img * 1.5,  # -> float64
        "u8_shift": (img >> 1) + (img << 1),
        "u8_sum": img.sum(),  # uint8 sums accumulate in uint64
        "u8_mean": img.mean(),
        "u8_blend": ((img.astype(np.uint16) * 3 + other) // 4).astype(np.uint8),
        "u8_clip": np.clip(img.astype(np.int16) + 100, 0, 255).astype(np.uint8),
        "u8_diff": np.abs(img.astype(np.int16) - other).astype(np.uint8),
        "i8_add": i8 + i8,
        "i8_neg": -i8,
        "i8_abs": np.abs(i8),
        "i8_mul": i8 * np.int8(3),
        "i8_sum": i8.sum(),  # int8 sums accumulate in int64
        "i8_cumsum": np.cumsum(i8),
        "i32_square": i32 * i32,
        "i32_pow": np.array([2, 3], dtype=np.int32) ** 31,
        "i64_wrap": i64 * 4 + 1,
        "floordiv": ints // 4,
        "mod": ints % 4,
        "fmod": np.fmod(ints, 4),
        "divmod_neg": ints // -4,
        "true_div": ints / 4,
        "trunc_cast": floats.astype(np.int32),
        "to_int8": np.array([300, -200, 255]).astype(np.int8),
        "u64_plus_i64": np.array([1], dtype=np.uint64) + np.array([1], dtype=np.int64),
        "bool_sum": (img > 128).sum(),
        "bool_add": (img > 100) + (img > 200),
        "fnv": h,
        "xor_sum": np.bitwise_xor.reduce(img, axis=1),
        "iinfo_max": np.iinfo(np.int16).max + np.zeros(2, dtype=np.int16),
    }
