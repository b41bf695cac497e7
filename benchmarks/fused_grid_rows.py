"""The fused ``upsampled`` grid's map rows per piece (``FC_GRID_RB`` in ``kernels/fftcorr.cu``)
against its speed and results: smooth shifted tiles with 5% noise, median of 20, each setting
compiled in turn from a copy of the source (the checkout's file is left alone).

Usage::

    python benchmarks/fused_grid_rows.py 1,2,4
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import shifted_smooth_tiles, time_upsampled  # noqa: E402

DEFAULT = "#define FC_GRID_RB (FC_NX % 4 == 0 ? 4 : 1)"
CASES = [(128, 24, 45, 50), (96, 0, 86, 50), (256, 24, 45, 20)]  # tile, max shift (0: full), ROIs, patterns


def with_rows(plain, rb):
    def source(name):
        text = plain(name)
        return text.replace(DEFAULT, f"#define FC_GRID_RB {rb}") if name == "fftcorr.cu" else text
    return source


def time_case(tile, shift, n, patterns, rbs):
    import cupy as cp

    import ebsdxc.kernel_loader as kl

    plain = kl.kernel_source.__wrapped__
    ref, scan = shifted_smooth_tiles(patterns, n, tile, tile, noise=0.05)
    tiles = cp.asarray(scan)
    first = None
    mode = f"+-{shift}" if shift else "full"
    for rb in rbs:
        kl.kernel_source = with_rows(plain, rb)
        kl._module.cache_clear()
        eng, y, x, ms = time_upsampled(ref, tiles, shift)
        first = (y, x) if first is None else first
        d = max(np.nanmax(np.abs(y - first[0])), np.nanmax(np.abs(x - first[1])))
        print(f"{tile}x{tile} {mode} upsampled RB={rb}: {ms:.3f} ms {patterns / ms * 1e3:9,.0f} patterns/s; "
              f"FFT {eng.plan.fft}; against RB={rbs[0]} max {d:.1e} px; NaN {int(np.isnan(y).sum())}", flush=True)
    kl.kernel_source = plain


def main(argv=None):
    args = argv if argv is not None else sys.argv[1:]
    rbs = [int(v) for v in (args[0] if args else "1,2,4").split(",")]
    for case in CASES:
        time_case(*case, rbs)


if __name__ == "__main__":
    main()
