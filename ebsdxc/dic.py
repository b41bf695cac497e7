"""Subset digital image correlation: points on a grid, an integer start, subset IC-GN.

A reference image and a deformed frame; subsets of ``subset`` x ``subset`` px centred on a grid
of points every ``step`` px (inside the image and the mask). Each point's displacement
``[u, v]`` = where the subset's centre is in the frame minus where it is in the reference (px;
x = column, y = row, origin at the centre of pixel (0, 0), as everywhere in ebsdxc).

1. **Start**. A whole-image cross-correlation of the two images binned to at most
   ``coarse_size`` px gives the rigid part, so shifts of hundreds of pixels are found. Then,
   with ``guess = "propagate"`` (the default, on a grid of points), reliability-guided
   propagation: seeds (every ``seed_spacing`` grid points, and one in every region of points
   the others do not reach, e.g. islands of a mask) get their integer shift from a zero-mean
   normalised cross-correlation over ``+-search`` px about the rigid shift (FFT, batched) and
   are refined; every other point starts from the converged warp of its computed neighbour
   with the highest ZNCC, carried over to its own centre exactly (the neighbour's displacement
   *and* gradient, so large gradients and rotations are followed where a per-subset search
   with a small window fails). Pan's RG-DIC (2009) takes one point at a time off a priority
   queue ordered by ZNCC; here all points next to computed ones go in one batch (a *wave*),
   each from its best computed neighbour, which keeps its rule -- start from the most
   reliable neighbour there is -- while the GPU refines thousands of subsets at once. A point
   that fails is tried again from each other neighbour as it gets computed, and what is left
   gets seeds of its own; the order of waves and the choice of neighbour do not depend on
   batch sizes. ``guess = "search"``: every point's own integer search (no grid needed).
2. **Refinement**: IC-GN of every subset with the affine (6 parameters) or quadratic (12) shape
   function (:mod:`ebsdxc.icgn`: ZNSSD criterion, cubic B-spline interpolation, batched on the
   GPU with the same code on the CPU).

Status per point (codes of :mod:`ebsdxc.status`): ``OK``; ``CONSTANT_TILE`` (no contrast in
the reference subset); ``OUTSIDE_MASK`` (the subset leaves the image or the mask);
``PEAK_ON_BORDER`` (the integer search found its best at the edge of its window: the true
shift may lie beyond); ``REFINE_FAILED`` (IC-GN did not converge, or converged to a ZNCC
below ``min_zncc``). Anything but ``OK`` is NaN.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from . import icgn, subset_icgn
from . import status as st
from .backend import array_module, to_host

__all__ = ["DicConfig", "SHAPE_FUNCTIONS", "GUESSES", "STARTS", "polygon_mask", "subset_grid", "coarse_shift",
           "binning_factor", "binned_shift", "integer_start", "match_subsets", "SubsetMatch"]

SHAPE_FUNCTIONS = ("affine", "quadratic")
GUESSES = ("propagate", "search")


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
        Least ZNCC of a subset at its result (and, for a point started by the integer search,
        halfway from it to 1: searched starts can lock onto false matches).
    strain_window : int
        Points (odd, >= 3) on a side of the strain fit's window (:mod:`ebsdxc.dic_strain`).
    guess : {"propagate", "search"}
        Where IC-GN starts: ``propagate`` (reliability-guided, from seeds through neighbours)
        or ``search`` (every point's own integer search).
    seed_spacing : int
        Grid points between the seeds of the propagation (and a seed for every region of
        points the others do not reach).
    mask : str or None
        Image file (TIFF, PNG) the size of the reference: nonzero = measure. A point is
        measured only where its whole subset lies in the mask (and in ``polygon``).
    polygon : list of [x, y] or None
        Vertices (px, ebsdxc's convention: x = column, y = row, pixel centres at integers) of
        the region to measure.
    incremental : bool
        Each frame against the one before (frame 0 against the reference), the increments
        accumulated afterwards (:mod:`ebsdxc.run.dic`): for deformations too large for one
        step from the reference.
    distortion : str or None
        SEM distortion model (JSON, ``ebsdxc distortion``; :mod:`ebsdxc.sem_distortion`)
        removed from the displacement fields.
    frame_times : list of float or None
        Start time (s) of each frame's scan, for a model with drift; ``reference_time`` the
        reference image's.
    tile : int
        Images with a side longer than this (px) are matched window by window, read lazily
        (:mod:`ebsdxc.dic_tiles`): a tile of points with its subsets and ``tile_margin`` about
        them at a time, so neither memory holds a whole frame. 0: always whole images.
    tile_margin : int
        Px a tile's window reaches beyond its subsets (and their rigid shift): what a subset
        at a tile's edge may move beyond the rigid shift and still be measured.
    """

    enabled: bool = False
    subset: int = 31
    step: int = 8
    search: int = 16
    coarse_size: int = 512
    shape_function: str = "affine"
    max_iterations: int = 30
    tolerance_px: float = 1e-3
    min_zncc: float = 0.8
    strain_window: int = 5
    guess: str = "propagate"
    seed_spacing: int = 16
    mask: str | None = None
    polygon: tuple | None = None
    incremental: bool = False
    distortion: str | None = None
    frame_times: tuple | None = None
    reference_time: float = 0.0
    tile: int = 8192
    tile_margin: int = 128

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
        if not isinstance(self.incremental, bool):
            raise ValueError(f"dic.incremental must be true or false, got {self.incremental!r}")
        if self.distortion is not None and not (isinstance(self.distortion, (str, os.PathLike))
                                                and os.fspath(self.distortion)):
            raise ValueError(f"dic.distortion must be a distortion-model file (JSON), got {self.distortion!r}")
        if self.frame_times is not None:
            try:
                ft = np.asarray(self.frame_times, dtype=np.float64).reshape(-1)
            except (TypeError, ValueError):
                ft = np.array([np.nan])
            if ft.size == 0 or not np.isfinite(ft).all():
                raise ValueError(f"dic.frame_times must be numbers (s), got {self.frame_times!r}")
            object.__setattr__(self, "frame_times", tuple(float(v) for v in ft))
        if not (isinstance(self.reference_time, (int, float)) and np.isfinite(self.reference_time)):
            raise ValueError(f"dic.reference_time must be a number (s), got {self.reference_time!r}")
        if not (_whole(self.tile) and (self.tile == 0 or self.tile >= 256)):
            raise ValueError(f"dic.tile must be 0 (whole images) or a whole number >= 256 (px), got {self.tile!r}")
        if not (_whole(self.tile_margin) and self.tile_margin >= 0):
            raise ValueError(f"dic.tile_margin must be a whole number >= 0 (px), got {self.tile_margin!r}")
        if self.guess not in GUESSES:
            raise ValueError(f"dic.guess must be one of {', '.join(GUESSES)}, got {self.guess!r}")
        if not (_whole(self.seed_spacing) and self.seed_spacing >= 1):
            raise ValueError(f"dic.seed_spacing must be a whole number >= 1, got {self.seed_spacing!r}")
        if self.mask is not None and not (isinstance(self.mask, (str, os.PathLike)) and os.fspath(self.mask)):
            raise ValueError(f"dic.mask must be an image file, got {self.mask!r}")
        if self.polygon is not None:
            try:
                poly = np.asarray(self.polygon, dtype=np.float64)
            except (TypeError, ValueError):
                poly = np.zeros(0)
            if poly.ndim != 2 or poly.shape[1] != 2 or len(poly) < 3 or not np.isfinite(poly).all():
                raise ValueError(f"dic.polygon must be at least 3 vertices [x, y] px, got {self.polygon!r}")
            object.__setattr__(self, "polygon", tuple(tuple(float(v) for v in xy) for xy in poly))


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


def polygon_mask(shape, polygon):
    """(H, W) bool: the pixels whose centres lie inside ``polygon`` (vertices [x, y] px)."""
    from matplotlib.path import Path

    h, w = (int(v) for v in shape)
    yy, xx = np.mgrid[0:h, 0:w]
    inside = Path(np.asarray(polygon, dtype=np.float64)).contains_points(np.stack([xx.ravel(), yy.ravel()], -1),
                                                                          radius=1e-9)
    return inside.reshape(h, w)


def _bin_to(image, size, xp):
    h, w = image.shape
    k = binning_factor(image.shape, size)
    hk, wk = h // k, w // k
    return image[:hk * k, :wk * k].reshape(hk, k, wk, k).mean(axis=(1, 3)), k


def coarse_shift(reference, image, *, coarse_size: int = 512):
    """The rigid shift ``[dx, dy]`` px (float, a whole multiple of the binning) of ``image``
    against ``reference``: the peak of the whole-image normalised cross-correlation of both
    binned to at most ``coarse_size`` px, searched up to half the image."""
    xp = array_module(image)
    a, k = _bin_to(xp.asarray(reference, dtype=xp.float64), coarse_size, xp)
    b, _ = _bin_to(xp.asarray(image, dtype=xp.float64), coarse_size, xp)
    return binned_shift(a, b, k)


def binning_factor(shape, coarse_size: int) -> int:
    """The binning :func:`coarse_shift` applies to images of ``shape``."""
    return max(1, int(np.ceil(max(int(v) for v in shape) / coarse_size)))


def binned_shift(a, b, k):
    """:func:`coarse_shift` of images already binned ``k`` times (``a`` the reference's, ``b``
    the frame's, float64, the same shape): ``[dx, dy]`` px of the full images."""
    xp = array_module(b)
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
    xp = array_module(image)
    ref = xp.asarray(reference, dtype=xp.float32)
    img = xp.asarray(image, dtype=xp.float32)
    h, w = img.shape
    p = np.rint(np.asarray(points, dtype=np.float64)).astype(np.int64).reshape(-1, 2)
    n_points = len(p)
    if xp is not np and n_points:
        # batches padded to a power of two (repeating the first point): a new batch size is a
        # new cuFFT plan, and propagation searches many small, different sets of seeds
        p = np.concatenate([p, np.repeat(p[:1], (1 << max(6, (n_points - 1).bit_length())) - n_points, 0)])
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
    return d.astype(np.float64)[:n_points], edge[:n_points]


@dataclass
class SubsetMatch:
    """Per point: ``displacement`` (N, 2) float64 [u, v] px (NaN where not ok), ``zncc`` (N,),
    ``iterations`` (N,) int16, ``status`` (N,) uint8; host arrays. ``started`` (N,) uint8: how
    the point's IC-GN was started (:data:`STARTS`)."""

    displacement: np.ndarray
    zncc: np.ndarray
    iterations: np.ndarray
    status: np.ndarray
    started: np.ndarray | None = None


#: How a point's IC-GN was started: not at all, by the integer search (a seed, or a point the
#: propagation did not reach), from a computed neighbour's warp.
STARTS = {0: "not started", 1: "integer search", 2: "a neighbour's warp (reliability-guided)"}


class _Matcher:
    """One reference and one frame: IC-GN of any set of subsets from given starting warps.

    Its per-point state (warps, ZNCC, status...) lives where the images are, and so do the
    indices it takes and returns: on a GPU the propagation's waves then never wait for copies
    back to the host, only for the sizes of the sets they make."""

    def __init__(self, ref, img, pts, config, shift, coef, ref_coef, batch):
        xp = array_module(img)
        self.xp, self.ref, self.img, self.c = xp, ref, img, config
        self.pts_host = pts
        self.pts = xp.asarray(pts)
        self.shift, self.coef, self.ref_coef, self.batch = shift, coef, ref_coef, batch
        self.half = config.subset // 2
        self.scale = float(self.half)
        yy, xx = np.mgrid[-self.half:self.half + 1, -self.half:self.half + 1]
        self.offsets = xp.asarray(np.stack([xx.ravel(), yy.ravel()], -1).astype(np.int32))
        N = len(pts)
        k = 6 if config.shape_function == "quadratic" else 3
        self.warp = xp.full((N, k, k), np.nan)
        self.zncc = xp.full(N, np.nan, np.float32)
        self.iterations = xp.full(N, -1, np.int16)
        self.status = xp.full(N, st.OUTSIDE_MASK, np.uint8)
        self.started = xp.zeros(N, np.uint8)
        # A searched start can lock onto another part of the texture where the subset has
        # moved off or decorrelated (a large rotation), and IC-GN then settles in a false
        # minimum of ZNCC 0.6-0.7; propagated starts begin next to the truth. So a searched
        # point must match better, halfway from min_zncc to 1.
        self.search_min_zncc = 0.5 * (1.0 + config.min_zncc)

    def _store(self, sel, warp, zncc, iterations, rs, min_zncc, constant=None):
        """Keep the IC-GN results of points ``sel``; returns those that came out ok."""
        xp = self.xp
        good = (rs == icgn.ICGN_CONVERGED) & (zncc >= (self.c.min_zncc if min_zncc is None else min_zncc))
        self.warp[sel] = xp.where(good[:, None, None], warp, np.nan)
        self.zncc[sel] = zncc
        self.iterations[sel] = iterations
        # the subset moved (partly) off the frame: nothing there to measure it with
        code = xp.where(rs == icgn.ICGN_LEFT_IMAGE, st.OUTSIDE_MASK, st.REFINE_FAILED)
        if constant is not None:
            code = xp.where(constant, st.CONSTANT_TILE, code)
        self.status[sel] = xp.where(good, st.OK, code).astype(np.uint8)
        return sel[good]

    def refine(self, idx, H0, how, min_zncc=None):
        """IC-GN of points ``idx`` from warps ``H0`` (normalised about each point); returns the
        points that came out ok (converged, ZNCC at least ``min_zncc``, default the config's)."""
        xp, c = self.xp, self.c
        fused = xp is not np and c.shape_function == "affine" and c.subset // 2 <= subset_icgn.MAX_HALF
        good_all = []
        for s in range(0, len(idx), self.batch):
            sel, H = idx[s:s + self.batch], H0[s:s + self.batch]
            self.started[sel] = how
            if fused:
                # the whole IC-GN of a subset in one block, template included
                warp, z, it, rs = subset_icgn.register_subsets(
                    self.ref, self.ref_coef[0], self.coef[0], self.pts[sel], subset=c.subset, initial=H,
                    max_iterations=c.max_iterations, tolerance=c.tolerance_px)
                good_all.append(self._store(sel, warp, z, it, rs, min_zncc, rs == subset_icgn.NO_CONTRAST))
                continue
            p = self.pts[sel]
            # the subsets' pixels made where the images are: (points x subset^2 x 2) int32 indices
            # are hundreds of MB a batch, not to be sent over the bus
            pix = xp.rint(p).astype(np.int32)[:, None, :] + self.offsets[None]
            patch = self.ref[pix[..., 1], pix[..., 0]]
            contrast = (patch.max(axis=1) - patch.min(axis=1)) > 0
            self.status[sel[~contrast]] = st.CONSTANT_TILE
            k_idx = sel[contrast]
            n = int(k_idx.size)
            if n == 0:
                continue
            tpl = icgn.make_templates(self.ref[None], pixels=pix[contrast], image_index=xp.zeros(n, dtype=np.int64),
                                      origin=p[contrast], scale=self.scale, shape_function=c.shape_function,
                                      coefficients=self.ref_coef)
            res = icgn.register(tpl, self.coef, template_index=xp.arange(n), image_index=xp.zeros(n, dtype=np.int64),
                                initial=xp.asarray(H[contrast]), max_iterations=c.max_iterations,
                                tolerance=c.tolerance_px, max_outside=0.0)
            good_all.append(self._store(k_idx, xp.asarray(res.warp), xp.asarray(res.zncc),
                                        xp.asarray(res.iterations), xp.asarray(res.status), min_zncc))
        return xp.concatenate(good_all) if good_all else xp.zeros(0, np.int64)

    def search(self, idx):
        """Integer search (+- search px about the rigid shift), then IC-GN; returns the ok points."""
        xp = self.xp
        hidx = to_host(idx)
        if hidx.size == 0:
            return xp.zeros(0, np.int64)
        start, edge = integer_start(self.ref, self.img, self.pts_host[hidx], subset=self.c.subset,
                                    search=self.c.search, shift=self.shift)
        H0 = icgn.translation_warp(xp.asarray(start / self.scale), self.c.shape_function)
        idx = xp.asarray(hidx)
        good = self.refine(idx, H0, 1, min_zncc=self.search_min_zncc)
        # the integer search hit its window's edge and IC-GN did not find the subset either
        miss = idx[xp.asarray(edge) & (self.status[idx] == st.REFINE_FAILED)]
        self.status[miss] = st.PEAK_ON_BORDER
        return good

    def displacement(self):
        """(N, 2) float64 host array, NaN where not ok."""
        xp = self.xp
        uv = icgn.warp_points(self.warp, xp.zeros((1, 2)))[:, 0] * self.scale
        uv[self.status != st.OK] = np.nan
        return to_host(uv)


def _transport(W, delta, shape_function):
    """Warps ``W`` (normalised about a neighbour) re-expressed about points ``delta`` (normalised
    units) from it: ``W'(u) = W(delta + u) - delta``, exact for every shape function."""
    T = icgn.translation_warp(delta, shape_function)
    Tinv = icgn.translation_warp(-delta, shape_function)
    M = Tinv @ W @ T
    if shape_function == "quadratic":
        return icgn.parameters_to_warp(icgn.warp_parameters(M), "quadratic")
    return M / M[:, 2:3, 2:3]


_NEIGHBOURS = ((-1, 0), (1, 0), (0, -1), (0, 1))


def _seed_points(todo, spacing):
    """Seeds of a (ny, nx) bool grid of points to measure: every ``spacing`` points in both
    directions (starting half a spacing in), plus, for every connected region of ``todo``
    that holds none of those, the point of it nearest its centroid."""
    from scipy import ndimage

    ny, nx = todo.shape
    rows = np.arange(min(spacing // 2, (ny - 1) // 2), ny, spacing)
    cols = np.arange(min(spacing // 2, (nx - 1) // 2), nx, spacing)
    seed = np.zeros_like(todo)
    seed[np.ix_(rows, cols)] = True
    seed &= todo
    labels, n = ndimage.label(todo)
    have = set(np.unique(labels[seed]).tolist())
    for lab in range(1, n + 1):
        if lab in have:
            continue
        rr, cc = np.nonzero(labels == lab)
        k = np.argmin((rr - rr.mean()) ** 2 + (cc - cc.mean()) ** 2)
        seed[rr[k], cc[k]] = True
    return np.flatnonzero(seed.reshape(-1))


def _propagate(m: _Matcher, ok, grid_shape, spacing):
    """Reliability-guided propagation over the point grid, in waves (module docstring).

    The bookkeeping is array operations where the matcher's state is (a GPU's waves wait only
    for the sizes of the sets they make); the seeds' regions are labelled on the host."""
    xp = m.xp
    ny, nx = grid_shape
    N = ny * nx
    done = xp.zeros(N, bool)
    tried = xp.zeros((N, 4), bool)
    seeded = np.zeros(N, bool)
    rr, cc = np.divmod(np.arange(N), nx)
    # neighbours of every point; N (one past the grid) where there is none
    nb = np.full((N, 4), N, np.int64)
    for d, (dr, dc) in enumerate(_NEIGHBOURS):
        r2, c2 = rr + dr, cc + dc
        inside = (r2 >= 0) & (r2 < ny) & (c2 >= 0) & (c2 < nx)
        nb[inside, d] = r2[inside] * nx + c2[inside]
    nb = xp.asarray(nb)
    # one sentinel point past the grid: never done, ZNCC -inf, so "no neighbour" needs no branch
    zncc = xp.full(N + 1, -np.inf, np.float32)
    todo = xp.array(ok, dtype=bool)  # a copy: the caller keeps its mask
    while True:
        seeds = _seed_points(to_host(todo & ~done).reshape(ny, nx) & ~seeded.reshape(ny, nx), spacing)
        if seeds.size == 0:
            if spacing == 1:
                break
            spacing = 1
            continue
        seeded[seeds] = True
        before = int(done.sum())
        newly = m.search(seeds)
        done[newly] = True
        failed = xp.zeros(0, np.int64)
        while True:
            # every point still to do with a computed neighbour it has not started from yet: a
            # neighbour of a point computed in the last wave, or a point that failed in it (the
            # rest of the grid cannot have one), so the bookkeeping is per wave, not per grid
            mark = xp.zeros(N + 1, bool)  # a mask, not unique(): hashing was a third of the time
            mark[nb[newly].reshape(-1)] = True
            mark[failed] = True
            cand = xp.flatnonzero(mark[:N] & todo & ~done)
            if cand.size == 0:
                break
            zncc[:N] = xp.where(done, m.zncc, -np.inf)
            z = xp.where(tried[cand], -np.inf, zncc[nb[cand]])
            best = xp.argmax(z, axis=1)
            has = xp.isfinite(z[xp.arange(cand.size), best])
            front, best = cand[has], best[has]
            if front.size == 0:
                break
            src = nb[front, best]
            tried[front, best] = True
            delta = (m.pts[front] - m.pts[src]) / m.scale
            H0 = _transport(m.warp[src], delta, m.c.shape_function)
            newly = m.refine(front, H0, 2)
            done[newly] = True
            failed = front[~done[front]]
        # a subset that left the frame from a neighbour's start lies off it: no seed brings it back
        todo &= ~done & ~((m.started > 0) & (m.status == st.OUTSIDE_MASK))
        # What is left (cut off from every computed point, or failed from all its neighbours)
        # gets seeds of its own: one per connected region while that measures something, then,
        # after a round that measures nothing, every point left is searched at once (a strip
        # along the frame's edge is not seeded point by point, round by round).
        if int(done.sum()) == before:
            if spacing == 1:
                break
            spacing = 1
    return to_host(done)


def match_subsets(reference, image, points, *, config: DicConfig, valid=None, shift=None,
                  coefficients=None, batch: int = 16384, grid_shape=None) -> SubsetMatch:
    """Displacements of the subsets centred on ``points`` from ``reference`` to ``image``
    (both (H, W), NumPy or CuPy: the work runs there).

    ``points``: (N, 2), or (ny, nx, 2) for a grid. ``valid`` (N,) bool: points to measure
    (others are ``OUTSIDE_MASK``). ``shift``: the rigid start (default :func:`coarse_shift`).
    ``coefficients``: the frame's B-spline coefficients when already made
    (:func:`ebsdxc.icgn.spline_coefficients`). ``grid_shape`` (ny, nx): the points are a grid,
    row-major; with ``config.guess = "propagate"`` (and a grid) the starts propagate from
    seeds to neighbours, else every point is searched.
    """
    xp = array_module(image)
    c = config
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim == 3 and grid_shape is None:
        grid_shape = pts.shape[:2]
    pts = pts.reshape(-1, 2)
    N = len(pts)
    if grid_shape is not None and int(np.prod(grid_shape)) != N:
        raise ValueError(f"grid_shape {tuple(grid_shape)} does not hold the {N} points")
    ok = np.ones(N, bool) if valid is None else np.asarray(valid, dtype=bool).reshape(-1).copy()
    ref = xp.asarray(reference, dtype=xp.float32)
    img = xp.asarray(image, dtype=xp.float32)
    if shift is None:
        shift = coarse_shift(ref, img, coarse_size=c.coarse_size)
    coef = icgn.spline_coefficients(img[None]) if coefficients is None else coefficients
    ref_coef = icgn.spline_coefficients(ref[None])  # once: every batch of subsets cuts its templates from it
    m = _Matcher(ref, img, pts, c, shift, coef, ref_coef, batch)
    half = c.subset // 2
    h, w = img.shape
    # a subset the rigid shift puts (partly) off the frame has nothing there to be measured with
    moved = pts + np.asarray(shift, dtype=np.float64)
    on_frame = (moved - half >= 0).all(axis=1) & (moved[:, 0] + half <= w - 1) & (moved[:, 1] + half <= h - 1)
    if c.guess == "propagate" and grid_shape is not None:
        _propagate(m, ok, tuple(int(v) for v in grid_shape), c.seed_spacing)
    else:
        m.search(np.flatnonzero(ok & on_frame))
    m.status[xp.asarray(~ok)] = st.OUTSIDE_MASK
    disp = m.displacement()
    return SubsetMatch(disp, to_host(m.zncc), to_host(m.iterations), to_host(m.status), to_host(m.started))
