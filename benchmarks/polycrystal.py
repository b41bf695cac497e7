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

Usage::

    python benchmarks/polycrystal.py [--rows 40 --cols 40 --grains 50 --size 256 --device cuda --repeat 3]
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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=40)
    p.add_argument("--cols", type=int, default=40)
    p.add_argument("--grains", type=int, default=50)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--folder", default=None, help="where the scan goes (default: a temporary folder)")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    a = p.parse_args(argv)
    folder = a.folder or tempfile.mkdtemp(prefix="ebsdxc-poly-")
    t = time.perf_counter()
    sim = simulate.simulate_polycrystal(a.rows, a.cols, n_grains=a.grains, shape=(a.size, a.size), counts=1000,
                                        seed=7, min_grain_points=8)
    scan, ang, _ = sim.save(folder)
    print(f"simulated {a.rows}x{a.cols} points, {sim.n_grains} grains, {a.size}x{a.size} px in "
          f"{time.perf_counter() - t:.1f} s -> {folder}")
    out = {"device": None, "points": a.rows * a.cols, "grains": sim.n_grains, "size": a.size}
    backend = select_backend(a.device)
    out["device"] = backend.name
    config = ProcessConfig(grains=GrainsConfig(per_grain=True))
    with backend.use(), open_scan(scan) as source:
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
    centre = (a.rows // 2, a.cols // 2)
    times = {"one": [], "grains": []}
    for k in range(a.repeat):
        o1, o2 = os.path.join(folder, f"one{k}.h5"), os.path.join(folder, f"grains{k}.h5")
        t = time.perf_counter()
        process(scan, ref_index=centre, output=o1, config=ProcessConfig(), run=run)
        times["one"].append(time.perf_counter() - t)
        t = time.perf_counter()
        process(scan, orientations=ang, output=o2, config=config, run=run)
        times["grains"].append(time.perf_counter() - t)
    n = a.rows * a.cols
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
