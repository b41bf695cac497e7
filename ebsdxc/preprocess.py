"""Pattern and subregion preprocessing on the array backend (NumPy or CuPy).

Pattern level, in this order: conversion to float32 on the device, static
background (subtract or divide), dynamic background (division by a Gaussian blur of
the pattern itself), optional Gaussian band-pass. Subregion level: zero mean and
a Hann window, with the energy of each prepared tile kept for the normalised peak
height.

Blurs and band-passes run in the Fourier domain on reflect-padded patterns: on the
GPU one FFT pair per pattern is cheaper than a wide spatial kernel, and the padding
stops the circular wrap from mixing opposite pattern edges.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import status as st

__all__ = ["PreprocessConfig", "PatternPreprocessor", "window_1d", "window_2d", "prepare_tiles"]


@dataclass(frozen=True)
class PreprocessConfig:
    """Pattern-level preprocessing options.

    Attributes
    ----------
    static_operation : {"subtract", "divide"}
        How a static background (when one is given) is removed.
    dynamic_sigma : float or None
        Standard deviation (px) of the Gaussian blur the pattern is divided by;
        ``None`` switches dynamic background correction off.
    bandpass : (float, float) or None
        (low_sigma, high_sigma) in px: Gaussian smoothing of width ``low_sigma`` and
        removal of features broader than ``high_sigma``; either may be 0 (off).
    window : {"hann", "none"}
        Window applied to each zero-mean subregion.
    """

    static_operation: str = "subtract"
    dynamic_sigma: float | None = None
    bandpass: tuple[float, float] | None = None
    window: str = "hann"

    def __post_init__(self):
        if self.static_operation not in ("subtract", "divide"):
            raise ValueError(f"static background operation must be subtract or divide, "
                             f"got {self.static_operation!r}")
        if self.window not in ("hann", "none"):
            raise ValueError(f"window must be hann or none, got {self.window!r}")
        if self.dynamic_sigma is not None and not self.dynamic_sigma > 0:
            raise ValueError(f"dynamic background sigma must be > 0 px, got {self.dynamic_sigma}")
        if self.bandpass is not None:
            lo, hi = self.bandpass
            if lo < 0 or hi < 0 or (hi and lo >= hi):
                raise ValueError(f"band-pass needs 0 <= low_sigma < high_sigma, got {self.bandpass}")


def _gaussian_transfer(shape, sigma, xp):
    # Fourier transform of a unit-sum Gaussian of std `sigma` px, on an rfft2 grid.
    fy = xp.fft.fftfreq(shape[0])[:, None]
    fx = xp.fft.rfftfreq(shape[1])[None, :]
    return xp.exp(-2.0 * np.pi**2 * sigma**2 * (fy * fy + fx * fx)).astype(xp.float32)


class PatternPreprocessor:
    """Applies a :class:`PreprocessConfig` to batches of patterns on a backend.

    Filters are built once per pattern shape and kept on the device.
    """

    def __init__(self, config: PreprocessConfig, backend, *, static_background=None):
        self.config = config
        self.backend = backend
        xp = backend.xp
        self._bg = None if static_background is None else xp.asarray(static_background, dtype=xp.float32)
        if self._bg is not None and config.static_operation == "divide":
            self._bg = xp.where(self._bg > 0, self._bg, xp.float32(np.nan))
        self._filters = {}

    @property
    def is_identity(self) -> bool:
        c = self.config
        return self._bg is None and c.dynamic_sigma is None and c.bandpass is None

    def _filter(self, key, padded_shape):
        f = self._filters.get((key, padded_shape))
        if f is None:
            xp = self.backend.xp
            if key == "dynamic":
                f = _gaussian_transfer(padded_shape, self.config.dynamic_sigma, xp)
            else:
                lo, hi = self.config.bandpass
                f = xp.ones((padded_shape[0], padded_shape[1] // 2 + 1), dtype=xp.float32)
                if lo:
                    f *= _gaussian_transfer(padded_shape, lo, xp)
                if hi:
                    f *= 1 - _gaussian_transfer(padded_shape, hi, xp)
            self._filters[(key, padded_shape)] = f
        return f

    def _fourier_filter(self, x, key, sigma):
        xp, be = self.backend.xp, self.backend
        H, W = x.shape[-2:]
        py, px = min(int(3 * sigma) + 1, H - 1), min(int(3 * sigma) + 1, W - 1)
        xpad = xp.pad(x, ((0, 0), (py, py), (px, px)), mode="reflect")
        shape = xpad.shape[-2:]
        spec = be.rfft2(xpad)
        spec *= self._filter(key, shape)
        return be.irfft2(spec, s=shape, overwrite=True)[:, py:py + H, px:px + W]

    def __call__(self, patterns):
        """(B, H, W) patterns of any real dtype -> (B, H, W) float32 on the backend."""
        xp = self.backend.xp
        x = xp.asarray(patterns).astype(xp.float32, copy=False)
        c = self.config
        if self._bg is not None:
            x = x - self._bg if c.static_operation == "subtract" else x / self._bg
        bad = None
        if c.dynamic_sigma is not None or c.bandpass is not None:
            # A Fourier filter would spread one NaN over the whole pattern: filter with the
            # pattern's finite mean in its place, and put the NaN back afterwards. (No
            # data-dependent branch: on the GPU it would stall the stream.)
            bad = ~xp.isfinite(x)
            n_ok = xp.maximum((~bad).sum(axis=(-2, -1), keepdims=True), 1)
            fill = xp.where(bad, 0, x).sum(axis=(-2, -1), keepdims=True) / n_ok
            x = xp.where(bad, fill, x).astype(xp.float32, copy=False)
        if c.dynamic_sigma is not None:
            blur = self._fourier_filter(x, "dynamic", c.dynamic_sigma)
            # Guard against division by ~0 where the blurred pattern vanishes.
            floor = xp.float32(1e-6) * xp.abs(blur).max(axis=(-2, -1), keepdims=True)
            x = x / xp.maximum(blur, floor)
        if c.bandpass is not None:
            x = self._fourier_filter(x, "bandpass", max(c.bandpass))
        if bad is not None:
            x = xp.where(bad, xp.float32(np.nan), x)
        return x.astype(xp.float32, copy=False)


def window_1d(n, kind="hann") -> np.ndarray:
    """(n,) float64 window factor: symmetric Hann, or ones for ``"none"`` (and n <= 2)."""
    if kind == "none" or n <= 2:
        return np.ones(n)
    return np.hanning(n)


def window_2d(shape, kind="hann", xp=np):
    """(h, w) float32 separable window, the outer product of :func:`window_1d` factors."""
    h, w = shape
    return xp.asarray(np.outer(window_1d(h, kind), window_1d(w, kind)), dtype=xp.float32)


def prepare_tiles(tiles, window, xp=np, *, overwrite=False):
    """Zero-mean, windowed subregions with their energy and status.

    Parameters
    ----------
    tiles : (..., h, w) real array
    window : (h, w) float32 array
    xp : array module
    overwrite : bool
        Allow the result to reuse ``tiles`` (only when it is float32 already).

    Returns
    -------
    prepared : (..., h, w) float32
        ``(tile - mean(tile)) * window``; zeros where the tile is not usable.
    energy : (...) float32
        Sum of squares of ``prepared`` (for the normalised peak height).
    status : (...) uint8
        ``OK``, ``NOT_FINITE`` or ``CONSTANT_TILE``.
    """
    t = tiles.astype(xp.float32, copy=not overwrite)
    npx = t.shape[-1] * t.shape[-2]
    total = t.sum(axis=(-2, -1), dtype=xp.float32)
    finite = xp.isfinite(total)  # NaN and Inf propagate into the sum
    if not bool(finite.all()):
        t[~finite] = 0
        total = xp.where(finite, total, xp.float32(0))
    mean = total / xp.float32(npx)
    t -= mean[..., None, None]
    t *= window
    energy = xp.einsum("...ij,...ij->...", t, t)
    # A constant tile leaves only rounding noise after the mean is removed.
    constant = energy <= xp.float32(1e-10 * npx) * mean * mean + xp.float32(1e-30)
    status = xp.where(~finite, np.uint8(st.NOT_FINITE),
                      xp.where(constant, np.uint8(st.CONSTANT_TILE), np.uint8(st.OK))).astype(xp.uint8)
    bad = status != st.OK
    if bool(bad.any()):
        t[bad] = 0
    return t, energy.astype(xp.float32, copy=False), status
