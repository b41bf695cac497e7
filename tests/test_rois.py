"""Tests of ebsdxc.rois: layouts, centres files, the inside check and tile extraction."""

from __future__ import annotations

import numpy as np
import pytest

from ebsdxc import rois
from ebsdxc.errors import InputError

# (pattern (H, W), grid (rows, cols), size (w, h) or int, margin)
GRID_CASES = [
    ((60, 80), (5, 5), 8, 0),
    ((60, 80), (3, 7), (9, 9), 2),
    ((61, 79), (4, 6), (10, 7), 3),
    ((101, 57), (7, 3), (11, 12), 5),
    ((37, 45), (9, 10), (5, 4), 1),
    ((200, 150), (2, 2), (31, 33), 0),
    ((33, 33), (1, 1), (7, 7), 0),
    ((33, 40), (1, 4), (8, 6), 4),
    ((40, 33), (5, 1), (6, 9), 4),
    ((17, 17), (3, 3), (1, 1), 0),
    ((20, 30), (3, 3), (30, 20), 0),  # ROI as large as the pattern: every ROI in the same place
]


def _wh(size):
    return (size, size) if np.ndim(size) == 0 else size


@pytest.mark.parametrize("shape,grid,size,margin", GRID_CASES)
def test_grid_layout_positions(shape, grid, size, margin):
    H, W = shape
    rows, cols = grid
    w, h = _wh(size)
    lay = rois.grid_layout(shape, grid=grid, size=size, margin=margin)
    assert lay.size == (w, h)
    assert lay.n == rows * cols
    c = lay.centres
    assert c.shape == (rows * cols, 2) and c.dtype == np.float64
    # Corners on whole pixels: centre - (size-1)/2 is an integer.
    o = c - [(w - 1) / 2, (h - 1) / 2]
    np.testing.assert_array_equal(o, np.round(o))
    np.testing.assert_array_equal(lay.origins, o.astype(np.int64))
    # Row-major order: ROI i is in grid row i // cols, column i % cols.
    cx = c[:, 0].reshape(rows, cols)
    cy = c[:, 1].reshape(rows, cols)
    np.testing.assert_array_equal(cx, np.broadcast_to(cx[0], (rows, cols)))
    np.testing.assert_array_equal(cy, np.broadcast_to(cy[:, :1], (rows, cols)))
    x0, y0 = cx[0] - (w - 1) / 2, cy[:, 0] - (h - 1) / 2
    if cols > 1:
        # First and last ROI touch the margins; the spacing is even to within a pixel.
        assert x0[0] == margin and x0[-1] + w == W - margin
        ideal = margin + np.linspace(0, W - 2 * margin - w, cols)
        assert np.all(np.abs(x0 - ideal) <= 0.5)
        assert np.all(np.diff(x0) >= 0)
    else:
        # A single column is centred (to within half a pixel).
        assert abs(cx[0, 0] - (W - 1) / 2) <= 0.5
    if rows > 1:
        assert y0[0] == margin and y0[-1] + h == H - margin
        ideal = margin + np.linspace(0, H - 2 * margin - h, rows)
        assert np.all(np.abs(y0 - ideal) <= 0.5)
        assert np.all(np.diff(y0) >= 0)
    else:
        assert abs(cy[0, 0] - (H - 1) / 2) <= 0.5
    lay.check_inside(shape)  # does not raise


@pytest.mark.parametrize("shape,expected", [((60, 80), 8), ((20, 20), 8), ((200, 300), 48),
                                            ((97, 130), 24), ((480, 640), 120)])
def test_grid_layout_default_size(shape, expected):
    lay = rois.grid_layout(shape, grid=(3, 3))
    assert lay.size == (expected, expected)
    lay.check_inside(shape)


def test_grid_layout_errors():
    with pytest.raises(InputError):
        rois.grid_layout((40, 50), grid=(3, 3), size=41)
    with pytest.raises(InputError):
        rois.grid_layout((40, 50), grid=(3, 3), size=(30, 20), margin=11)
    with pytest.raises(ValueError):
        rois.grid_layout((40, 50), grid=(0, 3), size=8)
    # exactly fitting with the margin is fine
    lay = rois.grid_layout((40, 50), grid=(2, 2), size=(30, 20), margin=10)
    assert lay.origins.min(axis=0).tolist() == [10, 10]


@pytest.mark.parametrize("shape,size", [((100, 120), 8), ((240, 320), (12, 11))])
def test_drop_corners_9x10(shape, size):
    full = rois.grid_layout(shape, grid=(9, 10), size=size)
    lay = rois.grid_layout(shape, grid=(9, 10), size=size, drop_corners=True)
    assert full.n == 90 and lay.n == 86
    grid = full.centres.reshape(9, 10, 2)
    corners = {tuple(grid[r, c]) for r, c in [(0, 0), (0, -1), (-1, 0), (-1, -1)]}
    kept = {tuple(p) for p in lay.centres}
    assert len(kept) == 86
    assert not kept & corners
    assert kept | corners == {tuple(p) for p in full.centres}
    # 1-row / 1-column grids have no corners to drop
    assert rois.grid_layout(shape, grid=(1, 10), size=size, drop_corners=True).n == 10


@pytest.mark.parametrize("shape,n,radius,size,centre,include", [
    ((100, 120), 8, 30, 9, None, True),
    ((100, 120), 8, 30, 9, None, False),
    ((81, 64), 5, 17.3, (10, 7), (31.5, 40.0), True),
    ((150, 150), 12, None, 16, None, True),
    ((61, 91), 1, 0, 5, None, False),
])
def test_ring_layout(shape, n, radius, size, centre, include):
    H, W = shape
    w, h = _wh(size)
    lay = rois.ring_layout(shape, n=n, radius=radius, size=size, centre=centre, include_centre=include)
    cx, cy = ((W - 1) / 2, (H - 1) / 2) if centre is None else centre
    r = min(H, W) / 3 if radius is None else radius
    a = 2 * np.pi * np.arange(n) / n
    ideal = np.stack([cx + r * np.cos(a), cy + r * np.sin(a)], axis=-1)
    if include:
        ideal = np.vstack([[cx, cy], ideal])
    assert lay.n == n + int(include)
    assert lay.size == (w, h)
    assert np.all(np.abs(lay.centres - ideal) <= 0.5 + 1e-12)
    o = lay.centres - [(w - 1) / 2, (h - 1) / 2]
    np.testing.assert_array_equal(o, np.round(o))


def test_roi_layout_rejects_off_grid_centres_and_layout_from_centres_snaps():
    with pytest.raises(ValueError):
        rois.RoiLayout(np.array([[10.0, 10.0]]), (8, 8))  # even size needs half pixels
    with pytest.raises(ValueError):
        rois.RoiLayout(np.array([[10.5, 10.0]]), (7, 7))
    with pytest.raises(ValueError):
        rois.RoiLayout(np.zeros((0, 2)), (7, 7))
    with pytest.raises(ValueError):
        rois.RoiLayout(np.array([[10.0, 10.0]]), (0, 7))
    lay = rois.layout_from_centres([[10.2, 20.9], [3.0, 4.4]], size=(8, 7))
    np.testing.assert_array_equal(lay.centres, [[10.5, 21.0], [3.5, 4.0]])
    np.testing.assert_array_equal(lay.origins, [[7, 18], [0, 1]])


# ---------------------------------------------------------------- centres files

GOOD_FILES = {
    "spaces.txt": "# ROI centres\n10 20\n  30.5\t40.25  \n\n# trailing comment\n-1 2e1\n",
    "comma.csv": "# x,y\n10,20\n30.5, 40.25\n-1,2e1  # inline comment\n",
    "one_line.txt": "10 20\n",
    "inline.txt": "10 20  # first\n30.5 40.25\n-1 20\n",
    # a comma in a comment of a whitespace-separated file does not make it CSV
    "comment_comma.txt": "# centres: x, y (px)\n10 20\n30.5 40.25\n-1 20\n",
}
EXPECTED = {
    "spaces.txt": [[10, 20], [30.5, 40.25], [-1, 20]],
    "comma.csv": [[10, 20], [30.5, 40.25], [-1, 20]],
    "one_line.txt": [[10, 20]],
    "inline.txt": [[10, 20], [30.5, 40.25], [-1, 20]],
    "comment_comma.txt": [[10, 20], [30.5, 40.25], [-1, 20]],
}


@pytest.mark.parametrize("name", sorted(GOOD_FILES))
def test_read_centres_good(tmp_path, name):
    p = tmp_path / name
    p.write_text(GOOD_FILES[name])
    c = rois.read_centres(p)
    assert c.shape == (len(EXPECTED[name]), 2)
    np.testing.assert_array_equal(c, np.array(EXPECTED[name], dtype=float))


BAD_FILES = {
    "empty.txt": "",
    "only_comments.txt": "# nothing\n# here\n",
    "one_column.txt": "1\n2\n3\n",
    "three_columns.csv": "1,2,3\n4,5,6\n",
    "ragged.txt": "1 2\n3\n",
    "words.txt": "x y\n1 2\n",
    "nan.txt": "nan 20\n30 40\n",
    "inf.csv": "10,inf\n30,40\n",
}


@pytest.mark.filterwarnings("ignore:loadtxt")
@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_read_centres_bad_names_file(tmp_path, name):
    p = tmp_path / name
    p.write_text(BAD_FILES[name])
    with pytest.raises(InputError) as ei:
        rois.read_centres(p)
    assert ei.value.path == str(p)
    assert str(p) in str(ei.value)


def test_read_centres_missing_file(tmp_path):
    p = tmp_path / "nope.txt"
    with pytest.raises(InputError) as ei:
        rois.read_centres(p)
    assert str(p) in str(ei.value)


# ---------------------------------------------------------------- inside check

@pytest.mark.parametrize("shape,size", [((30, 40), (6, 5)), ((31, 17), (4, 4)), ((9, 9), (1, 1)),
                                        ((25, 12), (12, 25))])
def test_check_inside(shape, size):
    H, W = shape
    w, h = size
    mid_x, mid_y = (W - w) // 2, (H - h) // 2

    def at(x0, y0):
        return rois.RoiLayout(np.array([[x0 + (w - 1) / 2, y0 + (h - 1) / 2]]), size)

    # touching each edge, and all four corners: fine
    for x0, y0 in [(0, mid_y), (W - w, mid_y), (mid_x, 0), (mid_x, H - h),
                   (0, 0), (W - w, H - h), (0, H - h), (W - w, 0)]:
        at(x0, y0).check_inside(shape)
    # one pixel outside on each side: an error naming the file
    for x0, y0 in [(-1, mid_y), (W - w + 1, mid_y), (mid_x, -1), (mid_x, H - h + 1)]:
        with pytest.raises(InputError) as ei:
            at(x0, y0).check_inside(shape, path="centres.txt")
        assert "centres.txt" in str(ei.value)
    # one bad ROI among good ones is enough
    good = at(0, 0).centres
    bad = at(-1, 0).centres
    lay = rois.RoiLayout(np.vstack([good, good, bad]), size)
    with pytest.raises(InputError):
        lay.check_inside(shape)


# ---------------------------------------------------------------- extraction

@pytest.mark.parametrize("dtype", [np.uint16, np.float32, np.float64])
@pytest.mark.parametrize("shape,grid,size,B", [((23, 31), (3, 4), (5, 7), 3),
                                               ((40, 33), (2, 3), (1, 1), 2),
                                               ((16, 16), (1, 1), (16, 16), 1),
                                               ((50, 61), (4, 3), (13, 6), 4)])
def test_extract_tiles_matches_loop(dtype, shape, grid, size, B):
    rng = np.random.default_rng(7)
    pats = (rng.random((B,) + shape) * 1000).astype(dtype)
    lay = rois.grid_layout(shape, grid=grid, size=size)
    tiles = rois.extract_tiles(pats, lay)
    w, h = size
    assert tiles.shape == (B, lay.n, h, w)
    assert tiles.dtype == pats.dtype
    for b in range(B):
        for k, (x0, y0) in enumerate(lay.origins):
            np.testing.assert_array_equal(tiles[b, k], pats[b, y0:y0 + h, x0:x0 + w])


def test_extract_tiles_explicit_centres():
    # ROI centre (x, y) = (4, 2), size 3x5 (w=3, h=5) -> columns 3..5, rows 0..4
    pats = np.arange(2 * 8 * 9).reshape(2, 8, 9)
    lay = rois.layout_from_centres([[4, 2]], size=(3, 5))
    t = rois.extract_tiles(pats, lay)
    np.testing.assert_array_equal(t[:, 0], pats[:, 0:5, 3:6])


# ---------------------------------------------------------------- grid strings

@pytest.mark.parametrize("text,expected", [("5x7", (5, 7)), ("5X7", (5, 7)), ("5*7", (5, 7)),
                                           (" 9x10 ", (9, 10)), ("1x1", (1, 1)),
                                           ("100x1000", (100, 1000))])
def test_parse_grid_good(text, expected):
    assert rois.parse_grid(text) == expected


@pytest.mark.parametrize("text", ["5", "5x", "x5", "5x7x2", "0x5", "5x0", "-1x5", "5.5x2", "",
                                  "axb", "1000x1000", "5,7"])
def test_parse_grid_bad(text):
    with pytest.raises(ValueError):
        rois.parse_grid(text)
