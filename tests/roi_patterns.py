"""Patterns with ROIs for the engines that read the ROIs of whole patterns (``match_rois``):
smooth random patterns of any dtype, references cut from them, and both ways of matching
them (``match_rois``, and ``match`` on the tiles ``prepare_tiles_padded`` writes)."""

import numpy as np


def patterns_and_origins(rng, B, n, tile, dtype, side=None):
    """B smooth random patterns (each the first moved by up to 2 px) of ``dtype`` and n ROI
    origins inside them (overlapping, two at the patterns' corners)."""
    from scipy import ndimage

    h, w = tile
    H, W = (side or 2 * h + 7), (side or 2 * w + 5)
    base = ndimage.gaussian_filter(rng.standard_normal((H + 16, W + 16)), 2.0)
    pats = np.empty((B, H, W))
    for b in range(B):
        moved = ndimage.shift(base, rng.uniform(-2.0, 2.0, 2), order=3, mode="wrap")
        pats[b] = moved[8:8 + H, 8:8 + W] + 0.05 * rng.standard_normal((H, W))
    if np.dtype(dtype).kind in "ui":  # the type's range, at most -30000 to 60000
        info = np.iinfo(dtype)
        lo, hi = max(info.min, -30000), min(info.max, 60000)
        pats = np.round((lo + hi) / 2 + 0.45 * (hi - lo) * pats / np.abs(pats).max())
    origins = np.stack([rng.integers(0, W - w + 1, n), rng.integers(0, H - h + 1, n)], axis=1)
    origins[0] = (0, 0)
    origins[-1] = (W - w, H - h)
    return pats.astype(dtype), origins.astype(np.int32)


def rois_both_ways(eng, pats, origins, window, index=None, references=None):
    """(match_rois, match on prepare_tiles_padded's tiles) as host arrays."""
    import cupy as cp

    from ebsdxc.engines.gpu_ops import PaddedTileBuffer, prepare_tiles_padded

    dev, org = cp.asarray(pats), cp.asarray(origins)
    B, n = pats.shape[0], origins.shape[0]
    frames = PaddedTileBuffer(eng.input_shape).get(B * n)
    e, s = prepare_tiles_padded(dev, org, eng.tile_shape, window, frames)
    idx = None if index is None else cp.asarray(index)
    want = eng.match(frames.reshape(B, n, *frames.shape[1:]), e.reshape(B, n), s.reshape(B, n), index=idx,
                     references=references)
    got = eng.match_rois(dev, org, window, index=idx, references=references)
    return ([a.get() for a in (got.displacement, got.peak_height, got.status)],
            [a.get() for a in (want.displacement, want.peak_height, want.status)])


def reference_from(eng, pats, origins, window):
    import cupy as cp

    from ebsdxc.engines.gpu_ops import PaddedTileBuffer, prepare_tiles_padded

    n = origins.shape[0]
    frames = PaddedTileBuffer(eng.input_shape).get(n)
    e, s = prepare_tiles_padded(cp.asarray(pats[:1]), cp.asarray(origins), eng.tile_shape, window, frames)
    h, w = eng.tile_shape
    return cp.ascontiguousarray(frames[:, :h, :w]), e, s


def with_reference(eng, rng, B, n, tile, dtype, side=None):
    """(patterns, origins, window) of :func:`patterns_and_origins`, the window on the device, and
    the engine's reference cut from pattern 0."""
    import cupy as cp

    from ebsdxc.preprocess import window_2d

    window = window_2d(tile, xp=cp)
    pats, origins = patterns_and_origins(rng, B, n, tile, dtype, side=side)
    eng.set_reference(*reference_from(eng, pats, origins, window))
    return pats, origins, window


def spoil(pats, origins, tile):
    """In place: a NaN in ROI 1 of pattern 1 (float patterns) and ROI 2 of pattern 2 constant,
    tiles that prepare_tiles rejects."""
    if pats.dtype.kind == "f":
        x0, y0 = origins[1]
        pats[1, y0 + 3, x0 + 4] = np.nan
    x0, y0 = origins[2]
    pats[2, y0:y0 + tile[0], x0:x0 + tile[1]] = pats[2, y0, x0]


def two_reference_sets(eng, pats, origins, window):
    """The engine's two reference sets, cut from patterns 0 and 3."""
    import cupy as cp

    sets = [reference_from(eng, pats[k:k + 1], origins, window) for k in (0, 3)]
    return eng.prepare_references(*(cp.stack([s[i] for s in sets]) for i in range(3)))


def assert_spoiled_rejected(status, displacement, least_ok, *, nan):
    """The tiles :func:`spoil` made come back with prepare_tiles' status and NaN shifts (``nan``:
    the patterns were float, so ROI 1 of pattern 1 holds a NaN); at least ``least_ok`` tiles ok."""
    from ebsdxc import status as st

    if nan:
        assert status[1, 1] == st.NOT_FINITE
    assert st.CONSTANT_TILE in status[2] and np.isnan(displacement[2][status[2] == st.CONSTANT_TILE]).all()
    assert (status == st.OK).sum() >= least_ok
