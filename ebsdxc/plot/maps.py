"""Maps over the scan: displacement per ROI, peak height, status, strain and rotation.

Each function takes a results file (path) and returns a :class:`matplotlib.figure.Figure`
made without pyplot (nothing is shown; ``fig.savefig`` or Jupyter displays it). Maps are read
with a stride that keeps them under ``max_points`` points (:class:`ResultsView`).
"""

from __future__ import annotations

import numpy as np
from matplotlib import colors
from matplotlib.figure import Figure

from .. import status as st
from .panels import SMALL_FONT, figure_title, outer_labels, panel_grid
from .results_view import ResultsView
from .scanmap import colour_bar, draw_map, draw_small_multiples, grid_subtitle, map_panel, small_multiples_panel

__all__ = ["displacement_maps", "peak_height_map", "status_map", "strain_maps", "rotation_maps"]

DIVERGING = "RdBu_r"
STATUS_COLOURS = {st.OK: "#2ca02c", st.PEAK_ON_BORDER: "#ff7f0e", st.CONSTANT_TILE: "#8c564b",
                  st.NOT_FINITE: "#d62728", st.NOT_PROCESSED: "#bbbbbb", st.MISSING_PATTERN: "#ffffff",
                  st.OUTSIDE_MASK: "#9467bd", st.NO_REFERENCE: "#e377c2", st.SUBPIXEL_FAILED: "#17becf"}
STATUS_NAMES = {st.OK: "ok", st.PEAK_ON_BORDER: "peak on border", st.CONSTANT_TILE: "constant",
                st.NOT_FINITE: "NaN/Inf", st.NOT_PROCESSED: "not processed",
                st.MISSING_PATTERN: "no pattern", st.OUTSIDE_MASK: "outside mask", st.NO_REFERENCE: "no reference",
                st.SUBPIXEL_FAILED: "subpixel fit failed"}


def _symmetric(values, floor=1e-12):
    """Colour limits centred on zero that hold 99% of the finite values."""
    v = np.abs(values[np.isfinite(values)])
    lim = float(np.percentile(v, 99)) if v.size else 1.0
    return colors.Normalize(-max(lim, floor), max(lim, floor))


def _small_multiple_box(n):
    """Inches per map when ``n`` maps share a figure: a few large, many small."""
    return 2.3 if n <= 4 else 1.7 if n <= 16 else 1.35 if n <= 36 else 1.05


def displacement_maps(results, *, component="magnitude", rois=None, max_points=250_000) -> Figure:
    """One map per ROI of its displacement over the scan.

    The maps are small multiples with one colour scale in one axes (``ax.images[k]`` is the
    k-th ROI's map): the ticks give the coordinates along the first column and row, the other
    maps show the same scan.

    Parameters
    ----------
    results : str or os.PathLike
        Results file.
    component : {"magnitude", "dx", "dy"}
        What to show: ``|d|`` (sequential colours from 0) or one component (diverging colours
        centred on zero). px.
    rois : sequence of int, optional
        ROIs to show (default: all).
    max_points : int
        Largest number of scan points per map; bigger scans are drawn every n-th point.
    """
    if component not in ("magnitude", "dx", "dy"):
        raise ValueError(f"component must be 'magnitude', 'dx' or 'dy', got {component!r}")
    with ResultsView(results) as v:
        rois = list(range(v.n_roi)) if rois is None else [int(r) for r in rois]
        bad = [r for r in rois if not 0 <= r < v.n_roi]
        if bad or not rois:
            raise ValueError(f"ROIs must be in 0..{v.n_roi - 1}, got {bad or 'none'}")
        s = v.stride(max_points)

        def pick(block):
            d = block[:, :, rois, :].astype(np.float64)
            if component == "magnitude":
                return np.hypot(d[..., 0], d[..., 1])
            return d[..., 0 if component == "dx" else 1]

        maps = v.read_map("displacement", stride=s, reduce=pick)  # (r, c, k)
        finite = maps[np.isfinite(maps)]
        if component == "magnitude":
            top = float(np.percentile(finite, 99)) if finite.size else 1.0
            norm, cmap, label = colors.Normalize(0, max(top, 1e-6)), "viridis", "|d| (px)"
        else:
            norm, cmap, label = _symmetric(maps, 1e-6), DIVERGING, f"{component} (px)"
        n = len(rois)
        tile, panel, ncol = small_multiples_panel(v, maps.shape, s, n, _small_multiple_box(n))
        fig, (ax,), (bar,) = panel_grid(1, 1, panel, colorbar="shared", fontsize=SMALL_FONT)
        im = draw_small_multiples(ax, v, maps, s, tile, ncol, titles=[f"ROI {k}" for k in rois], cmap=cmap,
                                  norm=norm)
        colour_bar(im, bar, label, fontsize=SMALL_FONT)
        figure_title(fig, f"Displacement {component} per ROI", grid_subtitle(v, s))
    return fig


def peak_height_map(results, *, roi=None, max_points=1_000_000) -> Figure:
    """Peak height (normalised cross-correlation) over the scan: the mean over ROIs, or one ROI's."""
    with ResultsView(results) as v:
        s = v.stride(max_points)
        if roi is None:
            def mean(block):
                with np.errstate(invalid="ignore"):
                    ok = np.isfinite(block)
                    total = np.where(ok, block, 0).sum(axis=2)
                    return np.where(ok.any(axis=2), total / np.maximum(ok.sum(axis=2), 1), np.nan)
            m = v.read_map("peak_height", stride=s, reduce=mean)
            what = "mean over ROIs"
        else:
            m = v.read_map("peak_height", (int(roi),), stride=s)
            what = f"ROI {int(roi)}"
        fig, (ax,), (bar,) = panel_grid(1, 1, map_panel(v, m.shape, s, (4.6, 4.2)), titles=False, colorbar="each",
                                        bar_labels=1.0)
        draw_map(ax, v, m, s, cmap="magma", norm=colors.Normalize(min(0.0, float(np.nanmin(m, initial=0))), 1.0),
                  bar=bar, bar_label="peak height (normalised cross-correlation)")
        figure_title(fig, f"Peak height, {what}", grid_subtitle(v, s))
    return fig


def _status_cmap():
    codes = sorted(STATUS_COLOURS)
    cmap = colors.ListedColormap([STATUS_COLOURS[c] for c in codes])
    norm = colors.BoundaryNorm(np.arange(len(codes) + 1) - 0.5, len(codes))
    return codes, cmap, norm


def status_map(results, *, roi=None, max_points=1_000_000) -> Figure:
    """Where the matches failed, and why.

    Without ``roi``: the fraction of ROIs with status ok at each point, and each point's most
    frequent status other than ok (ok where all are). With ``roi``: that ROI's status.
    """
    codes, cmap, norm = _status_cmap()
    with ResultsView(results) as v:
        s = v.stride(max_points)
        if roi is None:
            def ok_fraction(block):
                return (block == st.OK).mean(axis=2)

            def worst(block):
                counts = np.stack([(block == c).sum(axis=2) for c in codes], axis=-1)
                counts[..., codes.index(st.OK)] = 0
                top = np.argmax(counts, axis=-1)
                return np.where(counts.max(axis=-1) > 0, top, codes.index(st.OK))

            frac = v.read_map("status", stride=s, reduce=ok_fraction)
            cat = v.read_map("status", stride=s, reduce=worst)
            fig, (a0, a1), (b0, b1) = panel_grid(2, 2, map_panel(v, frac.shape, s, (4.2, 4.0)), colorbar="each",
                                                 bar_labels=1.3)
            draw_map(a0, v, frac, s, cmap="cividis", norm=colors.Normalize(0, 1), bar=b0,
                      bar_label="ROIs with status ok (fraction)", title="ROIs ok")
            im = draw_map(a1, v, cat, s, cmap=cmap, norm=norm, title="Most frequent failure")
        else:
            raw = v.read_map("status", (int(roi),), stride=s)
            cat = np.searchsorted(codes, raw).astype(np.float64)
            fig, (a1,), (b1,) = panel_grid(1, 1, map_panel(v, cat.shape, s, (4.6, 4.2)), colorbar="each",
                                           bar_labels=1.3)
            im = draw_map(a1, v, cat, s, cmap=cmap, norm=norm, title=f"Status of ROI {int(roi)}")
        cb = fig.colorbar(im, cax=b1, ticks=np.arange(len(codes)), label="status")
        cb.ax.set_yticklabels([f"{c} {STATUS_NAMES[c]}" for c in codes], fontsize=7)
        figure_title(fig, "Status", grid_subtitle(v, s))
    return fig


_STRAIN_PARTS = [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]
_AXES = "xyz"


def _tensor_maps(results, name, parts, *, frame, max_points, title, ncol):
    """Maps of tensor components ``parts`` [(i, j, label), ...] of ``name`` (x 1e3), diverging
    around zero, each with its colour bar."""
    if frame not in ("sample", "crystal"):
        raise ValueError(f"frame must be 'sample' or 'crystal', got {frame!r}")
    name = name if frame == "sample" else f"{name}_crystal"
    with ResultsView(results) as v:
        s = v.stride(max_points)
        maps = [v.read_map(name, (i, j), stride=s) * 1e3 for i, j, _ in parts]
        fig, axes, bars = panel_grid(len(parts), ncol, map_panel(v, maps[0].shape, s, (3.0, 2.8)), labels="outer",
                                     colorbar="each")
        for ax, bar, m, (_, _, label), shown in zip(axes, bars, maps, parts, outer_labels(len(parts), ncol)):
            draw_map(ax, v, m, s, cmap=DIVERGING, norm=_symmetric(m), title=label, bar=bar, bar_label=label,
                     labels=shown)
        figure_title(fig, f"{title}, {frame} frame", grid_subtitle(v, s))
    return fig


def strain_maps(results, *, frame="sample", max_points=1_000_000) -> Figure:
    """The six components of the elastic strain (HR-EBSD), in 10^-3, colours centred on zero.

    ``frame``: ``"sample"`` (the ``strain`` dataset) or ``"crystal"`` (``strain_crystal``).
    """
    parts = [(i, j, f"ε_{_AXES[i]}{_AXES[j]} (10⁻³)") for i, j in _STRAIN_PARTS]
    return _tensor_maps(results, "strain", parts, frame=frame, max_points=max_points, title="Elastic strain",
                        ncol=3)


def rotation_maps(results, *, frame="sample", max_points=1_000_000) -> Figure:
    """Lattice rotation about x, y and z (``w = log R``) in mrad, colours centred on zero.

    ``frame``: ``"sample"`` (the ``rotation`` dataset) or ``"crystal"`` (``rotation_crystal``).
    """
    # w is antisymmetric: the rotation about x is w[2, 1], about y w[0, 2], about z w[1, 0].
    parts = [(2, 1, "ω_x (mrad)"), (0, 2, "ω_y (mrad)"), (1, 0, "ω_z (mrad)")]
    return _tensor_maps(results, "rotation", parts, frame=frame, max_points=max_points, title="Lattice rotation",
                        ncol=3)
