"""The fused ``upsampled`` grid summed at Chebyshev nodes (``fused.GRID_NODES``, interpolated in
fc::grid_finish) against every lag summed, with the tensor-core widths of ``fused.GRID_MMA_COLUMNS``:
speed and how far the results move from the every-lag kernel's. Smooth shifted tiles with 5% noise,
median of 20, each setting planned in turn.

Usage::

    python benchmarks/fused_grid_nodes.py                 # every lag, 12 nodes; 3, 4, 6 columns
    python benchmarks/fused_grid_nodes.py 100:3 12:4 15:4  # nodes:columns
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import shifted_smooth_tiles, time_upsampled  # noqa: E402

# tile, max shift (0: full mode), ROIs, patterns
CASES = [(128, 24, 45, 50), (64, 16, 86, 50), (96, 0, 86, 50), (256, 24, 45, 20)]
SETTINGS = ["100:3", "12:3", "12:4", "12:6"]  # nodes a side (100: every lag of any default grid), columns a pass


def time_case(tile, shift, n, patterns, settings):
    import cupy as cp

    from ebsdxc.engines import fused

    ref, scan = shifted_smooth_tiles(patterns, n, tile, tile, noise=0.05)
    tiles = cp.asarray(scan)
    first = None
    mode = f"+-{shift}" if shift else "full"
    for spec in settings:
        q, cw = (int(v) for v in spec.split(":"))
        saved = fused.GRID_NODES, fused.GRID_MMA_COLUMNS
        try:
            fused.GRID_NODES, fused.GRID_MMA_COLUMNS = q, (cw,)
            eng, y, x, ms = time_upsampled(ref, tiles, shift)
        finally:
            fused.GRID_NODES, fused.GRID_MMA_COLUMNS = saved
        first = (y, x) if first is None else first
        d = np.concatenate([(y - first[0]).ravel(), (x - first[1]).ravel()])
        d = d[np.isfinite(d)]
        nan = int((np.isnan(y) != np.isnan(first[0])).sum())
        print(f"{tile}x{tile} {mode} {n} ROIs, nodes {q}, CW={eng.plan.grid_cw} (asked {cw}), FFT {eng.plan.fft}: "
              f"{ms:.3f} ms {patterns / ms * 1e3:9,.0f} patterns/s; against the first: max {np.abs(d).max():.1e} px, "
              f"RMS {np.sqrt((d ** 2).mean()):.1e}, NaN differ {nan}", flush=True)


def main(argv=None):
    settings = (argv if argv is not None else sys.argv[1:]) or SETTINGS
    for case in CASES:
        time_case(*case, settings)


if __name__ == "__main__":
    main()
