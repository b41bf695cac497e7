"""Peak location in correlation maps: integer search and subpixel refinement.

All functions are array-in/array-out and take the array module ``xp`` (NumPy or
CuPy), so the CPU and GPU share one code path. Correlation maps are circular lag
maps as an inverse FFT leaves them: element ``[ly % Ny, lx % Nx]`` holds the
correlation at shift (dy, dx) = (ly, lx) of the scan subregion against the
reference, so the peak lag *is* the displacement (design conventions).

Subpixel methods
----------------
``parabolic``
    3-point parabola through the peak and its neighbours, separately in x and y.
``gaussian``
    3-point Gaussian (parabola through log values); falls back to ``parabolic``
    where a neighbour is not positive.
``quadratic``
    2-D quadratic surface fitted by least squares to the 3x3 neighbourhood; falls
    back to ``parabolic`` where the surface has no maximum.
``upsampled``
    Guizar-Sicairos et al. (2008): the correlation is evaluated by a matrix DFT on
    an ``upsample``-times finer grid over 1.5 px about the integer peak, then a
    quadratic fit on that grid removes its quantisation.
``dft``
    Starts from ``quadratic`` and refines it with two quadratic fits to 3x3 stencils
    (steps 0.25 px, then 0.05 px) evaluated exactly by a matrix DFT: the continuous
    peak of the band-limited correlation at about a quarter of the cost of a 16x
    upsampled grid.
``none``
    Integer peak only.

Fits that cannot be made
------------------------
A subpixel peak is a maximum of the correlation within reach of its integer peak:
at most :data:`FIT_3X3_REACH` px from it along each axis for the 3x3 fits (the
neighbourhood they are made from), :data:`SUBPIXEL_REACH` px for the refinements
(``dft``, ``upsampled``: an elongated, tilted peak's sampled maximum can be over a
pixel off its continuous one). Where there is none, the methods return NaN instead of a
position, and engines report the match as ``SUBPIXEL_FAILED``
(:mod:`ebsdxc.status`): a 3-point parabola that is not concave (a flat ridge or a
slope), a fit more than a pixel off, a refinement still climbing when its steps run
out (``dft``: the last, finest stencil still reaches its edge; ``upsampled``: the
fine maximum still on the grid edge after the last re-centring). Only an exactly
flat axis (a tile one pixel high or wide, whose neighbours are the peak itself) has
offset 0.

This matters with window compensation: a correlation peak that is nearly flat
along one direction (a Kikuchi band crossing a small subregion) is tilted by the
division by the window autocorrelation, which falls away from zero shift, into a
slope that rises away from the integer peak; without the checks the fits followed
that slope to the end of their steps (1 px for the 3x3 fits, 2.05 px for ``dft``,
up to 5.7 px for ``upsampled``). See ``BENCHMARKS.md``, "Subpixel fits on flat
peaks".

Window compensation
-------------------
Windowing both subregions multiplies their correlation by the autocorrelation of
the window, W(lag), which peaks at zero shift and pulls every fitted peak towards
zero (about 5 % of the shift for Hann-windowed Kikuchi subregions). Dividing the
correlation by W near the peak before the subpixel fit removes most of that bias
(see ``BENCHMARKS.md``). The window is separable, so W = Wy(dy) Wx(dx), and each
factor is evaluated at any fractional lag from its power spectrum.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["SUBPIXEL_METHODS", "SUBPIXEL_REACH", "FIT_3X3_REACH", "UPSAMPLED_MAX_RECENTRE", "integer_peak",
           "neighbourhood", "fit_3x3",
           "upsampled_dft_peak", "dft_grid", "dft_refine_peak", "locate_peaks", "drop_far_peaks",
           "window_power_spectrum", "window_autocorrelation", "barely_concave", "drop_loose_peaks",
           "CONDITION_MIN", "LOOSE_REACH"]

SUBPIXEL_METHODS = ("dft", "upsampled", "quadratic", "gaussian", "parabolic", "none")
SPECTRUM_METHODS = ("dft", "upsampled")  # need the cross-power spectrum
#: Largest distance (px, along each axis) of a refined subpixel peak (``dft``, ``upsampled``)
#: from its integer peak; beyond it the fit is not a measurement (NaN). The sampled maximum of
#: an elongated, tilted peak can lie up to about 1.2 px from the continuous one (a pixel and a
#: half is what the refinements were always tested to reach); the 3x3 fits stop at
#: :data:`FIT_3X3_REACH`, the edge of the neighbourhood they are made from.
SUBPIXEL_REACH = 1.5
FIT_3X3_REACH = 1.0
#: A window-compensated peak is well conditioned where its curvature along its flattest
#: direction, relative to its height, is at least this many times the window autocorrelation's
#: own (along the window's flattest direction, at the same lags). Compensation then changes a
#: fitted offset by at most about half (raw curvature k_r = k_c + k_w moves a peak by
#: k_r / k_c = 1 + k_w / k_c); below it the position comes more from the window model than from
#: the data (:func:`barely_concave`).
CONDITION_MIN = 2.0
#: How far (px, along each axis) a fit of a barely concave compensated peak may lie from its
#: integer peak: the integer peak is the sample nearest the maximum only within half a pixel.
LOOSE_REACH = 0.5


def window_power_spectrum(window_1d, n, xp=np):
    """(n,) float64 power spectrum of a 1-D window zero-padded to ``n`` samples."""
    f = np.fft.fft(np.asarray(window_1d, dtype=np.float64), n)
    return xp.asarray((f * f.conj()).real)


def window_autocorrelation(power, lags, xp=np):
    """Autocorrelation of a window at (fractional) ``lags``, normalised to 1 at lag 0.

    ``power`` is :func:`window_power_spectrum`; fractional lags use the same
    trigonometric interpolation as the upsampled DFT, so compensated values on a
    fine grid stay consistent with the integer ones.
    """
    n = power.shape[0]
    k = xp.fft.fftfreq(n)
    lags = xp.asarray(lags, dtype=xp.float64)
    phase = (2 * np.pi) * lags[..., None] * k
    return (xp.cos(phase) @ power) / power.sum()


def integer_lag_table(power, xp=np):
    """(n,) window autocorrelation at integer lags, indexed by lag mod n."""
    n = power.shape[0]
    return window_autocorrelation(power, xp.asarray(np.fft.fftfreq(n, 1.0 / n)), xp)


def _wrap_index(lags, n, xp):
    return xp.remainder(lags, n)


def integer_peak(corr, max_lag, xp=np):
    """Integer peak of circular lag maps within ``|lag| <= max_lag``.

    Parameters
    ----------
    corr : (T, Ny, Nx) real array
    max_lag : (int, int)
        (ry, rx): largest |dy|, |dx| searched.

    Returns
    -------
    ly, lx : (T,) int64 lags of the maximum
    value : (T,) correlation at the maximum
    on_border : (T,) bool, the maximum lies on the edge of the searched lags
    """
    T, Ny, Nx = corr.shape
    ry, rx = max_lag
    iy = _wrap_index(xp.arange(-ry, ry + 1), Ny, xp)
    ix = _wrap_index(xp.arange(-rx, rx + 1), Nx, xp)
    region = corr[:, iy[:, None], ix[None, :]].reshape(T, -1)
    flat = xp.argmax(region, axis=1)
    value = xp.take_along_axis(region, flat[:, None], axis=1)[:, 0]
    ly = flat // (2 * rx + 1) - ry
    lx = flat % (2 * rx + 1) - rx
    # An axis with nothing to search (a 1-pixel tile side) has no border.
    on_border = ((xp.abs(ly) == ry) & (ry > 0)) | ((xp.abs(lx) == rx) & (rx > 0))
    return ly, lx, value, on_border


def neighbourhood(corr, ly, lx, xp=np):
    """(T, 3, 3) values of circular maps ``corr`` about lags (ly, lx), rows = y."""
    T, Ny, Nx = corr.shape
    d = xp.arange(-1, 2)
    yy = _wrap_index(ly[:, None] + d[None, :], Ny, xp)  # (T, 3)
    xx = _wrap_index(lx[:, None] + d[None, :], Nx, xp)
    t = xp.arange(T)[:, None, None]
    return corr[t, yy[:, :, None], xx[:, None, :]]


def _parabolic_1d(cm, c0, cp, xp):
    # Not concave: no maximum along this axis (NaN), except an exactly flat axis (a tile
    # one pixel wide, whose "neighbours" are the peak itself), which has nothing to fit.
    den = cm - 2 * c0 + cp
    flat = (cm == c0) & (cp == c0)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = xp.where(den < 0, 0.5 * (cm - cp) / xp.where(den < 0, den, -1), xp.where(flat, 0.0, xp.nan))
    return d


def _quadratic_coefficients(n, xp):
    """Least-squares quadratic a + b x + c y + d x^2 + e xy + f y^2 on (T, 3, 3) grids.

    Closed-form normal equations (the same arithmetic as ``kernels/peaks.cu``);
    returns (b, c, d, e, f, det) with det = 4 d f - e^2.
    """
    x = xp.asarray([-1.0, 0.0, 1.0])
    s = n.sum(axis=(1, 2))
    sx = (n * x[None, None, :]).sum(axis=(1, 2))
    sy = (n * x[None, :, None]).sum(axis=(1, 2))
    sxy = (n * (x[:, None] * x[None, :])[None]).sum(axis=(1, 2))
    sxx = (n * (x * x)[None, None, :]).sum(axis=(1, 2))
    syy = (n * (x * x)[None, :, None]).sum(axis=(1, 2))
    b, c, e = sx / 6.0, sy / 6.0, sxy / 4.0
    d, f = sxx / 2.0 - s / 3.0, syy / 2.0 - s / 3.0
    return b, c, d, e, f, 4.0 * d * f - e * e


def _quadratic_peak(n, xp):
    """Maximum of the least-squares quadratic on (T, 3, 3) grids.

    Returns (qy, qx, ok); ``ok`` is false where the surface has no maximum within 1 px.
    ``kernels/peaks.cu`` (``quadratic_peak``) takes the coefficients scaled to whole multiples
    and divides once; ``tests/test_peaks.py`` checks that both agree.
    """
    b, c, d, e, f, det = _quadratic_coefficients(n, xp)
    # A relative threshold: a degenerate surface (e.g. a 1-row map) must not pass on rounding.
    ok = (det > 1e-12 * (d * d + f * f)) & (d < 0) & (f < 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        qx = (e * c - 2 * f * b) / det
        qy = (e * b - 2 * d * c) / det
    ok &= (xp.abs(qx) <= 1) & (xp.abs(qy) <= 1)
    return qy, qx, ok


def stencil_step(g, xp=np):
    """One trust-region ascent step from a (T, 3, 3) stencil: (dy, dx, beyond) in stencil units.

    Where the least-squares quadratic has a maximum, the step goes to it, shortened
    to reach at most one stencil spacing (keeping its direction); elsewhere each axis
    takes its parabolic offset, or a whole step towards the larger neighbour where
    the axis is not concave. ``beyond`` marks steps that reached the stencil edge (the
    peak may lie further on).
    """
    n = g.astype(xp.float64)
    b, c, d, e, f, det = _quadratic_coefficients(n, xp)
    ok = (det > 1e-12 * (d * d + f * f)) & (d < 0) & (f < 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        qx = (e * c - 2 * f * b) / det
        qy = (e * b - 2 * d * c) / det
    m = xp.maximum(xp.abs(qx), xp.abs(qy))
    ok &= xp.isfinite(m)
    shrink = xp.where(ok & (m > 1), 1.0 / xp.where(m > 0, m, 1.0), 1.0)
    qx, qy = qx * shrink, qy * shrink

    def axis(cm, c0, cp):
        den = cm - 2 * c0 + cp
        with np.errstate(divide="ignore", invalid="ignore"):
            par = 0.5 * (cm - cp) / xp.where(den < 0, den, -1.0)
        return xp.clip(xp.where(den < 0, par, xp.sign(cp - cm)), -1.0, 1.0)

    px = axis(n[:, 1, 0], n[:, 1, 1], n[:, 1, 2])
    py = axis(n[:, 0, 1], n[:, 1, 1], n[:, 2, 1])
    dx = xp.where(ok, qx, px)
    dy = xp.where(ok, qy, py)
    beyond = xp.where(ok, m >= 1, (xp.abs(px) >= 1) | (xp.abs(py) >= 1))
    return dy, dx, beyond


def fit_3x3(neigh, method, xp=np):
    """Subpixel offsets (dy, dx) in px from (T, 3, 3) neighbourhoods about integer peaks.

    A fit that fails falls back as the module docstring says; where the fallback has
    no maximum either, or the offset exceeds :data:`FIT_3X3_REACH` along an axis,
    both offsets are NaN (the peak cannot be fitted).
    """
    n = neigh.astype(xp.float64)
    c0 = n[:, 1, 1]
    dx = _parabolic_1d(n[:, 1, 0], c0, n[:, 1, 2], xp)
    dy = _parabolic_1d(n[:, 0, 1], c0, n[:, 2, 1], xp)
    if method == "gaussian":
        pos = (n[:, 1, :] > 0).all(axis=1) & (n[:, :, 1] > 0).all(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            ln = xp.log(xp.where(n > 0, n, 1.0))
        gx = _parabolic_1d(ln[:, 1, 0], ln[:, 1, 1], ln[:, 1, 2], xp)
        gy = _parabolic_1d(ln[:, 0, 1], ln[:, 1, 1], ln[:, 2, 1], xp)
        dx, dy = xp.where(pos, gx, dx), xp.where(pos, gy, dy)
    elif method == "quadratic":
        qy, qx, ok = _quadratic_peak(n, xp)
        dx, dy = xp.where(ok, qx, dx), xp.where(ok, qy, dy)
    elif method not in ("parabolic",):
        raise ValueError(f"unknown 3x3 subpixel method {method!r}")
    bad = ~((xp.abs(dx) <= FIT_3X3_REACH) & (xp.abs(dy) <= FIT_3X3_REACH))  # NaN included
    return xp.where(bad, xp.nan, dy), xp.where(bad, xp.nan, dx)


def _largest_curvature(g, xp):
    # Largest eigenvalue of the least-squares quadratic's Hessian [[2d, e], [e, 2f]]: the
    # curvature along the flattest direction (negative where the surface is concave).
    _, _, d, e, f, _ = _quadratic_coefficients(g, xp)
    return d + f + xp.sqrt((d - f) ** 2 + e * e)


def barely_concave(neigh, window, xp=np):
    """(T,) bool: window-compensated peaks too flat for their fit to be a measurement.

    Parameters
    ----------
    neigh : (T, 3, 3) compensated correlation about the integer peaks (rows = y)
    window : (T, 3, 3) window autocorrelation at the same lags (what ``neigh`` was divided by)

    A peak is well conditioned where its flattest curvature relative to its height is at least
    :data:`CONDITION_MIN` times the window's (both from the same least-squares quadratic as
    the ``quadratic`` fit): ``k_peak / c_peak <= CONDITION_MIN * k_window / c_window``. Peaks of
    non-positive height and NaN neighbourhoods count as barely concave. Used with
    :func:`drop_loose_peaks`; ``kernels/peaks.cu`` (``barely_concave``) does the same sums.
    """
    n = neigh.astype(xp.float64)
    w = window.astype(xp.float64)
    kn, kw = _largest_curvature(n, xp), _largest_curvature(w, xp)
    cn, cw = n[:, 1, 1], w[:, 1, 1]
    with np.errstate(invalid="ignore"):
        good = (cn > 0) & (cw > 0) & (kn * cw <= CONDITION_MIN * kw * cn)
    return ~good


def drop_loose_peaks(y, x, ly, lx, flat, *, xp=np):
    """(y, x) with NaN where a barely concave peak (``flat``, :func:`barely_concave`) was
    fitted more than :data:`LOOSE_REACH` px from its integer peak (ly, lx) along either axis.

    Within half a pixel the integer peak vouches for the fit; further out only a well
    conditioned peak can (an elongated, tilted peak's maximum may lie over a pixel from its
    largest sample), and a barely concave one is a slope the fit climbed (issue 20).
    """
    with np.errstate(invalid="ignore"):
        loose = flat & ~((xp.abs(y - ly) <= LOOSE_REACH) & (xp.abs(x - lx) <= LOOSE_REACH))
    return xp.where(loose, xp.nan, y), xp.where(loose, xp.nan, x)


def drop_far_peaks(y, x, ly, lx, *, reach=SUBPIXEL_REACH, xp=np):
    """(y, x) with NaN where a refined peak lies more than ``reach`` px from its integer
    peak (ly, lx) along either axis, or is NaN already."""
    far = ~((xp.abs(y - ly) <= reach) & (xp.abs(x - lx) <= reach))
    return xp.where(far, xp.nan, y), xp.where(far, xp.nan, x)


def _phases(c, kint, n, xp):
    """(T, K) complex128 ``exp(2 pi i (k / n) c_t)`` for integer frequencies ``kint`` (NumPy, host)."""
    if xp is not np:  # exps are cheap on a GPU: no recurrence
        return xp.exp((2j * np.pi / n) * c[:, None] * xp.asarray(kint, dtype=xp.float64)[None, :])
    # Powers of one complex exponential per tile: T exps instead of T*K.
    z = xp.exp((2j * np.pi / n) * c)  # (T,)
    kmax = int(np.abs(kint).max()) if kint.size else 0
    zk = xp.cumprod(xp.repeat(z[:, None], kmax + 1, axis=1), axis=1) / z[:, None]
    idx = xp.asarray(np.abs(kint))
    out = zk[:, idx]
    neg = kint < 0
    if neg.any():
        out[:, xp.asarray(np.flatnonzero(neg))] = xp.conj(out[:, xp.asarray(np.flatnonzero(neg))])
    return out


def dft_grid(cross_power, yc, xc, *, spacing, size, shape, window_spectra=None, xp=np):
    """Correlation on a small grid about (yc, xc), evaluated exactly by a matrix DFT.

    Parameters
    ----------
    cross_power : (T, Ny, Nx//2 + 1) complex
        Half-spectrum whose inverse real FFT of size ``shape`` is the correlation.
    yc, xc : (T,) float arrays
        Grid centres (lags, px).
    spacing : float
        Grid step (px).
    size : int
        Points per side; point ``u`` sits at ``centre + (u - size // 2) * spacing``.
    shape : (int, int)
        (Ny, Nx) of the correlation maps.
    window_spectra : (Sy, Sx) or None
        When given, values are divided by the window autocorrelation.

    Returns
    -------
    (T, size, size) float64 values, same scale as ``irfft2``.
    """
    Ny, Nx = shape
    u = (xp.arange(size, dtype=xp.float64) - size // 2) * spacing
    fy = xp.fft.fftfreq(Ny)
    fx = xp.arange(Nx // 2 + 1, dtype=xp.float64) / Nx
    w = xp.full(Nx // 2 + 1, 2.0)  # Hermitian weights of the half-spectrum
    w[0] = 1.0
    if Nx % 2 == 0:
        w[-1] = 1.0
    yc = yc.astype(xp.float64)
    xc = xc.astype(xp.float64)
    # exp(2 pi i f (c + u)) = exp(2 pi i f c) * exp(2 pi i f u): per-tile phases times a shared table.
    ky = np.rint(np.fft.fftfreq(Ny) * Ny).astype(np.int64)
    py, px = _phases(yc, ky, Ny, xp), _phases(xc, np.arange(Nx // 2 + 1), Nx, xp)  # (T, Ny), (T, Nxh)
    ty = xp.exp((2j * np.pi) * u[:, None] * fy[None, :])  # (size, Ny)
    tx = xp.exp((2j * np.pi) * u[:, None] * fx[None, :])  # (size, Nxh)
    ct = xp.result_type(cross_power.dtype, xp.complex64)  # complex64, or complex128 for oracles
    Ey = (py[:, None, :] * ty[None]).astype(ct)  # (T, size, Ny)
    Ex = ((w * px)[:, :, None] * tx.T[None]).astype(ct)  # (T, Nxh, size)
    cp = cross_power.astype(ct, copy=False)
    out = xp.matmul(xp.matmul(Ey, cp), Ex).real.astype(xp.float64) / (Ny * Nx)
    if window_spectra is not None:
        Sy, Sx = window_spectra
        wy = (py * Sy).real @ ty.T.real - (py * Sy).imag @ ty.T.imag  # Re(sum S e^{i f (c+u)})
        wx = _window_half(px, Sx, tx, Nx, xp)
        with np.errstate(divide="ignore", invalid="ignore"):  # flagged (all-zero) maps: 0/0
            out /= (wy / Sy.sum())[:, :, None] * wx[:, None, :]
    return out


def _window_half(px, Sx, tx, Nx, xp):
    # Window autocorrelation from the non-negative half of its (even) power spectrum.
    h = Nx // 2 + 1
    w = xp.full(h, 2.0)
    w[0] = 1.0
    if Nx % 2 == 0:
        w[-1] = 1.0
    a = px * (w * Sx[:h])
    return (a.real @ tx.T.real - a.imag @ tx.T.imag) / Sx.sum()


#: Re-centrings of the ``upsampled`` grid where its maximum lies on its edge.
UPSAMPLED_MAX_RECENTRE = 4


def upsampled_dft_peak(cross_power, ly, lx, shape, *, upsample=16, window_spectra=None, xp=np,
                       chunk=16384, max_recentre=UPSAMPLED_MAX_RECENTRE):
    """Refine integer peaks on an ``upsample``-times finer grid (Guizar-Sicairos 2008).

    The grid covers 1.5 px about the integer peak (:func:`dft_grid`); its maximum is
    refined by a quadratic fit to its 3x3 fine-grid neighbourhood, which removes the
    grid quantisation. Where the fine maximum lies on the edge of the grid (an
    elongated peak whose integer maximum is a pixel off), the grid is re-centred on
    the nearest whole pixel and searched again, at most ``max_recentre`` times.

    Returns
    -------
    y, x : (T,) float64 peak lags; NaN where no maximum was found: still on the grid
        edge after the last re-centring (the correlation rises further away).
    """
    R = int(math.ceil(1.5 * upsample))
    centre = R // 2
    d = xp.arange(-1, 2)
    ys, xs = [], []
    for s in range(0, cross_power.shape[0], chunk):
        sl = slice(s, s + chunk)
        cps = cross_power[sl]
        cy, cx = ly[sl].astype(xp.float64), lx[sl].astype(xp.float64)
        todo = slice(None)
        for it in range(max_recentre + 1):
            sub = cps if it == 0 else cps[todo]  # no copy of the spectra on the first pass
            up = dft_grid(sub, cy[todo], cx[todo], spacing=1.0 / upsample, size=R, shape=shape,
                          window_spectra=window_spectra, xp=xp)
            t = up.shape[0]
            flat = xp.argmax(up.reshape(t, -1), axis=1)
            iu, iv = flat // R, flat % R
            # Quadratic fit to the 3x3 fine-grid neighbourhood: continuous across argmax flips.
            iu_c, iv_c = xp.clip(iu, 1, R - 2), xp.clip(iv, 1, R - 2)
            ar = xp.arange(t)[:, None, None]
            du, dv = fit_3x3(up[ar, (iu_c[:, None] + d)[:, :, None], (iv_c[:, None] + d)[:, None, :]],
                             "quadratic", xp)
            # About a fine maximum the fit always succeeds; it can fail only beside one on the
            # grid edge, which is re-centred below.
            du, dv = xp.nan_to_num(du), xp.nan_to_num(dv)
            if it == 0:
                y = cy + (iu_c + du - centre) / upsample
                x = cx + (iv_c + dv - centre) / upsample
            else:
                y[todo] = cy[todo] + (iu_c + du - centre) / upsample
                x[todo] = cx[todo] + (iv_c + dv - centre) / upsample
            edge = (iu != iu_c) | (iv != iv_c)
            if not bool(edge.any()):
                break
            todo = xp.flatnonzero(edge) if it == 0 else todo[edge]
            if it == max_recentre:  # the maximum was never inside a grid: none to report
                y[todo], x[todo] = xp.nan, xp.nan
                break
            cy[todo], cx[todo] = xp.rint(y[todo]), xp.rint(x[todo])
        ys.append(y)
        xs.append(x)
    return xp.concatenate(ys), xp.concatenate(xs)


DFT_STEPS = (0.25, 0.05)
DFT_MAX_MOVES = 4


def dft_refine_peak(cross_power, y0, x0, shape, *, steps=DFT_STEPS, max_moves=DFT_MAX_MOVES,
                    window_spectra=None, xp=np, chunk=16384):
    """Refine peak estimates by quadratic fits to exact 3x3 DFT stencils of shrinking step.

    Each step evaluates the (window-compensated) correlation at the 9 points
    ``estimate + step * {-1, 0, 1}^2`` by a matrix DFT and moves the estimate to the
    maximum of the least-squares quadratic through them (:func:`stencil_step`). Over a small stencil the
    quadratic model is accurate, so a few steps reach the continuous peak of the
    band-limited correlation at a fraction of the cost of a fine upsampled grid.
    The first step is repeated (up to ``max_moves`` times) while the step reaches the
    stencil edge, so estimates up to ``max_moves * steps[0]`` px off (the
    3x3 start on an elongated, tilted peak) are still reached.

    Returns
    -------
    y, x : (T,) float64 peak lags; NaN where the estimate was NaN or the refinement did
        not converge: the step of the last (finest) stencil still reaches its edge, so
        the maximum lies further on (or the correlation has none: a rising slope).
    """
    ys, xs = [], []
    for s in range(0, cross_power.shape[0], chunk):
        sl = slice(s, s + chunk)
        cps = cross_power[sl]
        y, x = y0[sl].astype(xp.float64).copy(), x0[sl].astype(xp.float64).copy()
        for i, h in enumerate(steps):
            todo = xp.arange(cps.shape[0])
            for it in range(max_moves if i == 0 else 1):
                sub = cps if it == 0 else cps[todo]  # no copy of the spectra on the first pass
                with np.errstate(invalid="ignore"):  # NaN estimates (failed 3x3 starts) stay NaN
                    g = dft_grid(sub, y[todo], x[todo], spacing=h, size=3, shape=shape,
                                 window_spectra=window_spectra, xp=xp)
                dy, dx, beyond = stencil_step(g, xp)
                y[todo] += h * dy
                x[todo] += h * dx
                todo = todo[beyond]
                if not todo.size:
                    break
        # `todo`: where the last stencil's step still reached its edge (NaN estimates too).
        y[todo], x[todo] = xp.nan, xp.nan
        ys.append(y)
        xs.append(x)
    return xp.concatenate(ys), xp.concatenate(xs)


def locate_peaks(corr, *, max_lag, method="quadratic", cross_power=None, upsample=16,
                 window_spectra=None, xp=np):
    """Integer search plus subpixel refinement.

    Parameters
    ----------
    corr : (T, Ny, Nx) circular lag maps
    max_lag : (int, int)
    method : str, one of :data:`SUBPIXEL_METHODS`
    cross_power : (T, Ny, Nx//2+1) complex, needed by ``upsampled`` and ``dft``
    upsample : int
    window_spectra : (Sy, Sx) or None
        1-D window power spectra at the FFT sizes for window compensation.

    Returns
    -------
    y, x : (T,) float64 lags of the peak; NaN where the peak cannot be fitted (no maximum
        near the integer peak; see the module docstring)
    value : (T,) correlation at the integer peak
    on_border : (T,) bool
    """
    ly, lx, value, on_border = integer_peak(corr, max_lag, xp)
    if method == "none":
        return ly.astype(xp.float64), lx.astype(xp.float64), value, on_border
    if method in SPECTRUM_METHODS and cross_power is None:
        raise ValueError(f"the {method} method needs the cross-power spectrum")
    neigh = neighbourhood(corr, ly, lx, xp)
    flat = None  # barely concave compensated peaks (compensation only)
    if window_spectra is not None:
        T, Ny, Nx = corr.shape
        d = xp.arange(-1, 2)
        wy = integer_lag_table(window_spectra[0], xp)[_wrap_index(ly[:, None] + d, Ny, xp)]  # (T, 3)
        wx = integer_lag_table(window_spectra[1], xp)[_wrap_index(lx[:, None] + d, Nx, xp)]
        window = wy[:, :, None] * wx[:, None, :]
        with np.errstate(divide="ignore", invalid="ignore"):  # flagged (all-zero) maps: 0/0
            neigh = neigh / window
        flat = barely_concave(neigh, window, xp)
    if method == "upsampled":
        y, x = upsampled_dft_peak(cross_power, ly, lx, corr.shape[1:], upsample=upsample,
                                  window_spectra=window_spectra, xp=xp)
    else:
        with np.errstate(invalid="ignore", divide="ignore"):  # NaN maps of flagged tiles: NaN offsets
            dy, dx = fit_3x3(neigh, "quadratic" if method == "dft" else method, xp)
        y, x = ly + dy, lx + dx
    if flat is not None:
        y, x = drop_loose_peaks(y, x, ly, lx, flat, xp=xp)
    if method == "dft":
        y, x = dft_refine_peak(cross_power, y, x, corr.shape[1:], window_spectra=window_spectra, xp=xp)
        if flat is not None:  # the refinement may carry a start within reach out of it
            y, x = drop_loose_peaks(y, x, ly, lx, flat, xp=xp)
    if method in SPECTRUM_METHODS:
        y, x = drop_far_peaks(y, x, ly, lx, xp=xp)
    return y, x, value, on_border
