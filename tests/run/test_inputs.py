"""The run's inputs: scan points read again for a second pass (remapping)."""

import numpy as np
import pytest

from ebsdxc.config import PreprocessConfig
from ebsdxc.io import ArraySource
from ebsdxc.run.inputs import read_points


class Counted(ArraySource):
    def __init__(self, patterns):
        super().__init__(patterns)
        self.calls = []

    def read_into(self, start, stop, out):
        self.calls.append((start, stop))
        super().read_into(start, stop, out)


def test_points_come_in_the_order_asked_one_read_a_run():
    pats = np.arange(40 * 3 * 2, dtype=">u2").reshape(40, 3, 2)  # big-endian, as some files store them
    src = Counted(pats)
    flat = np.array([7, 5, 6, 30, 8, 31, 5, 12])
    got = read_points(src, PreprocessConfig(), flat)
    np.testing.assert_array_equal(got, pats[flat])
    assert got.dtype == np.dtype("=u2")
    # runs 5-8, 5 again, 12, 30-31: four reads, not eight
    assert sorted(src.calls) == [(5, 6), (5, 9), (12, 13), (30, 32)]
    assert read_points(src, PreprocessConfig(), []).shape == (0, 3, 2)


def test_one_run_in_order_is_one_read():
    pats = np.arange(10 * 2 * 2, dtype=np.uint16).reshape(10, 2, 2)
    src = Counted(pats)
    np.testing.assert_array_equal(read_points(src, PreprocessConfig(), [3, 4, 5]), pats[3:6])
    assert src.calls == [(3, 6)]



def test_points_read_into_a_buffer_given():
    """``out`` (the remapping pass's pinned buffer) is filled and returned; runs of points in
    order are read into it in place, the rest read and placed; averaged points are copied in."""
    pats = np.arange(40 * 3 * 2, dtype=">u2").reshape(40, 3, 2)
    buffer = np.full((8, 3, 2), 7, dtype="=u2")
    into = []

    class Watched(ArraySource):
        def read_into(self, start, stop, out):
            into.append(np.shares_memory(out, buffer))
            super().read_into(start, stop, out)

    src = Watched(pats)
    flat = np.array([3, 4, 5, 20, 21, 9, 8, 30])
    got = read_points(src, PreprocessConfig(), flat, buffer)
    assert got is buffer
    np.testing.assert_array_equal(got, pats[flat])
    # 3-5, 20-21 and 30 straight into the buffer; 8-9, asked for as 9, 8, through a read of their own
    assert sorted(into) == [False, True, True, True]
    with pytest.raises(ValueError, match="out must be"):
        read_points(src, PreprocessConfig(), flat[:4], buffer)
    with pytest.raises(ValueError, match="out must be"):
        read_points(src, PreprocessConfig(), flat, buffer.astype(np.float32))
    grid = ArraySource(np.random.default_rng(0).integers(1, 500, (4, 5, 6, 7)).astype(np.uint16))
    pre = PreprocessConfig(average_neighbours=3)
    want = read_points(grid, pre, [6, 7, 12])
    out = np.empty_like(want)
    assert read_points(grid, pre, [6, 7, 12], out) is out
    np.testing.assert_array_equal(out, want)


def _averaged_one_by_one(source, pre, flat):
    # what the correlation pass does for each point: its own rows and halo, averaged
    from ebsdxc.preprocess import average_neighbours

    rows, cols, h = source.grid.rows, source.grid.cols, pre.average_neighbours // 2
    out = []
    for i in flat:
        a, b = max(0, i // cols - h) * cols, min(rows, i // cols + h + 1) * cols
        block = source.read(a, b).astype(np.float32)
        ok = (block.reshape(b - a, -1) != 0).any(axis=1)
        out.append(average_neighbours(block, cols=cols, kernel=pre.average_kernel, size=pre.average_neighbours,
                                      sigma=pre.average_sigma, present=ok, xp=np)[i - a])
    return np.stack(out)


@pytest.mark.parametrize("size,kernel,pixels", [(3, "gaussian", 1 << 28), (5, "box", 1 << 28),
                                                (3, "gaussian", 3 * 7 * 4 * 5)])
def test_averaged_points_read_a_block_of_rows_once(monkeypatch, size, kernel, pixels):
    """Neighbour-averaged points (remapping reads them again) equal each point averaged over its
    own rows, bit for bit, with a read per group of nearby rows (``pixels``: a bound that
    leaves one row of points a read), absent (all-zero) points left out of the means."""
    from ebsdxc.run import inputs

    monkeypatch.setattr(inputs, "AVERAGE_PIXELS", pixels)
    rng = np.random.default_rng(1)
    pats = rng.integers(1, 4000, (6, 7, 4, 5)).astype(np.uint16)
    pats[2, 3] = 0  # a point the scan did not record
    src = Counted(pats)
    pre = PreprocessConfig(average_neighbours=size, average_kernel=kernel)
    flat = np.array([9, 10, 11, 12, 13, 7, 8, 0, 41, 17, 24, 23, 9, 35, 1, 2, 3])
    got = read_points(src, pre, flat)
    np.testing.assert_array_equal(got, _averaged_one_by_one(ArraySource(pats), pre, flat))
    patterns_read = sum(b - a for a, b in src.calls)
    assert patterns_read < len(flat) * size * 7 / 2
    # a few points far apart (references of grains): each its neighbourhood only, as one scan
    wide = rng.integers(1, 4000, (20, 30, 4, 5)).astype(np.uint16)
    wide[1, 11] = 0
    src = Counted(wide)
    sparse = np.array([40, 3, 559, 22, 331])
    np.testing.assert_array_equal(read_points(src, pre, sparse), _averaged_one_by_one(ArraySource(wide), pre, sparse))
    assert all(b - a <= size for a, b in src.calls) and len(src.calls) <= len(sparse) * size, src.calls
