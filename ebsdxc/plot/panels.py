"""Figures laid out in inches, without a layout engine.

A layout engine (matplotlib's constrained layout) measures every tick label of every axes on
each draw, and ``savefig`` draws twice when one is set: for the maps of ``ebsdxc plot`` that
was most of the command's time. Here a figure's size follows from its panels and fixed
margins hold the labels, so a figure is laid out once, when it is made, and drawn once per
file.
"""

from __future__ import annotations

import math

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

__all__ = ["panel_grid", "fit_panel", "figure_title", "few_ticks", "hide_ticks", "outer_labels", "FONT", "SMALL_FONT"]

FONT = 10  # points: labels of a figure of a few panels
SMALL_FONT = 7  # small multiples (a map per ROI)

# Room in inches at FONT points (scaled with the font size of a figure).
EDGE = 0.12  # free border of the figure
TICKS_LEFT = 0.78  # y tick labels and the y label
TICKS_BOTTOM = 0.56  # x tick labels and the x label
TITLE = 0.3  # one line of a panel's title
SUPTITLE = 0.62  # the figure's two-line title (what, and which grid)
BAR_PAD, BAR_WIDTH = 0.1, 0.14  # a colour bar's distance from its panel, and its width
BAR_LABELS = 0.8  # a colour bar's tick labels and label
GAP = 0.1  # between panels that carry no labels
BAR = "<colorbar>"  # the label matplotlib gives the colour bars' axes it makes itself


def fit_panel(extent, box, *, least=1 / 3) -> tuple[float, float]:
    """Width and height in inches of a panel that shows ``extent`` (imshow's left, right,
    bottom, top) with equal scales on x and y, as large as fits in ``box`` (w, h).

    A strip (a 1 x 500 scan) would be a line: neither side is made smaller than ``least``
    of the box's, and such a panel's scales differ.
    """
    left, right, bottom, top = (float(v) for v in extent)
    ew, eh = abs(right - left), abs(bottom - top)
    bw, bh = (float(v) for v in box)
    if not (ew > 0 and eh > 0):
        return bw, bh
    scale = min(bw / ew, bh / eh)
    return max(ew * scale, least * bw), max(eh * scale, least * bh)


def panel_grid(n: int, ncol: int, panel, *, labels: str = "each", titles: bool = True, colorbar: str | None = None,
               suptitle: bool = True, bar_labels: float = BAR_LABELS, fontsize: float = FONT):
    """A figure of ``n`` panels (axes) in rows of ``ncol``, every panel ``panel`` = (w, h) inches.

    Parameters
    ----------
    n, ncol : int
        Panels, and panels per row.
    panel : (float, float)
        Size of each panel's plotting area, inches.
    labels : {"each", "outer"}
        Room for tick labels and axis labels beside every panel, or only left of the first
        column and below the lowest panel of each column (panels that share their
        coordinates: :func:`outer_labels` says which axes of which panel to label).
    titles : bool
        Room for a one-line title above every panel.
    colorbar : {None, "each", "shared"}
        A colour bar right of every panel, or one right of the grid.
    suptitle : bool
        Room for a two-line figure title.
    bar_labels : float
        Inches right of a colour bar for its tick labels and label (long category names
        need more).
    fontsize : float
        Points of the tick labels and axis labels; the margins scale with it.

    Returns
    -------
    fig : matplotlib.figure.Figure
        No layout engine: the axes stay where they are put.
    axes : list of matplotlib.axes.Axes
        ``n`` panels, row by row.
    bars : list of matplotlib.axes.Axes
        The colour bars' axes: one per panel (``"each"``), one (``"shared"``) or none.
    """
    n, ncol = int(n), int(ncol)
    if n < 1 or ncol < 1:
        raise ValueError(f"a panel grid needs n >= 1 and ncol >= 1, got n={n}, ncol={ncol}")
    if labels not in ("each", "outer"):
        raise ValueError(f"labels must be 'each' or 'outer', got {labels!r}")
    if colorbar not in (None, "each", "shared"):
        raise ValueError(f"colorbar must be None, 'each' or 'shared', got {colorbar!r}")
    ncol = min(ncol, n)
    nrow = math.ceil(n / ncol)
    pw, ph = (float(v) for v in panel)
    k = fontsize / FONT
    title = TITLE * k if titles else 0.0
    bar = BAR_PAD + BAR_WIDTH + bar_labels * k
    hgap = (TICKS_LEFT * k if labels == "each" else GAP) + (bar if colorbar == "each" else 0.0)
    vgap = (TICKS_BOTTOM * k if labels == "each" else GAP) + title
    left, bottom = EDGE + TICKS_LEFT * k, EDGE + TICKS_BOTTOM * k
    top = EDGE + (SUPTITLE if suptitle else 0.0) + title
    right = EDGE + (bar if colorbar is not None else 0.0)
    width = left + ncol * pw + (ncol - 1) * hgap + right
    height = bottom + nrow * ph + (nrow - 1) * vgap + top
    fig = Figure(figsize=(width, height))

    def rect(x, y, w, h):  # inches from the bottom-left corner -> figure fractions
        return (x / width, y / height, w / width, h / height)

    axes, bars = [], []
    for i in range(n):
        r, c = divmod(i, ncol)
        x = left + c * (pw + hgap)
        y = height - top - r * (ph + vgap) - ph
        axes.append(fig.add_axes(rect(x, y, pw, ph)))
        if colorbar == "each":
            bars.append(fig.add_axes(rect(x + pw + BAR_PAD, y, BAR_WIDTH, ph), label=BAR))
    if colorbar == "shared":
        span = height - top - bottom
        h = min(span, max(0.8 * span, ph))
        bars.append(fig.add_axes(rect(width - right + BAR_PAD, bottom + (span - h) / 2, BAR_WIDTH, h), label=BAR))
    return fig, axes, bars


def figure_title(fig: Figure, what: str, detail: str | None = None):
    """The figure's title, two lines at the top: ``what`` and ``detail`` (the grid)."""
    text = what if not detail else f"{what}\n{detail}"
    w, h = fig.get_size_inches()
    return fig.suptitle(text, y=1 - EDGE / h, va="top", fontsize=11, linespacing=1.3)


def outer_labels(n: int, ncol: int) -> list[tuple[bool, bool]]:
    """For ``n`` panels in rows of ``ncol`` laid out with ``labels="outer"``: whether each
    panel labels its x axis (no panel below it) and its y axis (first column)."""
    return [(i + ncol >= n, i % ncol == 0) for i in range(n)]


def few_ticks(axis, n: int = 4) -> None:
    """At most about ``n`` + 1 round ticks on ``axis`` (an x or y axis): each tick is several
    artists to make and draw, and a map needs few."""
    axis.set_major_locator(MaxNLocator(nbins=n, steps=[1, 2, 2.5, 5, 10]))


def hide_ticks(ax) -> None:
    """No ticks or tick labels (a panel whose coordinates another one gives)."""
    ax.set_xticks([])
    ax.set_yticks([])
