"""Figures of a polycrystal's results: the grains and their references, GND density, and the
strain and rotation of each grain.

They read the datasets a reference-per-grain run writes: ``grain_id`` (rows, cols; -1 = no
grain), ``grains/reference_point`` (n_grains, 2) [row, col] (-1, -1: none), ``gnd_density``
(rows, cols) 1/m^2, and ``strain`` and ``rotation`` relative to each point's grain reference.
"""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps, colors, ticker
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ..grains import neighbour_pairs
from .colouring import PALETTE, distinct_colours, label_pairs
from .panels import few_ticks, figure_title, panel_grid
from .results_view import ResultsView
from .scanmap import draw_map, grid_subtitle, map_panel

__all__ = ["grain_map", "gnd_density_map", "grain_strain_statistics", "grain_strain_table", "grain_colours",
           "NO_GRAIN"]

NO_GRAIN = "#bbbbbb"  # points in no grain
LABELLED_GRAINS = 40  # grain ids are written on the map up to this many grains
_STRAIN_PARTS = [(0, 0, "ε_xx"), (1, 1, "ε_yy"), (2, 2, "ε_zz"), (0, 1, "ε_xy"), (0, 2, "ε_xz"), (1, 2, "ε_yz")]


def _grain_ids(view, stride):
    """The grain map read with ``stride`` as float64 (NaN at padding slots), and the grain count."""
    gid = view.read_map("grain_id", stride=stride)
    gid[view.padding(gid.shape, stride)] = np.nan
    if view.has("grains/reference_point"):
        n = int(view.g["grains/reference_point"].shape[0])
    else:
        n = int(np.nanmax(gid, initial=-1)) + 1
    return gid, n


def grain_colours(grain_id, n_grains: int, *, kind: str = "square") -> np.ndarray:
    """A colour (hex string) per grain, different for grains that touch on the grid.

    Parameters
    ----------
    grain_id : (rows, cols) array
        Grain of each point, -1 (or NaN) for none.
    n_grains : int
    kind : {"square", "hexagonal"}
        The grid's neighbours (:func:`ebsdxc.grains.neighbour_pairs`).
    """
    g = np.asarray(grain_id, dtype=np.float64)
    labels = np.where(np.isfinite(g), g, -1).astype(np.int64)
    pairs = label_pairs(labels, neighbour_pairs(*labels.shape, kind=kind))
    return np.asarray(PALETTE)[distinct_colours(n_grains, pairs)] if n_grains else np.zeros(0, dtype="<U7")


def grain_map(results, *, max_points=1_000_000, labels=None) -> Figure:
    """The grains, in colours that differ between neighbours, and each grain's reference point.

    Points in no grain (-1) are grey. A star marks the reference point of each grain (the
    point its strain is measured against); a grain without a usable reference is marked with
    a cross at its centroid. The image holds the grain ids (``images[0].get_array()``).

    Parameters
    ----------
    results : str or os.PathLike
        Results file holding ``grain_id`` (and ``grains/reference_point``).
    max_points : int
        Largest number of scan points drawn; bigger scans are drawn every n-th point.
    labels : bool, optional
        Write each grain's id beside its marker (default: up to 40 grains).
    """
    with ResultsView(results) as v:
        s = v.stride(max_points)
        gid, n = _grain_ids(v, s)
        refs = v.g["grains/reference_point"][...] if v.has("grains/reference_point") else np.full((n, 2), -1)
        kind = v.grid_kind if s == 1 else "square"  # every other row of a hexagonal grid is a square grid
        palette = grain_colours(gid, n, kind=kind)
        cmap = colors.ListedColormap([NO_GRAIN, *palette]).with_extremes(bad=(0, 0, 0, 0))
        norm = colors.BoundaryNorm(np.arange(-1.5, n), cmap.N)
        fig, (ax,), (room,) = panel_grid(1, 1, map_panel(v, gid.shape, s, (5.2, 4.8)), titles=False,
                                         colorbar="each", bar_labels=1.6)
        draw_map(ax, v, gid, s, cmap=cmap, norm=norm)
        has_ref = (refs[:, 0] >= 0) & (refs[:, 1] >= 0)
        xy = v.xy(refs[has_ref, 0], refs[has_ref, 1])
        ax.plot(xy[:, 0], xy[:, 1], "*", ms=11, mfc="white", mec="black", mew=0.8, ls="none", zorder=4,
                gid="reference-points")
        # a grain without a reference: a cross where its points are (as read)
        rr, cc = np.nonzero(np.isfinite(gid) & (gid >= 0))
        g_of = gid[rr, cc].astype(np.int64)
        pos = v.xy(rr * s, cc * s)
        count = np.bincount(g_of, minlength=n)[:n]
        with np.errstate(invalid="ignore", divide="ignore"):
            centroid = np.stack([np.bincount(g_of, pos[:, k], minlength=n)[:n] / count for k in (0, 1)], axis=1)
        lacking = np.flatnonzero(~has_ref & (count > 0))
        ax.plot(centroid[lacking, 0], centroid[lacking, 1], "X", ms=9, mfc="black", mec="white", mew=0.8, ls="none",
                zorder=4, gid="grains-without-reference")
        if labels if labels is not None else n <= LABELLED_GRAINS:
            at = np.full((n, 2), np.nan)
            at[has_ref] = xy
            at[lacking] = centroid[lacking]
            for g in np.flatnonzero(np.isfinite(at[:, 0])):
                ax.annotate(str(g), at[g], xytext=(5, 4), textcoords="offset points", fontsize=7, zorder=5,
                            bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.75})
        # the legend goes where a colour bar would: grains are categories, not a scale
        box = room.get_position()
        fig.delaxes(room)
        fig.legend(handles=[Line2D([], [], marker="*", ms=11, mfc="white", mec="black", ls="none",
                                   label="reference point"),
                            Line2D([], [], marker="X", ms=9, mfc="black", mec="white", ls="none",
                                   label="no reference\n(at the centroid)"),
                            Patch(fc=NO_GRAIN, label="no grain")],
                   loc="upper left", bbox_to_anchor=(box.x0, box.y1), fontsize=8, frameon=False)
        n_ref = int(has_ref.sum())
        figure_title(fig, f"{n} grains, {n_ref} with a reference point", grid_subtitle(v, s))
    return fig


def gnd_density_map(results, *, max_points=1_000_000) -> Figure:
    """Geometrically necessary dislocation density on a log colour scale, 1/m^2.

    The colour limits are the smallest and largest positive density in the map; points
    without a value (NaN) are transparent.
    """
    with ResultsView(results) as v:
        s = v.stride(max_points)
        rho = v.read_map("gnd_density", stride=s)
        rho[v.padding(rho.shape, s)] = np.nan
        positive = rho[np.isfinite(rho) & (rho > 0)]
        if positive.size:
            lo, hi = float(positive.min()), float(positive.max())
            if hi <= lo:  # one value: a decade around it
                lo, hi = lo / np.sqrt(10), hi * np.sqrt(10)
        else:
            lo, hi = 1.0, 10.0
        cmap = colormaps["viridis"].with_extremes(bad=(0, 0, 0, 0))
        fig, (ax,), (bar,) = panel_grid(1, 1, map_panel(v, rho.shape, s, (5.2, 4.8)), titles=False, colorbar="each")
        draw_map(ax, v, rho, s, cmap=cmap, norm=colors.LogNorm(lo, hi), bar=bar, bar_label="GND density (1/m²)")
        _log_ticks(bar.yaxis, lo, hi)
        bad = int((~np.isfinite(rho) & ~v.padding(rho.shape, s)).sum())
        zero = int((np.isfinite(rho) & (rho <= 0)).sum())
        notes = [f"{bad} points without a value"] * bool(bad) + [f"{zero} at zero (not drawn)"] * bool(zero)
        figure_title(fig, "GND density" + (f" ({', '.join(notes)})" if notes else ""), grid_subtitle(v, s))
    return fig


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _power_of_ten(value, _pos=None) -> str:
    """``3×10¹²``: plain text, not mathtext (whose parser costs a tenth of a second to build)."""
    if not value > 0:
        return ""
    exponent = int(np.floor(np.log10(value) + 1e-9))
    mantissa = value / 10.0 ** exponent
    power = f"10{str(exponent).translate(_SUPERSCRIPT)}"
    return power if abs(mantissa - 1) < 1e-6 else f"{mantissa:.3g}×{power}"


def _log_ticks(axis, lo, hi) -> None:
    """Labelled ticks of a log scale from ``lo`` to ``hi``: powers of ten over many decades,
    1, 2 and 5 times them over a few, every integer multiple within one."""
    decades = np.log10(hi / lo)
    subs = (1.0,) if decades > 3 else (1.0, 3.0) if decades > 1.5 else (1.0, 2.0, 5.0) if decades > 0.8 \
        else np.arange(1.0, 10.0)
    axis.set_major_locator(ticker.LogLocator(subs=subs))
    axis.set_major_formatter(ticker.FuncFormatter(_power_of_ten))
    axis.set_minor_locator(ticker.NullLocator())


def grain_strain_table(results, *, frame="sample", max_points=1_000_000) -> dict:
    """Per grain: the mean and spread of the six strain components (10^-3) and of the
    rotation magnitude ``|ω|`` (mrad), both relative to the grain's reference.

    Returns a dict: ``grain`` (G,) ids 0..G-1; ``points`` (G,) scan points in the grain (as
    read: every n-th for large scans); ``quantities`` (7 labels); and (G, 7) arrays ``count``
    (points with a finite value), ``mean``, ``std`` (standard deviation, ddof = 0), ``p5``,
    ``p95`` (percentiles), NaN where a grain has no value.
    """
    if frame not in ("sample", "crystal"):
        raise ValueError(f"frame must be 'sample' or 'crystal', got {frame!r}")
    suffix = "" if frame == "sample" else "_crystal"
    with ResultsView(results) as v:
        s = v.stride(max_points)
        gid, n = _grain_ids(v, s)

        def six(block):
            return np.stack([block[..., i, j] for i, j, _ in _STRAIN_PARTS], axis=-1).astype(np.float64) * 1e3

        def magnitude(block):
            w = block.astype(np.float64)
            return np.sqrt(w[..., 2, 1] ** 2 + w[..., 0, 2] ** 2 + w[..., 1, 0] ** 2) * 1e3

        values = [v.read_map(f"strain{suffix}", stride=s, reduce=six)]
        if v.has(f"rotation{suffix}"):
            values.append(v.read_map(f"rotation{suffix}", stride=s, reduce=magnitude)[..., None])
        else:
            values.append(np.full(gid.shape + (1,), np.nan))
    values = np.concatenate(values, axis=-1).reshape(-1, 7)
    g = gid.ravel()
    inside = np.isfinite(g) & (g >= 0) & (g < n)
    g, values = g[inside].astype(np.int64), values[inside]
    order = np.argsort(g, kind="stable")
    g, values = g[order], values[order]
    edges = np.searchsorted(g, np.arange(n + 1))
    out = {k: np.full((n, 7), np.nan) for k in ("mean", "std", "p5", "p95")}
    out["count"] = np.zeros((n, 7), dtype=np.int64)
    for k in range(n):
        block = values[edges[k]:edges[k + 1]]
        for q in range(7):
            x = block[:, q]
            x = x[np.isfinite(x)]
            out["count"][k, q] = x.size
            if x.size:
                out["mean"][k, q], out["std"][k, q] = x.mean(), x.std()
                out["p5"][k, q], out["p95"][k, q] = np.percentile(x, [5, 95])
    return {"grain": np.arange(n), "points": np.diff(edges), "stride": s,
            "quantities": [f"{label} (10⁻³)" for *_, label in _STRAIN_PARTS] + ["|ω| (mrad)"], **out}


def grain_strain_statistics(results, *, frame="sample", max_points=1_000_000) -> Figure:
    """Per grain (x = grain id): the mean ± standard deviation of the six strain components
    (10^-3) and of the rotation magnitude (mrad), with the 5th to 95th percentile as a thin
    line, and the number of points of each grain in the grain map's colours.

    The numbers are :func:`grain_strain_table`'s.
    """
    t = grain_strain_table(results, frame=frame, max_points=max_points)
    with ResultsView(results) as v:
        gid, n = _grain_ids(v, t["stride"])
        palette = grain_colours(gid, n, kind=v.grid_kind if t["stride"] == 1 else "square")
        subtitle = grid_subtitle(v, t["stride"])
    ids = t["grain"]
    width = float(np.clip(1.6 + 0.09 * max(n, 1), 3.2, 7.5))
    fig, axes, _ = panel_grid(8, 2, (width, 1.45), titles=False)
    a0 = axes[0]
    a0.bar(ids, t["points"], color=palette if n else None, width=0.8)
    a0.set_ylabel("points")
    for q, ax in enumerate(axes[1:]):
        ax.axhline(0, color="#999999", lw=0.6, zorder=0)
        ax.vlines(ids, t["p5"][:, q], t["p95"][:, q], color="#b9cbe6", lw=5, label="5th–95th percentile")
        ax.errorbar(ids, t["mean"][:, q], yerr=t["std"][:, q], fmt="o", ms=3, capsize=2, lw=1.0, color="#1f4e99",
                    label="mean ± std")
        ax.set_ylabel(t["quantities"][q])
        few_ticks(ax.yaxis)
    for ax in axes:
        ax.set_xlabel("grain id")
        ax.set_xlim(-0.6, max(n, 1) - 0.4)
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[1].legend(fontsize=7, loc="best")
    figure_title(fig, f"Strain and rotation per grain ({frame} frame, relative to each grain's reference)",
                 subtitle)
    return fig
