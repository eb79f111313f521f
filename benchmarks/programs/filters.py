"""Image filters on a uint8 RGB image: grayscale, box and Gaussian blur, Sobel edges, sharpen, median."""

from __future__ import annotations

from typing import Any

import numpy
from numpy.random import default_rng

# image height, width
SIZES = {"small": (64, 96), "medium": (720, 1280), "large": (2160, 3840)}


def _image(h: int, w: int) -> Any:
    """A deterministic test picture: gradients, a bright disc and noise, as uint8 RGB."""
    rng = default_rng(6)
    yy, xx = (a.astype(float) for a in numpy.mgrid[0:h, 0:w])
    disc = ((yy - h / 2) ** 2 + (xx - w / 3) ** 2 < (min(h, w) / 4) ** 2) * 120.0
    base = (xx / w * 200.0)[..., None] * [1.0, 0.6, 0.3] + (yy / h * 55.0)[..., None] + disc[..., None]
    return (base + rng.normal(0, 12, (h, w, 3))).clip(0, 255).astype("uint8")


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Filter a synthetic photo; returns the filtered images (float32 and uint8)."""
    h, w = SIZES[size]
    rgb = np.asarray(_image(h, w))
    gray = (rgb.astype(np.float32) @ np.array([0.299, 0.587, 0.114], dtype=np.float32)) / 255.0

    p = np.pad(gray, 1, mode="edge")
    box = sum(p[1 + dy : 1 + dy + h, 1 + dx : 1 + dx + w] for dy in (-1, 0, 1) for dx in (-1, 0, 1)) / 9.0

    k = np.array([1, 4, 6, 4, 1], dtype=np.float32) / 16
    p2 = np.pad(gray, 2, mode="reflect")
    rows = sum(k[i] * p2[:, i : i + w] for i in range(5))
    gauss = sum(k[i] * rows[i : i + h, :] for i in range(5))

    gx = (p[:-2, 2:] + 2 * p[1:-1, 2:] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[1:-1, :-2] + p[2:, :-2])
    gy = (p[2:, :-2] + 2 * p[2:, 1:-1] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[:-2, 1:-1] + p[:-2, 2:])
    magnitude = np.hypot(gx, gy)
    edges = magnitude > 0.5

    sharp = np.clip(gray + 1.5 * (gray - gauss), 0.0, 1.0)
    sharp_u8 = (sharp * 255).round().astype(np.uint8)
    shifts = np.stack([p[1 + dy : 1 + dy + h, 1 + dx : 1 + dx + w] for dy in (-1, 0, 1) for dx in (-1, 0, 1)])
    median = np.median(shifts, axis=0)
    inverted = 255 - rgb
    return {
        "gray": gray,
        "box": box,
        "gauss": gauss,
        "magnitude": magnitude,
        "edges": edges,
        "sharp_u8": sharp_u8,
        "median": median,
        "inverted": inverted,
        "mean_color": rgb.mean(axis=(0, 1)),
    }
