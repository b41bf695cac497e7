"""DIC (``--mode dic``, ebsdxc.dic): accuracy against exactly known deformations, and speed.

Accuracy: an analytic pattern -- random Gaussian speckles of 4 px covering half the area
(``--pattern speckle``, the default), or a band-limited sum of 400 plane waves of periods 8-25
px (``waves``) -- is evaluated at the inverse-mapped position of every pixel, so each frame is an
exact warp of the reference (point samples of the formula, not pixel integrals). Cases as issue
19 names them: rigid translations of 0.3 to 200 px, uniform strain of 1e-3 and 1e-2, a 2 degree
rotation, a sinusoidal field; with Gaussian noise of 1% of the texture's range in both images.
31x31 subsets every 16 px on a 512x512 image, affine and quadratic shape functions.
Displacement bias (mean error) and RMS over the points that report ok.

Speed (``--speed N``): an N x N pair (a smooth random texture, the frame shifted by a whole
number of pixels plus a Fourier sub-pixel shift), step 8, 31x31 subsets, affine IC-GN, on the
device given; points/s of ``ebsdxc.dic.match_subsets`` (reading excluded), after a warm-up.

Tiled (``--tiled N``): the same kind of pair at N x N written as tiled 16-bit TIFF files, then,
in a fresh process, matched window by window (``ebsdxc.dic_tiles``, ``--tile`` px tiles) straight
from the files: points/s with the reading included, the peak host memory (RSS) of that process
and the device memory its pool held, against the size of one frame.

Usage::

    python benchmarks/dic_accuracy.py [--device cpu|cuda] [--size 512] [--speed 4096] [--tiled 16384]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

from ebsdxc import dic
from ebsdxc import status as st
from ebsdxc.backend import select_backend


def texture(seed=0, n=400):
    rng = np.random.default_rng(seed)
    period = rng.uniform(8, 25, n)
    angle = rng.uniform(0, np.pi, n)
    k = (2 * np.pi / period)[:, None] * np.stack([np.cos(angle), np.sin(angle)], -1)
    ph = rng.uniform(0, 2 * np.pi, n)
    amp = rng.uniform(0.5, 1, n)

    def f(x, y):
        out = np.zeros(np.broadcast(x, y).shape)
        for a, (kx, ky), p in zip(amp, k, ph):
            out += a * np.cos(kx * x + ky * y + p)
        return out
    return f


def speckle(size, seed=0, *, diameter=4.0, coverage=0.5):
    """``f(x, y)``: random Gaussian speckles of about ``diameter`` px (the 1/e^2 width) covering
    about ``coverage`` of an area ``size`` px square (with a margin), an exact formula evaluated
    anywhere: each point sums the speckles of its own and the neighbouring 8 px bins."""
    rng = np.random.default_rng(seed)
    sigma = diameter / 4.0
    lo, hi = -40.0, size + 40.0
    n = int(coverage * (hi - lo) ** 2 / (np.pi * (diameter / 2) ** 2))
    c = rng.uniform(lo, hi, size=(n, 2))
    amp = rng.uniform(0.6, 1.0, n)
    b = 8.0
    nb = int(np.ceil((hi - lo) / b))
    key = np.clip(((c - lo) // b).astype(np.int64), 0, nb - 1)
    order = np.lexsort((key[:, 0], key[:, 1]))
    c, amp, key = c[order], amp[order], key[order]
    flat = key[:, 1] * nb + key[:, 0]
    start = np.searchsorted(flat, np.arange(nb * nb))
    stop = np.searchsorted(flat, np.arange(nb * nb), side="right")
    width = int((stop - start).max())

    def f(x, y):
        x, y = np.broadcast_arrays(np.asarray(x, float), np.asarray(y, float))
        shape = x.shape
        x, y = x.ravel(), y.ravel()
        out = np.zeros(x.size)
        bx = np.clip(((x - lo) // b).astype(np.int64), 1, nb - 2)
        by = np.clip(((y - lo) // b).astype(np.int64), 1, nb - 2)
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                cell = (by + dy) * nb + (bx + dx)
                s0, s1 = start[cell], stop[cell]
                for j in range(width):
                    k = s0 + j
                    use = k < s1
                    if not use.any():
                        break
                    kk = np.where(use, k, 0)
                    r2 = (x - c[kk, 0]) ** 2 + (y - c[kk, 1]) ** 2
                    out += np.where(use, amp[kk] * np.exp(-r2 / (2 * sigma * sigma)), 0.0)
        return out.reshape(shape)
    return f


def warped_pair(field, size, *, noise=0.01, seed=0, pattern="speckle"):
    """Reference and frame (size x size) with frame(X + u(X)) = reference(X), and u."""
    f = speckle(size, seed) if pattern == "speckle" else texture(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    x = np.stack([xx, yy], -1)
    X = x.copy()
    for _ in range(50):  # X + u(X) = x, fixed point (u is smooth and small in gradient)
        X = x - field(X)
    ref, img = f(xx, yy), f(X[..., 0], X[..., 1])
    rng = np.random.default_rng(seed + 1)
    span = ref.max() - ref.min()
    return ref + rng.normal(scale=noise * span, size=ref.shape), img + rng.normal(scale=noise * span, size=ref.shape)


def cases(size):
    c = (size - 1) / 2
    out = [(f"translation {t} px", (lambda X, t=t: np.broadcast_to([t, -0.6 * t], X.shape)))
           for t in (0.3, 2.7, 25.4, 200.0)]
    for e in (1e-3, 1e-2):
        out.append((f"uniform strain {e:g}", (lambda X, e=e: (X - c) @ np.diag([e, -0.3 * e]).T)))
    a = np.deg2rad(2.0)
    R = np.array([[np.cos(a) - 1, -np.sin(a)], [np.sin(a), np.cos(a) - 1]])
    out.append(("rotation 2 deg", lambda X: (X - c) @ R.T))
    out.append(("sinusoid 0.5 px, period 128 px",
                lambda X: np.stack([0.5 * np.sin(2 * np.pi * X[..., 1] / 128), np.zeros(X.shape[:-1])], -1)))
    return out


def accuracy(a):
    what = ("Gaussian speckles of 4 px, 50% coverage" if a.pattern == "speckle"
            else "a sum of plane waves of periods 8-25 px")
    be = select_backend(a.device)
    xp = be.xp
    print(f"\n### DIC accuracy ({a.size}x{a.size}, {what}, 31x31 subsets every 16 px, 1% noise, "
          f"reliability-guided start, {be.name})\n")
    print("| field | shape function | points ok | bias u, v (px) | RMS (px) | max (px) | time (s) |")
    print("|---|---|---|---|---|---|---|")
    for name, field in cases(a.size):
        ref, img = warped_pair(field, a.size, pattern=a.pattern)
        pts, inside = dic.subset_grid(ref.shape, subset=31, step=16)
        for shape in dic.SHAPE_FUNCTIONS:
            cfg = dic.DicConfig(enabled=True, subset=31, step=16, shape_function=shape)
            t = time.perf_counter()
            m = dic.match_subsets(xp.asarray(ref), xp.asarray(img), pts, config=cfg, valid=inside.reshape(-1))
            dt = time.perf_counter() - t
            ok = m.status == st.OK
            if not ok.any():
                print(f"| {name} | {shape} | 0/{ok.size} | | | | {dt:.1f} |", flush=True)
                continue
            err = m.displacement[ok] - field(pts.reshape(-1, 2)[ok])
            print(f"| {name} | {shape} | {ok.sum()}/{ok.size} | {err[:, 0].mean():+.4f}, {err[:, 1].mean():+.4f} | "
                  f"**{np.sqrt((err ** 2).mean()):.4f}** | {np.abs(err).max():.4f} | {dt:.1f} |", flush=True)


SHIFT = (12.37, 4.79)  # of the speed pairs' frame, [dx, dy] px


def speed_pair(n, xp=np):
    """An n x n random speckle of a few px and its copy shifted by :data:`SHIFT` (host float64)."""
    rng = np.random.default_rng(0)
    spec = xp.fft.rfft2(xp.asarray(rng.normal(size=(n, n))))
    ky = xp.fft.fftfreq(n)[:, None]
    kx = xp.fft.rfftfreq(n)[None, :]
    spec *= xp.exp(-(kx ** 2 + ky ** 2) / (2 * 0.08 ** 2))
    ref = xp.fft.irfft2(spec, s=(n, n))
    shifted = xp.fft.irfft2(spec * xp.exp(-2j * np.pi * (kx * 0.37 + ky * -0.21)), s=(n, n))
    img = xp.roll(shifted, (5, 12), axis=(0, 1))
    get = (lambda v: v.get()) if xp is not np else np.asarray
    return get(ref), get(img)


def speed(a):
    be = select_backend(a.device)
    xp = be.xp
    n = a.speed
    ref, img = speed_pair(n)
    cfg = dic.DicConfig(enabled=True, subset=31, step=8)
    pts, inside = dic.subset_grid(ref.shape, subset=31, step=8)
    r, g = xp.asarray(ref, dtype=xp.float32), xp.asarray(img, dtype=xp.float32)
    print(f"\n### DIC speed ({n}x{n}, step 8, 31x31 subsets, affine IC-GN, {be.name})\n")
    print("| start | points | first frame (s) | next frames (s, median of 3) | points/s | ok | RMS error (px) | "
          "median iterations |")
    print("|---|---|---|---|---|---|---|---|")
    for guess in ("search", "propagate"):
        cfg = dic.DicConfig(enabled=True, subset=31, step=8, guess=guess)
        times = []
        for _ in range(4):  # the first frame of a run also makes the FFT plans and compiles kernels
            be.synchronize()
            t = time.perf_counter()
            m = dic.match_subsets(r, g, pts, config=cfg, valid=inside.reshape(-1))
            be.synchronize()
            times.append(time.perf_counter() - t)
        dt = float(np.median(times[1:]))
        ok = m.status == st.OK
        err = m.displacement[ok] - SHIFT
        print(f"| {guess} | {ok.size} | {times[0]:.2f} | {dt:.2f} ({min(times[1:]):.2f}-{max(times[1:]):.2f}) | "
              f"**{ok.size / dt:,.0f}** | {ok.sum()} | {np.sqrt((err ** 2).mean()):.4f} | "
              f"{np.median(m.iterations[ok]):.0f} |", flush=True)


def _peak_rss_mb():
    # VmHWM belongs to this process's memory map; getrusage's maxrss outlives exec and would
    # report the parent's peak (which held the generated images)
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def tiled(a):
    for n in a.tiled:
        _tiled(a, n)


def _tiled(a, n):
    import tifffile

    be = select_backend(a.device)
    with tempfile.TemporaryDirectory(dir=a.tmp) as d:
        ref, img = speed_pair(n, be.xp if be.is_gpu else np)
        lo, hi = float(ref.min()), float(ref.max())
        for name, im in (("ref.tif", ref), ("frame.tif", img)):
            tifffile.imwrite(os.path.join(d, name), np.clip((im - lo) / (hi - lo) * 60000 + 2000, 0, 65535)
                             .astype(np.uint16), tile=(512, 512))
        del ref, img
        print(f"\n### Tiled DIC ({n}x{n} 16-bit tiled TIFF files, step 8, 31x31 subsets, tiles of {a.tile} px, "
              f"{be.name})\n", flush=True)
        subprocess.run([sys.executable, __file__, "--device", a.device, "--tiled-run", d, "--tile", str(a.tile)],
                       check=True)


def tiled_run(a):
    from ebsdxc import dic_tiles
    from ebsdxc import io as scan_io

    be = select_backend(a.device)
    xp = be.xp
    ref = scan_io.open_scan(os.path.join(a.tiled_run, "ref.tif"))
    frame = scan_io.open_scan(os.path.join(a.tiled_run, "frame.tif"))
    shape = ref.pattern_shape
    cfg = dic.DicConfig(enabled=True, subset=31, step=8, tile=a.tile)
    pts, inside = dic.subset_grid(shape, subset=31, step=8)
    frame_mb = shape[0] * shape[1] * 4 / 2 ** 20
    with be.use():
        # what the process holds before any frame: the libraries, the CUDA context, compiled kernels
        small = np.random.default_rng(0).normal(size=(96, 96))
        dic.match_subsets(xp.asarray(small, dtype=xp.float32), xp.asarray(small, dtype=xp.float32),
                          *dic.subset_grid(small.shape, subset=31, step=8)[:1], config=cfg)
        rss0 = _peak_rss_mb()
    print(f"Host memory (RSS) of the process after start-up and one small match: {rss0:,.0f} MB.\n")
    print("| run | points | time (s) | points/s (reading included) | ok | RMS error (px) | peak host RSS (MB) | "
          "device pool (MB) | one float32 frame (MB) |\n|---|---|---|---|---|---|---|---|---|")
    with be.use():
        for run in ("first (compiles)", "second"):
            be.synchronize()
            t = time.perf_counter()
            m = dic_tiles.match_tiled(lambda r, c: ref.read_window(0, r, c), lambda r, c: frame.read_window(0, r, c),
                                      shape, pts, config=cfg, valid=inside.reshape(-1),
                                      prepare=lambda w: xp.asarray(w, dtype=xp.float32))
            be.synchronize()
            dt = time.perf_counter() - t
            ok = m.status == st.OK
            err = m.displacement[ok] - SHIFT
            rss = _peak_rss_mb()
            pool = xp.get_default_memory_pool().total_bytes() / 2 ** 20 if be.is_gpu else 0.0
            print(f"| {run} | {ok.size} | {dt:.2f} | **{ok.size / dt:,.0f}** | {ok.sum()} | "
                  f"{np.sqrt((err ** 2).mean()):.4f} | {rss:,.0f} | {pool:,.0f} | {frame_mb:,.0f} |", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--speed", type=int, default=0, metavar="N")
    p.add_argument("--skip-accuracy", action="store_true")
    p.add_argument("--tiled", type=int, nargs="*", default=(), metavar="N")
    p.add_argument("--tile", type=int, default=4096)
    p.add_argument("--tmp", default=None, help="folder for the tiled benchmark's files")
    p.add_argument("--tiled-run", default=None, help=argparse.SUPPRESS)
    p.add_argument("--pattern", choices=("speckle", "waves"), default="speckle")
    a = p.parse_args(argv)
    if a.tiled_run:
        tiled_run(a)
        return 0
    if not a.skip_accuracy:
        accuracy(a)
    if a.speed:
        speed(a)
    if a.tiled:
        tiled(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
