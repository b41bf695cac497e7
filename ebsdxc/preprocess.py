"""Pattern and subregion preprocessing on the array backend (NumPy or CuPy).

Pattern level (:class:`PatternPreprocessor`), in this order:

1. conversion to float32 on the device;
2. binning (mean of ``f x f`` pixel blocks, :func:`bin_patterns`);
3. neighbour pattern averaging over the scan grid (:func:`average_neighbours`; a
   separate call on a block of whole scan rows, see
   :meth:`PatternPreprocessor.average_neighbours`);
4. static background (subtract or divide; given at the stored pattern size and binned
   like the patterns);
5. detector mask fill: pixels off a circular phosphor screen (:func:`circular_mask`) take
   the mean of the on-screen pixels, so the dark rim carries no contrast into the filters;
6. dynamic background (division by a Gaussian blur of the pattern itself);
7. band-pass: Gaussian, or with error-function edges (:func:`erf_bandpass_transfer`);
8. mask fill again (the filters spread screen content over the rim).

Subregion level: zero mean and a Hann window, with the energy of each prepared tile
kept for the normalised peak height.

Blurs and band-passes run in the Fourier domain on reflect-padded patterns: on the
GPU one FFT pair per pattern is cheaper than a wide spatial kernel, and the padding
stops the circular wrap from mixing opposite pattern edges. On the GPU the dynamic
background's blur, a low-pass whose operator along each axis is of low rank, is the same
operator applied as four matrix products (:mod:`ebsdxc.lowrank_blur`).

Conventions: pixel (row i, column j) has its centre at x = j, y = i (x = column).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

import numpy as np

from . import status as st
from .lowrank_blur import MAX_RANK, LowRankBlur, lowpass_factors

__all__ = ["PreprocessConfig", "PatternPreprocessor", "window_1d", "window_2d", "prepare_tiles",
           "erf_bandpass_transfer", "bin_patterns", "circular_mask", "rois_inside_mask",
           "average_neighbours", "neighbour_weights", "BANDPASS_KINDS", "AVERAGE_KERNELS", "MASKS"]

BANDPASS_KINDS = ("gaussian", "erf")
AVERAGE_KERNELS = ("gaussian", "box", "circular")
MASKS = (None, "circle")


def _is_whole(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _finite_number(v) -> bool:
    try:
        return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)) \
            and math.isfinite(v)
    except TypeError:
        return False


def _pair(name, v, *, allow_inf=False):
    try:
        t = tuple(v)
    except TypeError:
        raise ValueError(f"{name} must be two numbers, got {v!r}") from None
    ok = len(t) == 2 and all(
        isinstance(a, (int, float, np.integer, np.floating)) and not isinstance(a, (bool, np.bool_))
        and not math.isnan(a) and (allow_inf or math.isfinite(a)) for a in t)
    if not ok:
        raise ValueError(f"{name} must be two {'' if allow_inf else 'finite '}numbers, got {v!r}")
    return tuple(float(a) for a in t)


@dataclass(frozen=True)
class PreprocessConfig:
    """Pattern-level preprocessing options (a recipe's ``[preprocess]`` table).

    Errors name the parameters by their recipe path (``preprocess.bandpass_cutoffs``).

    Attributes
    ----------
    static_background : str or None
        Static background to remove: ``"mean"`` (the mean pattern of the scan), ``"file"``
        (the background the vendor stored in the scan file) or the path of an image.
        ``None``: none.
    static_operation : {"subtract", "divide"}
        How a static background (when one is given) is removed.
    dynamic_background_sigma : float or None
        Standard deviation (px) of the Gaussian blur the pattern is divided by;
        ``None`` switches dynamic background correction off.
    bandpass : (float, float) or None
        Gaussian band-pass (``bandpass_kind="gaussian"``): (low_sigma, high_sigma) in px,
        Gaussian smoothing of width ``low_sigma`` and removal of features broader than
        ``high_sigma``; either may be 0 (off).
    window : {"hann", "none"}
        Window applied to each zero-mean subregion.
    bandpass_kind : {"gaussian", "erf"}
        ``"gaussian"`` (default): the filter of ``bandpass``. ``"erf"``: a band-pass with
        error-function edges between ``bandpass_cutoffs``, see :func:`erf_bandpass_transfer`.
    bandpass_cutoffs : (float, float) or None
        erf band-pass only: (low, high) spatial frequencies in **cycles per pixel**
        (0 to 0.5 along an axis; a period of P px is 1/P cycles/px). Frequencies below
        ``low`` (features broader than 1/low px) and above ``high`` (finer than 1/high px)
        are removed; ``low = 0`` switches the high-pass part off, ``high = 0`` (or ``inf``)
        the low-pass part. Frequencies are those of the patterns after binning.
    bandpass_width : float
        erf band-pass only: edge width in cycles/px; the transfer function is 0.5 at a
        cutoff and 0.92 / 0.08 one width inside / outside the band.
    binning : int
        Average ``binning x binning`` pixel blocks of each pattern, first of all steps; the
        pattern sides must be multiples of it (see :func:`bin_patterns`). 1 = off.
    mask : {None, "circle"}
        Detector mask: ``"circle"`` marks the pixels of a round phosphor screen; pixels off
        it are filled with the mean of the on-screen pixels of each pattern.
    mask_centre : (float, float) or None
        Screen centre (x, y) in px of the patterns **as stored** (before ``binning``),
        pixel (0, 0) centred at (0, 0), x = column. Default: the pattern centre.
    mask_radius : float or None
        Screen radius in px of the patterns as stored. Default: half the smaller side.
    average_neighbours : int
        Neighbour pattern averaging over the scan grid: 0 = off, else the (odd) kernel side
        in scan points, e.g. 3 or 5. Run by the caller on blocks of whole scan rows through
        :meth:`PatternPreprocessor.average_neighbours`, never by ``__call__``.
    average_kernel : {"gaussian", "box", "circular"}
        Neighbour weights, see :func:`neighbour_weights`.
    average_sigma : float
        Standard deviation in scan points of the ``"gaussian"`` neighbour kernel.
    """

    static_background: str | None = None
    static_operation: str = "subtract"
    dynamic_background_sigma: float | None = None
    bandpass: tuple[float, float] | None = None
    window: str = "hann"
    bandpass_kind: str = "gaussian"
    bandpass_cutoffs: tuple[float, float] | None = None
    bandpass_width: float = 0.01
    binning: int = 1
    mask: str | None = None
    mask_centre: tuple[float, float] | None = None
    mask_radius: float | None = None
    average_neighbours: int = 0
    average_kernel: str = "gaussian"
    average_sigma: float = 1.0

    @classmethod
    def from_tables(cls, *tables: dict) -> PreprocessConfig:
        """The configuration of ``[preprocess]`` tables applied in order over the defaults.

        Each table is a dict of field names, as in a TOML recipe: ``mask = "none"`` stands
        for ``None`` (TOML has no null). A later table replaces the keys it gives, and its
        choices replace what they exclude: a band-pass kind drops the other kind's settings
        of the earlier tables (``bandpass`` or ``bandpass_cutoffs``), ``mask = "none"`` drops
        their ``mask_centre`` and ``mask_radius``. Keys of one table must agree.
        """
        merged: dict = {}
        for table in tables:
            table = dict(table)
            if isinstance(table.get("mask"), str) and table["mask"].lower() == "none":
                table["mask"] = None
            kind = table.get("bandpass_kind")
            if kind == "erf":
                merged.pop("bandpass", None)
            elif kind == "gaussian":
                merged.pop("bandpass_cutoffs", None)
            if "mask" in table and table["mask"] is None:
                merged.pop("mask_centre", None)
                merged.pop("mask_radius", None)
            merged.update(table)
        return cls(**merged)

    def __post_init__(self):
        sb = self.static_background
        if sb is not None:
            if not isinstance(sb, (str, os.PathLike)) or not os.fspath(sb):
                raise ValueError(f"preprocess.static_background must be mean, file or an image path, got {sb!r}")
            object.__setattr__(self, "static_background", os.fspath(sb))
        if self.static_operation not in ("subtract", "divide"):
            raise ValueError(f"preprocess.static_operation must be subtract or divide, "
                             f"got {self.static_operation!r}")
        if self.window not in ("hann", "none"):
            raise ValueError(f"preprocess.window must be hann or none, got {self.window!r}")
        sigma = self.dynamic_background_sigma
        if sigma is not None and not (_finite_number(sigma) and sigma > 0):
            raise ValueError(f"preprocess.dynamic_background_sigma must be a number > 0 px, got {sigma!r}")
        # --- band-pass: one kind, with its own settings
        if self.bandpass is not None:
            lo, hi = _pair("preprocess.bandpass", self.bandpass)
            if lo < 0 or hi < 0 or (hi and lo >= hi):
                raise ValueError(f"preprocess.bandpass needs 0 <= low_sigma < high_sigma, got {self.bandpass}")
            object.__setattr__(self, "bandpass", (lo, hi))
        if self.bandpass_cutoffs is not None:
            object.__setattr__(self, "bandpass_cutoffs",
                               _pair("preprocess.bandpass_cutoffs", self.bandpass_cutoffs, allow_inf=True))
        if self.bandpass_kind not in BANDPASS_KINDS:
            raise ValueError(f"preprocess.bandpass_kind must be gaussian or erf, got {self.bandpass_kind!r}")
        if not (_finite_number(self.bandpass_width) and self.bandpass_width > 0):
            raise ValueError(f"preprocess.bandpass_width (the erf edge width) must be a number > 0 cycles/px, "
                             f"got {self.bandpass_width!r}")
        if self.bandpass is not None and self.bandpass_cutoffs is not None:
            raise ValueError("give either preprocess.bandpass (Gaussian sigmas in px) or "
                             "preprocess.bandpass_cutoffs (erf cutoffs in cycles/px), not both")
        if self.bandpass_kind == "erf":
            if self.bandpass is not None:
                raise ValueError("the erf band-pass takes preprocess.bandpass_cutoffs (cycles/px), not "
                                 "preprocess.bandpass (Gaussian sigmas in px): give one kind of band-pass")
            if self.bandpass_cutoffs is None:
                raise ValueError("the erf band-pass needs preprocess.bandpass_cutoffs = (low, high) in cycles/px")
            lo, hi = self.bandpass_cutoffs
            if not (0 <= lo < math.inf) or hi < 0 or (hi and lo >= hi):
                raise ValueError(f"the erf band-pass needs 0 <= low < high cycles/px (high 0 = no low-pass) in "
                                 f"preprocess.bandpass_cutoffs, got {self.bandpass_cutoffs}")
        elif self.bandpass_cutoffs is not None:
            raise ValueError("preprocess.bandpass_cutoffs are for the erf band-pass: "
                             "set preprocess.bandpass_kind to erf")
        # --- binning
        if not (_is_whole(self.binning) and self.binning >= 1):
            raise ValueError(f"preprocess.binning must be a whole number >= 1, got {self.binning!r}")
        object.__setattr__(self, "binning", int(self.binning))
        # --- mask
        if self.mask not in MASKS:
            raise ValueError(f"preprocess.mask must be circle or None (\"none\" in a recipe), got {self.mask!r}")
        if self.mask is None:
            given = [n for n in ("mask_centre", "mask_radius") if getattr(self, n) is not None]
            if given:
                raise ValueError(f"{' and '.join('preprocess.' + n for n in given)} "
                                 f"{'need' if len(given) > 1 else 'needs'} preprocess.mask to be circle")
        if self.mask_centre is not None:
            object.__setattr__(self, "mask_centre", _pair("preprocess.mask_centre", self.mask_centre))
        if self.mask_radius is not None and not (_finite_number(self.mask_radius) and self.mask_radius > 0):
            raise ValueError(f"preprocess.mask_radius must be a number > 0 px, got {self.mask_radius!r}")
        # --- neighbour averaging
        n = self.average_neighbours
        if not (_is_whole(n) and (n == 0 or (n >= 3 and n % 2 == 1))):
            raise ValueError(f"preprocess.average_neighbours takes 0 (off) or an odd kernel size >= 3 "
                             f"(scan points), got {n!r}")
        object.__setattr__(self, "average_neighbours", int(n))
        if self.average_kernel not in AVERAGE_KERNELS:
            raise ValueError(f"preprocess.average_kernel (neighbour weights) must be gaussian, box or circular, "
                             f"got {self.average_kernel!r}")
        if not (_finite_number(self.average_sigma) and self.average_sigma > 0):
            raise ValueError(f"preprocess.average_sigma (neighbour kernel) must be a number > 0 scan points, "
                             f"got {self.average_sigma!r}")


# Where a filter's transfer stays below this fraction of its peak past some column of the half
# spectrum, those columns are left out of its transforms (PatternPreprocessor._band): their
# part of any pattern is far below float32's rounding.
BAND_TOLERANCE = 1e-9


def _reflect_pad(x, before_y, after_y, before_x, after_x, xp):
    """``x`` (B, H, W) padded as ``np.pad(..., mode="reflect")`` does (pads below H and W); on
    the GPU in one pass, not CuPy's pass a side, as float32 from any real dtype."""
    if xp is np:
        return np.pad(x, ((0, 0), (before_y, after_y), (before_x, after_x)), mode="reflect")
    B, H, W = x.shape
    out = xp.empty((B, H + before_y + after_y, W + before_x + after_x), dtype=xp.float32)
    wide = max(out.size, x.size) >= 2 ** 31
    _reflect_pad_kernel(wide)(xp.ascontiguousarray(x), H, W, before_y, before_x, out.shape[1], out.shape[2], out)
    return out


@functools.cache
def _reflect_pad_kernel(wide):
    import cupy as cp

    # 32-bit index arithmetic where the arrays allow it: the divisions are most of the pass
    index = "long long" if wide else "unsigned int"
    return cp.ElementwiseKernel(
        "raw T x, int32 H, int32 W, int32 py, int32 px, int32 Hp, int32 Wp", "float32 out",
        f"""
        {index} k = i, q = k / Wp, b = q / Hp;
        int r = (int)(q - b * Hp) - py, c = (int)(k - q * Wp) - px;
        r = r < 0 ? -r : (r >= H ? 2 * (H - 1) - r : r);
        c = c < 0 ? -c : (c >= W ? 2 * (W - 1) - c : c);
        out = (float)x[(b * H + r) * W + c];
        """, f"ebsdxc_reflect_pad_{'wide' if wide else 'narrow'}")


def _divide_by_blur(x, blur, xp):
    """``x / max(blur, 1e-6 max|blur|)``, the max over each pattern: the dynamic background's
    division, guarded where the blurred pattern vanishes; on the GPU in two passes, ``x`` of
    any real dtype converted as it is read."""
    if xp is np:
        floor = np.float32(1e-6) * np.abs(blur).max(axis=(-2, -1), keepdims=True)
        return x / np.maximum(blur, floor)
    floor = xp.float32(1e-6) * _absmax_kernel()(blur, axis=(-2, -1))
    # The blur is a crop of the filter's rows: read through its parent's pointer and pitches,
    # not through CuPy's strided indexing (a division a dimension a value).
    parent = blur if blur.base is None else blur.base
    if blur.strides[-1] != blur.itemsize or parent.dtype != blur.dtype or not parent.flags.c_contiguous:
        parent = blur = xp.ascontiguousarray(blur)
    off = (blur.data.ptr - parent.data.ptr) // blur.itemsize
    B, H, W = x.shape
    out = xp.empty((B, H, W), dtype=xp.float32)
    divide = _divide_kernel(max(x.size, parent.size) >= 2 ** 31)
    divide(xp.ascontiguousarray(x).ravel(), parent.ravel(), floor, off,
           blur.strides[0] // blur.itemsize, blur.strides[1] // blur.itemsize, H, W, out)
    return out


def _fill_gpu(x, ok, n_ok=None):
    """(B, H, W) patterns of any real dtype -> float32, every pixel not ``ok`` set to the mean of
    its pattern's ``ok`` pixels (summed in float64): one reduction, one pass. ``ok``: the (H, W)
    screen with its pixel count ``n_ok``, or (B, H, W) usable pixels, counted here."""
    import cupy as cp

    B, H, W = x.shape
    x = cp.ascontiguousarray(x)
    ok = cp.ascontiguousarray(ok)
    n_ok = cp.maximum(ok.sum(axis=(1, 2), dtype=cp.float64), 1.0) if n_ok is None else max(n_ok, 1)
    fill = (_masked_sum_kernel()(x, ok, axis=(1, 2)) / n_ok).astype(cp.float32)
    per_pattern = ok.ndim == 3
    return _fill_kernel(x.size >= 2 ** 31, per_pattern)(x, ok, fill, H * W, size=x.size).reshape(B, H, W)


@functools.cache
def _masked_sum_kernel():
    import cupy as cp

    return cp.ReductionKernel("T x, bool m", "float64 y", "m ? (double)x : 0.0", "a + b", "y = a", "0",
                              "ebsdxc_masked_sum")


@functools.cache
def _fill_kernel(wide, per_pattern):
    import cupy as cp

    index = "long long" if wide else "unsigned int"  # 32-bit divisions where the arrays allow them
    ok = "m[k]" if per_pattern else "m[k - b * hw_]"
    return cp.ElementwiseKernel(
        "raw T x, raw bool m, raw float32 fill, int64 hw", "float32 out",
        f"""
        {index} k = i, hw_ = ({index})hw, b = k / hw_;
        out = {ok} ? (float)x[k] : fill[b];
        """, f"ebsdxc_fill_{'wide' if wide else 'narrow'}_{'per_pattern' if per_pattern else 'screen'}")


@functools.cache
def _absmax_kernel():
    import cupy as cp

    # NaN as cupy.maximum gives it: from either side
    return cp.ReductionKernel("float32 v", "float32 m", "abs(v)", "(a != a || a > b) ? a : b", "m = a", "0",
                              "ebsdxc_absmax")


@functools.cache
def _divide_kernel(wide):
    import cupy as cp

    index = "long long" if wide else "unsigned int"  # 32-bit divisions where the arrays allow them
    return cp.ElementwiseKernel(
        "raw T x, raw float32 blur, raw float32 floor, int64 off, int64 sb, int64 sr, int32 H, int32 W",
        "float32 out",
        f"""
        {index} k = i, q = k / W, b = q / H;
        float v = blur[off + b * sb + (q - b * H) * sr + (k - q * W)], f = floor[b];
        out = (float)x[k] / ((v != v || v > f) ? v : f);
        """, f"ebsdxc_divide_by_blur_{'wide' if wide else 'narrow'}")


def _gaussian_transfer(shape, sigma, xp):
    # Fourier transform of a unit-sum Gaussian of std `sigma` px, on an rfft2 grid.
    fy = xp.fft.fftfreq(shape[0])[:, None]
    fx = xp.fft.rfftfreq(shape[1])[None, :]
    return xp.exp(-2.0 * np.pi**2 * sigma**2 * (fy * fy + fx * fx)).astype(xp.float32)


def erf_bandpass_transfer(shape, low, high, width, *, xp=np):
    """Band-pass transfer function with error-function edges, on an rfft2 grid.

    With ``r = sqrt(fx**2 + fy**2)`` the radial spatial frequency in cycles per pixel
    (``fy = fftfreq(H)``, ``fx = rfftfreq(W)``)::

        T(r) = 0.5 * (1 + erf((r - low) / width))    (1 if low == 0)
             * 0.5 * (1 - erf((r - high) / width))   (1 if high == 0 or inf)

    so ``T`` is 0.5 at each cutoff, and an edge rises from 0.08 to 0.92 over
    ``cutoff -/+ width``. Because the frequencies are in cycles/px, the same options give
    the same filter whatever the pattern (or padded) size. Its spatial kernel has a
    Gaussian envelope of standard deviation ``1 / (sqrt(2) * pi * width)`` px.

    Parameters
    ----------
    shape : (int, int)
        (H, W) of the real images the filter applies to (e.g. padded patterns).
    low, high : float
        Cutoffs in cycles/px: ``low`` removes slower variation (0 = off), ``high`` removes
        finer detail (0 or ``inf`` = off).
    width : float
        Edge width in cycles/px (> 0).
    xp : module
        ``numpy`` or ``cupy``: where the result lives.

    Returns
    -------
    (H, W // 2 + 1) float32 array
        Real transfer function, to multiply an ``rfft2`` spectrum by.
    """
    from scipy.special import erf

    H, W = (int(s) for s in shape)
    if H < 1 or W < 1:
        raise ValueError(f"filter shape must be positive, got {shape}")
    if not (width > 0 and math.isfinite(width)):
        raise ValueError(f"erf band-pass edge width must be > 0 cycles/px, got {width}")
    if not (0 <= low < math.inf) or not high >= 0 or (high and low >= high):
        raise ValueError(f"erf band-pass needs 0 <= low < high cycles/px, got ({low}, {high})")
    r = np.hypot(np.fft.fftfreq(H)[:, None], np.fft.rfftfreq(W)[None, :])
    t = np.ones_like(r)
    if low:
        t *= 0.5 * (1.0 + erf((r - low) / width))
    if high and math.isfinite(high):
        t *= 0.5 * (1.0 - erf((r - high) / width))
    return xp.asarray(t.astype(np.float32))


def _module_of(a, xp):
    if xp is not None:
        return xp
    if type(a).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def bin_patterns(x, factor, *, xp=None):
    """Mean of ``factor x factor`` pixel blocks: (..., H, W) -> (..., H/f, W/f) float32.

    The mean (not the sum) keeps intensities on the scale of the input, so a static
    background, thresholds and the dtype range mean the same after binning. Both sides
    must be multiples of ``factor``: cropping the remainder would move the pattern centre
    relative to the pattern size (fractional pattern-centre conventions), so it is refused.

    Parameters
    ----------
    x : (..., H, W) real array (NumPy or CuPy)
    factor : int
        Binning factor (>= 1); 1 returns ``x`` as float32 (no copy when it is already).
    xp : module, optional
        Array module of ``x`` (default: that of ``x``).

    Returns
    -------
    (..., H // factor, W // factor) float32 array
    """
    xp = _module_of(x, xp)
    if not (_is_whole(factor) and factor >= 1):
        raise ValueError(f"binning must be a whole number >= 1, got {factor!r}")
    x = xp.asarray(x).astype(xp.float32, copy=False)
    if x.ndim < 2:
        raise ValueError(f"binning needs images of at least 2 dimensions, got shape {x.shape}")
    if factor == 1:
        return x
    H, W = x.shape[-2:]
    if H % factor or W % factor:
        raise ValueError(f"binning {factor} needs pattern sides that are multiples of {factor}; "
                         f"these patterns are {W}x{H} px")
    f = int(factor)
    blocks = x.reshape(*x.shape[:-2], H // f, f, W // f, f)
    return blocks.mean(axis=(-3, -1), dtype=xp.float32)


def circular_mask(shape, *, centre=None, radius=None, xp=np):
    """Pixels of a round phosphor screen: True on the screen.

    Pixel (row i, column j) has its centre at (x, y) = (j, i); it is on the screen when
    ``(x - cx)**2 + (y - cy)**2 <= radius**2``.

    Parameters
    ----------
    shape : (int, int)
        (H, W) of the patterns.
    centre : (float, float), optional
        Screen centre (x, y) in px; default the pattern centre ((W - 1) / 2, (H - 1) / 2).
    radius : float, optional
        Screen radius in px; default ``min(H, W) / 2``.
    xp : module
        Where the result lives.

    Returns
    -------
    (H, W) bool array
    """
    H, W = (int(s) for s in shape)
    if H < 1 or W < 1:
        raise ValueError(f"mask shape must be positive, got {shape}")
    cx, cy = ((W - 1) / 2, (H - 1) / 2) if centre is None else _pair("mask centre", centre)
    r = min(H, W) / 2 if radius is None else radius
    if not (_finite_number(r) and r > 0):
        raise ValueError(f"mask radius must be a number > 0 px, got {radius!r}")
    y = np.arange(H, dtype=np.float64)[:, None] - cy
    x = np.arange(W, dtype=np.float64)[None, :] - cx
    return xp.asarray(x * x + y * y <= float(r) ** 2)


def rois_inside_mask(mask, origins, size) -> np.ndarray:
    """Whether each ROI lies wholly on the screen of a detector mask.

    Parameters
    ----------
    mask : (H, W) bool array (NumPy or CuPy)
        True on the screen (e.g. :func:`circular_mask`).
    origins : (n_roi, 2) ints
        [x0, y0] of each ROI's first pixel (:attr:`ebsdxc.rois.RoiLayout.origins`).
    size : (int, int)
        (w, h) of every ROI.

    Returns
    -------
    (n_roi,) bool ndarray
        True where every pixel of the ROI is on the screen; an ROI that reaches past the
        pattern edge is not inside.
    """
    m = mask.get() if hasattr(mask, "get") and not isinstance(mask, np.ndarray) else np.asarray(mask)
    if m.ndim != 2:
        raise ValueError(f"mask must be a 2-D (H, W) array, got shape {m.shape}")
    o = np.asarray(origins).reshape(-1, 2)
    if o.size and not np.issubdtype(o.dtype, np.integer):
        if not np.array_equal(o, np.round(o)):
            raise ValueError("ROI origins must be whole pixels")
        o = o.astype(np.int64)
    w, h = (int(s) for s in size)
    if w < 1 or h < 1:
        raise ValueError(f"ROI size must be positive, got {w}x{h}")
    H, W = m.shape
    # Off-screen pixel counts by a summed-area table: any ROI costs four lookups.
    off = np.zeros((H + 1, W + 1), dtype=np.int64)
    off[1:, 1:] = np.cumsum(np.cumsum(~m.astype(bool), axis=0), axis=1)
    x0, y0 = o[:, 0].astype(np.int64), o[:, 1].astype(np.int64)
    within = (x0 >= 0) & (y0 >= 0) & (x0 + w <= W) & (y0 + h <= H)
    xa, ya = np.clip(x0, 0, W), np.clip(y0, 0, H)
    xb, yb = np.clip(x0 + w, 0, W), np.clip(y0 + h, 0, H)
    n_off = off[yb, xb] - off[ya, xb] - off[yb, xa] + off[ya, xa]
    return within & (n_off == 0)


def neighbour_weights(kernel="gaussian", size=3, sigma=1.0) -> np.ndarray:
    """(size, size) float64 weights of neighbour pattern averaging, 1 at the centre.

    ``"gaussian"``: ``exp(-(di**2 + dj**2) / (2 sigma**2))`` (kikuchipy's ``"gaussian"``
    window with ``std=sigma``); ``"box"``: all ones (kikuchipy's ``"rectangular"``);
    ``"circular"``: ones within ``size // 2`` scan points of the centre, zero in the corners
    (kikuchipy's default ``"circular"``; for size 3 the four edge neighbours).
    """
    if kernel not in AVERAGE_KERNELS:
        raise ValueError(f"neighbour averaging kernel must be gaussian, box or circular, got {kernel!r}")
    if not (_is_whole(size) and size >= 1 and size % 2 == 1):
        raise ValueError(f"neighbour averaging kernel size must be an odd whole number >= 1, got {size!r}")
    k = size // 2
    d = np.arange(-k, k + 1, dtype=np.float64)
    r2 = d[:, None] ** 2 + d[None, :] ** 2
    if kernel == "box":
        return np.ones((size, size))
    if kernel == "circular":
        return (r2 <= k * k).astype(np.float64)
    if not (_finite_number(sigma) and sigma > 0):
        raise ValueError(f"neighbour averaging sigma must be a number > 0 (scan points), got {sigma!r}")
    return np.exp(-r2 / (2.0 * float(sigma) ** 2))


def _shift_slices(n, d):
    # destination and source slices along one axis for a neighbour offset d
    if d >= 0:
        return slice(0, n - d), slice(d, n)
    return slice(-d, n), slice(0, n + d)


def average_neighbours(patterns, *, cols, kernel="gaussian", size=3, sigma=1.0, present=None, xp=None):
    """Weighted mean of each pattern and its scan-grid neighbours (square grids).

    Each present pattern becomes ``sum_k w_k p_k P_k / sum_k w_k p_k`` over the neighbours
    k within the kernel (itself included, ``w = 1`` at the centre), with ``p_k`` = 1 for a
    present neighbour inside the block and 0 otherwise. Weights are therefore renormalised
    at the block's edges and around absent points, as kikuchipy's
    ``EBSD.average_neighbour_patterns`` renormalises at the map edges. Absent points are
    returned as they were and contribute nothing.

    Differences from kikuchipy: kikuchipy rescales every averaged pattern to the full range
    of its dtype; here intensities are kept (a weighted mean), since the background
    corrections that follow need real intensities and the normalised cross-correlation does
    not care about a per-pattern scale. kikuchipy knows no absent points.

    Block contract (for streaming): every row given is averaged, and rows beyond the block
    count as absent. A caller averaging a chunk of scan rows reads ``size // 2`` halo rows
    above and below it (where the scan has them), calls this on the whole block, and drops
    the halo rows from the result; the chunk's rows are then exactly as if the whole scan had
    been averaged at once.

    Memory: one float32 accumulator of the block's size (plus a masked copy of the block
    when ``present`` is given); the sum runs over shifted slices of the (rows, cols) axes,
    in place, weight groups combined by Horner's rule, so no per-shift temporaries.

    Parameters
    ----------
    patterns : (rows * cols, H, W) real array (NumPy or CuPy)
        Whole scan rows, row after row.
    cols : int
        Scan points per row.
    kernel : {"gaussian", "box", "circular"}
        Neighbour weights, see :func:`neighbour_weights`.
    size : int
        Odd kernel side in scan points (1 = no averaging).
    sigma : float
        Gaussian standard deviation in scan points.
    present : (rows * cols,) bool array, optional
        Points that hold a pattern (default: all).
    xp : module, optional
        Array module of ``patterns`` (default: that of ``patterns``).

    Returns
    -------
    (rows * cols, H, W) float32 array
    """
    xp = _module_of(patterns, xp)
    w = neighbour_weights(kernel, size, sigma)
    if not (_is_whole(cols) and cols >= 1):
        raise ValueError(f"cols (scan points per row) must be a whole number >= 1, got {cols!r}")
    x = xp.asarray(patterns)
    if x.ndim != 3:
        raise ValueError(f"patterns must be (points, H, W), got shape {x.shape}")
    N, H, W = x.shape
    if N % cols:
        raise ValueError(f"{N} patterns are not whole scan rows of {cols} points")
    R = N // cols
    src = x.astype(xp.float32, copy=False).reshape(R, cols, H, W)
    p = None
    if present is not None:
        p = xp.asarray(present).astype(bool, copy=False).reshape(-1)
        if p.shape[0] != N:
            raise ValueError(f"present must have one entry per pattern ({N}), got {p.shape[0]}")
        p = p.reshape(R, cols)
        src = xp.where(p[:, :, None, None], src, xp.float32(0))
    k = size // 2
    groups = {}
    for di in range(-k, k + 1):
        for dj in range(-k, k + 1):
            wt = float(w[di + k, dj + k])
            if wt > 0 and abs(di) < R and abs(dj) < cols:
                groups.setdefault(wt, []).append((di, dj))
    acc = xp.zeros((R, cols, H, W), dtype=xp.float32)
    pw = xp.ones((R, cols), dtype=xp.float32) if p is None else p.astype(xp.float32)
    den = xp.zeros((R, cols), dtype=xp.float32)
    prev = None
    for wt in sorted(groups, reverse=True):
        if prev is not None:
            acc *= xp.float32(prev / wt)  # Horner: acc = (...(S1 w1/w2 + S2) w2/w3 + ...) wK
        for di, dj in groups[wt]:
            (ri, rs), (ci, cs) = _shift_slices(R, di), _shift_slices(cols, dj)
            acc[ri, ci] += src[rs, cs]
            den[ri, ci] += xp.float32(wt) * pw[rs, cs]
        prev = wt
    if prev is not None and prev != 1.0:
        acc *= xp.float32(prev)
    if p is None:
        acc /= den[:, :, None, None]
    else:
        acc /= xp.where(p, den, xp.float32(1))[:, :, None, None]
        xp.copyto(acc, x.reshape(R, cols, H, W), where=~p[:, :, None, None], casting="unsafe")
    return acc.reshape(N, H, W)


class PatternPreprocessor:
    """Applies a :class:`PreprocessConfig` to batches of patterns on a backend.

    ``pp(patterns)`` = ``pp.correct(pp.convert(patterns))``: conversion to float32 and
    binning, then background corrections, mask fill and filters. Neighbour averaging is a
    separate step, :meth:`average_neighbours`, on blocks of whole scan rows between the two.
    Filters and masks are built once per pattern shape and kept on the device.

    Parameters
    ----------
    config : PreprocessConfig
    backend : Backend
    static_background : (H, W) array, optional
        At the size of the patterns as stored (before binning); binned here.
    """

    def __init__(self, config: PreprocessConfig, backend, *, static_background=None):
        self.config = config
        self.backend = backend
        xp = backend.xp
        self._bg = None if static_background is None else xp.asarray(static_background, dtype=xp.float32)
        if self._bg is not None and config.binning > 1:
            self._bg = bin_patterns(self._bg, config.binning, xp=xp)
        if self._bg is not None and config.static_operation == "divide":
            self._bg = xp.where(self._bg > 0, self._bg, xp.float32(np.nan))
        # Finite patterns stay finite through it: the search for NaN before a Fourier filter
        # (several passes over the batch) can be left out for integer patterns.
        self._bg_finite = self._bg is None or bool(xp.isfinite(self._bg).all())
        self._filters = {}
        self._bands = {}  # (key, padded shape) -> half-spectrum columns kept, or None: all
        self._low_rank = {}  # (shape, pads, sigma) -> LowRankBlur, or None: the FFTs
        self._screen_counts = {}  # mask shape -> pixels on the screen
        self._masks = {}

    @property
    def is_identity(self) -> bool:
        """True when ``pp(x)`` is only a float32 conversion (neighbour averaging aside)."""
        c = self.config
        return (self._bg is None and c.dynamic_background_sigma is None and c.bandpass is None
                and c.bandpass_kind == "gaussian" and c.binning == 1 and c.mask is None)

    @property
    def halo_rows(self) -> int:
        """Scan rows a caller of :meth:`average_neighbours` adds above and below a chunk."""
        return self.config.average_neighbours // 2

    def output_shape(self, raw_shape) -> tuple[int, int]:
        """(H', W') of the preprocessed patterns for (H, W) patterns as stored.

        Raises ValueError when the binning does not divide the pattern sides.
        """
        H, W = (int(s) for s in raw_shape[-2:])
        f = self.config.binning
        if H % f or W % f:
            raise ValueError(f"binning {f} needs pattern sides that are multiples of {f}; "
                             f"these patterns are {W}x{H} px")
        return H // f, W // f

    def _mask_geometry(self):
        c, f = self.config, self.config.binning
        centre = None if c.mask_centre is None else tuple((v + 0.5) / f - 0.5 for v in c.mask_centre)
        radius = None if c.mask_radius is None else c.mask_radius / f
        return centre, radius

    def screen_mask(self, raw_shape):
        """(H', W') bool NumPy mask of the screen on the preprocessed patterns, or None.

        ``mask_centre`` and ``mask_radius`` are in px of the stored patterns and are scaled
        to the binned grid (the pixel-centre convention is kept: a stored x maps to
        ``(x + 0.5) / f - 0.5``).
        """
        if self.config.mask is None:
            return None
        centre, radius = self._mask_geometry()
        return circular_mask(self.output_shape(raw_shape), centre=centre, radius=radius)

    def _device_mask(self, shape):
        m = self._masks.get(shape)
        if m is None:
            centre, radius = self._mask_geometry()
            m = circular_mask(shape, centre=centre, radius=radius, xp=self.backend.xp)
            self._masks[shape] = m
        return m

    def _filter(self, key, padded_shape):
        f = self._filters.get((key, padded_shape))
        if f is None:
            xp = self.backend.xp
            c = self.config
            if key == "dynamic":
                f = _gaussian_transfer(padded_shape, c.dynamic_background_sigma, xp)
            elif key == "erf":
                lo, hi = c.bandpass_cutoffs
                f = erf_bandpass_transfer(padded_shape, lo, hi, c.bandpass_width, xp=xp)
            else:
                lo, hi = c.bandpass
                f = xp.ones((padded_shape[0], padded_shape[1] // 2 + 1), dtype=xp.float32)
                if lo:
                    f *= _gaussian_transfer(padded_shape, lo, xp)
                if hi:
                    f *= 1 - _gaussian_transfer(padded_shape, hi, xp)
            self._filters[(key, padded_shape)] = f
        return f

    def _band(self, key, padded_shape):
        """Columns of the half spectrum that ``key``'s filter keeps (the rest are below
        :data:`BAND_TOLERANCE` of its peak), or None where that is over half of them."""
        k = (key, padded_shape)
        if k not in self._bands:
            f = np.abs(self.backend.asnumpy(self._filter(key, padded_shape))).max(axis=0)
            kept = np.flatnonzero(f > BAND_TOLERANCE * f.max())
            keep = int(kept[-1]) + 1 if kept.size else 1
            self._bands[k] = keep if keep <= f.size // 2 else None
        return self._bands[k]

    def _fourier_filter(self, x, key, sigma):
        # `sigma`: reach of the filter's kernel in px / 3 (the Gaussian std for Gaussian filters).
        # The padded frame takes a length of small factors: at 512 px a 12 px dynamic background
        # padded 37 px a side was 586 = 2 x 293, which cuFFT transformed by Bluestein's algorithm
        # (H200, 512 patterns: 17 ms for the whole correction). The far side takes the extra rows
        # and columns, reflected further; the kernel's reach stays inside the margins.
        import scipy.fft

        be = self.backend
        H, W = x.shape[-2:]
        py, px = min(int(3 * sigma) + 1, H - 1), min(int(3 * sigma) + 1, W - 1)
        ay = min(scipy.fft.next_fast_len(H + 2 * py, real=True) - H - py, H - 1)
        ax = min(scipy.fft.next_fast_len(W + 2 * px, real=True) - W - px, W - 1)
        shape = (H + py + ay, W + px + ax)
        keep = self._band(key, shape)
        if keep is not None and key == "dynamic" and be.xp is not np:
            blur = self._low_rank_blur((H, W), ((py, ay), (px, ax)), sigma)
            if blur is not None:
                return blur(x)
        xpad = _reflect_pad(x, py, ay, px, ax, be.xp)
        f = self._filter(key, shape)
        if keep is None:
            spec = be.rfft2(xpad)
            spec *= f
            return be.irfft2(spec, s=shape, overwrite=True)[:, py:py + H, px:px + W]
        # A low-pass (the dynamic background's blur): the columns past the band are zero to
        # float32's precision, so the column transforms run on the band only and the rows'
        # inverse on the pattern's rows only (512 px, 12 px: 52 of 301 columns).
        spec = be.fft1("rfft", xpad)[..., :keep]
        spec = be.fft1("fft", spec, axis=-2)
        spec *= f[:, :keep]
        spec = be.fft1("ifft", spec, axis=-2)[:, py:py + H]
        rows = be.xp.zeros((*spec.shape[:-1], shape[-1] // 2 + 1), dtype=spec.dtype)
        rows[..., :keep] = spec
        return be.fft1("irfft", rows, n=shape[-1], overwrite=True)[..., px:px + W]

    def _low_rank_blur(self, shape, pads, sigma):
        # On the GPU the dynamic background's blur as matrix products where each axis's operator
        # is of low rank (ebsdxc.lowrank_blur; 512 px, 12 px: rank 103), else None: the FFTs.
        k = (shape, pads, sigma)
        if k not in self._low_rank:
            fy = lowpass_factors(shape[0], *pads[0], sigma, BAND_TOLERANCE)
            fx = lowpass_factors(shape[1], *pads[1], sigma, BAND_TOLERANCE)
            ok = (fy is not None and fx is not None and max(len(fy[0]), len(fx[0])) <= MAX_RANK
                  and len(fy[0]) < shape[0] and len(fx[0]) < shape[1])
            self._low_rank[k] = LowRankBlur(fy, fx) if ok else None
        return self._low_rank[k]

    def convert(self, patterns):
        """(B, H, W) patterns of any real dtype -> (B, H', W') float32, binned, on the backend."""
        xp = self.backend.xp
        x = xp.asarray(patterns).astype(xp.float32, copy=False)
        if self.config.binning > 1:
            x = bin_patterns(x, self.config.binning, xp=xp)
        return x

    def average_neighbours(self, block, *, cols, present=None):
        """Neighbour averaging of a block of whole scan rows (:func:`average_neighbours`).

        Run on converted (float32, binned) patterns, **before** :meth:`correct`: the mean
        of raw counts is the pattern a longer exposure would have recorded, so the static
        background (recorded from raw counts) still applies and the dynamic background is
        estimated from the less noisy averaged pattern. (kikuchipy averages after
        background correction; for a static subtraction the order does not matter, for the
        divisions it does, and averaging counts weights every point by its signal.)

        Parameters
        ----------
        block : ((rows + halos) * cols, H', W') float32 array
            Output of :meth:`convert` for whole scan rows, including up to
            :attr:`halo_rows` rows above and below the chunk (fewer at the scan edges).
        cols : int
            Scan points per row.
        present : (n,) bool array, optional
            Points that hold a pattern.

        Returns
        -------
        Same shape as ``block``: the caller drops the halo rows. ``block`` itself (as
        float32) when averaging is off.
        """
        c, xp = self.config, self.backend.xp
        if not c.average_neighbours:
            return xp.asarray(block).astype(xp.float32, copy=False)
        return average_neighbours(block, cols=cols, kernel=c.average_kernel, size=c.average_neighbours,
                                  sigma=c.average_sigma, present=present, xp=xp)

    def _fill_off_screen(self, x, ok):
        # Off-screen (and bad) pixels take the mean of the usable on-screen pixels; no sync.
        xp = self.backend.xp
        if xp is not np:  # one reduction and one pass, any dtype
            return _fill_gpu(x, ok, self._screen_pixels(ok) if ok.ndim == 2 else None)
        n_ok = xp.maximum(ok.sum(axis=(-2, -1), keepdims=True, dtype=xp.float32), xp.float32(1))
        fill = xp.where(ok, x, xp.float32(0)).sum(axis=(-2, -1), keepdims=True, dtype=xp.float32) / n_ok
        return xp.where(ok, x, fill).astype(xp.float32, copy=False)

    def _screen_pixels(self, mask):
        # pixels on the screen, counted once per mask (a count on the device would be a sync)
        key = tuple(mask.shape)
        if key not in self._screen_counts:
            self._screen_counts[key] = int(mask.sum())
        return self._screen_counts[key]

    def correct(self, x, *, finite=False):
        """(B, H', W') patterns, converted (or of any real dtype, converted here) -> (B, H', W')
        float32: backgrounds, mask, filters.

        ``finite``: the caller knows ``x`` holds no NaN or infinity (integer patterns), so no
        pixel needs the treatment of unusable ones.
        """
        xp = self.backend.xp
        x = xp.asarray(x)
        c = self.config
        erf = c.bandpass_kind == "erf"
        filters = c.dynamic_background_sigma is not None or c.bandpass is not None or erf
        # On the GPU, integer patterns with no static background are not converted by a pass of
        # their own (0.64 ms of a 512 x 512 x 512 batch, H200): the screen mask's fill converts
        # them as it fills, and without a mask the Fourier filters' pad and division convert them
        # as they read them.
        if not (finite and xp is not np and x.dtype.kind in "ui" and self._bg is None
                and (c.mask is not None or filters)):
            x = x.astype(xp.float32, copy=False)
        if self._bg is not None:
            x = x - self._bg if c.static_operation == "subtract" else x / self._bg
        search = not (finite and self._bg_finite)
        bad = m = None
        if c.mask is not None:
            m = self._device_mask(tuple(x.shape[-2:]))
            bad = ~xp.isfinite(x) if search else None
            x = self._fill_off_screen(x, m if bad is None else m & ~bad)
        elif filters and search:
            # A Fourier filter would spread one NaN over the whole pattern: filter with the
            # pattern's finite mean in its place, and put the NaN back afterwards. (No
            # data-dependent branch: on the GPU it would stall the stream.)
            bad = ~xp.isfinite(x)
            n_ok = xp.maximum((~bad).sum(axis=(-2, -1), keepdims=True), 1)
            fill = xp.where(bad, 0, x).sum(axis=(-2, -1), keepdims=True) / n_ok
            x = xp.where(bad, fill, x).astype(xp.float32, copy=False)
        if c.dynamic_background_sigma is not None:
            x = _divide_by_blur(x, self._fourier_filter(x, "dynamic", c.dynamic_background_sigma), xp)
        if c.bandpass is not None:
            x = self._fourier_filter(x, "bandpass", max(c.bandpass))
        if erf:
            # Kernel envelope std 1 / (sqrt(2) pi width) px; pad by 4 of them (reach / 3).
            x = self._fourier_filter(x, "erf", 4.0 / (3.0 * math.sqrt(2.0) * math.pi * c.bandpass_width))
        if m is not None:
            if filters:
                x = self._fill_off_screen(x, m)
            if bad is not None:
                x = xp.where(bad & m, xp.float32(np.nan), x)
        elif bad is not None:
            x = xp.where(bad, xp.float32(np.nan), x)
        return x.astype(xp.float32, copy=False)

    def __call__(self, patterns):
        """(B, H, W) patterns of any real dtype -> (B, H', W') float32 on the backend.

        :meth:`convert` then :meth:`correct` (no neighbour averaging).
        """
        finite = np.dtype(getattr(patterns, "dtype", np.float64)).kind in "uib"
        if self.config.binning == 1:  # correct() converts, where it must
            return self.correct(patterns, finite=finite)
        return self.correct(self.convert(patterns), finite=finite)


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
