"""The run's inputs: scan points read again for a second pass (remapping)."""

import numpy as np

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
