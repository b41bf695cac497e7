"""Accuracy of every subpixel method on simulated strained patterns with known displacements.

Patterns: kikuchipy's physics-based Ni master pattern projected for a crystal under a
smoothly varying deformation F (strain and rotation about 1e-3) with a pattern centre
that moves across the scan (shifts up to about 1 px), with and without Poisson noise.
Truth: :func:`ebsdxc.simulate.displacement_truth` at every ROI centre.

Usage::

    python benchmarks/accuracy.py [--device cpu|cuda] [--rows 8 --cols 8] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import numpy as np

from ebsdxc import simulate as sim
from ebsdxc.backend import select_backend
from ebsdxc.config import ProcessConfig, RoiConfig
from ebsdxc.engines import EngineConfig
from ebsdxc.preprocess import PreprocessConfig
from ebsdxc.rois import layout_for
from ebsdxc.run import Pipeline

METHODS = ("dft", "upsampled", "quadratic", "gaussian", "parabolic")


def simulate_scan(rows, cols, *, noise=True):
    """(patterns (rows*cols, H, W), reference, truth function of ROI centres)."""
    sc = sim.simulate_scan(rows, cols, counts=1000 if noise else None, seed=1)

    def truth(centres):
        return sc.truth(centres).reshape(rows * cols, len(centres), 2)

    return sc.patterns.reshape(rows * cols, *sc.patterns.shape[2:]), sc.reference, truth


def evaluate(backend, pats, ref, truth, cfg):
    layout = layout_for(cfg.roi, pats.shape[1:])
    pipe = Pipeline(backend, cfg, layout, ref)
    try:
        pipe.match(pats[:2])
        t = time.perf_counter()
        r = pipe.match(pats)
        disp = backend.asnumpy(r.displacement)
        dt = time.perf_counter() - t
    finally:
        pipe.close()
    err = disp - truth(layout.centres)
    ok = np.isfinite(err).all(axis=-1)
    e = err[ok]
    return {"bias_x": float(e[:, 0].mean()), "bias_y": float(e[:, 1].mean()),
            "rms": float(np.sqrt((e ** 2).mean())), "max": float(np.abs(e).max()),
            "ok_fraction": float(ok.mean()), "seconds": dt, "disp": disp}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--cols", type=int, default=8)
    ap.add_argument("--markdown", default=None)
    a = ap.parse_args(argv)
    be = select_backend(a.device)
    layouts = {
        "86 ROIs 96x96 (paper)": RoiConfig(layout="grid", grid=(9, 10), size=96, drop_corners=True),
        "25 ROIs 64x64": RoiConfig(layout="grid", grid=(5, 5), size=64, margin=8),
    }
    lines = [f"Device: {be.name}; {a.rows}x{a.cols} points, 256x256 px; {time.strftime('%Y-%m-%d')}", "",
             "| noise | ROIs | mode | method | bias x (px) | bias y (px) | RMS (px) | max (px) |",
             "|---|---|---|---|---|---|---|---|"]
    for noise in (True, False):
        pats, ref, truth = simulate_scan(a.rows, a.cols, noise=noise)
        for lname, roi in layouts.items():
            for mode, corr in (("full", EngineConfig(mode="full")),
                               ("window 16", EngineConfig(mode="window", max_shift=16)),
                               ("window 16 circular", EngineConfig(mode="window", max_shift=16, circular=True))):
                methods = METHODS if mode == "full" else ("dft", "quadratic")
                for m in methods:
                    for comp in ((True, False) if m in ("dft", "quadratic") and mode == "full" else (True,)):
                        cfg = ProcessConfig(roi=roi, preprocess=PreprocessConfig(dynamic_background_sigma=16.0),
                                            correlation=dataclasses.replace(corr, subpixel=m, compensate=comp))
                        r = evaluate(be, pats, ref, truth, cfg)
                        name = m + ("" if comp else " (no window compensation)")
                        line = (f"| {'Poisson' if noise else 'none'} | {lname} | {mode} | {name} | "
                                f"{r['bias_x']:+.4f} | {r['bias_y']:+.4f} | {r['rms']:.4f} | {r['max']:.4f} |")
                        print(line, flush=True)
                        lines.append(line)
    if be.is_gpu:  # the same simulated scan through both backends
        pats, ref, truth = simulate_scan(a.rows, a.cols, noise=True)
        lines += ["", "| GPU vs CPU, Poisson noise, paper layout | method | max abs difference (px) |",
                  "|---|---|---|"]
        for mode, corr in (("full", EngineConfig(mode="full")),
                           ("window 16", EngineConfig(mode="window", max_shift=16))):
            for m in METHODS:
                cfg = ProcessConfig(roi=layouts["86 ROIs 96x96 (paper)"],
                                    preprocess=PreprocessConfig(dynamic_background_sigma=16.0),
                                    correlation=dataclasses.replace(corr, subpixel=m))
                d_gpu = evaluate(be, pats, ref, truth, cfg)["disp"]
                d_cpu = evaluate(select_backend("cpu"), pats, ref, truth, cfg)["disp"]
                line = f"| {mode} | {m} | {np.nanmax(np.abs(d_gpu - d_cpu)):.2e} |"
                print(line, flush=True)
                lines.append(line)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
