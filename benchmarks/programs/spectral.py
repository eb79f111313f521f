"""Signal processing: FFT power spectrum, peak frequencies, an FFT low-pass filter and a windowed spectrum."""

from __future__ import annotations

from typing import Any

from numpy.random import default_rng

# samples per signal, signals
SIZES = {"small": (1_024, 4), "medium": (65_536, 16), "large": (1_048_576, 16)}


def run(np: Any, size: str = "small") -> dict[str, Any]:
    """Analyse noisy tones; returns spectra, the detected tones and the low-passed signals."""
    n, signals = SIZES[size]
    fs = 1000.0
    rng = default_rng(21)
    t = np.arange(n) / fs
    freqs = np.asarray(rng.uniform(20, 200, signals))
    x = np.sin(2 * np.pi * freqs[:, None] * t[None, :]) + 0.5 * np.asarray(rng.normal(size=(signals, n)))

    spectrum = np.fft.rfft(x, axis=1)
    power = np.abs(spectrum) ** 2 / n
    bins = np.fft.rfftfreq(n, d=1 / fs)
    peaks = bins[np.argmax(power[:, 1:], axis=1) + 1]
    cutoff = bins > 250.0
    lowpassed = np.fft.irfft(np.where(cutoff, 0, spectrum), n=n, axis=1)
    window = np.hanning(n)
    windowed = np.abs(np.fft.rfft(x * window, axis=1))
    return {
        "power": power,
        "peaks": peaks,
        "lowpassed": lowpassed,
        "windowed": windowed,
        "snr_db": 10 * np.log10(power.max(axis=1) / np.median(power, axis=1)),
    }
