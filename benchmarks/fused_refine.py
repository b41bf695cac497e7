"""The fused engine's subpixel refinements on smooth shifted tiles (broad peaks, as of EBSD
patterns; benchmarks/fused_fft.py uses random tiles, whose noise peaks move the refinements
more): tiles on the device to peaks, and the maps kernel alone (the FFT part), full mode.

Usage::

    python benchmarks/fused_refine.py TILE METHOD [--no-compensate]   # e.g. 96 upsampled

86 ROIs of 96x96 (the paper layout), else 45 ROIs, against 50 patterns.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import median_ms, shifted_smooth_tiles  # noqa: E402


def main(argv=None):
    import cupy as cp

    from ebsdxc.backend import select_backend
    from ebsdxc.engines import EngineConfig, make_engine
    from ebsdxc.preprocess import window_1d

    ap = argparse.ArgumentParser()
    ap.add_argument("tile", type=int)
    ap.add_argument("method")
    ap.add_argument("--no-compensate", action="store_true")
    a = ap.parse_args(argv)
    h = w = a.tile
    B, n = 50, 86 if a.tile == 96 else 45
    ref, scan = shifted_smooth_tiles(B, n, h, w)
    tiles = cp.asarray(scan)
    cfg = EngineConfig(mode="full", subpixel=a.method, compensate=not a.no_compensate)
    eng = make_engine("fused", select_backend("cuda"), (h, w), cfg, window_1d=(window_1d(h), window_1d(w)))
    eng.set_reference(cp.asarray(ref), np.ones(n), np.zeros(n, np.uint8))
    ms = median_ms(lambda: eng.locate(tiles))
    maps = median_ms(lambda: eng.correlation_maps(tiles))
    print(f"{a.tile} {a.method} comp={not a.no_compensate}: {ms:.3f} ms = {B / ms * 1e3:,.0f} patterns/s "
          f"(maps kernel {maps:.3f} ms)")


if __name__ == "__main__":
    main()
