"""roi_layout stays readable when ROIs overlap: every outline drawn where its ROI is, numbers
that never cover each other, overlapping ROIs in different colours, the overlap stated."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from matplotlib import colors  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

import ebsdxc  # noqa: E402
from ebsdxc import plot  # noqa: E402
from ebsdxc.rois import layout_for  # noqa: E402


def _label_boxes(fig, renderer):
    ax = fig.axes[0]
    return {t.get_text(): t.get_bbox_patch().get_window_extent(renderer) for t in ax.texts}


def _overlapping(boxes):
    """Pairs of display boxes that share more than a hairline (0.5 px) of area."""
    bad = []
    for (a, ba), (b, bb) in itertools.combinations(boxes.items(), 2):
        w = min(ba.x1, bb.x1) - max(ba.x0, bb.x0)
        h = min(ba.y1, bb.y1) - max(ba.y0, bb.y0)
        if w > 0.5 and h > 0.5:
            bad.append((a, b))
    return bad


def _most_overlapping(centres, size, shape):
    """Brute force: the most ROIs covering one pixel."""
    count = np.zeros(shape, dtype=int)
    w, h = size
    for cx, cy in centres:
        x0, y0 = int(round(cx - (w - 1) / 2)), int(round(cy - (h - 1) / 2))
        count[y0:y0 + h, x0:x0 + w] += 1
    return count.max()


def _check_outlines(fig, centres, size):
    ax = fig.axes[0]
    rects = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert len(rects) == len(centres)
    w, h = size
    for k, (r, (cx, cy)) in enumerate(zip(rects, centres)):
        assert r.get_visible() and r.get_edgecolor()[3] > 0 and r.get_linewidth() > 0, k
        assert (r.get_x(), r.get_y(), r.get_width(), r.get_height()) == (cx - w / 2, cy - h / 2, w, h), k
    x0, x1 = sorted(ax.get_xlim())
    y0, y1 = sorted(ax.get_ylim())
    assert x0 <= centres[:, 0].min() - w / 2 and centres[:, 0].max() + w / 2 <= x1
    assert y0 <= centres[:, 1].min() - h / 2 and centres[:, 1].max() + h / 2 <= y1
    return rects


def test_paper_layout_outlines_numbers_and_colours(tmp_path, build):
    """The seed paper's 86 ROIs of 96 x 96 px on a 480 x 480 pattern: up to 6 cover a pixel."""
    cfg = ebsdxc.load_config("paper-86roi-96")[0]
    layout = layout_for(cfg.roi, (480, 480))
    path = build.layout(tmp_path / "paper.h5", layout.centres, layout.size, (480, 480))
    fig = plot.roi_layout(path)
    rects = _check_outlines(fig, layout.centres, layout.size)
    renderer, img = build.rendered(fig, dpi=150)
    assert img.std() > 10
    boxes = _label_boxes(fig, renderer)
    assert sorted(boxes, key=int) == [str(k) for k in range(86)]
    assert not _overlapping(boxes), "ROI numbers cover each other"
    assert min(t.get_fontsize() for t in fig.axes[0].texts) >= 4.5
    # each number sits on its ROI's centre, in its ROI's colour
    for t, r, (cx, cy) in zip(fig.axes[0].texts, rects, layout.centres):
        assert t.get_position() == (cx, cy)
        assert colors.same_color(t.get_bbox_patch().get_facecolor()[:3], r.get_edgecolor()[:3])
    # ROIs that overlap or touch never share a colour
    pairs = plot.pattern.roi_overlaps(layout.centres, layout.size)
    edge = np.array([r.get_edgecolor() for r in rects])
    assert len(pairs) > 300
    assert not np.all(edge[pairs[:, 0]] == edge[pairs[:, 1]], axis=1).any()
    most = _most_overlapping(layout.centres, layout.size, (480, 480))
    assert most == 6
    assert fig.get_suptitle() == f"86 ROIs of 96 x 96 px\nup to {most} ROIs overlap at a pixel"


def test_close_rois_grow_the_figure_not_the_clutter(tmp_path, build):
    """Pairs of ROIs 3 px apart on a 256 px pattern: numbers at the default size would cover
    each other; the figure grows until they are legible."""
    rng = np.random.default_rng(5)
    first = rng.integers(30, 220, (15, 2)) + 0.5
    centres = np.concatenate([first, first + 3])
    sparse = plot.roi_layout(build.layout(tmp_path / "sparse.h5", first, (32, 32), (256, 256)))
    fig = plot.roi_layout(build.layout(tmp_path / "close.h5", centres, (32, 32), (256, 256)))
    _check_outlines(fig, centres, (32, 32))
    assert fig.get_size_inches()[0] > 1.3 * sparse.get_size_inches()[0]
    assert min(t.get_fontsize() for t in fig.axes[0].texts) >= 4.5
    renderer, _ = build.rendered(fig, dpi=72)
    boxes = _label_boxes(fig, renderer)
    assert len(boxes) == 30 and not _overlapping(boxes)


def test_rois_at_one_place_share_a_label_and_no_overlap_is_said(tmp_path, build):
    centres = np.array([[20.5, 20.5], [60.5, 20.5], [20.5, 20.5], [100.5, 60.5]])
    path = build.layout(tmp_path / "same.h5", centres, (16, 16), (128, 128))
    fig = plot.roi_layout(path)
    _check_outlines(fig, centres, (16, 16))
    assert sorted(t.get_text() for t in fig.axes[0].texts) == ["0,2", "1", "3"]
    assert fig.get_suptitle().endswith("up to 2 ROIs overlap at a pixel")
    apart = plot.roi_layout(build.layout(tmp_path / "apart.h5", centres[[0, 1, 3]], (16, 16), (128, 128)))
    assert apart.get_suptitle().endswith("no two overlap")
    edges = [colors.to_hex(p.get_edgecolor()) for p in fig.axes[0].patches]
    assert edges[0] != edges[2]  # the same place: different colours, both outlines drawn


def test_roi_overlaps_are_the_pairs_within_one_roi_size():
    rng = np.random.default_rng(3)
    centres = rng.uniform(0, 200, (40, 2))
    pairs = {tuple(p) for p in plot.pattern.roi_overlaps(centres, (30, 20)).tolist()}
    want = {(i, j) for i, j in itertools.combinations(range(40), 2)
            if abs(centres[i, 0] - centres[j, 0]) <= 30 and abs(centres[i, 1] - centres[j, 1]) <= 20}
    assert pairs == want and want
