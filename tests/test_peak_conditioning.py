"""Barely concave compensated peaks (issue 20): :func:`ebsdxc.peaks.barely_concave` and
:func:`ebsdxc.peaks.drop_loose_peaks`, on analytic peaks with known curvature.

Window compensation divides a correlation peak by the window autocorrelation W; where the peak
is hardly sharper than W the quotient is nearly flat along some direction and its fitted
maximum comes from the window model more than from the data. Such a fit is kept within half a
pixel of its integer peak and flagged beyond.
"""

from __future__ import annotations

import numpy as np
import pytest

from ebsdxc import peaks as pk
from ebsdxc.preprocess import window_1d

N = 32  # FFT size of 16 px tiles
W1 = pk.integer_lag_table(pk.window_power_spectrum(window_1d(16), N))  # W by lag mod N


def _window(ly, lx):
    d = np.arange(-1, 2)
    return W1[(ly + d) % N][:, None] * W1[(lx + d) % N][None, :]


def _gauss(ly, lx, *, sy, sx, angle=0.0):
    """3x3 samples about (ly, lx) of a peak exp(-u^2 / 2 sy^2 - v^2 / 2 sx^2) there, (u, v)
    rotated by angle."""
    d = np.arange(-1, 2).astype(float)
    y, x = np.meshgrid(d, d, indexing="ij")
    c, s = np.cos(angle), np.sin(angle)
    u, v = c * y - s * x, s * y + c * x
    return np.exp(-u**2 / (2 * sy**2) - v**2 / (2 * sx**2))


def _window_curvature_sigma(ly=0, lx=0):
    # The Gaussian whose relative curvature on a 3x3 least-squares fit equals the window's.
    g = _window(ly, lx)[None]
    k = pk._largest_curvature(g, np) / g[:, 1, 1]
    return float(np.sqrt(-1 / k[0]))  # a Gaussian's relative curvature is -1/sigma^2 (3x3: close)


def test_window_of_16_px_tiles_is_as_broad_as_their_peaks():
    # W(1 px) = 0.97 for 16 px Hann tiles (BENCHMARKS.md): its curvature is a 4 px Gaussian's.
    assert abs(W1[1] - 0.971) < 0.002
    assert 3.5 < _window_curvature_sigma() < 5.0


@pytest.mark.parametrize("lag", [(0, 0), (3, -2)])
def test_sharp_peaks_are_well_conditioned_and_broad_ones_not(lag):
    ly, lx = lag
    w = _window(ly, lx)
    sw = _window_curvature_sigma(ly, lx)
    # Relative curvature -1/s^2 against the window's -1/sw^2: the threshold is s = sw / sqrt(2).
    for s, flat in ((0.5 * sw, False), (0.65 * sw, False), (0.8 * sw, True), (2 * sw, True)):
        n = _gauss(ly, lx, sy=s, sx=s)[None]
        assert pk.barely_concave(n, w[None])[0] == flat, (s, sw)


def test_a_tilted_ridge_is_found_along_its_flattest_direction():
    # A ridge along the diagonal: sharp along both axes (each axis' parabola is well curved),
    # flat along the ridge. Per-axis checks would pass it; the Hessian's eigenvalue does not.
    sw = _window_curvature_sigma()
    n = _gauss(0, 0, sy=0.4 * sw, sx=3 * sw, angle=np.pi / 4)
    den_x = n[1, 0] - 2 * n[1, 1] + n[1, 2]
    assert den_x / n[1, 1] < 2 * (W1[1] - 2 * W1[0] + W1[1]) / W1[0]  # the x axis alone: sharp
    assert pk.barely_concave(n[None], _window(0, 0)[None])[0]
    assert not pk.barely_concave(_gauss(0, 0, sy=0.4 * sw, sx=0.4 * sw)[None], _window(0, 0)[None])[0]


def test_non_peaks_count_as_barely_concave():
    w = _window(0, 0)[None]
    assert pk.barely_concave(-_gauss(0, 0, sy=1, sx=1)[None], w)[0]  # negative height
    assert pk.barely_concave(np.full((1, 3, 3), np.nan), w)[0]
    assert pk.barely_concave(np.ones((1, 3, 3)), w)[0]  # flat


def test_drop_loose_peaks_keeps_half_a_pixel():
    ly = lx = np.zeros(4)
    y = np.array([0.49, 0.51, -0.7, 0.2])
    x = np.array([-0.5, 0.0, 0.0, np.nan])
    flat = np.array([True, True, False, True])
    dy, dx = pk.drop_loose_peaks(y, x, ly, lx, flat)
    np.testing.assert_array_equal(np.isnan(dy), [False, True, False, True])
    np.testing.assert_array_equal(dy[[0, 2]], y[[0, 2]])


def _maps(rng, T, *, ridge):
    """(T, N, N) circular maps: a Gaussian peak at a fractional lag, times the window's W
    (what correlating windowed tiles gives), plus a little noise."""
    out = np.empty((T, N, N))
    lags = np.fft.fftfreq(N, 1.0 / N)
    y, x = np.meshgrid(lags, lags, indexing="ij")
    W = W1[:, None] * W1[None, :]
    sw = _window_curvature_sigma()
    truth = rng.uniform(-1.5, 1.5, (T, 2))
    for t in range(T):
        sy, sx = (0.35 * sw, 4 * sw) if ridge else (0.35 * sw, 0.35 * sw)
        a = rng.uniform(0, np.pi)
        c, s = np.cos(a), np.sin(a)
        u, v = c * (y - truth[t, 0]) - s * (x - truth[t, 1]), s * (y - truth[t, 0]) + c * (x - truth[t, 1])
        out[t] = np.exp(-u**2 / (2 * sy**2) - v**2 / (2 * sx**2)) * W + 1e-4 * rng.standard_normal((N, N))
    return out, truth


@pytest.mark.parametrize("method", ["quadratic", "parabolic", "gaussian"])
def test_locate_peaks_measures_sharp_peaks_and_flags_loose_ridges(method):
    rng = np.random.default_rng(5)
    spectra = (pk.window_power_spectrum(window_1d(16), N),) * 2
    sharp, truth = _maps(rng, 60, ridge=False)
    y, x, _, _ = pk.locate_peaks(sharp, max_lag=(8, 8), method=method, window_spectra=spectra)
    assert np.isfinite(y).all() and np.isfinite(x).all()  # well conditioned: all measured
    assert np.abs(np.stack([y, x], 1) - truth).max() < 0.25  # 3x3 fits of Gaussians: biased, but near
    ridges, _ = _maps(rng, 60, ridge=True)
    ly, lx, _, _ = pk.integer_peak(ridges, (8, 8))
    y, x, _, _ = pk.locate_peaks(ridges, max_lag=(8, 8), method=method, window_spectra=spectra)
    ok = np.isfinite(y)
    assert (np.abs(y - ly)[ok] <= pk.LOOSE_REACH).all() and (np.abs(x - lx)[ok] <= pk.LOOSE_REACH).all()
    assert (~ok).sum() >= 5  # ridges are found and flagged
    # Without compensation nothing is conditioned (the fits are those of before).
    y0, _, _, _ = pk.locate_peaks(ridges, max_lag=(8, 8), method=method)
    assert np.isfinite(y0).sum() > ok.sum()


@pytest.mark.gpu
def test_gpu_kernel_flags_as_numpy():
    import cupy as cp

    from ebsdxc.engines.gpu_ops import find_peaks

    rng = np.random.default_rng(7)
    maps = np.concatenate([_maps(rng, 40, ridge=r)[0] for r in (False, True)]).astype(np.float32)
    spectra = (pk.window_power_spectrum(window_1d(16), N),) * 2
    lags = (cp.asarray(W1), cp.asarray(W1))
    ly, lx, _, _ = pk.integer_peak(maps, (8, 8))
    flat = pk.barely_concave(pk.neighbourhood(maps, ly, lx) / np.stack([_window(a, b) for a, b in zip(ly, lx)]),
                             np.stack([_window(a, b) for a, b in zip(ly, lx)]))
    for method in ("none", "quadratic", "parabolic"):
        *_, gflat = find_peaks(cp.asarray(maps), (8, 8), method, lags, with_flat=True)
        np.testing.assert_array_equal(gflat.get(), flat)
        y, x, _, _ = pk.locate_peaks(maps, max_lag=(8, 8), method=method, window_spectra=spectra)
        gy, gx, *_ = find_peaks(cp.asarray(maps), (8, 8), method, lags)
        np.testing.assert_allclose(gy.get(), y, atol=1e-9)
        np.testing.assert_allclose(gx.get(), x, atol=1e-9)
