"""Regions of interest (ROIs): where on the pattern the subregions are cut.

An ROI of size (w, h) whose first pixel is (x0, y0) has centre
(x0 + (w-1)/2, y0 + (h-1)/2) (design conventions: x = column, y = row, origin at
the centre of pixel (0, 0)). Layouts are computed for a pattern shape and checked
against it: an ROI that does not lie wholly inside the pattern is an error, never
a silent crop.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from .errors import InputError

__all__ = ["MIN_ROI_SIZE", "RoiLayout", "grid_layout", "ring_layout", "layout_for", "layout_from_centres",
           "read_centres", "extract_tiles"]


#: The smallest ROI side: a 1-3 px ROI has no contrast to match, and every match comes out
#: "constant" (a peak and its sub-pixel neighbours need a few pixels either side).
MIN_ROI_SIZE = 4

@dataclass(frozen=True)
class RoiLayout:
    """ROI centres and size.

    Attributes
    ----------
    centres : (n_roi, 2) float64 ndarray
        [x, y] centre of each ROI in pixels.
    size : (int, int)
        (w, h) of every ROI.
    """

    centres: np.ndarray
    size: tuple[int, int]

    def __post_init__(self):
        c = np.asarray(self.centres, dtype=np.float64).reshape(-1, 2)
        object.__setattr__(self, "centres", c)
        object.__setattr__(self, "size", (int(self.size[0]), int(self.size[1])))
        w, h = self.size
        if w < 1 or h < 1:
            raise ValueError(f"ROI size must be positive, got {w}x{h}")
        if len(c) == 0:
            raise ValueError("the ROI layout holds no ROI")
        origin = self.origins.astype(np.float64)
        if not np.allclose(origin, c - [(w - 1) / 2, (h - 1) / 2]):
            raise ValueError(
                "ROI centres must put the ROI corners on whole pixels "
                f"(size {w}x{h} needs centres at {'half-' if w % 2 == 0 else 'whole '}pixels)")

    @property
    def n(self) -> int:
        return len(self.centres)

    @property
    def origins(self) -> np.ndarray:
        """(n_roi, 2) int64 [x0, y0] of each ROI's first pixel."""
        w, h = self.size
        return np.rint(self.centres - [(w - 1) / 2, (h - 1) / 2]).astype(np.int64)

    def check_inside(self, pattern_shape, *, path=None) -> None:
        """Raise InputError if any ROI is not wholly inside a (H, W) pattern."""
        H, W = pattern_shape
        w, h = self.size
        o = self.origins
        bad = np.flatnonzero((o[:, 0] < 0) | (o[:, 1] < 0) | (o[:, 0] + w > W) | (o[:, 1] + h > H))
        if bad.size:
            i = int(bad[0])
            raise InputError(
                f"{bad.size} of {self.n} ROIs lie outside the {W}x{H} pattern "
                f"(ROI {i}: centre ({self.centres[i, 0]:g}, {self.centres[i, 1]:g}), size {w}x{h})",
                path)


def _snap(c, size):
    # Corners on whole pixels: centre = x0 + (size-1)/2.
    return np.round(c - (size - 1) / 2) + (size - 1) / 2


def grid_layout(pattern_shape, *, grid=(5, 5), size=None, margin=0, drop_corners=False) -> RoiLayout:
    """A regular grid of ``grid = (rows, cols)`` ROIs spread evenly over the pattern.

    Parameters
    ----------
    pattern_shape : (int, int)
        (H, W) of the patterns.
    grid : (int, int)
        ROI rows and columns.
    size : int or (int, int), optional
        ROI (w, h); default: the largest multiple of 8 not above a quarter of the smaller
        pattern side (at least 8).
    margin : int
        Pixels kept free between the outermost ROIs and the pattern edge.
    drop_corners : bool
        Leave out the four corner ROIs (they fall outside a round phosphor screen).
    """
    H, W = pattern_shape
    rows, cols = int(grid[0]), int(grid[1])
    if rows < 1 or cols < 1:
        raise ValueError(f"ROI grid must be at least 1x1, got {rows}x{cols}")
    w, h = _size_pair(size, pattern_shape)
    span_x, span_y = W - 2 * margin - w, H - 2 * margin - h
    if span_x < 0 or span_y < 0:
        raise InputError(f"ROIs of {w}x{h} with margin {margin} do not fit in a {W}x{H} pattern")
    xs = margin + (w - 1) / 2 + (np.linspace(0, span_x, cols) if cols > 1 else np.array([span_x / 2]))
    ys = margin + (h - 1) / 2 + (np.linspace(0, span_y, rows) if rows > 1 else np.array([span_y / 2]))
    xs, ys = _snap(xs, w), _snap(ys, h)
    cx, cy = np.meshgrid(xs, ys)
    keep = np.ones((rows, cols), dtype=bool)
    if drop_corners and rows > 1 and cols > 1:
        keep[[0, 0, -1, -1], [0, -1, 0, -1]] = False
    return RoiLayout(np.stack([cx[keep], cy[keep]], axis=-1), (w, h))


def ring_layout(pattern_shape, *, n=8, radius=None, size=None, centre=None,
                include_centre=True) -> RoiLayout:
    """``n`` ROIs evenly spaced on a circle about ``centre`` (default: the pattern centre).

    ``radius`` defaults to a third of the smaller pattern side. With ``include_centre``
    one more ROI sits at the centre.
    """
    H, W = pattern_shape
    w, h = _size_pair(size, pattern_shape)
    cx, cy = ((W - 1) / 2, (H - 1) / 2) if centre is None else centre
    r = min(H, W) / 3 if radius is None else float(radius)
    a = 2 * np.pi * np.arange(int(n)) / int(n)
    pts = np.stack([cx + r * np.cos(a), cy + r * np.sin(a)], axis=-1)
    if include_centre:
        pts = np.vstack([[cx, cy], pts])
    pts = np.stack([_snap(pts[:, 0], w), _snap(pts[:, 1], h)], axis=-1)
    return RoiLayout(pts, (w, h))


def read_centres(path) -> np.ndarray:
    """Read ROI centres (x, y per line, separated by spaces or commas); ``#`` starts a comment."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError("no such file (ROI centres)", path)
    rows = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                text = line.split("#", 1)[0].replace(",", " ").split()
                if not text:
                    continue
                if len(text) != 2:
                    raise InputError(f"line {n}: expected two numbers x y, got {len(text)} values", path)
                try:
                    rows.append([float(v) for v in text])
                except ValueError:
                    raise InputError(f"line {n}: {line.strip()!r} is not two numbers x y", path) from None
    except UnicodeDecodeError:
        raise InputError("not a text file of ROI centres", path) from None
    c = np.asarray(rows, dtype=np.float64).reshape(-1, 2)
    if len(c) == 0:
        raise InputError("holds no ROI centres", path)
    if not np.isfinite(c).all():
        raise InputError("ROI centres must be finite numbers", path)
    return c


def layout_from_centres(centres, *, size) -> RoiLayout:
    """ROIs of ``size`` at explicit ``centres`` ((n, 2) [x, y], e.g. from :func:`read_centres`).

    Centres off the pixel grid for that size are rounded to the nearest valid centre.
    """
    c = np.asarray(centres, dtype=np.float64).reshape(-1, 2)
    w, h = _size_pair(size, None)
    return RoiLayout(np.stack([_snap(c[:, 0], w), _snap(c[:, 1], h)], axis=-1), (w, h))


def _size_pair(size, pattern_shape):
    if size is None:
        if pattern_shape is None:
            raise ValueError("ROI size is needed")
        s = max(8, (min(pattern_shape) // 4) // 8 * 8)
        return s, s
    if np.ndim(size) == 0:
        return int(size), int(size)
    w, h = size
    return int(w), int(h)


def extract_tiles(patterns, layout: RoiLayout, xp=np, *, dtype=None):
    """Cut every ROI out of every pattern.

    Parameters
    ----------
    patterns : (B, H, W) array
    layout : RoiLayout
    xp : array module of ``patterns``
    dtype : dtype, optional
        Dtype of the result (converted while copying); default that of ``patterns``.

    Returns
    -------
    (B, n_roi, h, w) array.
    """
    w, h = layout.size
    o = layout.origins
    if xp is np:  # slice copies run at memory speed; a fancy-index gather does not
        out = np.empty((patterns.shape[0], layout.n, h, w), dtype=dtype or patterns.dtype)
        for k, (x0, y0) in enumerate(o):
            out[:, k] = patterns[:, y0:y0 + h, x0:x0 + w]
        return out
    ys = xp.asarray(o[:, 1:2] + np.arange(h)[None, :])  # (n, h)
    xs = xp.asarray(o[:, 0:1] + np.arange(w)[None, :])  # (n, w)
    out = patterns[:, ys[:, :, None], xs[:, None, :]]
    return out if dtype is None else out.astype(dtype, copy=False)



def layout_for(roi, pattern_shape, *, path=None) -> RoiLayout:
    """The ROI layout that ``roi`` (a :class:`~ebsdxc.config.RoiConfig`: ``layout`` = grid, ring or
    file, and its options) describes, checked to fit patterns of ``pattern_shape``.

    Problems are InputErrors against ``path`` (the scan whose patterns the ROIs must fit).
    """
    try:
        if roi.layout == "grid":
            layout = grid_layout(pattern_shape, grid=roi.grid, size=roi.size, margin=roi.margin,
                                 drop_corners=roi.drop_corners)
        elif roi.layout == "ring":
            layout = ring_layout(pattern_shape, n=roi.n, radius=roi.radius, size=roi.size,
                                 include_centre=roi.include_centre)
        elif roi.layout == "file":  # RoiConfig refuses a file layout without centres
            size = roi.size or grid_layout(pattern_shape, grid=(1, 1)).size
            layout = layout_from_centres(read_centres(roi.centres), size=size)
        else:
            raise InputError(f"unknown roi.layout {roi.layout!r} (grid, ring or file)")
        layout.check_inside(pattern_shape, path=path)
        if min(layout.size) < MIN_ROI_SIZE:  # (RoiLayout itself stays a plain geometry of any size)
            raise InputError(f"ROI size {layout.size[0]}x{layout.size[1]} is too small: a correlation peak and "
                             f"its neighbours need at least {MIN_ROI_SIZE}x{MIN_ROI_SIZE} px")
    except InputError as e:
        if e.path is None and path is not None:
            raise InputError(e.problem, path) from None
        raise
    except ValueError as e:
        raise InputError(str(e), path) from None
    return layout

def roi_summary(layout: RoiLayout) -> str:
    w, h = layout.size
    return f"{layout.n} ROIs of {w}x{h}"


def parse_grid(text: str) -> tuple[int, int]:
    """Parse ``"RxC"`` (e.g. ``"5x7"``) into (rows, cols)."""
    parts = text.lower().replace("*", "x").split("x")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"ROI grid must look like RxC (e.g. 5x5), got {text!r}")
    r, c = (int(p) for p in parts)
    if r < 1 or c < 1 or math.prod((r, c)) > 100000:
        raise ValueError(f"ROI grid {text!r} is out of range")
    return r, c
