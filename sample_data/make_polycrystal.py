#!/usr/bin/env python
"""Make the ebsdxc polycrystal sample: a small simulated nickel scan of a few bent, strained grains.

Writes, into ``--out`` (default: ``polycrystal/`` next to this script):

- ``scan.h5``   /patterns (12, 12, 128, 128) uint16, gzip + shuffle, one scan row per chunk,
  with the per-point pattern centre, step sizes, grid kind and tilts as attributes;
- ``scan.ang``  the per-point orientations (EDAX/TSL .ang, phase "Ni", m-3m), image quality
  and confidence index, as an indexing program would give them;
- ``truth.h5``  grain ids, orientations, deformation gradients, lattice rotations, the Nye
  tensor and the per-grain parameters, with the conventions as text.

Everything comes from :func:`ebsdxc.simulate.simulate_polycrystal` (its docstring and
``ebsdxc.simulate.POLYCRYSTAL_CONVENTIONS`` define the truth). The output is deterministic
(fixed seed; HDF5 written without time stamps). It needs ebsdxc, h5py and kikuchipy installed
(only kikuchipy's master-pattern data file is used; kikuchipy is not imported). Run
``python sample_data/make_polycrystal.py --help``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# Parameters of the committed sample (change them and the files change).
PARAMS = {
    "rows": 12,
    "cols": 12,
    "n_grains": 4,
    "shape": (128, 128),  # detector (H, W)
    "counts": 1000.0,  # mean counts per pixel
    "strain": 1e-3,  # largest principal deviatoric strain of each grain
    "curvature": 2e3,  # rad/m, Frobenius norm of each grain's curvature tensor
    "step": 1.0,  # um
    "grid_kind": "square",
    "seed": 20261123,
    "pc_ref": (0.5, 0.45, 0.6),  # Bruker PC at the map centre
    "pc_shift_px": 0.9,
}
GZIP_LEVEL = 9


def make(out: str, p: dict = PARAMS, *, verbose: bool = True):
    """Simulate the polycrystal and write scan.h5, scan.ang and truth.h5 into ``out``."""
    sys.path.insert(0, os.path.dirname(HERE))  # run from a checkout without installing
    from ebsdxc.simulate import simulate_polycrystal

    t0 = time.perf_counter()
    rows, cols = p["rows"], p["cols"]
    kw = {k: v for k, v in p.items() if k not in ("rows", "cols")}
    sim = simulate_polycrystal(rows, cols, **kw)
    note = ("Simulated polycrystal (not measured): kikuchipy's EMsoft nickel master pattern (20 kV) "
            "projected with ebsdxc.simulate.simulate_polycrystal for Voronoi grains, each with a "
            "uniform elastic strain and a constant lattice curvature, Poisson noise; made by "
            "sample_data/make_polycrystal.py. Ground truth in truth.h5.")
    sim.save(out, compression_level=GZIP_LEVEL, note=note)
    if verbose:
        sizes = np.bincount(sim.grain_id[sim.grain_id >= 0])
        theta = np.linalg.norm(sim.lattice_rotation, axis=-1)
        nye = [np.linalg.norm(sim.nye[sim.grain_id == k][0]) for k in range(sim.n_grains)]
        print(f"wrote {out}: {rows} x {cols} points, {sim.n_grains} grains of {sizes.tolist()} points, "
              f"lattice rotation up to {np.nanmax(theta):.2e} rad, |Nye| {np.round(nye).tolist()} 1/m "
              f"({time.perf_counter() - t0:.1f} s)")
    return sim


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(HERE, "polycrystal"),
                        help="output folder (default: %(default)s)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing")
    args = parser.parse_args(argv)
    make(args.out, verbose=not args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
