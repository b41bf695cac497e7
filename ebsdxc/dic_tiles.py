"""Tiled DIC: images larger than memory, matched window by window, read lazily.

:func:`ebsdxc.dic.match_subsets` takes two whole images. For images too large for that (SEM
mosaics, 16k+ frames), :func:`match_tiled` takes two readers of windows instead
(``read(rows, cols)``, e.g. :meth:`ebsdxc.io.source.PatternSource.read_window`) and

1. finds the rigid shift from both images binned to ``coarse_size`` px, read block by block
   (as :func:`ebsdxc.dic.coarse_shift` does for whole images);
2. splits the point grid into tiles of about ``tile`` x ``tile`` px; for each, reads the
   window of both images that holds its subsets and where the rigid shift takes them, plus
   ``tile_margin`` px on every side, and matches the tile's points in it (propagation seeded
   in every tile). Host and device memory hold two windows, never a frame.

Every point is measured in a window that holds its whole subset in the reference and, in the
frame, everything within ``tile_margin`` px of where the rigid shift puts it. A subset that
moves further than that at a tile's edge leaves the window: where the image itself goes on
beyond that edge it is reported ``REFINE_FAILED`` (not measured), not ``OUTSIDE_MASK``; raise
``tile_margin`` for fields with large non-rigid motion. Results agree with whole-image
matching to the IC-GN tolerance (the starts differ: each tile has its own seeds).
"""

from __future__ import annotations

import numpy as np

from . import dic
from . import status as st

__all__ = ["binned_image", "match_tiled", "tile_windows"]


def binned_image(read, shape, k: int, *, block: int = 4096):
    """(H // k, W // k) float64: the image ``read(rows, cols)`` returns windows of, binned
    ``k`` x ``k`` (the rows and columns past a whole multiple of ``k`` dropped), read in
    blocks of at most ``block`` px on a side."""
    h, w = (int(v) for v in shape)
    hk, wk = h // k, w // k
    out = np.empty((hk, wk))
    step = max(k, block // k * k)
    for r in range(0, hk * k, step):
        r1 = min(r + step, hk * k)
        for c in range(0, wk * k, step):
            c1 = min(c + step, wk * k)
            a = np.asarray(read((r, r1), (c, c1)), dtype=np.float64)
            out[r // k:r1 // k, c // k:c1 // k] = a.reshape((r1 - r) // k, k, (c1 - c) // k, k).mean(axis=(1, 3))
    return out


def tile_windows(points, *, subset: int, step: int, tile: int, margin: int, shift, shape):
    """The tiles of a (ny, nx, 2) point grid: ``(rows, cols, window)`` per tile, ``rows`` and
    ``cols`` slices of the grid, ``window`` ((r0, r1), (c0, c1)) px of the images to read."""
    ny, nx = points.shape[:2]
    h, w = (int(v) for v in shape)
    half = subset // 2
    per = max(1, tile // step)
    sx, sy = (int(np.rint(v)) for v in shift)
    out = []
    for i0 in range(0, ny, per):
        for j0 in range(0, nx, per):
            rows, cols = slice(i0, min(i0 + per, ny)), slice(j0, min(j0 + per, nx))
            p = points[rows, cols].reshape(-1, 2)
            x0, y0 = np.rint(p.min(axis=0)).astype(int) - half
            x1, y1 = np.rint(p.max(axis=0)).astype(int) + half + 1
            r0 = max(0, min(y0, y0 + sy) - margin)
            r1 = min(h, max(y1, y1 + sy) + margin)
            c0 = max(0, min(x0, x0 + sx) - margin)
            c1 = min(w, max(x1, x1 + sx) + margin)
            out.append((rows, cols, ((r0, r1), (c0, c1))))
    return out


def match_tiled(read_reference, read_frame, shape, points, *, config: dic.DicConfig, valid=None, prepare=None,
                tile: int | None = None, margin: int | None = None) -> dic.SubsetMatch:
    """:func:`ebsdxc.dic.match_subsets` over a grid of points, window by window.

    Parameters
    ----------
    read_reference, read_frame : callable
        ``read((r0, r1), (c0, c1))`` -> (r1 - r0, c1 - c0) array: a window of each image.
    shape : (H, W)
        Of both images.
    points : (ny, nx, 2) float64
        The grid (:func:`ebsdxc.dic.subset_grid`).
    valid : (ny * nx,) bool, optional
        Points to measure.
    prepare : callable, optional
        Host window -> the (h, w) float32 image to match (on the device to match there);
        default float32 on the host.
    tile, margin : int, optional
        Default ``config.tile`` and ``config.tile_margin``.

    Returns
    -------
    SubsetMatch
        For all ny * nx points, row-major.
    """
    c = config
    tile = c.tile if tile is None else int(tile)
    margin = c.tile_margin if margin is None else int(margin)
    if tile <= 0:
        raise ValueError(f"tile must be > 0 px for tiled matching, got {tile!r}")
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 3:
        raise ValueError(f"points must be a (ny, nx, 2) grid, got shape {pts.shape}")
    ny, nx = pts.shape[:2]
    N = ny * nx
    ok = np.ones(N, bool) if valid is None else np.asarray(valid, dtype=bool).reshape(-1)
    prepare = prepare or (lambda a: np.asarray(a, dtype=np.float32))
    k = dic.binning_factor(shape, c.coarse_size)
    # at most coarse_size px a side: on the host wherever the windows are matched
    shift = dic.binned_shift(binned_image(read_reference, shape, k), binned_image(read_frame, shape, k), k)

    disp = np.full((N, 2), np.nan)
    zncc = np.full(N, np.nan, np.float32)
    iterations = np.full(N, -1, np.int16)
    status = np.full(N, st.OUTSIDE_MASK, np.uint8)
    started = np.zeros(N, np.uint8)
    flat = np.arange(N).reshape(ny, nx)
    h, w = (int(v) for v in shape)
    half = c.subset // 2
    for rows, cols, ((r0, r1), (c0, c1)) in tile_windows(pts, subset=c.subset, step=c.step, tile=tile,
                                                          margin=margin, shift=shift, shape=shape):
        idx = flat[rows, cols].reshape(-1)
        if not ok[idx].any():
            continue
        local = pts[rows, cols] - [c0, r0]
        m = dic.match_subsets(prepare(read_reference((r0, r1), (c0, c1))), prepare(read_frame((r0, r1), (c0, c1))),
                              local, config=c, valid=ok[idx], shift=shift)
        s = m.status.copy()
        if (r0, r1, c0, c1) != (0, h, 0, w):
            # left the window where the image goes on: moved more than the margin, not measured
            moved = pts.reshape(-1, 2)[idx] + shift
            inner = ((moved - half - margin >= 0).all(axis=1) & (moved[:, 0] + half + margin <= w - 1)
                     & (moved[:, 1] + half + margin <= h - 1))
            s[(s == st.OUTSIDE_MASK) & (m.started > 0) & inner] = st.REFINE_FAILED
        disp[idx], zncc[idx], iterations[idx], status[idx], started[idx] = (
            m.displacement, m.zncc, m.iterations, s, m.started)
    status[~ok] = st.OUTSIDE_MASK
    return dic.SubsetMatch(disp, zncc, iterations, status, started)
