"""Where the GPU time goes: each stage of one batch of the paper's layout, timed with CUDA events.

Usage::

    python benchmarks/gpu_stages.py --batch 256
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import cuda_time as timed  # noqa: E402
from common import simulated_patterns


def main(argv=None):
    import cupy as cp
    import cupyx

    from ebsdxc.backend import select_backend
    from ebsdxc.config import load_config
    from ebsdxc.engines.gpu_ops import dft_refine, find_peaks, prepare_tiles_padded
    from ebsdxc.peaks import DFT_MAX_MOVES, DFT_STEPS
    from ebsdxc.rois import layout_for
    from ebsdxc.run import Pipeline

    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--recipe", default="paper-86roi-96")
    a = ap.parse_args(argv)
    be = select_backend("cuda")
    cfg = load_config(a.recipe)[0]
    base = simulated_patterns(16, (256, 256))
    pats = base[np.arange(a.batch) % 16]
    lay = layout_for(cfg.roi, (256, 256))
    pipe = Pipeline(be, cfg, lay, base[0])
    eng = pipe.engine
    B, n = a.batch, lay.n
    dev = cp.asarray(pats)
    frames = pipe._frames.get(B * n)
    origins = cp.asarray(lay.origins, dtype=cp.int32)
    rows = []

    def row(name, ms):
        rows.append((name, ms))
        print(f"{name:40s} {ms:8.3f} ms  {ms * 1e3 / B:7.2f} us/pattern", flush=True)

    row("prepare_tiles kernel", timed(lambda: prepare_tiles_padded(dev, origins, pipe.tile_shape, pipe.window, frames)))
    t4 = frames.reshape(B, n, *frames.shape[1:])
    row("rfft2 + product (cross_power)", timed(lambda: eng.cross_power(t4)))
    cps = eng.cross_power(t4)
    row("irfft2 keeping the spectrum (copy)", timed(lambda: be.irfft2(cps, s=eng.fft_shape, overwrite=False)))
    corr = be.irfft2(cps, s=eng.fft_shape).reshape(B * n, *eng.fft_shape)
    lags = eng._window_lags()
    row("find_peaks kernel (quadratic)", timed(lambda: find_peaks(corr, eng.max_lag, "quadratic", lags)))
    y, x, *_ = find_peaks(corr, eng.max_lag, "quadratic", lags)
    c2 = cps.reshape(B * n, *cps.shape[2:])
    row("dft_refine kernel", timed(lambda: dft_refine(c2, y, x, eng.fft_shape, steps=DFT_STEPS,
                                                      max_moves=DFT_MAX_MOVES, window_spectra=eng._window_spectra)))
    row("Pipeline.match (device-resident batch)", timed(lambda: pipe.match(dev), reps=10))
    pinned = cupyx.empty_pinned(pats.shape, dtype=pats.dtype)
    pinned[...] = pats
    d2 = cp.empty_like(dev)
    row("H2D copy from pinned", timed(lambda: d2.set(pinned)))
    import h5py

    path = "bench_out/stage_scan.h5"
    os.makedirs("bench_out", exist_ok=True)
    with h5py.File(path, "w") as f:
        f["patterns"] = np.concatenate([pats] * 8)
    with h5py.File(path, "r") as f:
        ds = f["patterns"]
        ds.read_direct(pinned, np.s_[0:B])
        t = time.perf_counter()
        for i in range(8):
            ds.read_direct(pinned, np.s_[i * B:(i + 1) * B])
        dt = (time.perf_counter() - t) / 8 * 1e3
    row("h5py read_direct into pinned (page cache)", dt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
