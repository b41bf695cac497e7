"""The fused ``upsampled`` kernel at the smallest FFT lengths (its plan's choice) against the
cheapest ones (:func:`ebsdxc.engines.fused.fast_length`, through ``fused.FAST_GRID_MAX``): the
same smooth shifted tiles, two rounds, and how far the results move (in window mode the
interpolant depends on the length).

Usage::

    python benchmarks/fused_upsampled_lengths.py
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import median_ms, shifted_smooth_tiles  # noqa: E402

CASES = [(128, 24, 45, 50), (112, 24, 45, 50), (96, 16, 86, 50)]  # tile, max shift, ROIs, patterns


def main():
    import cupy as cp

    from ebsdxc.backend import select_backend
    from ebsdxc.engines import EngineConfig, fused, make_engine
    from ebsdxc.preprocess import window_1d

    saved = fused.FAST_GRID_MAX
    try:
        for tile, shift, n, patterns in CASES:
            ref, scan = shifted_smooth_tiles(patterns, n, tile, tile, noise=0.05)
            tiles = cp.asarray(scan)
            first = None
            for _ in range(2):
                for fast in (saved, 100):
                    fused.FAST_GRID_MAX = fast
                    cfg = EngineConfig(mode="window", max_shift=shift, subpixel="upsampled")
                    win = (window_1d(tile), window_1d(tile))
                    eng = make_engine("fused", select_backend("cuda"), (tile, tile), cfg, window_1d=win)
                    eng.set_reference(cp.asarray(ref), np.ones(n), np.zeros(n, np.uint8))
                    y = eng.locate(tiles)[0].get()
                    ms = median_ms(lambda e=eng, x=tiles: e.locate(x))
                    first = y if first is None else first
                    print(f"{tile}x{tile} +-{shift} upsampled FFT {eng.plan.fft}: {ms:.3f} ms "
                          f"{patterns / ms * 1e3:9,.0f} patterns/s; against the first max "
                          f"{np.nanmax(np.abs(y - first)):.1e} px", flush=True)
    finally:
        fused.FAST_GRID_MAX = saved


if __name__ == "__main__":
    main()
