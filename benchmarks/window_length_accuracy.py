"""Window mode: does the FFT length change the `dft` and `upsampled` results against the truth?

In window mode the correlation map is circular: lags beyond the window alias into it, and the
trigonometric interpolant that `dft` and `upsampled` evaluate takes in every map sample, so
their results depend on the FFT length. The fused engine chooses lengths by what they cost the
kernel (:func:`ebsdxc.engines.fused.fast_length`: 192 rather than 162 for 128x128 ROIs at
+-24 px). This runs the float64 CPU FFT engine -- whose results the fused kernel matches at its own
length (``tests/engines/test_fused.py``) -- at given lengths on simulated 512x512 Ni patterns with
known displacements (:mod:`ebsdxc.simulate`), 49 ROIs of 128x128, window +-24, Poisson noise.

Usage::

    python benchmarks/window_length_accuracy.py [--rows 4 --cols 4] [--lengths 152,162,192]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from ebsdxc import simulate as sim
from ebsdxc.backend import select_backend
from ebsdxc.config import ProcessConfig, RoiConfig
from ebsdxc.engines import EngineConfig
from ebsdxc.engines import fft as fft_engine
from ebsdxc.preprocess import PreprocessConfig
from ebsdxc.rois import layout_for
from ebsdxc.run import Pipeline


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--cols", type=int, default=4)
    ap.add_argument("--lengths", default="152,162,192")
    ap.add_argument("--strain", type=float, default=2e-3)
    a = ap.parse_args(argv)
    be = select_backend("cpu")
    sc = sim.simulate_scan(a.rows, a.cols, shape=(512, 512), counts=1000, strain=a.strain, rotation=a.strain,
                           seed=3)
    pats = sc.patterns.reshape(a.rows * a.cols, 512, 512)
    roi = RoiConfig(layout="grid", grid=(7, 7), size=128)
    layout = layout_for(roi, (512, 512))
    truth = sc.truth(layout.centres).reshape(a.rows * a.cols, len(layout.centres), 2)
    print(f"{a.rows}x{a.cols} points of 512x512, 49 ROIs of 128x128, window +-24, Poisson noise (1000 counts), "
          f"strain and rotation {a.strain:g}; float64 CPU FFT engine; {time.strftime('%Y-%m-%d')}")
    print("| FFT length | method | RMS error (px) | max (px) | fitted | RMS change from the first length (px) |")
    print("|---|---|---|---|---|---|")
    shape_of = fft_engine.fft_shape
    for method in ("dft", "upsampled", "quadratic"):
        first = None
        for n in (int(v) for v in a.lengths.split(",")):
            fft_engine.fft_shape = lambda *args, n=n, **kw: (n, n)  # the engine's length, as the fused plan's
            try:
                cfg = ProcessConfig(roi=roi, preprocess=PreprocessConfig(dynamic_background_sigma=16.0),
                                    correlation=EngineConfig(mode="window", max_shift=24, subpixel=method,
                                                             engine="fft"))
                pipe = Pipeline(be, cfg, layout, sc.reference)
                try:
                    assert pipe.engine.fft_shape == (n, n)
                    disp = be.asnumpy(pipe.match(pats).displacement)
                finally:
                    pipe.close()
            finally:
                fft_engine.fft_shape = shape_of
            err = disp - truth
            ok = np.isfinite(err).all(axis=-1)
            e = err[ok]
            change = "" if first is None else f"{np.sqrt(np.nanmean((disp - first) ** 2)):.1e}"
            first = disp if first is None else first
            print(f"| {n} | {method} | {np.sqrt((e ** 2).mean()):.4f} | {np.abs(e).max():.4f} | "
                  f"{ok.mean():.3f} | {change} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
