"""Shared pieces of the benchmark scripts: test scans made from simulated patterns."""

from __future__ import annotations

import os
import time

import h5py
import numpy as np


def simulated_patterns(n_distinct, shape, *, seed=0, counts=1000):
    """``n_distinct`` physics-based Ni patterns with small random deformations and Poisson noise."""
    from ebsdxc import simulate as sim

    rng = np.random.default_rng(seed)
    master = sim.load_nickel_master_pattern()
    g = sim.bunge_to_matrix(160, 40, 20)
    F = sim.smooth_deformation_field(1, n_distinct, strain=1e-3, rotation=1e-3, seed=seed)[0]
    out = np.empty((n_distinct, *shape), dtype=np.uint16)
    for i in range(n_distinct):
        p = sim.simulate_pattern(master, shape=shape, pc=(0.5, 0.45, 0.6), orientation=g, F=F[i])
        out[i] = sim.poisson_noise(p, counts=counts, rng=rng)
    return out


def shifted_smooth_tiles(patterns, n, h, w, *, noise=0.0, seed=0):
    """Subregion pairs with broad peaks, as of EBSD patterns: ``n`` smooth reference tiles
    (Gaussian-filtered noise) and, per pattern, each shifted by up to 2.5 px (bilinear), plus
    Gaussian noise of ``noise`` times the tiles' standard deviation. (ref (n, h, w), scan
    (patterns, n, h, w)), float32."""
    from scipy import ndimage

    rng = np.random.default_rng(seed)
    big = ndimage.gaussian_filter(rng.standard_normal((n, h + 16, w + 16)), (0, 3, 3))
    ref = big[:, 8:8 + h, 8:8 + w].astype(np.float32)
    scan = np.empty((patterns, n, h, w), np.float32)
    for b in range(patterns):
        d = rng.uniform(-2.5, 2.5, 2)
        scan[b] = ndimage.shift(big, (0, d[0], d[1]), order=1, mode="wrap")[:, 8:8 + h, 8:8 + w]
    if noise:
        scan += rng.normal(0, noise * scan.std(), scan.shape).astype(np.float32)
    return ref, scan


def paper_layout_patterns(B, rng):
    """The paper's layout on the device: B uint16 patterns of 256x256 (up to 16 distinct ones,
    smooth random, each moved by up to 2 px, drawn from ``rng``) and the origins of its 86 ROIs
    of 96x96, (patterns, origins (n, 2) int32)."""
    import cupy as cp
    from scipy import ndimage

    from ebsdxc.rois import grid_layout

    lay = grid_layout((256, 256), grid=(9, 10), size=96, drop_corners=True)
    origins = cp.asarray(np.asarray(lay.origins, dtype=np.int32))
    base = ndimage.gaussian_filter(rng.standard_normal((272, 272)), 2.0)
    distinct = np.stack([ndimage.shift(base, rng.uniform(-2, 2, 2), order=1, mode="wrap")[8:264, 8:264]
                         for _ in range(min(B, 16))])
    distinct = np.round(30000 + 20000 * distinct / np.abs(distinct).max()).astype(np.uint16)
    return cp.asarray(distinct[np.arange(B) % len(distinct)]), origins


def make_scan(path, n_patterns, shape=(256, 256), *, n_distinct=64, chunk=64, seed=0):
    """An uncompressed HDF5 scan of ``n_patterns`` uint16 patterns (distinct ones repeated)."""
    if os.path.exists(path):
        with h5py.File(path, "r") as f:
            if f["patterns"].shape == (n_patterns, *shape):
                return path
    t = time.perf_counter()
    base = simulated_patterns(n_distinct, shape, seed=seed)
    with h5py.File(path, "w") as f:
        d = f.create_dataset("patterns", (n_patterns, *shape), np.uint16, chunks=(min(chunk, n_patterns), *shape))
        for a in range(0, n_patterns, chunk):
            b = min(a + chunk, n_patterns)
            d[a:b] = base[np.arange(a, b) % n_distinct]
    print(f"made {path}: {n_patterns} patterns {shape} in {time.perf_counter() - t:.1f} s", flush=True)
    return path


def write_tiff(path, image):
    import tifffile

    tifffile.imwrite(path, image)
    return path


def cuda_time(fn, reps=20):
    """Milliseconds per call of ``fn`` on the current CUDA device (CUDA events, after one warm-up)."""
    import cupy as cp

    fn()
    cp.cuda.Device().synchronize()
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b) / reps


def median_ms(fn, reps=20):
    """Median milliseconds of ``reps`` calls, each between its own pair of CUDA events (after one warm-up)."""
    import cupy as cp
    import numpy as np

    fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(cp.cuda.get_elapsed_time(a, b))
    return float(np.median(times))


def time_upsampled(ref, tiles, shift, upsample=None):
    """The fused engine's ``upsampled`` peaks of ``tiles`` (device, (B, n, t, t)) against ``ref``
    ((n, t, t)) in window mode at +-``shift`` (full mode where it is 0), at the configuration's
    upsampling factor unless given, planned as the engine module's settings are now, and their
    median time: (engine, y, x, ms)."""
    import cupy as cp

    from ebsdxc.backend import select_backend
    from ebsdxc.engines import EngineConfig, make_engine
    from ebsdxc.preprocess import window_1d

    n, tile = ref.shape[0], ref.shape[1]
    cfg = EngineConfig(mode="window" if shift else "full", max_shift=shift or None, subpixel="upsampled",
                       **({} if upsample is None else {"upsample": upsample}))
    eng = make_engine("fused", select_backend("cuda"), (tile, tile), cfg, window_1d=(window_1d(tile), window_1d(tile)))
    eng.set_reference(cp.asarray(ref), np.ones(n), np.zeros(n, np.uint8))
    y, x = (a.get() for a in eng.locate(tiles)[:2])
    return eng, y, x, median_ms(lambda: eng.locate(tiles))
