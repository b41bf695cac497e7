"""Whole-pattern refinement of subregion matches by IC-GN (``--refine icgn``).

Subregion cross-correlation measures each ROI's shift to about 0.01 px; the projection of a
deformed crystal onto the flat detector is exactly a homography (8 parameters, the eight
deviatoric components of the deformation gradient, the pattern centre shift included), so
the whole pattern can be registered at once (Ernould et al. 2020, Vermeij & Hoefnagels 2018).
:class:`WholePatternRefiner` starts from the homography that fits a point's ROI shifts, refines
it by IC-GN (:mod:`ebsdxc.icgn`) over the whole pattern (minus a margin, inside the detector
mask), and reports each ROI's displacement as the refined homography moves the ROI's centre.
Those displacements go to the strain fit unchanged: a homography's displacements are fitted
exactly by the deformation gradient it came from, whatever the rotation, so no remapping
pass is needed.

Large rotations: where the ROI matches give no usable start (shifts beyond the search window,
as a 10-degree rotation makes them), or IC-GN from that start does not converge, the point is
registered again coarse to fine: a whole-pattern cross-correlation of 4x binned patterns
gives a translation, IC-GN refines the homography on 4x and 2x binned patterns (where the
same error is a quarter and a half as many pixels) and finally at full resolution. The
normalised coordinates are the same at every level, so one homography carries through.

Per point it records the homography, the iterations, the IC-GN status and the zero-mean
normalised correlation (ZNCC) of the whole pattern at the result, which also becomes every
ROI's peak height. A point whose IC-GN does not converge gets status ``REFINE_FAILED`` and
NaN in every ROI: it is not silently left at the cross-correlation result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import icgn
from . import status as st
from .backend import array_module

__all__ = ["REFINE_METHODS", "RefineConfig", "WholePatternRefiner", "RefineRecord", "POINT_DATASETS"]

REFINE_METHODS = ("none", "icgn")
REFINE_REGIONS = ("pattern", "rois")


def _real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)


@dataclass(frozen=True)
class RefineConfig:
    """Whole-pattern refinement (a recipe's ``[refine]`` table).

    Attributes
    ----------
    method : {"none", "icgn"}
        ``"icgn"``: refine every point's ROI shifts by whole-pattern IC-GN.
    max_iterations : int
        IC-GN iterations per point before it is called not converged.
    tolerance_px : float
        Converged when an update moves no corner of the registered region by more than this.
    margin : float
        Fraction of the pattern's height and width left out at each edge: the region
        registered is the pattern minus this margin (and minus the detector mask).
    max_outside : float
        Largest fraction of the region allowed to move off the pattern; the overlap is
        registered exactly.
    min_zncc : float
        A converged point whose whole-pattern ZNCC is lower is flagged ``REFINE_FAILED``.
    region : {"pattern", "rois"}
        ``"pattern"``: the pattern minus the margin; ``"rois"``: only the pixels the ROI layout
        covers (ROIs placed to avoid a detector flaw keep it out of the refinement too).
    """

    method: str = "none"
    max_iterations: int = 50
    tolerance_px: float = 1e-4
    margin: float = 0.08
    max_outside: float = 0.25
    min_zncc: float = 0.2
    region: str = "pattern"

    def __post_init__(self):
        if self.method not in REFINE_METHODS:
            raise ValueError(f"refine.method must be one of {', '.join(REFINE_METHODS)}, got {self.method!r}")
        if not (isinstance(self.max_iterations, int) and not isinstance(self.max_iterations, bool)
                and 1 <= self.max_iterations <= 1000):
            raise ValueError(f"refine.max_iterations must be a whole number in 1..1000, got {self.max_iterations!r}")
        if not (_real(self.tolerance_px) and 0 < self.tolerance_px <= 1):
            raise ValueError(f"refine.tolerance_px must be in (0, 1] px, got {self.tolerance_px!r}")
        if not (_real(self.margin) and 0 <= self.margin < 0.45):
            raise ValueError(f"refine.margin must be a fraction in [0, 0.45), got {self.margin!r}")
        if not (_real(self.max_outside) and 0 <= self.max_outside < 1):
            raise ValueError(f"refine.max_outside must be a fraction in [0, 1), got {self.max_outside!r}")
        if not (_real(self.min_zncc) and -1 <= self.min_zncc < 1):
            raise ValueError(f"refine.min_zncc must be in [-1, 1), got {self.min_zncc!r}")
        if self.region not in REFINE_REGIONS:
            raise ValueError(f"refine.region must be one of {', '.join(REFINE_REGIONS)}, got {self.region!r}")

    @property
    def enabled(self) -> bool:
        return self.method != "none"


#: Per-point datasets a refined run adds to the results file: name -> (trailing shape, dtype,
#: fill value, meaning).
POINT_DATASETS = {
    "icgn/homography": ((3, 3), np.float64, np.nan,
                        "H mapping reference pixel (x, y) to pattern pixel: with u = ((x, y) - origin) / scale, "
                        "the pattern shows at origin + scale (H u)[:2] / (H u)[2] what the reference shows at (x, y); "
                        "origin and scale in the group's attributes; NaN where IC-GN failed"),
    "icgn/iterations": ((), np.int16, -1, "IC-GN iterations (-1: not refined)"),
    "icgn/status": ((), np.uint8, 255, "IC-GN status code (codes in the attribute 'codes'; 255: not refined)"),
    "icgn/zncc": ((), np.float32, np.nan, "zero-mean normalised correlation of the whole registered region"),
    "icgn/outside": ((), np.float32, np.nan, "fraction of the registered region that moved off the pattern"),
}


@dataclass
class RefineRecord:
    """Per-point IC-GN record of a batch: arrays (B, ...) named as :data:`POINT_DATASETS`."""

    arrays: dict


class WholePatternRefiner:
    """Refine a batch's ROI shifts by whole-pattern IC-GN against K resident references.

    Parameters
    ----------
    reference_images : (K, H, W) array
        The preprocessed references (NumPy or CuPy; the refinement runs there).
    centres : (n, 2) array
        ROI centres ``[x, y]`` px.
    config : RefineConfig
    roi_size : (int, int), optional
        ``(w, h)`` of the ROIs, for ``config.region = "rois"``.
    mask : (H, W) bool array, optional
        The detector mask: pixels outside it are not registered.
    min_peak_height : float
        ROI matches below this peak height are not used for the starting homography.
    """

    def __init__(self, reference_images, centres, config: RefineConfig, *, mask=None, min_peak_height=0.3,
                 roi_size=None):
        xp = array_module(reference_images)
        self.xp = xp
        self.config = config
        refs = xp.asarray(reference_images, dtype=xp.float32)
        K, h, w = refs.shape
        self.shape = (h, w)
        my, mx = int(round(config.margin * h)), int(round(config.margin * w))
        region = np.zeros((h, w), dtype=bool)
        region[my:h - my, mx:w - mx] = True
        if mask is not None:
            region &= np.asarray(mask.get() if hasattr(mask, "get") else mask, dtype=bool)
        if config.region == "rois":
            if roi_size is None:
                raise ValueError("refine.region rois needs the ROI size")
            covered = np.zeros((h, w), dtype=bool)
            rw, rh = (int(v) for v in roi_size)
            for cx, cy in np.asarray(centres, dtype=np.float64):
                x0, y0 = int(round(cx - (rw - 1) / 2)), int(round(cy - (rh - 1) / 2))
                covered[max(y0, 0):max(y0 + rh, 0), max(x0, 0):max(x0 + rw, 0)] = True
            region &= covered
        ys, xs = np.nonzero(region)
        if len(xs) < 64:
            raise ValueError(f"refine.margin leaves {len(xs)} pixels of the {h}x{w} pattern to register; "
                             "lower refine.margin or widen the mask")
        #: Normalisation of the homography: the pattern's centre and half its larger side.
        self.origin = np.array([(w - 1) / 2.0, (h - 1) / 2.0])
        self.scale = max(h, w) / 2.0
        self._pixels = xp.asarray(np.stack([xs, ys], -1))
        self.templates = icgn.make_templates(refs, pixels=self._pixels, origin=self.origin, scale=self.scale,
                                             shape_function="homography")
        self.centres_uv = xp.asarray((np.asarray(centres, dtype=np.float64) - self.origin) / self.scale)
        self.min_peak_height = float(min_peak_height)
        #: Coarse levels for points without a usable start: (factor, templates), coarsest first.
        self.levels = []
        for k in (4, 2):
            hk, wk = h // k, w // k
            if min(hk, wk) < 24:
                continue
            sub = _bin(refs, k, xp)
            rk = region[:hk * k, :wk * k].reshape(hk, k, wk, k).all(axis=(1, 3))
            yk, xk = np.nonzero(rk)
            if len(xk) < 64:
                continue
            self.levels.append((k, icgn.make_templates(sub, pixels=xp.asarray(np.stack([xk, yk], -1)),
                                                       origin=(self.origin - (k - 1) / 2.0) / k, scale=self.scale / k,
                                                       shape_function="homography")))
        self._coarse_refs = None
        if self.levels:
            k = self.levels[0][0]
            self._coarse_refs = _windowed(_bin(refs, k, xp), xp)

    def to_dict(self) -> dict:
        c = self.config
        return {"method": c.method, "shape_function": "homography", "interpolation": "cubic B-spline",
                "criterion": "ZNSSD", "max_iterations": c.max_iterations, "tolerance_px": c.tolerance_px,
                "margin": c.margin, "max_outside": c.max_outside, "min_zncc": c.min_zncc, "region": c.region,
                "origin": self.origin.tolist(), "scale": self.scale, "pixels": self.templates.n_pixels}

    def refine(self, patterns, displacement, peak_height, status, index=None):
        """Refine one batch.

        Parameters
        ----------
        patterns : (B, H, W) array
            Preprocessed patterns, on the refiner's array module.
        displacement, peak_height, status : (B, n, 2), (B, n), (B, n)
            The batch's ROI matches.
        index : (B,) int array, optional
            Each pattern's reference (default 0).

        Returns
        -------
        displacement, peak_height, status, RefineRecord
        """
        B = patterns.shape[0]
        tidx = self.xp.zeros(B, dtype=np.int64) if index is None else self.xp.asarray(index, dtype=np.int64)
        return self._refine(self.templates, tidx, patterns, displacement, peak_height, status, coarse=True)

    def refine_pairs(self, references, patterns, displacement, peak_height, status):
        """Refine pattern b against preprocessed ``references[b]`` (B, H, W), e.g. references
        simulated per point; templates are made for the batch. Without the coarse-to-fine
        retry: such references are made close to their patterns."""
        xp = self.xp
        templates = icgn.make_templates(xp.asarray(references, dtype=xp.float32), pixels=self._pixels,
                                        origin=self.origin, scale=self.scale, shape_function="homography")
        tidx = xp.arange(len(references), dtype=np.int64)
        return self._refine(templates, tidx, patterns, displacement, peak_height, status, coarse=False)

    def _refine(self, templates, tidx, patterns, displacement, peak_height, status, *, coarse):
        xp = self.xp
        c = self.config
        d = xp.asarray(displacement, dtype=xp.float64)
        ok = (xp.asarray(status) == st.OK) & (xp.asarray(peak_height) >= self.min_peak_height)
        moved = self.centres_uv[None] + d / self.scale
        H0, _ = icgn.fit_warp(self.centres_uv, moved, ok, shape_function="homography", floor=0.5 / self.scale)
        coef = icgn.spline_coefficients(xp.asarray(patterns, dtype=xp.float32))
        res = icgn.register(templates, coef, template_index=tidx, initial=H0,
                            max_iterations=c.max_iterations, tolerance=c.tolerance_px, max_outside=c.max_outside)
        good = (res.status == icgn.ICGN_CONVERGED) & (res.zncc >= c.min_zncc)
        has_data = ~(xp.asarray(status) == st.MISSING_PATTERN).all(axis=1) & ~(
            xp.asarray(status) == st.NO_REFERENCE).all(axis=1)
        retry = xp.nonzero(~good & has_data)[0]
        if coarse and retry.size and self.levels:
            res = self._coarse_to_fine(xp.asarray(patterns, dtype=xp.float32)[retry], coef[retry], tidx[retry],
                                       res, retry)
            good = (res.status == icgn.ICGN_CONVERGED) & (res.zncc >= c.min_zncc)
        moved = icgn.warp_points(xp.where(good[:, None, None], res.warp, xp.eye(3)), self.centres_uv)
        new_disp = ((moved - self.centres_uv[None]) * self.scale).astype(xp.float32)
        status = xp.asarray(status)
        # No pattern, no reference, or outside the detector mask: those flags stand.
        keep = (status == st.MISSING_PATTERN) | (status == st.NO_REFERENCE) | (status == st.OUTSIDE_MASK)
        new_status = xp.where(keep, status, xp.where(good[:, None], np.uint8(st.OK), np.uint8(st.REFINE_FAILED)))
        new_status = new_status.astype(xp.uint8)
        valid = new_status == st.OK
        nan = xp.float32(np.nan)
        new_disp = xp.where(valid[..., None], new_disp, nan)
        height = xp.where(valid, res.zncc[:, None], nan).astype(xp.float32)
        empty = keep.all(axis=1)  # nothing was there to refine
        record = {
            "icgn/homography": xp.where(empty[:, None, None], xp.nan, res.warp),
            "icgn/iterations": xp.where(empty, -1, res.iterations).astype(xp.int16),
            "icgn/status": xp.where(empty, 255, res.status).astype(xp.uint8),
            "icgn/zncc": xp.where(empty, nan, res.zncc).astype(xp.float32),
            "icgn/outside": xp.where(empty, nan, res.outside).astype(xp.float32),
        }
        return new_disp, height, new_status, RefineRecord(record)

    def _coarse_to_fine(self, patterns, coef, tidx, res, where):
        """Register ``patterns`` again from a whole-pattern translation, coarse to fine; keep the
        results that converge (into ``res`` at ``where``)."""
        xp, c = self.xp, self.config
        k0 = self.levels[0][0]
        shift = _translation(self._coarse_refs[tidx], _windowed(_bin(patterns, k0, xp), xp), xp)
        H = icgn.translation_warp(shift * k0 / self.scale)
        for k, templates in self.levels:
            r = icgn.register(templates, icgn.spline_coefficients(_bin(patterns, k, xp)), template_index=tidx,
                              initial=H, max_iterations=c.max_iterations, tolerance=c.tolerance_px * k,
                              max_outside=c.max_outside)
            H = xp.where(xp.isfinite(r.warp).all(axis=(1, 2))[:, None, None], r.warp, H)
        r = icgn.register(self.templates, coef, template_index=tidx, initial=H, max_iterations=c.max_iterations,
                          tolerance=c.tolerance_px, max_outside=c.max_outside)
        better = (r.status == icgn.ICGN_CONVERGED) & ~((res.status[where] == icgn.ICGN_CONVERGED)
                                                       & (res.zncc[where] >= r.zncc))
        w = where[better]
        for name in ("warp", "iterations", "status", "zncc", "outside"):
            getattr(res, name)[w] = getattr(r, name)[better]
        return res


def _bin(images, k, xp):
    """Mean of k x k blocks of (B, H, W) images (the trailing rows and columns that do not fill a
    block are dropped): the pattern a detector of k times larger pixels records."""
    B, h, w = images.shape
    hk, wk = h // k, w // k
    return images[:, :hk * k, :wk * k].reshape(B, hk, k, wk, k).mean(axis=(2, 4), dtype=xp.float32)


def _windowed(images, xp):
    """Zero-mean, Hann-windowed, unit-norm (B, h, w) images, for the translation search."""
    _, h, w = images.shape
    win = xp.asarray(np.outer(np.hanning(h), np.hanning(w)), dtype=xp.float32)
    a = images - images.mean(axis=(1, 2), keepdims=True)
    a = a * win
    return a / xp.maximum(xp.sqrt((a * a).sum(axis=(1, 2), keepdims=True)), 1e-30)


def _translation(refs, patterns, xp):
    """Integer shifts (B, 2) [dx, dy] of each pattern against its reference, by FFT cross-correlation
    (linear, zero padded), searched within a third of the pattern size."""
    B, h, w = patterns.shape
    shape = (2 * h, 2 * w)
    cc = xp.fft.irfft2(xp.fft.rfft2(patterns, s=shape) * xp.conj(xp.fft.rfft2(refs, s=shape)), s=shape)
    dy = xp.fft.fftfreq(2 * h, 1.0 / (2 * h))
    dx = xp.fft.fftfreq(2 * w, 1.0 / (2 * w))
    inside = (xp.abs(dy)[:, None] <= h / 3) & (xp.abs(dx)[None, :] <= w / 3)
    cc = xp.where(inside[None], cc, -xp.inf)
    best = xp.argmax(cc.reshape(B, -1), axis=1)
    iy, ix = best // (2 * w), best % (2 * w)
    return xp.stack([dx[ix], dy[iy]], axis=-1).astype(xp.float64)
