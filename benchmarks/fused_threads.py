"""The fused engine's block size (``FC_NT``) against its speed: shifted copies of smooth random
tiles (a known shift of up to 6 px per ROI, with noise) on the device, to peaks, with the plan
made for each block size in turn (the module's caps set to it), against the first block size's
results.

Usage::

    python benchmarks/fused_threads.py [--tile 256] [--mode window --max-shift 24]
        [--subpixel dft,quadratic] [--threads 512,384,256]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import median_ms  # noqa: E402


def main(argv=None):
    import cupy as cp

    from ebsdxc.backend import select_backend
    from ebsdxc.engines import EngineConfig, fused, make_engine
    from ebsdxc.preprocess import window_1d

    ap = argparse.ArgumentParser()
    ap.add_argument("--tile", type=int, default=256)
    ap.add_argument("--rois", type=int, default=45)
    ap.add_argument("--patterns", type=int, default=20)
    ap.add_argument("--mode", default="window")
    ap.add_argument("--max-shift", type=int, default=24)
    ap.add_argument("--subpixel", default="dft,quadratic")
    ap.add_argument("--threads", default="512,384,256")
    a = ap.parse_args(argv)
    be = select_backend("cuda")
    t, n, B, m = a.tile, a.rois, a.patterns, 8
    rng = np.random.default_rng(0)
    base = rng.standard_normal((n, t + 2 * m, t + 2 * m)).astype(np.float32)
    sh = rng.integers(-6, 7, (B, n, 2))
    tiles = np.stack([[base[k, m + sh[b, k, 0]:m + sh[b, k, 0] + t, m + sh[b, k, 1]:m + sh[b, k, 1] + t]
                       for k in range(n)] for b in range(B)])
    tiles = cp.asarray(tiles + 0.3 * rng.standard_normal(tiles.shape).astype(np.float32))
    ref = cp.asarray(base[:, m:m + t, m:m + t])
    caps = (fused.THREADS_MAX, fused.COLS_THREADS_MAX)
    print(f"{be.name}: {n} ROIs {t}x{t}, {B} patterns, {a.mode} mode"
          f"{f' +-{a.max_shift}' if a.mode == 'window' else ''}; median of 20 (CUDA events)", flush=True)
    for sub in a.subpixel.split(","):
        cfg = EngineConfig(mode=a.mode, max_shift=a.max_shift if a.mode == "window" else None, subpixel=sub)
        first = None
        for nt in (int(v) for v in a.threads.split(",")):
            fused.THREADS_MAX = fused.COLS_THREADS_MAX = nt
            try:
                eng = make_engine("fused", be, (t, t), cfg, window_1d=(window_1d(t), window_1d(t)))
            finally:
                fused.THREADS_MAX, fused.COLS_THREADS_MAX = caps
            eng.set_reference(ref, np.ones(n), np.zeros(n, np.uint8))
            ms = median_ms(lambda e=eng: e.locate(tiles))
            y, x = (r.get() for r in eng.locate(tiles)[:2])
            first = first or (y, x)
            err = min(np.nanmax(np.abs(y + s)) for s in (sh[..., 0].ravel(), -sh[..., 0].ravel()))
            print(f"{sub:9s} {eng.plan.threads:4d} threads: {ms:.3f} ms {B / ms * 1e3:8.0f} patterns/s; against "
                  f"{a.threads.split(',')[0]} threads max |dy| {np.nanmax(np.abs(y - first[0])):.1e} |dx| "
                  f"{np.nanmax(np.abs(x - first[1])):.1e}; NaN {int(np.isnan(y).sum())}; max |y error| {err:.3f} px",
                  flush=True)


if __name__ == "__main__":
    main()
