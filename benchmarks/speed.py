"""Throughput of ``ebsdxc process`` against the competitors, measured in one run.

Case (issue 2): the paper's layout (86 ROIs of 96x96, pipelines/paper-86roi-96.toml) on
256x256 uint16 patterns read from an HDF5 file, end to end (read, transfer, correlate,
peaks, write the results file). Competitors measured in the same run:

- a ``skimage.registration.phase_cross_correlation`` loop over the same ROIs (CPU), with
  its defaults (phase normalisation, integer precision) and with ``normalization=None``;
- on a GPU, a plain CuPy batch (rfft2 padded to 192, product with cached reference
  spectra, irfft2, argmax) on device-resident tiles: the design card's baseline.

Usage::

    python benchmarks/speed.py --device cpu --patterns 300
    python benchmarks/speed.py --device cuda --patterns 40000 --json $OUT/speed.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import cuda_time, make_scan, write_tiff  # noqa: E402

from ebsdxc.backend import select_backend  # noqa: E402
from ebsdxc.config import RunConfig, load_config  # noqa: E402
from ebsdxc.engines import EngineConfig  # noqa: E402
from ebsdxc.progress import RecordingProgress  # noqa: E402
from ebsdxc.rois import layout_for  # noqa: E402
from ebsdxc.run import process  # noqa: E402


def run_ebsdxc(scan, ref, out, cfg, run, label):
    prog = RecordingProgress()
    t = time.perf_counter()
    process(scan, ref=ref, output=out, config=cfg, run=run, overwrite=True, progress=prog)
    wall = time.perf_counter() - t
    n = prog.count
    r = {"label": label, "patterns": n, "stream_s": prog.elapsed, "wall_s": wall,
         "patterns_per_s": n / prog.elapsed, "patterns_per_s_wall": n / wall}
    if label is not None:  # None: a warm-up
        print(f"{label:44s} {n:7d} patterns  {r['patterns_per_s']:10.1f} patterns/s "
              f"(wall incl. set-up {r['patterns_per_s_wall']:.1f})", flush=True)
    return r


def run_skimage(scan, ref, layout, n, normalization="phase"):
    import h5py
    from skimage.registration import phase_cross_correlation

    with h5py.File(scan, "r") as f:
        pats = f["patterns"][:n]
    w, h = layout.size
    o = layout.origins
    t = time.perf_counter()
    for p in pats:
        for (x0, y0) in o:
            phase_cross_correlation(ref[y0:y0 + h, x0:x0 + w], p[y0:y0 + h, x0:x0 + w],
                                    upsample_factor=1, normalization=normalization)
    dt = time.perf_counter() - t
    r = {"label": f"skimage phase_cross_correlation loop ({normalization})", "patterns": n, "stream_s": dt,
         "patterns_per_s": n / dt}
    print(f"{r['label']:44s} {n:7d} patterns  {r['patterns_per_s']:10.1f} patterns/s", flush=True)
    return r


def run_plain_cupy(scan, ref, layout, n, batch=256):
    """The design card's baseline: CuPy rfft2/irfft2 + argmax on device-resident tiles."""
    import cupy as cp
    import h5py

    with h5py.File(scan, "r") as f:
        pats = cp.asarray(f["patterns"][:batch].astype(np.float32))
    w, h = layout.size
    o = layout.origins
    ys = cp.asarray(o[:, 1:2] + np.arange(h))
    xs = cp.asarray(o[:, 0:1] + np.arange(w))
    tiles = pats[:, ys[:, :, None], xs[:, None, :]]
    tiles -= tiles.mean(axis=(-2, -1), keepdims=True)
    rt = cp.asarray(ref, dtype=cp.float32)[None][:, ys[:, :, None], xs[:, None, :]][0]
    rt -= rt.mean(axis=(-2, -1), keepdims=True)
    s = (2 * h, 2 * w)
    rs = cp.conj(cp.fft.rfft2(rt, s=s))

    def step():
        c = cp.fft.irfft2(cp.fft.rfft2(tiles, s=s) * rs, s=s)
        return c.reshape(*c.shape[:2], -1).argmax(axis=-1)

    reps = max(1, n // batch)
    dt = cuda_time(step, reps) * reps / 1e3
    r = {"label": "plain CuPy rfft2/irfft2 + argmax (resident)", "patterns": reps * batch, "stream_s": dt,
         "patterns_per_s": reps * batch / dt}
    print(f"{r['label']:44s} {reps * batch:7d} patterns  {r['patterns_per_s']:10.1f} patterns/s", flush=True)
    return r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--patterns", type=int, default=300)
    ap.add_argument("--skimage-patterns", type=int, default=10)
    ap.add_argument("--cpu-patterns", type=int, default=100, help="patterns for the CPU path on a GPU run")
    ap.add_argument("--workdir", default="bench_out")
    ap.add_argument("--methods", default="dft,quadratic,upsampled,none")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    os.makedirs(a.workdir, exist_ok=True)
    be = select_backend(a.device)
    scan = make_scan(os.path.join(a.workdir, f"bench_{a.patterns}.h5"), a.patterns)
    import h5py

    with h5py.File(scan, "r") as f:
        ref = f["patterns"][0]
    ref_path = write_tiff(os.path.join(a.workdir, "bench_ref.tif"), ref)
    base = load_config("paper-86roi-96")[0]
    run = RunConfig(device=a.device, batch=a.batch)
    layout = layout_for(base.roi, (256, 256))
    out = os.path.join(a.workdir, "bench_result.h5")
    info = {"date": time.strftime("%Y-%m-%d"), "device": be.name, "host": platform.node(),
            "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "command": " ".join(["python", *sys.argv]), "results": []}
    if be.is_gpu:
        import cupy as cp

        info["cupy"] = cp.__version__
    print(f"# {info['date']} {info['device']}  ({os.cpu_count()} CPU threads)", flush=True)
    res = info["results"]
    # Warm-up on a short run of every configuration before it is timed: kernel compilation (each
    # configuration may compile kernels of its own sizes) and FFT plans stay out of the figures.
    n_warm = 512 if be.is_gpu else 16
    small = make_scan(os.path.join(a.workdir, f"bench_warm_{n_warm}.h5"), n_warm)

    def timed(scan, cfg, run, label):
        run_ebsdxc(small, ref_path, out, cfg, run, None)
        return run_ebsdxc(scan, ref_path, out, cfg, run, label)

    full = base.replace(correlation=dataclasses.replace(base.correlation, mode="full"))
    for m in a.methods.split(","):
        cfg = full.replace(correlation=dataclasses.replace(full.correlation, subpixel=m))
        res.append(timed(scan, cfg, run, f"ebsdxc full, subpixel={m}"))
    windows = [
        ("ebsdxc window 16, subpixel=dft", EngineConfig(mode="window", max_shift=16, subpixel="dft")),
        ("ebsdxc window 16 circular, subpixel=dft",
         EngineConfig(mode="window", max_shift=16, subpixel="dft", circular=True)),
        ("ebsdxc window 16 circular, subpixel=quadratic",
         EngineConfig(mode="window", max_shift=16, subpixel="quadratic", circular=True)),
    ]
    for label, corr in windows:
        res.append(timed(scan, base.replace(correlation=corr), run, label))
    if be.is_gpu and "dft" in a.methods.split(","):  # the cuFFT path every dft run took before issue 17
        for label, corr in [("ebsdxc full, subpixel=dft, engine=fft", dataclasses.replace(full.correlation,
                                                                                          engine="fft")),
                            ("ebsdxc window 16, subpixel=dft, engine=fft", dataclasses.replace(windows[0][1],
                                                                                               engine="fft"))]:
            res.append(timed(scan, base.replace(correlation=corr), run, label))
    if be.is_gpu:
        direct = base.replace(correlation=EngineConfig(engine="direct", mode="window", max_shift=16,
                                                       subpixel="quadratic"))
        res.append(timed(scan, direct, run, "ebsdxc window 16, engine=direct (overlap-wise), subpixel=quadratic"))
        res.append(run_plain_cupy(scan, ref, layout, min(a.patterns, 20000)))
        cpu_scan = make_scan(os.path.join(a.workdir, f"bench_{a.cpu_patterns}.h5"), a.cpu_patterns)
        cpu = RunConfig(device="cpu")
        for label, corr in [("ebsdxc CPU full, subpixel=dft", dataclasses.replace(base.correlation, mode="full")),
                            *[(label.replace("ebsdxc", "ebsdxc CPU"), corr) for label, corr in windows[1:]]]:
            res.append(timed(cpu_scan, base.replace(correlation=corr), cpu, label))
    for norm in ("phase", None):  # skimage's default, and plain cross-correlation
        res.append(run_skimage(scan, ref, layout, a.skimage_patterns, norm))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(info, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
