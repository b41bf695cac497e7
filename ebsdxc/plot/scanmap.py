"""One map over the scan, drawn where the scan points are (hexagonal grids as bricks), in a
panel of the map's own shape."""

from __future__ import annotations

import numpy as np
from matplotlib import colors
from matplotlib.collections import PatchCollection
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from .panels import FONT, SMALL_FONT, few_ticks, fit_panel, hide_ticks

__all__ = ["draw_map", "colour_bar", "map_panel", "grid_subtitle", "ordinal", "small_multiples_panel",
           "draw_small_multiples"]


def map_panel(view, shape, stride, box):
    """Panel size (in) of a map read with ``stride`` whose values are ``shape``."""
    return fit_panel(view.extent(stride, view.image_shape(shape, stride)), box)


def draw_map(ax, view, values, stride, *, cmap, norm, title=None, bar=None, bar_label=None, fontsize=FONT,
             labels=True):
    """``values`` as an image at the scan positions; ``bar``: the axes of its colour bar.

    ``labels``: coordinates on both axes (True), none (False), or (x, y) flags, as
    :func:`~ebsdxc.plot.panels.outer_labels` gives for panels sharing them.
    """
    img = view.to_image(values, stride)
    im = ax.imshow(img, cmap=cmap, norm=norm, extent=view.extent(stride, img.shape), interpolation="nearest",
                   aspect="auto")  # the panel already has the map's aspect (fit_panel)
    show_x, show_y = (labels, labels) if isinstance(labels, bool) else labels
    if show_x or show_y:
        few_ticks(ax.xaxis)
        few_ticks(ax.yaxis)
        ax.tick_params(labelsize=fontsize, labelbottom=show_x, labelleft=show_y)
        if show_x:
            ax.set_xlabel(f"x ({view.units})", fontsize=fontsize)
        if show_y:
            ax.set_ylabel(f"y ({view.units})", fontsize=fontsize)
    else:
        hide_ticks(ax)
    if title:
        ax.set_title(title, fontsize=fontsize, pad=3)
    if bar is not None:
        colour_bar(im, bar, bar_label, fontsize=fontsize)
    return im


def colour_bar(mappable, cax, label, *, fontsize=FONT):
    """A colour bar in ``cax`` labelled ``label``; a linear scale gets a few round ticks."""
    cb = cax.figure.colorbar(mappable, cax=cax)
    cb.set_label(label, fontsize=max(fontsize, 8))
    cb.ax.tick_params(labelsize=fontsize)
    if not isinstance(mappable.norm, (colors.LogNorm, colors.BoundaryNorm)):
        few_ticks(cb.ax.yaxis, 5)
    return cb


def ordinal(n) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, ..., 21st."""
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def grid_subtitle(view, stride) -> str:
    """The grid, and how it was read: "10 x 10 square grid (every 2nd row and column)"."""
    note = f" (every {ordinal(stride)} row and column)" if stride > 1 else ""
    return f"{view.rows} x {view.cols} {view.grid_kind} grid{note}"


TILE_GAP = (0.12, 0.26)  # inches between small multiples: across, and down (room for a title)


def small_multiples_panel(view, shape, stride, n, box) -> tuple[tuple[float, float], tuple[float, float], int]:
    """Sizes for ``n`` maps of ``shape`` in one panel: each map's (w, h) inches, the panel's
    (w, h) inches and the maps per row."""
    tw, th = map_panel(view, shape, stride, (box, box))
    ncol = max(1, min(n, int(np.ceil(np.sqrt(n * th / tw)))))
    nrow = -(-n // ncol)
    gx, gy = TILE_GAP
    return (tw, th), (ncol * tw + (ncol - 1) * gx, nrow * th + (nrow - 1) * gy), ncol


def draw_small_multiples(ax, view, maps, stride, tile, ncol, *, titles, cmap, norm, fontsize=SMALL_FONT):
    """Maps ``maps[:, :, k]`` side by side in one axes, ``ncol`` a row, each ``tile`` = (w, h)
    inches, with one colour scale.

    One axes holds them all (an axes per map costs more to make and draw than the maps): map
    ``k`` is ``ax.images[k]``, the first one at its true coordinates, the others shifted by
    whole tiles. Ticks give the coordinates along the first column (x, below it) and the
    first row (y, beside it); every map has a frame and its title above it.
    """
    n = maps.shape[2]
    img0 = view.to_image(maps[:, :, 0], stride)
    left, right, bottom, top = view.extent(stride, img0.shape)
    w, h = right - left, bottom - top
    gx, gy = TILE_GAP[0] * w / tile[0], TILE_GAP[1] * h / tile[1]  # the gaps in map units
    nrow = -(-n // ncol)
    frames = []
    for k in range(n):
        r, c = divmod(k, ncol)
        dx, dy = c * (w + gx), r * (h + gy)
        img = img0 if k == 0 else view.to_image(maps[:, :, k], stride)
        ax.imshow(img, cmap=cmap, norm=norm, extent=(left + dx, right + dx, bottom + dy, top + dy),
                  interpolation="nearest", aspect="auto")
        ax.text(left + dx + w / 2, top + dy - 0.05 * gy, titles[k], ha="center", va="bottom", fontsize=fontsize)
        frames.append(Rectangle((left + dx, top + dy), w, h))
    ax.add_collection(PatchCollection(frames, facecolor="none", edgecolor="black", linewidth=0.6))
    ax.set_xlim(left, left + ncol * w + (ncol - 1) * gx)
    ax.set_ylim(top + nrow * h + (nrow - 1) * gy, top)
    ax.set_frame_on(False)
    locator = MaxNLocator(nbins=3, steps=[1, 2, 2.5, 5, 10])
    xt = [v for v in locator.tick_values(left, right) if left <= v <= right]
    yt = [v for v in locator.tick_values(top, bottom) if top <= v <= bottom]
    ax.set_xticks(xt, [f"{v:g}" for v in xt])
    ax.set_yticks(yt, [f"{v:g}" for v in yt])
    ax.tick_params(labelsize=fontsize)
    ax.set_xlabel(f"x ({view.units})", fontsize=fontsize, loc="left")
    ax.set_ylabel(f"y ({view.units})", fontsize=fontsize, loc="top")
    return ax.images[0]
