"""Layout in inches (ebsdxc.plot.panels) and categorical colours (ebsdxc.plot.colouring)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from ebsdxc.plot.colouring import PALETTE, distinct_colours, label_pairs  # noqa: E402
from ebsdxc.plot.panels import fit_panel, outer_labels, panel_grid  # noqa: E402


def _inches(fig, ax):
    w, h = fig.get_size_inches()
    p = ax.get_position()
    return np.array([p.x0 * w, p.y0 * h, p.x1 * w, p.y1 * h])


@pytest.mark.parametrize("labels,colorbar", [("each", None), ("each", "each"), ("outer", "each"), ("outer", "shared")])
def test_panels_have_their_size_and_never_overlap(labels, colorbar):
    fig, axes, bars = panel_grid(5, 3, (2.0, 1.5), labels=labels, colorbar=colorbar)
    assert fig.get_layout_engine() is None
    assert len(axes) == 5 and len(bars) == {None: 0, "each": 5, "shared": 1}[colorbar]
    boxes = [_inches(fig, ax) for ax in axes + bars]
    for ax in axes:
        np.testing.assert_allclose(np.diff(_inches(fig, ax).reshape(2, 2), axis=0), [[2.0, 1.5]])
    w, h = fig.get_size_inches()
    for a, b in itertools.combinations(boxes, 2):
        assert min(a[2], b[2]) <= max(a[0], b[0]) + 1e-9 or min(a[3], b[3]) <= max(a[1], b[1]) + 1e-9
    for b in boxes:
        assert b[0] >= 0.5 * (labels == "each") and b[2] <= w and b[1] > 0 and b[3] < h - 0.5  # room for the title
    # labels left of the first column and below each column's lowest panel
    assert outer_labels(5, 3) == [(False, True), (False, False), (True, False), (True, True), (True, False)]


def test_panel_grid_checks_its_options():
    for kw, word in (({"labels": "some"}, "labels"), ({"colorbar": "left"}, "colorbar")):
        with pytest.raises(ValueError, match=word):
            panel_grid(2, 2, (1, 1), **kw)
    with pytest.raises(ValueError, match="n >= 1"):
        panel_grid(0, 2, (1, 1))


def test_fit_panel_keeps_the_maps_aspect_and_widens_strips():
    w, h = fit_panel((-0.5, 9.5, 4.5, -0.5), (4.0, 4.0))  # 10 x 5 map
    assert (w, h) == (4.0, 2.0)
    w, h = fit_panel((-0.5, 499.5, 0.5, -0.5), (4.0, 3.0))  # a 1 x 500 strip: not a hairline
    assert w == 4.0 and h == 1.0


def test_distinct_colours_differ_between_neighbours():
    rng = np.random.default_rng(1)
    # grains of a random Voronoi map on a grid: neighbours differ, few colours used
    seeds = rng.uniform(0, 60, (40, 2))
    r, c = np.mgrid[0:60, 0:60]
    labels = np.argmin((r[..., None] - seeds[:, 0]) ** 2 + (c[..., None] - seeds[:, 1]) ** 2, axis=-1)
    idx = np.arange(labels.size).reshape(labels.shape)
    points = np.concatenate([np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1),
                             np.stack([idx[:-1].ravel(), idx[1:].ravel()], 1)])
    pairs = label_pairs(labels, points)
    assert len(pairs) > 60 and (pairs[:, 0] < pairs[:, 1]).all()
    colour = distinct_colours(40, pairs)
    assert (colour[pairs[:, 0]] != colour[pairs[:, 1]]).all()
    assert colour.max() < 6
    # a clique larger than the palette: every colour used, none more than twice
    n = len(PALETTE) + 3
    colour = distinct_colours(n, np.array(list(itertools.combinations(range(n), 2))))
    assert set(colour) == set(range(len(PALETTE))) and np.bincount(colour).max() == 2
    assert list(distinct_colours(3, np.zeros((0, 2)))) == [0, 0, 0]
    with pytest.raises(ValueError, match="pairs"):
        distinct_colours(2, [[0, 5]])
