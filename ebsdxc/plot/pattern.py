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
from .colouring import PALETTE, distinct_colours
from .panels import few_ticks, figure_title, fit_panel, panel_grid
from .results_view import ResultsView
from .scanmap import colour_bar

__all__ = ["roi_layout", "roi_overlaps", "displacement_quiver", "point_detail", "correlation_map"]


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


def _pattern_axes(ax, shape, ref, *, bar=None):
    """Draw the reference (or an empty detector frame of ``shape``) in pixel coordinates; its
    colour bar in ``bar`` (axes) when given."""
    h, w = shape
    if ref is not None:
        im = ax.imshow(ref, cmap="gray", interpolation="nearest", aspect="auto")
        if bar is not None:
            colour_bar(im, bar, "reference intensity (counts)")
    else:
        ax.set_facecolor("#dddddd")
    ax.set_xlim(-0.5, w - 0.5)
    ax.set_ylim(h - 0.5, -0.5)
    ax.set_xlabel("x (px)")
    ax.set_ylabel("y (px)")
    few_ticks(ax.xaxis)
    few_ticks(ax.yaxis)


def _pattern_figure(shape, *, box=(5.6, 5.4), colorbar=True):
    """A one-panel figure the shape of the pattern, with room for a colour bar."""
    h, w = shape
    panel = fit_panel((-0.5, w - 0.5, h - 0.5, -0.5), box)
    fig, (ax,), bars = panel_grid(1, 1, panel, titles=False, colorbar="each" if colorbar else None, bar_labels=1.0)
    return fig, ax, (bars[0] if bars else None)


def _shape(view, ref=None):
    """(H, W) of the pattern the ROIs were placed on."""
    if ref is not None:
        return ref.shape
    b = int(view.parameters.get("preprocess", {}).get("binning", 1) or 1)
    if len(view.pattern_shape) == 2:
        return view.pattern_shape[0] // b, view.pattern_shape[1] // b
    w, h = view.roi_size
    return (int(view.centres[:, 1].max() + h), int(view.centres[:, 0].max() + w))


def _boxes(ax, view, *, highlight=None):
    """Thin outlines of every ROI (one highlighted): the backdrop of the quiver and detail views."""
    w, h = view.roi_size
    for k, (cx, cy) in enumerate(view.centres):
        hot = k == highlight
        ax.add_patch(Rectangle((cx - w / 2, cy - h / 2), w, h, fill=False, lw=2.0 if hot else 0.6,
                               ec="#ffcc00" if hot else "#33aaff", alpha=1.0 if hot else 0.7, zorder=3 if hot else 2))


_BLOCK = 512  # ROIs compared with all the others at once
LABEL_PAD = 0.25  # em: the label box's padding around its text
LABEL_FONT = (4.5, 9.0)  # points: the smallest and largest ROI numbers


def roi_overlaps(centres, size) -> np.ndarray:
    """Pairs of ROIs that overlap or touch: (P, 2) indices ``i < j``, each pair once."""
    c = np.asarray(centres, dtype=np.float64).reshape(-1, 2)
    w, h = size
    found = []
    for a in range(0, len(c), _BLOCK):  # blocks of rows: memory O(block x n), not O(n^2)
        i = np.arange(a, min(a + _BLOCK, len(c)))
        near = (np.abs(c[i, None, 0] - c[None, :, 0]) <= w) & (np.abs(c[i, None, 1] - c[None, :, 1]) <= h)
        near &= np.arange(len(c))[None, :] > i[:, None]
        ii, jj = np.nonzero(near)
        found.append(np.stack([i[ii], jj], axis=1))
    return np.concatenate(found) if found else np.zeros((0, 2), dtype=np.int64)


def _coverage(centres, size, shape) -> np.ndarray:
    """How many ROIs cover each pattern pixel (summed-area table of the ROI corners)."""
    w, h = size
    H, W = shape
    acc = np.zeros((H + 1, W + 1), dtype=np.int32)
    x0 = np.clip(np.rint(centres[:, 0] - (w - 1) / 2).astype(np.int64), 0, W)
    y0 = np.clip(np.rint(centres[:, 1] - (h - 1) / 2).astype(np.int64), 0, H)
    x1, y1 = np.clip(x0 + w, 0, W), np.clip(y0 + h, 0, H)
    for a, b, sign in ((y0, x0, 1), (y0, x1, -1), (y1, x0, -1), (y1, x1, 1)):
        np.add.at(acc, (a, b), sign)
    return acc.cumsum(axis=0).cumsum(axis=1)[:H, :W]


def _label_size(texts) -> tuple[np.ndarray, float]:
    """Width of each label box and the boxes' height, in ems (points at a 1 pt font)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    prop, t = FontProperties(size=100), TextToPath()
    widths = np.array([t.get_text_width_height_descent(s, prop, ismath=False)[0] / 100 for s in texts])
    height = t.get_text_width_height_descent("lp", prop, ismath=False)[1] / 100  # matplotlib's line box
    return widths + 2 * LABEL_PAD, height + 2 * LABEL_PAD


def _label_font(xy, widths, height) -> float:
    """The largest font (pt) at which boxes ``widths`` x ``height`` (ems) centred on ``xy``
    (points) do not overlap: two boxes are apart when their centres are far enough apart on x
    or on y."""
    if len(xy) < 2:
        return float("inf")
    best = float("inf")
    for a in range(0, len(xy) - 1, _BLOCK):
        i = np.arange(a, min(a + _BLOCK, len(xy) - 1))
        j = np.arange(len(xy))
        later = j[None, :] > i[:, None]
        dx, dy = np.abs(xy[i, None, 0] - xy[None, :, 0]), np.abs(xy[i, None, 1] - xy[None, :, 1])
        fits = np.maximum(dx / ((widths[i, None] + widths[None, :]) / 2), dy / height)
        best = min(best, float(fits[later].min()))
    return 0.9 * best  # 10% room: hinting and rounding at draw time


def roi_layout(results, *, reference=None) -> Figure:
    """The ROIs on the reference pattern, readable when they overlap.

    Each ROI's outline and its number, on a box at its centre, share a colour that differs
    from every ROI it overlaps or touches. The numbers are sized so that no two overlap (ROIs
    with the same centre share one label); the figure grows for dense layouts rather than
    the numbers becoming unreadable. The title gives the ROI size and how many ROIs overlap
    at most.

    ``reference``: an (H, W) array or a TIFF path; default the reference the results record
    (if the file is still there), else an empty detector frame.
    """
    with ResultsView(results) as v:
        ref = _processed_reference(v, reference)
        H, W = _shape(v, ref)
        w, h = v.roi_size
        centres = np.asarray(v.centres, dtype=np.float64)
    n = len(centres)
    # one label per distinct centre: ROIs at one place share it
    _, first, where = np.unique(centres, axis=0, return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))  # places in the order of their first ROI
    places, where = centres[np.sort(first)], rank[where.ravel()]
    texts = [",".join(str(k) for k in np.flatnonzero(where == p)) for p in range(len(places))]
    widths, height = _label_size(texts)
    box = (5.6, 5.4)
    panel = fit_panel((-0.5, W - 0.5, H - 0.5, -0.5), box)
    font = _label_font(places * (72 * panel[0] / W), widths, height)
    if font < LABEL_FONT[0]:  # dense: a larger figure, up to 3 times, keeps the numbers legible
        grow = min(3.0, LABEL_FONT[0] / font)
        box, font = (box[0] * grow, box[1] * grow), font * grow
    font = min(font, LABEL_FONT[1])
    fig, ax, bar = _pattern_figure((H, W), box=box, colorbar=ref is not None)
    _pattern_axes(ax, (H, W), ref, bar=bar)
    colour = np.asarray(PALETTE)[distinct_colours(n, roi_overlaps(centres, (w, h)))]
    for k, (cx, cy) in enumerate(centres):
        ax.add_patch(Rectangle((cx - w / 2, cy - h / 2), w, h, fill=False, edgecolor=colour[k], lw=1.2,
                               label=f"ROI {k}"))
    for p, (cx, cy) in enumerate(places):
        first = int(np.flatnonzero(where == p)[0])
        ax.text(cx, cy, texts[p], ha="center", va="center", fontsize=font, color="white", fontweight="bold",
                bbox={"boxstyle": f"round,pad={LABEL_PAD}", "fc": colour[first], "ec": "none", "alpha": 0.85},
                gid=f"roi-label-{p}")
    most = int(_coverage(centres, (w, h), (H, W)).max())
    detail = f"up to {most} ROIs overlap at a pixel" if most > 1 else "no two overlap"
    figure_title(fig, f"{n} ROIs of {w} x {h} px", detail)
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
        shape = _shape(v, ref)
        fig, ax, bar = _pattern_figure(shape, box=(5.8, 5.4))
        _pattern_axes(ax, shape, ref)
        _boxes(ax, v)
        mag = np.hypot(d[:, 0], d[:, 1])
        ok = np.isfinite(mag)
        if scale is None:
            top = float(mag[ok].max()) if ok.any() else 0.0
            scale = 0.5 * min(v.roi_size) / top if top > 0 else 1.0
        c = v.centres
        q = ax.quiver(c[ok, 0], c[ok, 1], d[ok, 0] * scale, d[ok, 1] * scale, mag[ok], angles="xy",
                      scale_units="xy", scale=1, cmap="plasma", width=0.006, zorder=4)
        colour_bar(q, bar, "|d| (px)")
        bad = ~ok
        if bad.any():
            ax.plot(c[bad, 0], c[bad, 1], "x", color="red", ms=8, mew=2, label="no displacement (status)")
            ax.legend(loc="lower right", fontsize=8)
        r, col = divmod(i, v.cols)
        n_ok = int((s == st.OK).sum())
        figure_title(fig, f"Point ({r}, {col}): displacement x {scale:.3g}", f"{n_ok}/{v.n_roi} ROIs ok")
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
        fig, (a0, a1, a2, a3), bars = panel_grid(4, 4, (3.0, 3.0), colorbar="each", bar_labels=0.9)
        fig.delaxes(bars[0])  # the pattern's grey levels need no scale
        a0.imshow(c["pattern"], cmap="gray", interpolation="nearest")
        a0.set_xlabel("x (px)")
        a0.set_ylabel("y (px)")
        _boxes(a0, v, highlight=int(roi))
        a0.set_title("preprocessed pattern", fontsize=9)
    for ax, bar, tile, name in ((a1, bars[1], c["reference_tile"], "reference"), (a2, bars[2], c["scan_tile"], "scan")):
        lim = float(np.abs(tile).max()) or 1.0
        im = ax.imshow(tile, cmap="gray", vmin=-lim, vmax=lim, interpolation="nearest")
        ax.set_title(f"ROI {int(roi)}, {name}", fontsize=9)
        ax.set_xlabel("x (px)")
        ax.set_ylabel("y (px)")
        fig.colorbar(im, cax=bar, label="intensity (a.u.)")
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
    a3.set_title(f"Correlation, peak height {c['peak_height']:.3f}", fontsize=9)
    fig.colorbar(im, cax=bars[3], label="normalised cross-correlation")
    figure_title(fig, f"Point ({row}, {col}), ROI {int(roi)}",
                 f"status: {st.DESCRIPTIONS.get(c['status'], c['status'])}")
    return fig
