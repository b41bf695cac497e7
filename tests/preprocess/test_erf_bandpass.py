"""Band-pass with error-function edges: erf_bandpass_transfer and the preprocessor's erf kind."""

from __future__ import annotations

import math

import numpy as np
import pytest
from preprocess_oracles import host, seeded
from scipy.special import erf

from ebsdxc.preprocess import PatternPreprocessor, PreprocessConfig, erf_bandpass_transfer


def erf_oracle(shape, low, high, width):
    """float64 transfer function from its definition, frequencies written out by hand."""
    H, W = shape
    out = np.empty((H, W // 2 + 1))
    for i in range(H):
        fy = (i if i <= (H - 1) // 2 else i - H) / H
        for j in range(W // 2 + 1):
            r = math.hypot(fy, j / W)
            t = 1.0
            if low:
                t *= 0.5 * (1 + erf((r - low) / width))
            if high and math.isfinite(high):
                t *= 0.5 * (1 - erf((r - high) / width))
            out[i, j] = t
    return out


@pytest.mark.parametrize("shape", [(1, 1), (2, 3), (7, 5), (16, 16), (33, 64), (50, 17)])
@pytest.mark.parametrize("cut", [(0.05, 0.3, 0.02), (0.0, 0.2, 0.05), (0.1, 0.0, 0.01), (0.1, math.inf, 0.03),
                                 (0.01, 0.45, 0.005)])
def test_erf_transfer_matches_formula(xp, shape, cut):
    low, high, width = cut
    t = erf_bandpass_transfer(shape, low, high, width, xp=xp)
    assert type(t) is xp.ndarray and t.dtype == np.float32 and t.shape == (shape[0], shape[1] // 2 + 1)
    np.testing.assert_allclose(host(t), erf_oracle(shape, low, high, width), rtol=0, atol=2e-7)


def test_erf_transfer_values_at_given_radii():
    # On a 100 x 100 grid, index (i, j) has radius hypot(i, j) / 100 cycles/px.
    low, high, w = 0.05, 0.30, 0.01
    t = erf_bandpass_transfer((100, 100), low, high, w)

    def lp(r):
        return 0.5 * (1 - erf((r - high) / w))

    def hp(r):
        return 0.5 * (1 + erf((r - low) / w))

    assert t[0, 5] == pytest.approx(0.5 * lp(0.05), abs=1e-7)  # r = low: half way up the high-pass edge
    assert t[0, 5] == pytest.approx(0.5, abs=1e-6)
    assert t[0, 30] == pytest.approx(0.5 * hp(0.30), abs=1e-7)  # r = high
    assert t[0, 6] == pytest.approx(0.5 * (1 + erf(1)), abs=1e-6)  # one width inside: 0.92
    assert t[0, 4] == pytest.approx(0.5 * (1 - erf(1)), abs=1e-6)  # one width outside: 0.08
    assert t[0, 0] == pytest.approx(hp(0.0) * lp(0.0), abs=1e-7) and t[0, 0] < 1e-6  # DC removed
    assert t[6, 8] == pytest.approx(hp(0.1) * lp(0.1), abs=1e-7) and t[6, 8] == pytest.approx(1, abs=1e-6)
    assert t[30, 40] == pytest.approx(0.0, abs=1e-7)  # r = 0.5: far above high
    # negative frequencies (bottom rows) mirror the positive ones
    np.testing.assert_array_equal(t[1:50], t[99:50:-1])


def erf_T(f, low, high, width):
    r = float(np.hypot(*f))
    t = 1.0
    if low:
        t *= 0.5 * (1 + erf((r - low) / width))
    if high:
        t *= 0.5 * (1 - erf((r - high) / width))
    return t


@pytest.mark.parametrize("shape", [(200, 231), (181, 256), (151, 150)])
@pytest.mark.parametrize("case", [
    # (low, high, width) cycles/px; in-band and out-of-band frequencies (fx, fy)
    ((0.02, 0.25, 0.02), (0.08, -0.05), (0.31, 0.20)),  # out above the low-pass edge
    ((0.07, 0.0, 0.015), (0.15, 0.10), (0.010, -0.008)),  # out below the high-pass edge (no low-pass)
    ((0.06, 0.30, 0.015), (0.10, 0.12), (0.008, 0.006)),  # out below, band-pass
], ids=["lowpass-out", "highpass-out", "bandpass-out"])
def test_erf_bandpass_keeps_in_band_sinusoid_removes_other(be, shape, case):
    (low, high, w), fin, fout = case
    H, W = shape
    y, x = np.mgrid[0:H, 0:W].astype(float)
    keep = np.cos(2 * np.pi * (fin[0] * x + fin[1] * y) + 0.3)
    drop = 0.7 * np.cos(2 * np.pi * (fout[0] * x + fout[1] * y) + 1.1)
    pat = 5 + keep + drop
    cfg = PreprocessConfig(bandpass_kind="erf", bandpass_cutoffs=(low, high), bandpass_width=w)
    out = host(PatternPreprocessor(cfg, be)(be.xp.asarray(pat[None])))[0]
    assert out.dtype == np.float32 and out.shape == shape
    assert erf_T(fin, low, high, w) > 1 - 1e-5 and erf_T(fout, low, high, w) < 1e-5
    # away from the edges by 4 envelope sigmas of the kernel (1 / (sqrt 2 pi w) px)
    m = int(4 / (np.sqrt(2) * np.pi * w)) + 1
    inner = (slice(m, H - m), slice(m, W - m))
    dc = 5 * erf_T((0, 0), low, high, w)
    # Stated tolerance: the in-band sinusoid kept and the out-of-band one (amplitude 0.7) removed
    # to 2e-4 absolute (0.03 %).
    np.testing.assert_allclose(out[inner], (dc + keep)[inner], rtol=0, atol=2e-4)
    # the dropped one really was in the input at full strength
    assert np.abs(pat - dc - keep)[inner].max() > 0.69


def erf_reflect_oracle(pat, low, high, width):
    """float64 erf band-pass of a pattern reflect-padded as far as NumPy allows (H-1, W-1)."""
    H, W = pat.shape
    padded = np.pad(np.asarray(pat, np.float64), ((H - 1, H - 1), (W - 1, W - 1)), mode="reflect")
    t = erf_oracle(padded.shape, low, high, width)
    return np.fft.irfft2(np.fft.rfft2(padded) * t, s=padded.shape)[H - 1:2 * H - 1, W - 1:2 * W - 1]


@pytest.mark.parametrize("cut", [(0.02, 0.3, 0.02), (0.05, 0.0, 0.03), (0.0, 0.2, 0.05), (0.03, 0.25, 0.01)])
@pytest.mark.parametrize("shape", [(90, 121), (64, 47), (9, 14)])
def test_erf_bandpass_whole_pattern_against_oracle(be, cut, shape):
    """Edges included: the reflect padding (4 kernel-envelope sigmas) keeps the result within
    0.5 % of the pattern's filtered amplitude of the filter on a far longer padding."""
    low, high, w = cut
    H, W = shape
    y, x = np.mgrid[0:H, 0:W]
    rng = seeded("erfwhole", cut, shape)
    pat = (100 + 30 * np.exp(-((x - 0.1 * W) ** 2 + (y - 0.45 * H) ** 2) / 50) + 0.5 * x
           + rng.normal(0, 3, shape))
    cfg = PreprocessConfig(bandpass_kind="erf", bandpass_cutoffs=(low, high), bandpass_width=w)
    out = host(PatternPreprocessor(cfg, be)(be.xp.asarray(pat[None])))[0]
    want = erf_reflect_oracle(pat, low, high, w)
    assert np.abs(out - want).max() <= 5e-3 * np.abs(want).max()


def test_erf_and_gaussian_kinds_differ_and_default_is_gaussian(be):
    pat = seeded("kinds").uniform(0, 100, (2, 40, 52))
    g = host(PatternPreprocessor(PreprocessConfig(bandpass=(1.0, 8.0)), be)(be.xp.asarray(pat)))
    g2 = host(PatternPreprocessor(PreprocessConfig(bandpass=(1.0, 8.0), bandpass_kind="gaussian"), be)(
        be.xp.asarray(pat)))
    np.testing.assert_array_equal(g, g2)
    e = host(PatternPreprocessor(PreprocessConfig(bandpass_kind="erf", bandpass_cutoffs=(0.02, 0.2)), be)(
        be.xp.asarray(pat)))
    assert np.abs(e - g).max() > 1


def test_erf_filter_is_built_once_per_shape(be):
    pp = PatternPreprocessor(PreprocessConfig(bandpass_kind="erf", bandpass_cutoffs=(0.02, 0.3)), be)
    x = be.xp.asarray(seeded("cache").uniform(0, 1, (3, 30, 41)), dtype=be.xp.float32)
    pp(x)
    first = dict(pp._filters)
    pp(x[:1])
    assert len(first) == 1 and pp._filters.keys() == first.keys()
    assert all(pp._filters[k] is first[k] for k in first)


@pytest.mark.parametrize("args", [((8, 8), -0.1, 0.2, 0.01), ((8, 8), 0.3, 0.2, 0.01), ((8, 8), 0.2, 0.2, 0.01),
                                  ((8, 8), 0.1, 0.2, 0.0), ((8, 8), 0.1, 0.2, -1.0), ((0, 8), 0.1, 0.2, 0.01),
                                  ((8, 8), 0.1, 0.2, float("nan")), ((8, 8), float("nan"), 0.2, 0.01)])
def test_erf_transfer_bad_options(args):
    with pytest.raises(ValueError):
        erf_bandpass_transfer(*args)
