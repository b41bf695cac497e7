"""The fused ``upsampled`` kernel at the smallest FFT lengths against the cheapest ones
(:func:`ebsdxc.engines.fused.fast_length`; ``fused.FAST_GRID_MAX`` says up to which grid side
the plan takes them): the same smooth shifted tiles, two rounds, and how far the results move
(in window mode the interpolant depends on the length), at two upsampling factors.

Usage::

    python benchmarks/fused_upsampled_lengths.py
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import shifted_smooth_tiles, time_upsampled  # noqa: E402

# tile, max shift, ROIs, patterns, upsampling factor
CASES = [(128, 24, 45, 50, 16), (128, 24, 45, 50, 24), (128, 24, 45, 50, 30), (128, 24, 45, 50, 50),
         (112, 24, 45, 50, 16), (96, 16, 86, 50, 16)]


def main():
    import cupy as cp

    from ebsdxc.engines import fused

    saved = fused.FAST_GRID_MAX
    try:
        for tile, shift, n, patterns, upsample in CASES:
            ref, scan = shifted_smooth_tiles(patterns, n, tile, tile, noise=0.05)
            tiles = cp.asarray(scan)
            first = None
            for _ in range(2):
                for fast in (0, 10**6):  # smallest, cheapest
                    fused.FAST_GRID_MAX = fast
                    eng, y, _, ms = time_upsampled(ref, tiles, shift, upsample)
                    first = y if first is None else first
                    print(f"{tile}x{tile} +-{shift} upsampled {upsample} FFT {eng.plan.fft}: {ms:.3f} ms "
                          f"{patterns / ms * 1e3:9,.0f} patterns/s; against the first max "
                          f"{np.nanmax(np.abs(y - first)):.1e} px", flush=True)
    finally:
        fused.FAST_GRID_MAX = saved


if __name__ == "__main__":
    main()
