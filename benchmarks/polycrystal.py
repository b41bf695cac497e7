"""A reference per grain: throughput against one reference, on the same scan, in the same run.

A simulated Ni polycrystal (Voronoi grains, per-grain strain and curvature, Poisson noise) is
written as a user's files (scan.h5 + scan.ang). Then, on the same device and patterns:

1. the per-batch pipeline alone (the correlation the GPU does): ``Pipeline.match`` over every
   pattern, once against one reference and once against the per-grain references with each
   point's grain index; patterns already on the device, best of ``--repeat``;
2. the whole run as a user starts it (``ebsdxc.run.process``, no strain): ``--ref-index``
   against ``--ref-per-grain --orientations``, best of ``--repeat``, with the grain step
   (read orientations, segment, KAM, choose references) timed on its own;
3. the strain pass with GND on the per-grain file.

``--accuracy``: instead, per-grain strain, rotation, Nye tensor and GND density against the
simulation's truth, for bent (2e3 rad/m) and unbent crystals on square and hexagonal grids.

Usage::

    python benchmarks/polycrystal.py [--rows 40 --cols 40 --grains 50 --size 256 --device cuda --repeat 3
                                      --upscale 3]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

from ebsdxc import simulate
from ebsdxc.backend import select_backend
from ebsdxc.config import GrainsConfig, ProcessConfig, RunConfig
from ebsdxc.hrebsd import StrainConfig
from ebsdxc.io import open_scan
from ebsdxc.rois import layout_for
from ebsdxc.run import process
from ebsdxc.run.grain_references import grain_references
from ebsdxc.run.pipeline import Pipeline


def _sync(backend):
    if backend.is_gpu:
        backend.xp.cuda.Device().synchronize()


def _pipeline_rate(backend, config, layout, references, patterns, index, batch, repeat):
    pipe = Pipeline(backend, config, layout, references, batch=batch)
    xp = backend.xp
    try:
        dev = xp.asarray(patterns)
        idx = None if index is None else xp.asarray(index)
        best = np.inf
        for _ in range(repeat + 1):  # the first pass compiles kernels and plans
            _sync(backend)
            t = time.perf_counter()
            for i in range(0, len(dev), batch):
                pipe.match(dev[i:i + batch], index=None if idx is None else idx[i:i + batch])
            _sync(backend)
            best = min(best, time.perf_counter() - t)
        return len(dev) / best
    finally:
        pipe.close()


def _upscaled(scan, ang, k, folder):
    """The scan with every point repeated as a k x k block: the same grains, k^2 times the points
    (one pattern per chunk, as vendors store them)."""
    import h5py

    from ebsdxc.io import ScanGrid, read_orientation_map, write_ang

    with h5py.File(scan, "r") as f:
        ds = f["patterns"]
        attrs = dict(ds.attrs)
        pats = ds[...]
    r, c = pats.shape[:2]
    big = os.path.join(folder, f"scan_x{k}.h5")
    with h5py.File(big, "w") as f:
        ds = f.create_dataset("patterns", (r * k, c * k, *pats.shape[2:]), pats.dtype, chunks=(1, 1, *pats.shape[2:]))
        for i in range(r * k):
            ds[i] = np.repeat(pats[i // k], k, axis=0)
        for key in ("detector_tilt", "sample_tilt", "pattern_centre_convention", "step_x", "step_y", "step_unit"):
            if key in attrs:
                ds.attrs[key] = attrs[key]
        # one PC for all: a per-point map this large does not fit in an HDF5 attribute
        ds.attrs["pattern_centre"] = np.asarray(attrs["pattern_centre"]).reshape(-1, 3).mean(axis=0)
    omap = read_orientation_map(ang)
    up = type(omap)(path=ang, grid=ScanGrid(r * k, c * k, step=omap.grid.step),
                    euler_deg=np.repeat(np.repeat(omap.euler_deg, k, axis=0), k, axis=1),
                    phase=np.repeat(np.repeat(omap.phase, k, axis=0), k, axis=1), phases=omap.phases,
                    quality={n: np.repeat(np.repeat(v, k, axis=0), k, axis=1) for n, v in omap.quality.items()})
    big_ang = write_ang(os.path.join(folder, f"scan_x{k}.ang"), up, overwrite=True)
    return big, big_ang


_MEASURED = ((0, 1), (0, 2), (1, 0), (1, 2), (2, 2))


def _norm(nye):
    return np.sqrt(sum(nye[..., i, j] ** 2 for i, j in _MEASURED))


def accuracy(rows, cols, grains, size, device, curvature, seed, folder, grid_kind="square"):
    """Segmentation, strain, rotation, Nye tensor and GND of one simulated polycrystal against its truth."""
    import h5py

    sim = simulate.simulate_polycrystal(rows, cols, n_grains=grains, shape=(size, size), counts=1000, strain=1e-3,
                                        curvature=curvature, step=0.5, seed=seed, grid_kind=grid_kind)
    sub = os.path.join(folder, f"acc-{grid_kind}-{curvature:g}-{seed}")
    scan, ang, _ = sim.save(sub)
    out = process(scan, orientations=ang, output=os.path.join(sub, "out.h5"), run=RunConfig(device=device),
                  config=ProcessConfig(strain=StrainConfig(material="Ni"), grains=GrainsConfig(per_grain=True)))
    with h5py.File(out, "r") as f:
        g = f["ebsdxc"]
        gid, ref = g["grain_id"][...], g["grains/reference_point"][...]
        strain, rotation, ok = g["strain"][...], g["rotation"][...], g["fit_status"][...] == 0
        nye, rho = g["nye_tensor"][...], g["gnd_density"][...]
    agree = sum(np.bincount(sim.grain_id[gid == k]).max() for k in np.unique(gid[gid >= 0])) / (sim.grain_id >= 0).sum()
    truth = sim.truth_relative(ref)
    got, want = _norm(nye), _norm(sim.nye)
    fin = np.isfinite(got)
    row = {"grid": grid_kind, "curvature_rad_per_m": curvature, "points": int((sim.grain_id >= 0).sum()),
           "grains": sim.n_grains, "segmentation_agreement": float(agree),
           "strain_rms": float(np.sqrt(np.mean((strain[ok] - truth.strain[ok]) ** 2))),
           "rotation_rms": float(np.sqrt(np.mean((rotation[ok] - truth.rotation[ok]) ** 2))),
           "nye_norm_median": float(np.median(got[fin])), "nye_truth_median": float(np.median(want[fin])),
           "gnd_median": float(np.nanmedian(rho)), "fitted": float(ok.mean())}
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=40)
    p.add_argument("--cols", type=int, default=40)
    p.add_argument("--grains", type=int, default=50)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--upscale", type=int, default=1, help="repeat every point as a k x k block (more points, "
                                                             "same grains)")
    p.add_argument("--folder", default=None, help="where the scan goes (default: a temporary folder)")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    p.add_argument("--accuracy", action="store_true",
                   help="instead: accuracy against the truth (bent and unbent crystals, square and hexagonal)")
    a = p.parse_args(argv)
    folder = a.folder or tempfile.mkdtemp(prefix="ebsdxc-poly-")
    if a.accuracy:
        rows = [accuracy(a.rows, a.cols, a.grains, a.size, a.device, k, seed, folder, kind)
                for kind in ("square", "hexagonal") for k in (2e3, 0.0) for seed in (3, 4)]
        print("| grid | curvature rad/m | seed | points | grains | segmentation | strain RMS | rotation RMS | "
              "median Nye norm (truth) 1/m | median GND 1/m^2 |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r, seed in zip(rows, [3, 4] * 4):
            print(f"| {r['grid']} | {r['curvature_rad_per_m']:g} | {seed} | {r['points']} | {r['grains']} | "
                  f"{r['segmentation_agreement']:.1%} | {r['strain_rms']:.1e} | {r['rotation_rms']:.1e} | "
                  f"{r['nye_norm_median']:.0f} ({r['nye_truth_median']:.0f}) | {r['gnd_median']:.2e} |")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(rows, f, indent=1)
        return
    t = time.perf_counter()
    sim = simulate.simulate_polycrystal(a.rows, a.cols, n_grains=a.grains, shape=(a.size, a.size), counts=1000,
                                        seed=7, min_grain_points=8)
    scan, ang, _ = sim.save(folder)
    print(f"simulated {a.rows}x{a.cols} points, {sim.n_grains} grains, {a.size}x{a.size} px in "
          f"{time.perf_counter() - t:.1f} s -> {folder}")
    if a.upscale > 1:
        scan, ang = _upscaled(scan, ang, a.upscale, folder)
    rows, cols = a.rows * a.upscale, a.cols * a.upscale
    out = {"device": None, "points": rows * cols, "grains": sim.n_grains, "size": a.size, "upscale": a.upscale}
    backend = select_backend(a.device)
    out["device"] = backend.name
    config = ProcessConfig(grains=GrainsConfig(per_grain=True))
    with backend.use(), open_scan(scan) as source:
        grain_references(source, config, backend, orientations=ang)  # imports, first reads
        t = time.perf_counter()
        gr = grain_references(source, config, backend, orientations=ang)
        out["grain_step_s"] = time.perf_counter() - t
        out["grains_found"] = gr.n_grains
        layout = layout_for(config.roi, source.pattern_shape, path=scan)
        patterns = source.read(0, source.n_patterns)
        single = gr.references.patterns[0]
        index = gr.references.index
        one = _pipeline_rate(backend, config, layout, single, patterns, None, a.batch, a.repeat)
        many = _pipeline_rate(backend, config, layout, gr.references, patterns, index, a.batch, a.repeat)
    out["pipeline_one_reference_per_s"] = one
    out["pipeline_per_grain_per_s"] = many
    out["pipeline_ratio"] = many / one
    print(f"pipeline ({backend.name}): one reference {one:,.0f} patterns/s; {gr.n_grains} grain references "
          f"{many:,.0f} patterns/s = {many / one:.1%}")

    run = RunConfig(device=a.device)
    centre = (rows // 2, cols // 2)
    times = {"one": [], "grains": []}
    for k in range(a.repeat):
        o1, o2 = os.path.join(folder, f"one{k}.h5"), os.path.join(folder, f"grains{k}.h5")
        t = time.perf_counter()
        process(scan, ref_index=centre, output=o1, config=ProcessConfig(), run=run)
        times["one"].append(time.perf_counter() - t)
        t = time.perf_counter()
        process(scan, orientations=ang, output=o2, config=config, run=run)
        times["grains"].append(time.perf_counter() - t)
    n = rows * cols
    out["process_one_reference_per_s"] = n / min(times["one"])
    out["process_per_grain_per_s"] = n / min(times["grains"])
    out["process_ratio"] = min(times["one"]) / min(times["grains"])
    print(f"process: one reference {n / min(times['one']):,.0f} points/s; per grain "
          f"{n / min(times['grains']):,.0f} points/s = {out['process_ratio']:.1%} (grain step "
          f"{out['grain_step_s']:.2f} s of {min(times['grains']):.2f} s)")
    t = time.perf_counter()
    strained = os.path.join(folder, "strain.h5")
    process(scan, orientations=ang, output=strained, run=run,
            config=config.replace(strain=StrainConfig(material="Ni")))
    out["process_with_strain_gnd_s"] = time.perf_counter() - t
    print(f"process with strain and GND: {out['process_with_strain_gnd_s']:.2f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
