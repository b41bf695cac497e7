"""Fused shared-memory FFT engine against the cuFFT engine on the paper's case: 86 ROIs of
96x96 against 50 patterns (4300 correlations, full mode, 192x192 FFTs), from float32 tiles
on the device to peaks (quadratic 3x3 fit), reference spectra precomputed.

Usage::

    python benchmarks/fused_fft.py [--patterns 50] [--rois 86] [--tile 96] [--mode full|window --max-shift 16]
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
    from ebsdxc.engines import EngineConfig, make_engine
    from ebsdxc.preprocess import window_1d

    ap = argparse.ArgumentParser()
    ap.add_argument("--patterns", type=int, default=50)
    ap.add_argument("--rois", type=int, default=86)
    ap.add_argument("--tile", type=int, default=96)
    ap.add_argument("--mode", default="full")
    ap.add_argument("--max-shift", type=int, default=None)
    ap.add_argument("--subpixel", default="quadratic")
    a = ap.parse_args(argv)
    be = select_backend("cuda")
    h = w = a.tile
    B, n = a.patterns, a.rois
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((n, h, w)).astype(np.float32)
    tiles = cp.asarray(rng.standard_normal((B, n, h, w)).astype(np.float32))
    cfg = EngineConfig(mode=a.mode, max_shift=a.max_shift, subpixel=a.subpixel)
    win = (window_1d(h), window_1d(w))
    print(f"{be.name}: {n} ROIs {w}x{h}, {B} patterns = {B * n} correlations, {a.mode} mode, "
          f"{a.subpixel}; median of 20 (CUDA events)", flush=True)
    results = {}
    for name in ("fused", "fft"):
        eng = make_engine(name, be, (h, w), cfg, window_1d=win)
        eng.set_reference(cp.asarray(ref), np.ones(n), np.zeros(n, np.uint8))
        ms = median_ms(lambda e=eng: e.locate(tiles))
        results[name] = [r.get() for r in eng.locate(tiles)]
        extra = ""
        if name == "fused":
            p = eng.plan
            extra = f"  (FFT {p.fft[1]}x{p.fft[0]}, {p.threads} threads, {p.smem // 1024} KB shared)"
            extra += f"; maps kernel {median_ms(lambda e=eng: e.correlation_maps(tiles)):.3f} ms"
        print(f"{name:6s} tiles -> peaks: {ms:8.3f} ms  {B / ms * 1e3:10.0f} patterns/s{extra}", flush=True)
    f, c = results["fused"], results["fft"]
    print(f"fused vs fft: max |dy| {np.nanmax(np.abs(f[0] - c[0])):.2e}, "
          f"max |dx| {np.nanmax(np.abs(f[1] - c[1])):.2e}, "
          f"NaN fused {int(np.isnan(f[0]).sum())} fft {int(np.isnan(c[0]).sum())}, "
          f"max |dvalue|/max value {np.abs(f[2] - c[2]).max() / np.abs(c[2]).max():.2e}", flush=True)


if __name__ == "__main__":
    main()
