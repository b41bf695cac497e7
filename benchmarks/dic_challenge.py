"""The DIC Challenge 2.0 "star" images: spatial resolution and noise of subset DIC, an external check.

The 2-D DIC Challenge 2.0 (Reu et al., Exp. Mech. 62, 2022) published a reference and a deformed
image (4000 x 501 px, 8 bit, with noise) whose vertical displacement is a sinusoid of 0.5 px
amplitude, crest on the middle row (y = 250), with a period that grows from left to right. Along
the middle row the truth is v = 0.5 px, u = 0 everywhere, and how far a code's v falls short of
0.5 at a given period is its displacement transfer (its spatial resolution); its scatter where the
period is long is its noise. The images are not ours to ship: pyvale (MIT) carries them in its
wheel, which is on PyPI (``pip download pyvale --no-deps``); this script reads them from that
wheel or from the two TIFF files.

1. The period at each x is measured from the images themselves (subset DIC over a column of
   rows, a least-squares sinusoid in y; the frequency is not biased by a subset's low-pass
   filter, only the amplitude), then fitted by a line in x.
2. v and u along the middle row every ``--step`` px, for each subset size and shape function:
   the mean of v / 0.5 per period band, the period beyond which v (averaged over 60 px of x)
   stays above 90% of 0.5 (the challenge's 10%-bias spatial resolution), and the standard deviation of v and u where
   the period is longest (x > 3000).

Usage::

    pip download pyvale --no-deps -d /tmp/pyvale
    python benchmarks/dic_challenge.py --pyvale-wheel /tmp/pyvale/pyvale-*.whl [--device cuda]
    python benchmarks/dic_challenge.py --ref REF.tiff --deformed DEF.tiff
"""

from __future__ import annotations

import argparse
import glob
import io
import sys
import time
import zipfile

import numpy as np
import tifffile

from ebsdxc.dic import SHAPE_FUNCTIONS, DicConfig, match_subsets

NAMES = ("pyvale/data/dic/challenge/DIC_Challenge_Star_Noise_Ref.tiff",
         "pyvale/data/dic/challenge/DIC_Challenge_Star_Noise_Def.tiff")
AMPLITUDE = 0.5
CREST_ROW = 250.0


def load(a):
    if a.pyvale_wheel:
        path = sorted(glob.glob(a.pyvale_wheel))[-1]
        with zipfile.ZipFile(path) as z:
            return [tifffile.imread(io.BytesIO(z.read(n))).astype(np.float32) for n in NAMES]
    return [tifffile.imread(p).astype(np.float32) for p in (a.ref, a.deformed)]


def period_map(ref, dfm, xp, *, columns=None):
    """Local period (px) of the vertical sinusoid at ``columns``, and its linear fit p(x)."""
    columns = np.arange(200, ref.shape[1] - 100, 100.0) if columns is None else columns
    rows = np.arange(40.0, ref.shape[0] - 40, 2.0)
    got = []
    for x in columns:
        pts = np.stack([np.full_like(rows, x), rows], -1)
        m = match_subsets(xp.asarray(ref), xp.asarray(dfm), pts, config=DicConfig(subset=17, search=4))
        v = m.displacement[:, 1]
        ok = np.isfinite(v)
        best = (np.inf, np.nan)
        for p in np.geomspace(8, 400, 600):  # least squares over a fine grid of periods
            A = np.stack([np.cos(2 * np.pi * (rows[ok] - CREST_ROW) / p), np.ones(ok.sum())], -1)
            c, res, *_ = np.linalg.lstsq(A, v[ok], rcond=None)
            r = float(res[0]) if res.size else float(((A @ c - v[ok]) ** 2).sum())
            if r < best[0] and c[0] > 0.05:
                best = (r, p)
        got.append(best[1])
    got = np.asarray(got)
    ok = np.isfinite(got)
    slope, intercept = np.polyfit(columns[ok], got[ok], 1)
    return columns, got, (slope, intercept)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pyvale-wheel", help="pyvale wheel holding the images (a glob)")
    ap.add_argument("--ref")
    ap.add_argument("--deformed")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--step", type=float, default=5.0)
    ap.add_argument("--subsets", default="17,31,51")
    a = ap.parse_args(argv)
    if not a.pyvale_wheel and not (a.ref and a.deformed):
        ap.error("give --pyvale-wheel, or --ref and --deformed")
    xp = __import__("cupy") if a.device == "cuda" else np
    ref, dfm = load(a)
    print(f"images {ref.shape[1]} x {ref.shape[0]} px; device {a.device}")
    cols, per, (k, b) = period_map(ref, dfm, xp)
    resid = per - (k * cols + b)
    print(f"\nperiod measured at {len(cols)} columns: p(x) = {b:.2f} + {k:.5f} x px "
          f"(fit residual RMS {np.sqrt(np.nanmean(resid ** 2)):.2f} px; p = {b + k * 100:.1f} px at x = 100, "
          f"{b + k * 3900:.1f} px at x = 3900)")
    xs = np.arange(60.0, ref.shape[1] - 60, a.step)
    pts = np.stack([xs, np.full_like(xs, CREST_ROW)], -1)
    p_of_x = b + k * xs
    bands = [(10, 20), (20, 30), (30, 50), (50, 75), (75, 100), (100, 150), (150, 200), (200, 300)]
    print("\n| subset | shape function | v / 0.5 per period band (px): " + " ".join(f"{lo}-{hi}" for lo, hi in bands)
          + " | period at 10% bias (px) | period / subset | std v, u at x > 3000 (px) | points | s |")
    print("|---|---|---|---|---|---|---|---|")
    for s in (int(v) for v in a.subsets.split(",")):
        for shape in SHAPE_FUNCTIONS:
            t = time.perf_counter()
            m = match_subsets(xp.asarray(ref), xp.asarray(dfm), pts,
                              config=DicConfig(subset=s, search=4, shape_function=shape))
            dt = time.perf_counter() - t
            u, v = m.displacement[:, 0], m.displacement[:, 1]
            ok = np.isfinite(v)
            ratio = []
            for lo, hi in bands:
                sel = ok & (p_of_x >= lo) & (p_of_x < hi)
                ratio.append(f"{np.mean(v[sel]) / AMPLITUDE:.3f}" if sel.any() else "-")
            # the period beyond which v stays within 10% of 0.5: v averaged over 60 px of x (so that
            # noise alone does not set the figure), its last point below 0.45
            k = max(1, int(round(60 / a.step)))
            smooth = np.convolve(np.where(ok, v, 0.0), np.ones(k), mode="same") / np.maximum(
                np.convolve(ok.astype(float), np.ones(k), mode="same"), 1)
            last = np.flatnonzero(smooth < 0.9 * AMPLITUDE)
            p10 = p_of_x[last[-1]] if last.size else p_of_x[0]
            far = ok & (xs > 3000)
            print(f"| {s} | {shape} | {' '.join(ratio)} | {p10:.0f} | {p10 / s:.2f} | "
                  f"{np.std(v[far]):.4f}, {np.std(u[far]):.4f} | {ok.sum()}/{ok.size} | {dt:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
