"""Figures over the pattern: the ROI layout, one point's displacement field (quiver), and one
point and ROI in detail (subregions, correlation map, fitted peak)."""

from __future__ import annotations

import functools
import os
import warnings

import numpy as np
from matplotlib import colors
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .. import status as st
from .results_view import ResultsView

__all__ = ["roi_layout", "displacement_quiver", "point_detail", "correlation_map"]


def _processed_reference(view: ResultsView, reference):
    """The reference pattern at the size the ROIs were placed on (binned), or None."""
    from ..io import read_reference
    from ..preprocess import bin_patterns

    if reference is None:
        path = view.input_path("reference")
        if path is not None:
            reference = read_reference(path)
        elif view.parameters.get("reference_index") is not None and view.input_path("scan"):
            reference = _scan_and_reference(view, None, None)[1]
    elif isinstance(reference, (str, os.PathLike)):
        reference = read_reference(reference)
    if reference is None:
        return None
    ref = np.asarray(reference, dtype=np.float32)
    b = int(view.parameters.get("preprocess", {}).get("binning", 1) or 1)
    if b > 1 and ref.shape == view.pattern_shape:
        ref = bin_patterns(ref, b)
    return ref


def _pattern_axes(ax, view, ref):
    """Draw the reference (or an empty detector frame) in pixel coordinates."""
    if ref is not None:
        ax.imshow(ref, cmap="gray", interpolation="nearest")
    else:
        h, w = _shape(view)
        ax.set_xlim(-0.5, w - 0.5)
        ax.set_ylim(h - 0.5, -0.5)
        ax.set_facecolor("#dddddd")
    ax.set_xlabel("x (px)")
    ax.set_ylabel("y (px)")
    ax.set_aspect("equal")


def _shape(view):
    b = int(view.parameters.get("preprocess", {}).get("binning", 1) or 1)
    if len(view.pattern_shape) == 2:
        return view.pattern_shape[0] // b, view.pattern_shape[1] // b
    w, h = view.roi_size
    return (int(view.centres[:, 1].max() + h), int(view.centres[:, 0].max() + w))


def _boxes(ax, view, *, highlight=None, labels=True):
    w, h = view.roi_size
    for k, (cx, cy) in enumerate(view.centres):
        hot = k == highlight
        ax.add_patch(Rectangle((cx - w / 2, cy - h / 2), w, h, fill=False, lw=2.0 if hot else 0.8,
                               ec="#ffcc00" if hot else "#33aaff"))
        if labels:
            ax.text(cx - w / 2 + 1, cy - h / 2 + 1, str(k), color="#ffcc00" if hot else "#33aaff",
                    fontsize=7, va="top", ha="left")


def roi_layout(results, *, reference=None) -> Figure:
    """The ROIs (numbered) on the reference pattern.

    ``reference``: an (H, W) array or a TIFF path; default the reference the results record
    (if the file is still there), else an empty detector frame.
    """
    with ResultsView(results) as v:
        ref = _processed_reference(v, reference)
        fig = Figure(figsize=(6.5, 6), layout="constrained")
        ax = fig.subplots()
        _pattern_axes(ax, v, ref)
        if ref is not None:
            fig.colorbar(ax.images[0], ax=ax, label="reference intensity (counts)", shrink=0.8)
        _boxes(ax, v)
        w, h = v.roi_size
        ax.set_title(f"{v.n_roi} ROIs of {w} x {h} px")
    return fig


def displacement_quiver(results, point, *, reference=None, scale=None) -> Figure:
    """One scan point's displacement of every ROI as arrows over the pattern.

    Parameters
    ----------
    results : str or os.PathLike
    point : int or (int, int)
        Scan point, flat index or (row, col).
    reference : (H, W) array or str, optional
        Background image (default: the recorded reference, if there).
    scale : float, optional
        Arrow length per pixel of displacement (default: the largest arrow is half an ROI).
    """
    with ResultsView(results) as v:
        i = v.flat_index(point)
        d = v.point("displacement", i).astype(np.float64)
        s = v.point("status", i)
        ref = _processed_reference(v, reference)
        fig = Figure(figsize=(7, 6), layout="constrained")
        ax = fig.subplots()
        _pattern_axes(ax, v, ref)
        _boxes(ax, v, labels=False)
        mag = np.hypot(d[:, 0], d[:, 1])
        ok = np.isfinite(mag)
        if scale is None:
            top = float(mag[ok].max()) if ok.any() else 0.0
            scale = 0.5 * min(v.roi_size) / top if top > 0 else 1.0
        c = v.centres
        q = ax.quiver(c[ok, 0], c[ok, 1], d[ok, 0] * scale, d[ok, 1] * scale, mag[ok], angles="xy",
                      scale_units="xy", scale=1, cmap="plasma", width=0.006)
        fig.colorbar(q, ax=ax, label="|d| (px)", shrink=0.8)
        bad = ~ok
        if bad.any():
            ax.plot(c[bad, 0], c[bad, 1], "x", color="red", ms=8, mew=2, label="no displacement (status)")
            ax.legend(loc="lower right", fontsize=8)
        r, col = divmod(i, v.cols)
        n_ok = int((s == st.OK).sum())
        ax.set_title(f"Point ({r}, {col}): displacement x {scale:.3g} ({n_ok}/{v.n_roi} ROIs ok)")
    return fig


# --------------------------------------------------------------------------- one point in detail


@functools.lru_cache(maxsize=4)
def _cached_pipeline(path, mtime, scan, reference):
    """:func:`_cpu_pipeline` cached by file and inputs: a widget redraws often."""
    return _cpu_pipeline(path, scan, reference)


def _cpu_pipeline(path, scan, reference):
    """A CPU pipeline rebuilt from a results file's parameters, and the scan's source."""
    from ..backend import select_backend
    from ..config import ProcessConfig
    from ..rois import layout_from_centres
    from ..run.inputs import native, static_background
    from ..run.pipeline import Pipeline

    with ResultsView(path) as v:
        source, ref = _scan_and_reference(v, scan, reference)
        config = ProcessConfig.from_parameters(v.parameters)
        layout = layout_from_centres(v.centres, size=v.roi_size)
    backend = select_backend("cpu")
    static_bg = static_background(config.preprocess.static_background, source, backend)
    return source, Pipeline(backend, config, layout, native(np.asarray(ref)), static_background=static_bg)


def _scan_and_reference(view, scan, reference):
    from ..errors import InputError
    from ..io import SCAN_FORMATS, open_scan, read_reference
    from ..run.inputs import scan_reference

    scan_path = scan or view.input_path("scan")
    if scan_path is None:
        raise InputError("the scan file the results were made from is not there: pass scan=PATH", view.path)
    fmt = str(view.g.attrs.get("scan_format", ""))
    source = open_scan(scan_path, dataset=view.parameters.get("dataset"), grid_shape=(view.rows, view.cols),
                       format=fmt if fmt in SCAN_FORMATS else None)
    if reference is not None:
        ref = read_reference(reference) if isinstance(reference, (str, os.PathLike)) else np.asarray(reference)
    else:
        index = view.parameters.get("reference_index")
        if index is not None:
            from ..config import ProcessConfig

            ref = scan_reference(source, tuple(index) if isinstance(index, list) else index,
                                 ProcessConfig.from_parameters(view.parameters).preprocess)
        else:
            path = view.input_path("reference")
            if path is None:
                raise InputError("the reference pattern the results were made with is not there: "
                                 "pass reference=PATH", view.path)
            ref = read_reference(path)
    return source, ref


def correlation_map(results, point, roi, *, scan=None, reference=None) -> dict:
    """Correlate one ROI of one scan point again, on the CPU, as the run did.

    Returns a dict: ``map`` (normalised cross-correlation over lags, centred: lag (0, 0) at
    ``centre``), ``centre`` (row, col of lag 0), ``reference_tile`` and ``scan_tile`` (the
    preprocessed subregions), ``pattern`` (the preprocessed scan pattern) and the stored
    ``displacement`` (dx, dy), ``status`` and ``peak_height`` of that ROI.

    Neighbour averaging is not redone here: the pattern is the point's own.
    """
    from .. import xcorr
    from ..preprocess import prepare_tiles
    from ..rois import extract_tiles

    path = os.path.abspath(os.fspath(results))
    with ResultsView(path) as v:
        i = v.flat_index(point)
        roi = int(roi)
        if not 0 <= roi < v.n_roi:
            raise ValueError(f"ROI must be in 0..{v.n_roi - 1}, got {roi}")
        stored = {"displacement": v.point("displacement", i)[roi].astype(np.float64),
                  "status": int(v.point("status", i)[roi]), "peak_height": float(v.point("peak_height", i)[roi])}
        averaged = int(v.parameters.get("preprocess", {}).get("average_neighbours", 0) or 0) > 1
        # The scan's path is part of the cache key: a scan moved away is noticed, not read
        # through a handle cached before.
        scan = os.fspath(scan) if scan is not None else v.input_path("scan")
    if reference is None or isinstance(reference, (str, os.PathLike)):
        source, pipeline = _cached_pipeline(path, os.path.getmtime(path), scan, reference and os.fspath(reference))
    else:  # an array: not hashable, built each time
        source, pipeline = _cpu_pipeline(path, scan, reference)
    if averaged:
        warnings.warn("neighbour averaging is not redone for this view: the pattern is the point's own",
                      stacklevel=2)
    pattern = pipeline.preprocessor(np.asarray(source.read(i, i + 1), dtype=np.float32))
    tiles = extract_tiles(pattern, pipeline.layout, np)[0, roi]
    ref_tiles = extract_tiles(pipeline.reference_image[None], pipeline.layout, np)[0, roi]
    t, e, _ = prepare_tiles(tiles, pipeline.window, np)
    r, er, _ = prepare_tiles(ref_tiles, pipeline.window, np)
    corr = pipeline.config.correlation
    m = np.asarray(xcorr.one_to_one(r, t, mode=corr.mode, max_shift=corr.max_shift, device="cpu"), dtype=np.float64)
    denom = float(np.sqrt(float(e) * float(er)))
    m = m / denom if denom > 0 else m
    return {"map": m, "centre": ((m.shape[0] - 1) // 2, (m.shape[1] - 1) // 2), "reference_tile": r,
            "scan_tile": t, "pattern": pattern[0], **stored}


def point_detail(results, point, *, roi=0, scan=None, reference=None, zoom=None) -> Figure:
    """One scan point and one ROI: where the ROI is, its two subregions, the correlation map and
    the fitted (subpixel) peak.

    Parameters
    ----------
    results : str or os.PathLike
    point : int or (int, int)
    roi : int
    scan, reference : str, optional
        The scan file and reference TIFF, where the recorded paths no longer hold them.
    zoom : int, optional
        Half-width in px of the correlation map shown around lag 0 (default: enough for the
        peak, at least 8 px).
    """
    c = correlation_map(results, point, roi, scan=scan, reference=reference)
    with ResultsView(results) as v:
        i = v.flat_index(point)
        row, col = divmod(i, v.cols)
        fig = Figure(figsize=(15, 4.4), layout="constrained")
        a0, a1, a2, a3 = fig.subplots(1, 4)
        a0.imshow(c["pattern"], cmap="gray", interpolation="nearest")
        a0.set_xlabel("x (px)")
        a0.set_ylabel("y (px)")
        _boxes(a0, v, highlight=int(roi), labels=False)
        a0.set_title(f"Point ({row}, {col}), preprocessed")
    for ax, tile, name in ((a1, c["reference_tile"], "reference"), (a2, c["scan_tile"], "scan")):
        lim = float(np.abs(tile).max()) or 1.0
        im = ax.imshow(tile, cmap="gray", vmin=-lim, vmax=lim, interpolation="nearest")
        ax.set_title(f"ROI {int(roi)}, {name}", fontsize=9)
        ax.set_xlabel("x (px)")
        ax.set_ylabel("y (px)")
        fig.colorbar(im, ax=ax, label="intensity (a.u.)", shrink=0.7)
    m, (cy, cx) = c["map"], c["centre"]
    dx, dy = c["displacement"]
    peak = np.unravel_index(int(np.nanargmax(m)), m.shape)
    half = zoom or int(max(8, 2 * np.nanmax(np.abs([peak[0] - cy, peak[1] - cx])) + 4))
    extent = (-cx - 0.5, m.shape[1] - cx - 0.5, m.shape[0] - cy - 0.5, -cy - 0.5)
    im = a3.imshow(m, cmap="viridis", extent=extent, interpolation="nearest",
                   norm=colors.Normalize(min(0.0, float(np.nanmin(m))), float(np.nanmax(m))))
    a3.plot(peak[1] - cx, peak[0] - cy, "s", mfc="none", mec="white", ms=9, label="integer maximum")
    if np.isfinite(dx):
        a3.plot(dx, dy, "+", color="red", ms=14, mew=2, label=f"fitted peak ({dx:.2f}, {dy:.2f}) px")
    a3.set_xlim(-half, half)
    a3.set_ylim(half, -half)
    a3.set_xlabel("dx (px)")
    a3.set_ylabel("dy (px)")
    a3.legend(loc="lower left", fontsize=7)
    a3.set_title(f"Correlation: {st.DESCRIPTIONS.get(c['status'], c['status'])}, height {c['peak_height']:.3f}",
                 fontsize=9)
    fig.colorbar(im, ax=a3, label="normalised cross-correlation", shrink=0.7)
    return fig
