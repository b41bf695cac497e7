"""Tests of ebsdxc.peaks: 3x3 fits, integer search, DFT refinement, window autocorrelation.

Ground truth comes from functions whose peak is known exactly: quadratics and Gaussians
sampled on the 3x3 stencil, and band-limited periodic correlation maps (sums of
low-frequency cosines, periodic Gaussians of sigma >= 2 px, whose trigonometric
interpolant is the continuous function to ~1e-8).
"""

from __future__ import annotations

import numpy as np
import pytest

from ebsdxc import peaks

STENCIL_Y, STENCIL_X = np.mgrid[-1:2, -1:2].astype(np.float64)


def _offsets(rng, T):
    return rng.uniform(-0.5, 0.5, T), rng.uniform(-0.5, 0.5, T)


# ---------------------------------------------------------------- fit_3x3

def test_parabolic_exact_on_separable_parabolas():
    rng = np.random.default_rng(0)
    T = 300
    y0, x0 = _offsets(rng, T)
    A, a, b = rng.uniform(-2, 5, T), rng.uniform(0.05, 3, T), rng.uniform(0.05, 3, T)
    n = (A[:, None, None] - a[:, None, None] * (STENCIL_X - x0[:, None, None]) ** 2
         - b[:, None, None] * (STENCIL_Y - y0[:, None, None]) ** 2)
    dy, dx = peaks.fit_3x3(n, "parabolic")
    np.testing.assert_allclose(dx, x0, atol=1e-10)
    np.testing.assert_allclose(dy, y0, atol=1e-10)
    # float32 input works too (engines hand float32 maps)
    dy32, dx32 = peaks.fit_3x3(n.astype(np.float32), "parabolic")
    np.testing.assert_allclose(dx32, x0, atol=2e-4)


def test_gaussian_exact_on_sampled_gaussians():
    rng = np.random.default_rng(1)
    T = 300
    y0, x0 = _offsets(rng, T)
    A = rng.uniform(0.1, 10, T)
    sx, sy = rng.uniform(0.5, 4, T), rng.uniform(0.5, 4, T)
    n = A[:, None, None] * np.exp(-(STENCIL_X - x0[:, None, None]) ** 2 / (2 * sx[:, None, None] ** 2)
                                  - (STENCIL_Y - y0[:, None, None]) ** 2 / (2 * sy[:, None, None] ** 2))
    dy, dx = peaks.fit_3x3(n, "gaussian")
    np.testing.assert_allclose(dx, x0, atol=1e-9)
    np.testing.assert_allclose(dy, y0, atol=1e-9)
    # the parabolic method is not exact on them (the test can tell the two apart)
    pdy, pdx = peaks.fit_3x3(n, "parabolic")
    assert np.abs(pdx - x0).max() > 1e-3


def test_quadratic_exact_on_any_2d_quadratic_with_a_maximum():
    rng = np.random.default_rng(2)
    T = 400
    y0, x0 = _offsets(rng, T)
    # random negative-definite Hessians with strong cross terms
    L = rng.normal(size=(T, 2, 2))
    M = L @ L.transpose(0, 2, 1) + 0.05 * np.eye(2)  # positive definite
    A = rng.uniform(-3, 3, T)
    dx_, dy_ = STENCIL_X - x0[:, None, None], STENCIL_Y - y0[:, None, None]
    n = A[:, None, None] - (M[:, 0, 0, None, None] * dx_**2 + 2 * M[:, 0, 1, None, None] * dx_ * dy_
                            + M[:, 1, 1, None, None] * dy_**2)
    dy, dx = peaks.fit_3x3(n, "quadratic")
    np.testing.assert_allclose(dx, x0, atol=1e-9)
    np.testing.assert_allclose(dy, y0, atol=1e-9)


def _kernel_quadratic_peak(v):
    """kernels/peaks.cu quadratic_peak for one 3x3 grid, operation for operation in float64: the
    moments in its loop order, the coefficients scaled to whole multiples, one division."""
    s = sx = sy = sxy = sxx = syy = 0.0
    for a in range(3):
        for q in range(3):
            val, x, y = float(v[a, q]), q - 1, a - 1
            s += val
            sx += x * val
            sy += y * val
            sxy += x * y * val
            sxx += x * x * val
            syy += y * y * val
    d6, f6 = 3.0 * sxx - 2.0 * s, 3.0 * syy - 2.0 * s
    det144 = 16.0 * d6 * f6 - 9.0 * sxy * sxy
    if not (det144 > 4e-12 * (d6 * d6 + f6 * f6) and d6 < 0.0 and f6 < 0.0):
        return False, np.nan, np.nan
    r = 1.0 / det144
    return True, (6.0 * sxy * sy - 8.0 * f6 * sx) * r, (6.0 * sxy * sx - 8.0 * d6 * sy) * r


def test_kernel_quadratic_peak_equals_the_normal_equations():
    # the GPU's one-division form (fit_3x3 "quadratic", stencil_step) against the normal
    # equations' offsets and maximum test (_quadratic_coefficients), on concave, saddle,
    # barely concave and one-row grids
    rng = np.random.default_rng(5)
    T = 600
    L = rng.normal(size=(T, 2, 2))
    M = L @ L.transpose(0, 2, 1) * rng.choice([1.0, 1e-7, -1.0], size=(T, 1, 1))
    M[: T // 6, 1, 1] = M[: T // 6, 0, 1] = 0.0  # no curvature across the rows
    y0, x0 = rng.uniform(-2, 2, T), rng.uniform(-2, 2, T)
    dx_, dy_ = STENCIL_X - x0[:, None, None], STENCIL_Y - y0[:, None, None]
    noise = 1e-3 * rng.normal(size=(T, 3, 3))
    # about the maximum test's threshold (det / (d^2 + f^2) = 1e-12): rank-one Hessians plus mu I,
    # noise-free, at 4 mu / lambda = 4e-14 (no maximum), 1.2e-11 and 4e-9
    u = rng.normal(size=(60, 2))
    u /= np.linalg.norm(u, axis=1)[:, None]
    M[-60:] = u[:, :, None] * u[:, None, :] + np.repeat([1e-14, 3e-12, 1e-9], 20)[:, None, None] * np.eye(2)
    noise[-60:] = 0.0
    n = 5.0 - (M[:, 0, 0, None, None] * dx_**2 + 2 * M[:, 0, 1, None, None] * dx_ * dy_
               + M[:, 1, 1, None, None] * dy_**2) + noise
    b, c, d, e, f, det = peaks._quadratic_coefficients(n, np)
    want_ok = (det > 1e-12 * (d * d + f * f)) & (d < 0) & (f < 0)
    assert not want_ok[-60:-40].any() and want_ok[-40:].all()
    got = [_kernel_quadratic_peak(g) for g in n]
    assert 100 < want_ok.sum() < T - 100  # both outcomes are exercised
    np.testing.assert_array_equal([g[0] for g in got], want_ok)
    with np.errstate(divide="ignore", invalid="ignore"):
        qx, qy = (e * c - 2 * f * b) / det, (e * b - 2 * d * c) / det
    # within a few roundings: the coefficients carry roundings of the grid's size (sum |v|), which
    # the offsets amplify by (sum of |coefficients|) (1 + |q|) / det (up to 1e9 on barely concave grids)
    size = np.abs(n).sum(axis=(1, 2)) * (np.abs(b) + np.abs(c) + np.abs(d) + np.abs(e) + np.abs(f)) / np.abs(det)
    for k, q in ((1, qx), (2, qy)):
        cond = (size * (1 + np.abs(q)))[want_ok]
        err = np.abs(np.array([g[k] for g in got])[want_ok] - q[want_ok])
        assert (err <= 2e-15 * cond).all(), (err / cond).max()
        assert cond.max() > 1e8 and np.median(err) < 1e-13  # ill-conditioned grids are among them


def test_gaussian_falls_back_to_parabolic_on_non_positive_neighbour():
    rng = np.random.default_rng(3)
    T = 60
    y0, x0 = _offsets(rng, T)
    n = np.exp(-(STENCIL_X - x0[:, None, None]) ** 2 / 3 - (STENCIL_Y - y0[:, None, None]) ** 2 / 5)
    n = n - 0.3  # some edge values
    where = rng.integers(0, 4, T)
    pos = [(1, 0), (1, 2), (0, 1), (2, 1)]
    for t in range(T):  # one of the four neighbours used by the fit is 0 or negative
        n[t][pos[where[t]]] = -0.05 * (t % 3)
    gy, gx = peaks.fit_3x3(n, "gaussian")
    py, px = peaks.fit_3x3(n, "parabolic")
    np.testing.assert_array_equal(gx, px)
    np.testing.assert_array_equal(gy, py)
    assert np.all(np.isfinite(gx)) and np.all(np.isfinite(gy))


def test_quadratic_falls_back_to_parabolic_without_maximum():
    rng = np.random.default_rng(4)
    T = 80
    cases = []
    for t in range(T):
        # saddles (det < 0) and minima/valleys (d >= 0 or f >= 0), but rows/columns through the
        # centre still concave so that the parabolic fall-back has something to give
        if t % 2:
            d, f, e = -1.0, -1.0, rng.uniform(2.5, 4) * rng.choice([-1, 1])  # 4df - e^2 < 0
        else:
            d, f, e = -0.2, -0.3, rng.uniform(0.6, 1.0) * rng.choice([-1, 1])
        b, c = rng.uniform(-0.3, 0.3, 2)
        cases.append(b * STENCIL_X + c * STENCIL_Y + d * STENCIL_X**2 + e * STENCIL_X * STENCIL_Y
                     + f * STENCIL_Y**2)
    n = np.stack(cases)
    qy, qx = peaks.fit_3x3(n, "quadratic")
    py, px = peaks.fit_3x3(n, "parabolic")
    np.testing.assert_array_equal(qx, px)
    np.testing.assert_array_equal(qy, py)


def test_fits_beyond_reach_are_nan_not_clipped():
    # vertex of the parabola through (0, 1, 1.9) lies at +9.5: no maximum near the peak
    n = np.zeros((2, 3, 3))
    n[0, 1] = [0.0, 1.0, 1.9]
    n[0, :, 1] = [0.0, 1.0, 1.9]
    n[1, 1] = [1.9, 1.0, 0.0]
    n[1, :, 1] = [1.9, 1.0, 0.0]
    for m in ("parabolic", "gaussian"):  # (gaussian: a zero neighbour -> parabolic)
        dy, dx = peaks.fit_3x3(n, m)
        assert np.isnan(dx).all() and np.isnan(dy).all(), m
    rng = np.random.default_rng(5)
    r = rng.normal(size=(2000, 3, 3))
    r[::7] = 0.0  # degenerate, exactly flat: nothing to fit, offset 0
    for m in ("parabolic", "gaussian", "quadratic"):
        dy, dx = peaks.fit_3x3(r, m)
        np.testing.assert_array_equal(np.isnan(dx), np.isnan(dy))  # a fit fails as a whole
        good = np.isfinite(dx)
        assert np.abs(dx[good]).max() <= peaks.SUBPIXEL_REACH and np.abs(dy[good]).max() <= peaks.SUBPIXEL_REACH
        np.testing.assert_array_equal(dx[::7], 0)
        assert 0.2 < good.mean() < 1  # random surfaces: some have a maximum within reach, some not


def test_centre_maximum_always_fits_within_half_a_pixel():
    # An integer peak is the largest sample: the per-axis parabolas are concave (or flat) there,
    # so the 3-point methods always fit, within half a pixel; quadratic within reach.
    rng = np.random.default_rng(6)
    r = rng.uniform(0.1, 1.0, size=(3000, 3, 3))
    r[:, 1, 1] = 1.0
    r[::11, 1, :] = 1.0  # a flat row through the peak: the x axis has nothing to fit
    for m in ("parabolic", "gaussian", "quadratic"):
        dy, dx = peaks.fit_3x3(r, m)
        assert np.isfinite(dx).all() and np.isfinite(dy).all(), m
        lim = 0.5 if m != "quadratic" else peaks.SUBPIXEL_REACH
        assert np.abs(dx).max() <= lim and np.abs(dy).max() <= lim, m
        np.testing.assert_array_equal(dx[::11], 0.0) if m != "quadratic" else None


def test_non_concave_axis_is_nan():
    # A slope rising away from the sample (what window compensation makes of a flat ridge):
    # the x parabola is convex, so there is no maximum along x near the integer peak.
    n = np.array([[[0.83, 0.85, 0.88], [0.98, 1.00, 1.03], [0.83, 0.85, 0.88]]])
    for m in ("parabolic", "gaussian", "quadratic"):
        dy, dx = peaks.fit_3x3(n, m)
        assert np.isnan(dx).all() and np.isnan(dy).all(), m


def test_drop_far_peaks():
    r = peaks.SUBPIXEL_REACH
    y = np.array([0.2, r + 0.1, -2.0, np.nan, 3.0 + r])
    x = np.array([-0.9, 0.0, 0.0, 0.0, 3.0 - r])
    ly, lx = np.array([0, 0, -1, 0, 3]), np.array([0, 0, 0, 0, 3])
    yy, xx = peaks.drop_far_peaks(y, x, ly, lx)
    np.testing.assert_array_equal(np.isnan(yy), [False, True, False, True, False])
    np.testing.assert_array_equal(np.isnan(xx), np.isnan(yy))
    np.testing.assert_array_equal(yy[[0, 2, 4]], y[[0, 2, 4]])


def test_fit_3x3_unknown_method():
    with pytest.raises(ValueError):
        peaks.fit_3x3(np.ones((1, 3, 3)), "cubic")


# ---------------------------------------------------------------- integer_peak

def integer_peak_oracle(corr, max_lag):
    T, Ny, Nx = corr.shape
    ry, rx = max_lag
    out = []
    for t in range(T):
        best = None
        for ly in range(-ry, ry + 1):
            for lx in range(-rx, rx + 1):
                v = corr[t, ly % Ny, lx % Nx]
                if best is None or v > best[2]:
                    best = (ly, lx, v)
        out.append(best)
    return np.array(out)


@pytest.mark.parametrize("shape,max_lag", [((11, 14), (3, 5)), ((7, 7), (3, 3)), ((16, 33), (7, 15)),
                                           ((5, 9), (0, 2)), ((1, 1), (0, 0)), ((20, 6), (9, 1))])
def test_integer_peak_planted(shape, max_lag):
    rng = np.random.default_rng(6)
    Ny, Nx = shape
    ry, rx = max_lag
    T = 40
    corr = rng.uniform(-1, 1, (T,) + shape).astype(np.float32)
    ly = rng.integers(-ry, ry + 1, T)
    lx = rng.integers(-rx, rx + 1, T)
    ly[0], lx[0] = -ry, -rx  # wrap-around corner
    ly[1], lx[1] = ry, rx
    corr[np.arange(T), ly % Ny, lx % Nx] = 5.0
    # a larger value outside the searched lags is ignored
    if ry + 1 <= Ny - ry - 1:
        corr[:, (ry + 1) % Ny, 0] = 9.0
    gy, gx, val, border = peaks.integer_peak(corr, max_lag)
    np.testing.assert_array_equal(gy, ly)
    np.testing.assert_array_equal(gx, lx)
    np.testing.assert_array_equal(val, 5.0)
    # an axis with nothing to search (r = 0, a 1-pixel tile side) has no border
    np.testing.assert_array_equal(border, ((np.abs(ly) == ry) & (ry > 0)) | ((np.abs(lx) == rx) & (rx > 0)))


@pytest.mark.parametrize("shape,max_lag", [((11, 14), (3, 5)), ((9, 9), (4, 4)), ((13, 6), (2, 2))])
def test_integer_peak_ties_first_in_lag_order(shape, max_lag):
    rng = np.random.default_rng(7)
    T = 200
    corr = rng.integers(0, 3, (T,) + shape).astype(np.float32)  # many ties
    gy, gx, val, border = peaks.integer_peak(corr, max_lag)
    ref = integer_peak_oracle(corr, max_lag)
    np.testing.assert_array_equal(gy, ref[:, 0])
    np.testing.assert_array_equal(gx, ref[:, 1])
    np.testing.assert_array_equal(val, ref[:, 2])
    # ties decided in favour of negative lags: not simply the lowest array index
    assert np.any(ref[:, 0] < 0)


# ---------------------------------------------------------------- band-limited maps

def periodic_gaussian(shape, y0, x0, s1, s2, theta):
    """Periodic (period = shape) 2-D Gaussian peaked at (y0, x0), axes rotated by theta."""
    Ny, Nx = shape
    y = np.arange(Ny)[:, None].astype(np.float64)
    x = np.arange(Nx)[None, :].astype(np.float64)
    c, s = np.cos(theta), np.sin(theta)
    out = np.zeros(shape)
    for my in range(-2, 3):
        for mx in range(-2, 3):
            dy, dx = y - y0 - my * Ny, x - x0 - mx * Nx
            u, v = c * dx + s * dy, -s * dx + c * dy
            out += np.exp(-u**2 / (2 * s1**2) - v**2 / (2 * s2**2))
    return out


def cosine_sum(shape, y0, x0, rng):
    """Sum of low-frequency cosines with positive weights: band-limited, maximum at (y0, x0)."""
    Ny, Nx = shape
    y = np.arange(Ny)[:, None].astype(np.float64)
    x = np.arange(Nx)[None, :].astype(np.float64)
    out = np.zeros(shape)
    for ky in range(0, 4):
        for kx in range(-3, 4):
            if ky == 0 and kx <= 0:
                continue
            out += rng.uniform(0.2, 1) * np.cos(2 * np.pi * (ky * (y - y0) / Ny + kx * (x - x0) / Nx))
    return out


def make_maps(shape, kind, T, seed):
    rng = np.random.default_rng(seed)
    Ny, Nx = shape
    ty = rng.integers(-(Ny // 2) + 6, Ny // 2 - 5, T) + rng.uniform(-0.5, 0.5, T)
    tx = rng.integers(-(Nx // 2) + 6, Nx // 2 - 5, T) + rng.uniform(-0.5, 0.5, T)
    ty[0] = -(Ny // 2) + 6.37  # negative lags, stored wrapped around
    tx[0] = -(Nx // 2) + 6.41
    maps = []
    for a, b in zip(ty, tx):
        if kind == "aligned":
            maps.append(periodic_gaussian(shape, a, b, rng.uniform(2, 3), rng.uniform(2, 3), 0.0))
        elif kind == "tilted":
            maps.append(periodic_gaussian(shape, a, b, 2.2, 4.0, rng.uniform(0.3, 1.2)))
        else:
            maps.append(cosine_sum(shape, a, b, rng))
    maps = np.stack(maps)
    cp = np.fft.rfft2(maps).astype(np.complex64)  # the cross-power spectrum
    corr = np.fft.irfft2(cp, s=shape).astype(np.float32)
    return cp, corr, ty, tx, (Ny // 2 - 1, Nx // 2 - 1)


SHAPES = [(37, 50), (32, 45), (64, 31), (40, 40), (27, 33)]
KINDS = ["aligned", "tilted", "cosines"]


def _err(y, x, ty, tx):
    return max(np.abs(y - ty).max(), np.abs(x - tx).max())


@pytest.mark.parametrize("shape", [(37, 50), (32, 45), (27, 33)])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("upsample", [16, 20, 32])
def test_upsampled_dft_peak_recovers_fractional_peak(shape, kind, upsample):
    cp, corr, ty, tx, ml = make_maps(shape, kind, 24, 10 + upsample)
    ly, lx, _, _ = peaks.integer_peak(corr, ml)
    y, x = peaks.upsampled_dft_peak(cp, ly, lx, shape, upsample=upsample)
    e = _err(y, x, ty, tx)
    assert e < 2e-3, f"max error {e:.2e} px"


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", KINDS)
def test_dft_refine_peak_recovers_fractional_peak(shape, kind):
    cp, corr, ty, tx, ml = make_maps(shape, kind, 24, 20)
    ly, lx, _, _ = peaks.integer_peak(corr, ml)
    # from the 3x3 quadratic estimate (as locate_peaks starts it) ...
    dy, dx = peaks.fit_3x3(peaks.neighbourhood(corr, ly, lx), "quadratic")
    y, x = peaks.dft_refine_peak(cp, ly + dy, lx + dx, shape)
    e = _err(y, x, ty, tx)
    assert e < 1e-3, f"max error {e:.2e} px"
    # ... and from any start within 0.2 px (the steps 0.25 + 0.05 reach 0.3 px at most)
    rng = np.random.default_rng(21)
    y, x = peaks.dft_refine_peak(cp, ty + rng.uniform(-0.2, 0.2, len(ty)),
                                 tx + rng.uniform(-0.2, 0.2, len(tx)), shape)
    e = _err(y, x, ty, tx)
    assert e < 1e-3, f"max error {e:.2e} px"


@pytest.mark.parametrize("shape", [(37, 50), (32, 45), (9, 12)])
def test_dft_grid_exact_at_integer_and_fractional_lags(shape):
    rng = np.random.default_rng(22)
    Ny, Nx = shape
    T = 6
    maps = rng.normal(size=(T,) + shape)
    cp = np.fft.rfft2(maps).astype(np.complex64)
    yc = rng.integers(-Ny, Ny, T).astype(float)
    xc = rng.integers(-Nx, Nx, T).astype(float)
    g = peaks.dft_grid(cp, yc, xc, spacing=1.0, size=5, shape=shape)
    d = np.arange(5) - 2
    expected = maps[np.arange(T)[:, None, None], ((yc[:, None] + d) % Ny).astype(int)[:, :, None],
                    ((xc[:, None] + d) % Nx).astype(int)[:, None, :]]
    np.testing.assert_allclose(g, expected, atol=2e-5 * np.abs(maps).max() * np.sqrt(Ny * Nx) / 4)
    # a cosine sum is reproduced exactly between samples
    c = np.stack([cosine_sum(shape, 1.3, -2.1, np.random.default_rng(s)) for s in range(T)])
    g = peaks.dft_grid(np.fft.rfft2(c), yc * 0 + 1.3, xc * 0 - 2.1, spacing=0.1, size=3, shape=shape)
    peak = np.array([cosine_sum(shape, 0, 0, np.random.default_rng(s))[0, 0] for s in range(T)])
    np.testing.assert_allclose(g[:, 1, 1], peak, rtol=1e-5)
    assert np.all(g[:, 1, 1][:, None, None] >= g - 1e-5 * peak[:, None, None])


# ---------------------------------------------------------------- window autocorrelation

@pytest.mark.parametrize("n,N", [(1, 1), (2, 3), (5, 9), (5, 12), (16, 31), (16, 40), (33, 65), (33, 36),
                                 (96, 192)])
@pytest.mark.parametrize("kind", ["hann", "ones", "random"])
def test_window_autocorrelation_integer_lags(n, N, kind):
    w = {"hann": np.hanning(n) if n > 2 else np.ones(n), "ones": np.ones(n),
         "random": np.random.default_rng(n).uniform(0.1, 1, n)}[kind]
    wp = np.zeros(N)
    wp[:n] = w
    # circular autocorrelation at the FFT size N, direct in float64
    r = np.correlate(np.concatenate([wp, wp]), wp, mode="valid")[:N]
    lags = np.arange(-N + 1, N)
    P = peaks.window_power_spectrum(w, N)
    got = peaks.window_autocorrelation(P, lags)
    np.testing.assert_allclose(got, r[lags % N] / r[0], atol=1e-12)
    assert peaks.window_autocorrelation(P, np.array([0.0]))[0] == pytest.approx(1.0, abs=1e-14)
    # broadcast over (T, k) arrays of lags
    L = np.stack([lags[:5], lags[-5:]])
    np.testing.assert_allclose(peaks.window_autocorrelation(P, L), (r[L % N] / r[0]), atol=1e-12)


# ---------------------------------------------------------------- locate_peaks

# method -> largest error allowed (px) on each kind of map
LOCATE_TOL = {
    "dft": {"aligned": 1e-3, "tilted": 1e-3, "cosines": 1e-3},
    "upsampled": {"aligned": 2e-3, "tilted": 2e-3, "cosines": 2e-3},
    "gaussian": {"aligned": 1e-5},
    "quadratic": {"aligned": 0.05, "tilted": 0.05, "cosines": 0.05},
    "parabolic": {"aligned": 0.05},
}


@pytest.mark.parametrize("shape", [(37, 50), (32, 45), (27, 33)])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("method", peaks.SUBPIXEL_METHODS)
def test_locate_peaks(shape, kind, method):
    cp, corr, ty, tx, ml = make_maps(shape, kind, 24, 30)
    y, x, value, border = peaks.locate_peaks(corr, max_lag=ml, method=method, cross_power=cp,
                                             upsample=16)
    assert y.dtype == np.float64 and x.dtype == np.float64
    assert not border.any()
    ly, lx, v0, _ = peaks.integer_peak(corr, ml)
    np.testing.assert_array_equal(value, v0)
    if method == "none":
        np.testing.assert_array_equal(y, ly)
        np.testing.assert_array_equal(x, lx)
        if kind == "aligned":  # separable peak: the integer maximum is the nearest lag
            np.testing.assert_array_equal(y, np.round(ty))
            np.testing.assert_array_equal(x, np.round(tx))
        return
    assert np.abs(y - ly).max() <= 1 and np.abs(x - lx).max() <= 1.5
    tol = LOCATE_TOL[method].get(kind)
    if tol is not None:
        e = _err(y, x, ty, tx)
        assert e < tol, f"max error {e:.2e} px"


@pytest.mark.parametrize("shape", [(48, 50), (64, 63), (37, 45)])
@pytest.mark.parametrize("method", ["dft", "upsampled"])
def test_refinement_reaches_peak_of_elongated_tilted_correlation(shape, method):
    # Ridge-like peaks (a Kikuchi band dominating a subregion): the sampled maximum can lie
    # ~1 px from the true peak and the 3x3 quadratic start ~0.5-0.8 px. The continuous peak
    # of the band-limited map is still unique and well defined.
    rng = np.random.default_rng(3)
    Ny, Nx = shape
    T = 30
    ty = rng.integers(-6, 6, T) + rng.uniform(-0.5, 0.5, T)
    tx = rng.integers(-6, 6, T) + rng.uniform(-0.5, 0.5, T)
    maps = np.stack([periodic_gaussian(shape, a, b, 2.0, 7.0, rng.uniform(0.3, 1.2))
                     for a, b in zip(ty, tx)])
    cp = np.fft.rfft2(maps).astype(np.complex64)
    corr = np.fft.irfft2(cp, s=shape).astype(np.float32)
    y, x, _, border = peaks.locate_peaks(corr, max_lag=(Ny // 2 - 1, Nx // 2 - 1), method=method,
                                         cross_power=cp, upsample=16)
    assert not border.any()
    e = _err(y, x, ty, tx)
    assert e < (1e-3 if method == "dft" else 2e-3), f"max error {e:.2e} px"


def test_locate_peaks_on_border_and_missing_spectrum():
    cp, corr, ty, tx, ml = make_maps((37, 50), "aligned", 4, 40)
    small = (int(np.abs(np.round(ty)).max()), 20)  # the farthest peak sits on the y border
    _, _, _, border = peaks.locate_peaks(corr, max_lag=small, method="quadratic")
    np.testing.assert_array_equal(border, np.abs(np.round(ty)) == small[0])
    for m in ("dft", "upsampled"):
        with pytest.raises(ValueError):
            peaks.locate_peaks(corr, max_lag=ml, method=m, cross_power=None)
