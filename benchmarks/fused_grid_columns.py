"""The fused ``upsampled`` grid's columns per pass over the map (``fused.GRID_COLUMNS``, fc::CW in
``kernels/fftcorr.cu``), their row sums on the FP64 pipes or, with an ``m`` before the width, on
the FP64 tensor cores (``fused.GRID_MMA_COLUMNS``, fc::row_sums_mma), against its speed and
results: smooth shifted tiles with 5% noise, median of 20, each width planned in turn (a width
whose scratch does not fit falls back to 3 on the FP64 pipes).

Usage::

    python benchmarks/fused_grid_columns.py 3,6,m3,m4,m6,m8
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import shifted_smooth_tiles, time_upsampled  # noqa: E402

CASES = [(128, 24, 45, 50), (64, 16, 86, 50), (96, 0, 86, 50)]  # tile, max shift (0: full), ROIs, patterns


def time_case(tile, shift, n, patterns, widths):
    import cupy as cp

    from ebsdxc.engines import fused

    ref, scan = shifted_smooth_tiles(patterns, n, tile, tile, noise=0.05)
    tiles = cp.asarray(scan)
    first = None
    mode = f"+-{shift}" if shift else "full"
    saved = fused.GRID_COLUMNS, fused.GRID_MMA_COLUMNS
    try:
        for spec in widths:
            mma, cw = spec.startswith("m"), int(spec.lstrip("m"))
            fused.GRID_COLUMNS, fused.GRID_MMA_COLUMNS = ((3,), (cw,)) if mma else ((cw, 3), ())
            eng, y, x, ms = time_upsampled(ref, tiles, shift)
            first = (y, x) if first is None else first
            d = max(np.nanmax(np.abs(y - first[0])), np.nanmax(np.abs(x - first[1])))
            how = "tensor cores" if eng.plan.grid_mma else "FP64 pipes"
            print(f"{tile}x{tile} {mode} upsampled CW={eng.plan.grid_cw}, {how} (asked {spec}): {ms:.3f} ms "
                  f"{patterns / ms * 1e3:9,.0f} patterns/s; FFT {eng.plan.fft}; against the first max {d:.1e} px; "
                  f"NaN {int(np.isnan(y).sum())}", flush=True)
    finally:
        fused.GRID_COLUMNS, fused.GRID_MMA_COLUMNS = saved


def main(argv=None):
    args = argv if argv is not None else sys.argv[1:]
    widths = (args[0] if args else "3,6,m3,m4,m6,m8").split(",")
    for case in CASES:
        time_case(*case, widths)


if __name__ == "__main__":
    main()
