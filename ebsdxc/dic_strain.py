"""Strain fields from DIC displacement fields: a local least-squares plane, then Green-Lagrange.

The displacement ``[u, v]`` px on a regular grid of subset centres (``step`` px apart) is fitted
by a plane ``a + b x + c y`` over a square window of ``window`` x ``window`` grid points centred
on each point (truncated at the grid's edges: the fit uses what is there), separately for u and
v; the slopes are the displacement gradient. Points whose window holds fewer than
``min_points`` valid values, or whose valid values all lie on one line, are NaN.

The window is the filter: the effective (virtual strain gauge) length is
``(window - 1) * step + subset`` px. A plane fitted over ``n`` points ``step`` apart to a
sinusoid of period ``P`` returns its slope times ``A = sum_j j sin(k j) / (k sum_j j^2)``,
``k = 2 pi step / P``, ``j = -(n-1)/2 .. (n-1)/2`` (:func:`transfer`): close to 1 for periods much longer
than the window, falling fast as the period nears the window's length.
"""

from __future__ import annotations

import numpy as np

from .backend import array_module

__all__ = ["fit_gradients", "green_lagrange", "small_strain", "gauge_length", "transfer"]


def _box_sums(a, window, xp):
    """Sums of ``a`` (..., ny, nx) over window x window boxes centred on each point, truncated
    at the edges (summed-area table)."""
    r = window // 2
    ny, nx = a.shape[-2:]
    c = xp.cumsum(xp.cumsum(a, axis=-2), axis=-1)
    c = xp.pad(c, [(0, 0)] * (a.ndim - 2) + [(1, 0), (1, 0)])
    y0 = np.clip(np.arange(ny) - r, 0, ny)
    y1 = np.clip(np.arange(ny) + r + 1, 0, ny)
    x0 = np.clip(np.arange(nx) - r, 0, nx)
    x1 = np.clip(np.arange(nx) + r + 1, 0, nx)
    Y0, Y1, X0, X1 = (xp.asarray(v) for v in (y0, y1, x0, x1))
    return (c[..., Y1[:, None], X1[None, :]] - c[..., Y0[:, None], X1[None, :]]
            - c[..., Y1[:, None], X0[None, :]] + c[..., Y0[:, None], X0[None, :]])


def fit_gradients(displacement, *, step, window: int = 5, min_points: int = 6):
    """Displacement gradient ``[[du/dx, du/dy], [dv/dx, dv/dy]]`` (..., ny, nx, 2, 2).

    Parameters
    ----------
    displacement : (..., ny, nx, 2) array
        ``[u, v]`` px on the grid, NaN where invalid; NumPy or CuPy.
    step : float
        Grid spacing in px.
    window : int
        Odd, >= 3: points on a side of the fit's window.
    min_points : int
        Fewest valid points (>= 3) a window needs.
    """
    xp = array_module(displacement)
    d = xp.asarray(displacement, dtype=xp.float64)
    if d.ndim < 3 or d.shape[-1] != 2:
        raise ValueError(f"displacement must have shape (..., ny, nx, 2), got {d.shape}")
    if not (isinstance(window, (int, np.integer)) and window >= 3 and window % 2 == 1):
        raise ValueError(f"window must be an odd whole number >= 3, got {window!r}")
    if not (np.isfinite(step) and step > 0):
        raise ValueError(f"step must be a positive number of px, got {step!r}")
    if not (isinstance(min_points, (int, np.integer)) and min_points >= 3):
        raise ValueError(f"min_points must be a whole number >= 3, got {min_points!r}")
    ny, nx = d.shape[-3:-1]
    # coordinates relative to each point's own centre: the sums of x, x^2, ... over a window
    # are box sums of the global coordinates minus the centre's
    gx = xp.asarray(np.arange(nx, dtype=np.float64) * step)[None, :] + xp.zeros((ny, 1))
    gy = xp.asarray(np.arange(ny, dtype=np.float64) * step)[:, None] + xp.zeros((1, nx))
    valid = xp.isfinite(d).all(axis=-1)
    w = valid.astype(xp.float64)
    out = xp.full(d.shape[:-1] + (2, 2), xp.nan)
    # centred coordinates: x - x_c with x_c the point's own position
    S = {}
    S["n"] = _box_sums(w, window, xp)
    for name, val in (("x", gx), ("y", gy), ("xx", gx * gx), ("yy", gy * gy), ("xy", gx * gy)):
        S[name] = _box_sums(w * val, window, xp)
    cx, cy = gx, gy
    n = S["n"]
    sx = S["x"] - n * cx
    sy = S["y"] - n * cy
    sxx = S["xx"] - 2 * cx * S["x"] + n * cx * cx
    syy = S["yy"] - 2 * cy * S["y"] + n * cy * cy
    sxy = S["xy"] - cx * S["y"] - cy * S["x"] + n * cx * cy
    # normal equations of a + b x + c y over the window (x, y centred on the point)
    M = xp.stack([xp.stack([n, sx, sy], -1), xp.stack([sx, sxx, sxy], -1), xp.stack([sy, sxy, syy], -1)], -2)
    # all valid points on one line: no plane (det ~ n^3 step^4 for a full window)
    good = (n >= min_points) & (xp.linalg.det(M) > 1e-9 * n ** 3 * float(step) ** 4)
    Mi = xp.linalg.inv(xp.where(good[..., None, None], M, xp.eye(3)))
    for comp in range(2):
        f = xp.where(valid, d[..., comp], 0.0)
        sf = _box_sums(f, window, xp)
        sfx = _box_sums(f * gx, window, xp) - cx * sf
        sfy = _box_sums(f * gy, window, xp) - cy * sf
        rhs = xp.stack([sf, sfx, sfy], -1)
        coef = (Mi @ rhs[..., None])[..., 0]
        out[..., comp, 0] = xp.where(good, coef[..., 1], xp.nan)
        out[..., comp, 1] = xp.where(good, coef[..., 2], xp.nan)
    return out


def green_lagrange(grad):
    """``E = (F^T F - I) / 2`` with ``F = I + grad`` (..., 2, 2)."""
    xp = array_module(grad)
    F = xp.asarray(grad) + xp.eye(2)
    return (xp.swapaxes(F, -1, -2) @ F - xp.eye(2)) / 2


def small_strain(grad):
    """``(grad + grad^T) / 2`` (..., 2, 2)."""
    xp = array_module(grad)
    g = xp.asarray(grad)
    return (g + xp.swapaxes(g, -1, -2)) / 2


def gauge_length(step, window, subset) -> float:
    """The virtual strain gauge length in px: ``(window - 1) * step + subset``."""
    return float((window - 1) * step + subset)


def transfer(period, *, step, window) -> float:
    """Fraction of a sinusoidal field's slope (period ``period`` px) that a plane fitted over
    ``window`` points ``step`` px apart recovers at the sinusoid's zero crossing."""
    j = np.arange(window) - window // 2
    k = 2 * np.pi * step / period
    return float((j * np.sin(k * j)).sum() / (k * (j * j).sum()))
