"""Subset digital image correlation: points on a grid, an integer start, subset IC-GN.

A reference image and a deformed frame; subsets of ``subset`` x ``subset`` px centred on a grid
of points every ``step`` px (inside the image and the mask). Each point's displacement
``[u, v]`` = where the subset's centre is in the frame minus where it is in the reference (px;
x = column, y = row, origin at the centre of pixel (0, 0), as everywhere in ebsdxc).

1. **Start** (integer): a whole-image cross-correlation of the two images binned to at most
   ``coarse_size`` px gives the rigid part, so shifts of hundreds of pixels are found; then
   each subset's zero-mean normalised cross-correlation with the frame over ``+-search`` px
   around that (FFT, batched) gives its own integer shift.
2. **Refinement**: IC-GN of every subset with the affine (6 parameters) or quadratic (12) shape
   function (:mod:`ebsdxc.icgn`:
   ZNSSD criterion, cubic B-spline interpolation, batched on the GPU with the same code on the
   CPU), started from the integer shift.

Status per point (codes of :mod:`ebsdxc.status`): ``OK``; ``CONSTANT_TILE`` (no contrast in
the reference subset); ``OUTSIDE_MASK`` (the subset leaves the image or the mask);
``PEAK_ON_BORDER`` (the integer search found its best at the edge of its window: the true
shift may lie beyond); ``REFINE_FAILED`` (IC-GN did not converge, or converged to a ZNCC
below ``min_zncc``). Anything but ``OK`` is NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import icgn
from . import status as st

__all__ = ["DicConfig", "SHAPE_FUNCTIONS", "subset_grid", "coarse_shift", "integer_start", "match_subsets",
           "SubsetMatch"]

SHAPE_FUNCTIONS = ("affine", "quadratic")


def _xp(a):
    return __import__("cupy") if type(a).__module__.startswith("cupy") else np


def _whole(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


@dataclass(frozen=True)
class DicConfig:
    """DIC settings (a recipe's ``[dic]`` table).

    Attributes
    ----------
    enabled : bool
        ``--mode dic``.
    subset : int
        Subset side in px (odd, >= 7).
    step : int
        Grid spacing of the points in px.
    search : int
        Integer search around the rigid shift, +- px, per subset.
    coarse_size : int
        The whole-image search bins the images to at most this many px on a side.
    shape_function : {"affine", "quadratic"}
        The quadratic one also follows the curvature of the displacement over a subset: less
        bias where the field varies on the scale of a subset, a little more noise.
    max_iterations : int
    tolerance_px : float
        IC-GN converged when an update moves no corner of the subset by more than this.
    min_zncc : float
    strain_window : int
        Points (odd, >= 3) on a side of the strain fit's window (:mod:`ebsdxc.dic_strain`).
    """

    enabled: bool = False
    subset: int = 31
    step: int = 8
    search: int = 16
    coarse_size: int = 512
    shape_function: str = "affine"
    max_iterations: int = 30
    tolerance_px: float = 1e-3
    min_zncc: float = 0.6
    strain_window: int = 5

    def __post_init__(self):
        if not isinstance(self.enabled, bool):
            raise ValueError(f"dic.enabled must be true or false, got {self.enabled!r}")
        if not (_whole(self.subset) and self.subset >= 7 and self.subset % 2 == 1):
            raise ValueError(f"dic.subset must be an odd whole number >= 7 (px), got {self.subset!r}")
        for name, low in (("step", 1), ("search", 1), ("coarse_size", 32), ("max_iterations", 1)):
            v = getattr(self, name)
            if not (_whole(v) and v >= low):
                raise ValueError(f"dic.{name} must be a whole number >= {low}, got {v!r}")
        if self.shape_function not in SHAPE_FUNCTIONS:
            raise ValueError(f"dic.shape_function must be one of {', '.join(SHAPE_FUNCTIONS)}, "
                             f"got {self.shape_function!r}")
        if not (isinstance(self.tolerance_px, (int, float)) and 0 < self.tolerance_px <= 1):
            raise ValueError(f"dic.tolerance_px must be in (0, 1] px, got {self.tolerance_px!r}")
        if not (isinstance(self.min_zncc, (int, float)) and -1 <= self.min_zncc < 1):
            raise ValueError(f"dic.min_zncc must be in [-1, 1), got {self.min_zncc!r}")
        if not (_whole(self.strain_window) and self.strain_window >= 3 and self.strain_window % 2 == 1):
            raise ValueError(f"dic.strain_window must be an odd whole number >= 3, got {self.strain_window!r}")


def subset_grid(shape, *, subset: int, step: int, mask=None):
    """The points of a DIC grid.

    Returns
    -------
    points : (ny, nx, 2) float64
        ``[x, y]`` px of each subset centre; the grid starts half a subset in from the top-left
        corner and spans the image every ``step`` px.
    inside : (ny, nx) bool
        The subset lies wholly in the image and (with ``mask``, (H, W) bool) in the mask.
    """
    h, w = (int(v) for v in shape)
    half = subset // 2
    if h < subset or w < subset:
        raise ValueError(f"dic.subset ({subset} px) is larger than the {w}x{h} px image")
    xs = np.arange(half, w - half, step, dtype=np.float64)
    ys = np.arange(half, h - half, step, dtype=np.float64)
    points = np.stack(np.meshgrid(xs, ys), axis=-1)
    inside = np.ones(points.shape[:2], bool)
    if mask is not None:
        m = np.asarray(mask, dtype=bool)
        if m.shape != (h, w):
            raise ValueError(f"the mask is {m.shape[1]}x{m.shape[0]} px; the image is {w}x{h}")
        # every pixel of the subset in the mask: a box sum of the mask's complement
        c = np.pad(np.cumsum(np.cumsum(~m, 0), 1), ((1, 0), (1, 0)))
        iy = ys.astype(np.int64)[:, None]
        ix = xs.astype(np.int64)[None, :]
        out = c[iy + half + 1, ix + half + 1] - c[iy - half, ix + half + 1] - c[iy + half + 1, ix - half] \
            + c[iy - half, ix - half]
        inside = out == 0
    return points, inside


def _bin_to(image, size, xp):
    h, w = image.shape
    k = max(1, int(np.ceil(max(h, w) / size)))
    hk, wk = h // k, w // k
    return image[:hk * k, :wk * k].reshape(hk, k, wk, k).mean(axis=(1, 3)), k


def coarse_shift(reference, image, *, coarse_size: int = 512):
    """The rigid shift ``[dx, dy]`` px (float, a whole multiple of the binning) of ``image``
    against ``reference``: the peak of the whole-image normalised cross-correlation of both
    binned to at most ``coarse_size`` px, searched up to half the image."""
    xp = _xp(image)
    a, k = _bin_to(xp.asarray(reference, dtype=xp.float64), coarse_size, xp)
    b, _ = _bin_to(xp.asarray(image, dtype=xp.float64), coarse_size, xp)
    h, w = a.shape
    win = xp.asarray(np.outer(np.hanning(h), np.hanning(w)))
    a = (a - a.mean()) * win
    b = (b - b.mean()) * win
    shape = (2 * h, 2 * w)
    cc = xp.fft.irfft2(xp.fft.rfft2(b, s=shape) * xp.conj(xp.fft.rfft2(a, s=shape)), s=shape)
    dy = xp.fft.fftfreq(2 * h, 1.0 / (2 * h))
    dx = xp.fft.fftfreq(2 * w, 1.0 / (2 * w))
    cc = xp.where((xp.abs(dy)[:, None] <= h / 2) & (xp.abs(dx)[None, :] <= w / 2), cc, -xp.inf)
    i = int(xp.argmax(cc))
    return np.array([float(dx[i % (2 * w)]) * k, float(dy[i // (2 * w)]) * k])


def _cut(image, corners, size, xp):
    """(N, size, size) windows of ``image`` with top-left ``corners`` (N, 2) [x, y] int (inside)."""
    r = xp.arange(size)
    ys = xp.asarray(corners[:, 1])[:, None, None] + r[None, :, None]
    xs = xp.asarray(corners[:, 0])[:, None, None] + r[None, None, :]
    return image[ys, xs]


def integer_start(reference, image, points, *, subset: int, search: int, shift=(0.0, 0.0)):
    """Integer displacement of each subset (N, 2) [dx, dy], and whether its best match lay on the
    edge of the +-``search`` window (N,) bool, by zero-mean normalised cross-correlation around
    ``shift``. Subsets whose window leaves the frame are searched within what the frame holds."""
    xp = _xp(image)
    ref = xp.asarray(reference, dtype=xp.float32)
    img = xp.asarray(image, dtype=xp.float32)
    h, w = img.shape
    p = np.rint(np.asarray(points, dtype=np.float64)).astype(np.int64)
    half = subset // 2
    base = np.rint(np.asarray(shift, dtype=np.float64)).astype(np.int64)
    tl = p - half  # reference subset corners (inside by construction)
    big = subset + 2 * search
    # search windows in the frame, clamped into it; the offset clamp costs is added back
    wtl = np.clip(tl + base - search, 0, [w - big, h - big])
    t = _cut(ref, tl, subset, xp)
    t = t - t.mean(axis=(1, 2), keepdims=True)
    tn = xp.sqrt((t * t).sum(axis=(1, 2)))
    a = _cut(img, wtl, big, xp)
    n = subset * subset
    shape = (big, big)
    num = xp.fft.irfft2(xp.fft.rfft2(a, s=shape) * xp.conj(xp.fft.rfft2(t, s=shape)), s=shape)
    # local sums of the window over every subset-sized position (summed-area tables)
    c1 = xp.pad(xp.cumsum(xp.cumsum(a.astype(xp.float64), 1), 2), ((0, 0), (1, 0), (1, 0)))
    c2 = xp.pad(xp.cumsum(xp.cumsum(a.astype(xp.float64) ** 2, 1), 2), ((0, 0), (1, 0), (1, 0)))
    m = big - subset + 1

    def box(c):
        return c[:, subset:subset + m, subset:subset + m] - c[:, :m, subset:subset + m] \
            - c[:, subset:subset + m, :m] + c[:, :m, :m]
    s1, s2 = box(c1), box(c2)
    var = xp.maximum(s2 - s1 * s1 / n, 0.0)
    ncc = num[:, :m, :m] / xp.maximum(xp.sqrt(var) * tn[:, None, None], 1e-30)
    best = xp.argmax(ncc.reshape(len(p), -1), axis=1)
    by, bx = best // m, best % m
    by, bx = np.asarray(by.get() if hasattr(by, "get") else by), np.asarray(bx.get() if hasattr(bx, "get") else bx)
    d = wtl + np.stack([bx, by], -1) - tl
    # on the edge of the window, unless the window met the frame's edge there
    edge = (bx == 0) | (by == 0) | (bx == m - 1) | (by == m - 1)
    return d.astype(np.float64), edge


@dataclass
class SubsetMatch:
    """Per point: ``displacement`` (N, 2) float64 [u, v] px (NaN where not ok), ``zncc`` (N,),
    ``iterations`` (N,) int16, ``status`` (N,) uint8; host arrays."""

    displacement: np.ndarray
    zncc: np.ndarray
    iterations: np.ndarray
    status: np.ndarray


def match_subsets(reference, image, points, *, config: DicConfig, valid=None, shift=None,
                  coefficients=None, batch: int = 16384) -> SubsetMatch:
    """Displacements of the subsets centred on ``points`` (N, 2) from ``reference`` to ``image``
    (both (H, W), NumPy or CuPy: the work runs there).

    ``valid`` (N,) bool: points to measure (others are ``OUTSIDE_MASK``). ``shift``: the rigid
    start (default :func:`coarse_shift`). ``coefficients``: the frame's B-spline coefficients
    when already made (:func:`ebsdxc.icgn.spline_coefficients`).
    """
    xp = _xp(image)
    c = config
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    N = len(pts)
    ok = np.ones(N, bool) if valid is None else np.asarray(valid, dtype=bool).reshape(-1).copy()
    ref = xp.asarray(reference, dtype=xp.float32)
    img = xp.asarray(image, dtype=xp.float32)
    if shift is None:
        shift = coarse_shift(ref, img, coarse_size=c.coarse_size)
    coef = icgn.spline_coefficients(img[None]) if coefficients is None else coefficients
    ref_coef = icgn.spline_coefficients(ref[None])  # once: every batch of subsets cuts its templates from it
    disp = np.full((N, 2), np.nan)
    zncc = np.full(N, np.nan, np.float32)
    its = np.full(N, -1, np.int16)
    status = np.full(N, st.OUTSIDE_MASK, np.uint8)
    half = c.subset // 2
    h, w = img.shape
    # a subset the rigid shift puts (partly) off the frame has nothing there to be measured with
    moved = pts + np.asarray(shift, dtype=np.float64)
    on_frame = (moved - half >= 0).all(axis=1) & (moved[:, 0] + half <= w - 1) & (moved[:, 1] + half <= h - 1)
    ok &= on_frame
    yy, xx = np.mgrid[-half:half + 1, -half:half + 1]
    offsets = np.stack([xx.ravel(), yy.ravel()], -1)
    scale = float(half)
    for s in range(0, N, batch):
        idx = np.flatnonzero(ok[s:s + batch]) + s
        if idx.size == 0:
            continue
        p = pts[idx]
        start, edge = integer_start(ref, img, p, subset=c.subset, search=c.search, shift=shift)
        centre = np.rint(p).astype(np.int64)
        pix = centre[:, None, :] + offsets[None]
        t = xp.asarray(pix[..., 1]), xp.asarray(pix[..., 0])
        patch = ref[t[0], t[1]]
        flat = (patch.max(axis=1) - patch.min(axis=1)) > 0
        flat = np.asarray(flat.get() if hasattr(flat, "get") else flat)
        status[idx[~flat]] = st.CONSTANT_TILE
        keep = flat
        if not keep.any():
            continue
        k_idx = idx[keep]
        tpl = icgn.make_templates(ref[None], pixels=xp.asarray(pix[keep]),
                                  image_index=xp.zeros(int(keep.sum()), dtype=np.int64), origin=xp.asarray(p[keep]),
                                  scale=scale, shape_function=c.shape_function, coefficients=ref_coef)
        H0 = icgn.translation_warp(xp.asarray(start[keep] / scale), c.shape_function)
        res = icgn.register(tpl, coef, template_index=xp.arange(int(keep.sum())),
                            image_index=xp.zeros(int(keep.sum()), dtype=np.int64), initial=H0,
                            max_iterations=c.max_iterations, tolerance=c.tolerance_px, max_outside=0.0)
        warp = res.warp
        centre_uv = icgn.warp_points(warp, xp.zeros((1, 2)))[:, 0]
        d = centre_uv * scale
        d = np.asarray(d.get() if hasattr(d, "get") else d)
        rs = np.asarray(res.status.get() if hasattr(res.status, "get") else res.status)
        z = np.asarray(res.zncc.get() if hasattr(res.zncc, "get") else res.zncc)
        it = np.asarray(res.iterations.get() if hasattr(res.iterations, "get") else res.iterations)
        good = (rs == icgn.ICGN_CONVERGED) & (z >= c.min_zncc)
        disp[k_idx[good]] = d[good]
        zncc[k_idx] = z
        its[k_idx] = it
        status[k_idx] = np.where(good, st.OK, st.REFINE_FAILED)
        # the integer search hit its window's edge and IC-GN did not find the subset either
        status[k_idx[~good & edge[keep]]] = st.PEAK_ON_BORDER
        # the subset moved (partly) off the frame: nothing there to measure it with
        status[k_idx[rs == icgn.ICGN_LEFT_IMAGE]] = st.OUTSIDE_MASK
    disp[status != st.OK] = np.nan
    return SubsetMatch(disp, zncc, its, status)
