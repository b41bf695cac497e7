"""Gaussian band-pass: the exact response to sinusoids."""

from __future__ import annotations

import numpy as np
import pytest

from ebsdxc.backend import select_backend
from ebsdxc.preprocess import PatternPreprocessor, PreprocessConfig


@pytest.fixture(scope="module")
def be():
    # CPU only: overrides the NumPy / CuPy `be` of conftest.py.
    return select_backend("cpu")

def _two_sinusoids(shape):
    H, W = shape
    y, x = np.mgrid[0:H, 0:W].astype(float)
    fl, fh = np.array([1 / 60, 1 / 80]), np.array([1 / 3.7, -1 / 5.3])
    low = np.cos(2 * np.pi * (fl[0] * x + fl[1] * y) + 0.3)
    high = 0.7 * np.cos(2 * np.pi * (fh[0] * x + fh[1] * y) + 1.1)
    return low, high, fl, fh


def _gauss_transfer(f, s):
    return np.exp(-2 * np.pi**2 * s**2 * (f @ f)) if s else 1.0


@pytest.mark.parametrize("shape", [(90, 121), (77, 64)])
@pytest.mark.parametrize("bandpass", [(2.0, 0.0), (0.0, 2.0), (1.5, 3.0), (3.0, 0.0), (0.0, 4.0)])
def test_bandpass_sinusoids(be, shape, bandpass):
    H, W = shape
    low, high, fl, fh = _two_sinusoids(shape)
    pat = 5 + low + high
    out = PatternPreprocessor(PreprocessConfig(bandpass=bandpass), be)(pat[None])[0]
    assert out.dtype == np.float32
    lo, hi = bandpass
    # Exact response of a Gaussian low-pass G_lo and high-pass 1 - G_hi to each sinusoid.
    t_low = _gauss_transfer(fl, lo) * ((1 - _gauss_transfer(fl, hi)) if hi else 1)
    t_high = _gauss_transfer(fh, lo) * ((1 - _gauss_transfer(fh, hi)) if hi else 1)
    dc = 0.0 if hi else 5.0
    m = int(4 * max(bandpass)) + 2
    inner = (slice(m, H - m), slice(m, W - m))
    np.testing.assert_allclose(out[inner], (dc + t_low * low + t_high * high)[inner], atol=1e-4)
    res = out - dc
    if lo >= 2:  # low-pass alone: the fine sinusoid is gone, the coarse one stays
        assert np.abs(res - t_low * low)[inner].max() < 1e-3
        assert t_low > 0.9
    if hi and not lo and hi <= 2:  # high-pass alone: the coarse sinusoid is (mostly) gone
        assert np.abs(res - high)[inner].max() < 0.04
    if lo and hi:  # band-pass (1.5, 3) keeps neither strongly
        assert np.abs(res)[inner].max() < 0.1
