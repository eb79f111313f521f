"""Reduced-precision floats: float16 storage and rounding, float32/float64 promotion, overflow to inf, nan."""

from __future__ import annotations

from typing import Any

from numpy.random import default_rng

# elements
SIZES = {"small": (1_000,), "medium": (1_000_000,), "large": (10_000_000,)}


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Compute in float16 and float32 the way mixed-precision code does; returns every result."""
    (n,) = SIZES[size]
    rng = default_rng(16)
    x64 = np.asarray(rng.normal(size=n))
    x16 = x64.astype(np.float16)
    x32 = x64.astype(np.float32)

    big = np.array([60000.0, 65504.0, 1e-8, 3.0], dtype=np.float16)
    scaled = x16 * np.float16(1000)
    return {
        "f16_round_trip": x16.astype(np.float64),
        "f16_square": x16 * x16,
        "f16_exp": np.exp(x16),
        "f16_sum": x16.sum(),
        "f16_mean": x16.mean(),
        "f16_f32_sum": x16.sum(dtype=np.float32),
        "f16_overflow": big * np.float16(2),
        "f16_underflow": big / np.float16(1e4),
        "f16_plus_f32": x16 + x32,  # -> float32
        "f16_plus_pyfloat": x16 + 0.1,  # stays float16
        "f16_scaled_max": scaled.max(),
        "f16_cast_back": (x32 * 3).astype(np.float16),
        "f32_plus_f64": x32 + x64,  # -> float64
        "f32_times_pyfloat": x32 * 0.1,  # stays float32
        "f32_sum": x32.sum(),
        "f32_softplus": np.log1p(np.exp(x32 * 30)),  # overflows to inf where large
        "f32_eps": np.finfo(np.float32).eps * np.ones(3, dtype=np.float32),
        "nan_max": np.maximum(np.array([np.nan, 1.0, 2.0]), 1.5),
        "nanmean": np.nanmean(np.where(x64 > 1.5, np.nan, x64)),
        "isfinite": np.isfinite(np.log(x32)).sum(),
        "kahan_gap": (x32.astype(np.float64).sum() - x32.sum()).astype(np.float32),
    }
