#!/usr/bin/env python
"""Make the ebsdxc sample data: a small simulated nickel EBSD scan with known deformation.

Writes, into ``--out`` (default: the folder of this script):

- ``scan.h5``   /patterns (10, 10, 160, 160) uint16, gzip + shuffle, one scan row per chunk,
  with the per-point pattern centre and step sizes as attributes;
- ``ref.tif``   the undeformed reference pattern (uint16, more counts, so less noise);
- ``truth.h5``  deformation gradients, pattern centres, orientation and all parameters, from
  which ``ebsdxc.simulate.displacement_truth`` gives the true displacement of any ROI.

The output is deterministic (fixed seed; HDF5 written without time stamps). It needs ebsdxc,
h5py, tifffile and kikuchipy installed (only kikuchipy's master-pattern data file is used;
kikuchipy is not imported). Run ``python sample_data/make_sample_data.py --help``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# Parameters of the committed sample data (change them and the files change).
PARAMS = {
    "detector_shape": [160, 160],  # (rows, cols)
    "scan_shape": [10, 10],  # (rows, cols)
    "pattern_centre_ref": [0.5, 0.45, 0.6],  # Bruker (PCx, PCy, PCz), as kikuchipy
    "euler_bunge_deg": [160.0, 40.0, 20.0],  # (phi1, Phi, phi2); 7 zone axes on the detector
    "sample_tilt_deg": 70.0,
    "detector_tilt_deg": 0.0,
    "step_x_um": 25.0,
    "step_y_um": 25.0,
    "detector_pixel_size_um": 160.0,  # binned pixel size; sets how the PC moves with the beam
    "strain": 1e-3,
    "rotation_rad": 1e-3,
    "counts_scan": 1000.0,  # mean counts per pixel of a scan pattern
    "counts_ref": 8000.0,  # mean counts per pixel of the reference (max ~ 6.7x mean)
    "seed": 20261122,
    "gzip_level": 6,
}

CONVENTIONS = """\
Pixels: x = column (right), y = row (down), origin at the centre of pixel (0, 0); arrays [y, x].
Pattern centre (PCx, PCy, PCz): Bruker convention as kikuchipy's EBSDDetector uses it: PCx from
the left detector edge as a fraction of the width W, PCy from the top edge as a fraction of the
height H, PCz = sample-detector distance as a fraction of H. In pixels: x_pc = PCx*W - 0.5,
y_pc = PCy*H - 0.5, L = PCz*H.
Sample frame: kikuchipy/EMsoft (EDAX TSL) sample frame; sample tilt about microscope X,
detector tilt about the detector horizontal (azimuthal = twist = 0).
orientation: 3x3 rotation matrix g taking SAMPLE to CRYSTAL coordinates (v_c = g v_s), equal to
orix Rotation.from_euler(radians(euler_bunge_deg)).to_matrix().
F: deformation gradient in the SAMPLE frame, F = (I + eps) R; a lattice direction r becomes
F r, so a reference feature at direction r0 appears at F r0 / |F r0| in the scan pattern.
Displacement = position in the scan pattern (its own PC) minus position in the reference
pattern (PC_ref), in pixels: ebsdxc.simulate.displacement_truth(centres, shape=..., pc_ref=...,
pc=pattern_centre[i, j], F=F[i, j], sample_tilt=..., detector_tilt=...).
PC per scan point (i = row, j = column; map centre (ic, jc) = ((rows-1)/2, (cols-1)/2)), after
Singh et al. (2017), as kikuchipy's EBSDDetector.extrapolate_pc; alpha = 90 - sample_tilt +
detector_tilt, delta = detector pixel size:
  PCx = PCx_ref + (jc - j) step_x / (delta W)
  PCy = PCy_ref + (ic - i) step_y cos(alpha) / (delta H)
  PCz = PCz_ref - (ic - i) step_y sin(alpha) / (delta H)
"""


def scan_pattern_centres(p: dict) -> np.ndarray:
    """Per-point PC (rows, cols, 3) moving with the beam (Singh et al. 2017)."""
    rows, cols = p["scan_shape"]
    h, w = p["detector_shape"]
    delta = p["detector_pixel_size_um"]
    alpha = np.deg2rad(90.0 - p["sample_tilt_deg"] + p["detector_tilt_deg"])
    i, j = np.meshgrid(np.arange(rows, dtype=float), np.arange(cols, dtype=float), indexing="ij")
    ic, jc = (rows - 1) / 2, (cols - 1) / 2
    pc = np.empty((rows, cols, 3))
    pc[..., 0] = p["pattern_centre_ref"][0] + (jc - j) * p["step_x_um"] / (delta * w)
    dy = (ic - i) * p["step_y_um"] / (delta * h)
    pc[..., 1] = p["pattern_centre_ref"][1] + dy * np.cos(alpha)
    pc[..., 2] = p["pattern_centre_ref"][2] - dy * np.sin(alpha)
    return pc


def make(out: str, p: dict = PARAMS, *, verbose: bool = True) -> dict:
    """Simulate and write scan.h5, ref.tif and truth.h5 into ``out``; return the arrays."""
    import h5py
    import tifffile

    sys.path.insert(0, os.path.dirname(HERE))  # run from a checkout without installing
    import ebsdxc
    from ebsdxc import simulate as sim

    t0 = time.perf_counter()
    os.makedirs(out, exist_ok=True)
    shape = tuple(p["detector_shape"])
    rows, cols = p["scan_shape"]
    tilts = dict(sample_tilt=p["sample_tilt_deg"], detector_tilt=p["detector_tilt_deg"])
    master = sim.load_nickel_master_pattern()
    g = sim.bunge_to_matrix(*p["euler_bunge_deg"])
    pc_ref = np.asarray(p["pattern_centre_ref"], dtype=float)
    pc = scan_pattern_centres(p)
    F = sim.smooth_deformation_field(
        rows, cols, strain=p["strain"], rotation=p["rotation_rad"], seed=p["seed"]
    )
    rng = np.random.default_rng([p["seed"], 1])

    ref = sim.simulate_pattern(master, shape=shape, pc=pc_ref, orientation=g, **tilts)
    ref_counts = sim.poisson_noise(ref, counts=p["counts_ref"], rng=rng)
    patterns = np.empty((rows, cols) + shape, dtype=np.uint16)
    for i in range(rows):
        for j in range(cols):
            pat = sim.simulate_pattern(
                master, shape=shape, pc=pc[i, j], orientation=g, F=F[i, j], **tilts
            )
            patterns[i, j] = sim.poisson_noise(pat, counts=p["counts_scan"], rng=rng)

    top = np.iinfo(np.uint16).max
    if ref_counts.max() >= top or patterns.max() >= top:
        raise ValueError("counts too high: patterns would clip at 65535; lower the counts")

    note = (
        "Simulated data (not measured): kikuchipy's EMsoft nickel master pattern (20 kV) "
        "projected with ebsdxc.simulate for a deformed crystal, Poisson noise; made by "
        "sample_data/make_sample_data.py. Ground truth in truth.h5."
    )
    scan_attrs = {
        "pattern_centre": pc,
        "pattern_centre_convention": "Bruker (PCx, PCy, PCz) as kikuchipy EBSDDetector",
        "step_x": p["step_x_um"],
        "step_y": p["step_y_um"],
        "step_unit": "um",
        "sample_tilt": p["sample_tilt_deg"],
        "detector_tilt": p["detector_tilt_deg"],
        "euler_angles": np.asarray(p["euler_bunge_deg"], dtype=np.float64),
        "euler_angles_convention": "Bunge (phi1, Phi, phi2) in degrees, sample to crystal",
        "detector_pixel_size": p["detector_pixel_size_um"],
        "note": note,
    }
    with h5py.File(os.path.join(out, "scan.h5"), "w") as f:
        ds = f.create_dataset(
            "patterns",
            data=patterns,
            chunks=(1, cols) + shape,
            compression="gzip",
            compression_opts=p["gzip_level"],
            shuffle=True,
            track_times=False,
        )
        for target in (f.attrs, ds.attrs):
            for key, value in scan_attrs.items():
                target[key] = value
        ds.attrs["dims"] = "scan_row, scan_col, pattern_row (y), pattern_col (x)"

    tifffile.imwrite(
        os.path.join(out, "ref.tif"),
        ref_counts,
        description=json.dumps(
            {
                "note": "Simulated reference pattern (F = identity) for sample_data/scan.h5",
                "pattern_centre": pc_ref.tolist(),
                "counts": p["counts_ref"],
            }
        ),
        metadata=None,
    )

    with h5py.File(os.path.join(out, "truth.h5"), "w") as f:
        for name, data in (
            ("F", F),
            ("pattern_centre", pc),
            ("pattern_centre_ref", pc_ref),
            ("orientation", g),
        ):
            f.create_dataset(name, data=data, track_times=False)
        f.attrs["sample_tilt"] = p["sample_tilt_deg"]
        f.attrs["detector_tilt"] = p["detector_tilt_deg"]
        f.attrs["detector_shape"] = shape
        f.attrs["conventions"] = CONVENTIONS
        f.attrs["parameters"] = json.dumps(p, sort_keys=True)
        f.attrs["generator"] = "sample_data/make_sample_data.py"
        f.attrs["ebsdxc_version"] = ebsdxc.__version__
        f.attrs["note"] = note

    if verbose:
        centre = np.array([[(shape[1] - 1) / 2, (shape[0] - 1) / 2]])
        d = sim.displacement_truth(centre, shape=shape, pc_ref=pc_ref, pc=pc, F=F, **tilts)
        print(f"wrote {out}: scan {patterns.shape}, mean counts {patterns.mean():.0f}; "
              f"true displacement of the pattern centre pixel: dx {d[..., 0].min():+.2f}.."
              f"{d[..., 0].max():+.2f}, dy {d[..., 1].min():+.2f}..{d[..., 1].max():+.2f} px "
              f"({time.perf_counter() - t0:.1f} s)")
    return {"patterns": patterns, "ref": ref_counts, "F": F, "pattern_centre": pc,
            "pattern_centre_ref": pc_ref, "orientation": g}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=HERE, help="output folder (default: %(default)s)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing")
    args = parser.parse_args(argv)
    make(args.out, verbose=not args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
