"""HR-EBSD accuracy: strain and rotation from simulated strained patterns with known F.

Patterns: kikuchipy's physics-based Ni master pattern projected for a crystal under a
smoothly varying, traction-free deformation F (strain and rotation about 1e-3; optionally
on top of a 3-degree lattice rotation), pattern centre moving with the beam, with and
without Poisson noise (1000 counts/px, reference 8000). Each scan is written to an HDF5 file
and a TIFF reference and run through ``ebsdxc.run.process`` with the strain pass, as a
user would; errors are fitted minus true values over all points.

Tables: (1) error by pattern size and noise; (2) 3-degree rotation with and without
remapping; (3) strain error against a pattern-centre error; (4) fit throughput.

Usage::

    python benchmarks/strain_accuracy.py [--device cpu|cuda] [--rows 6 --cols 6] [--sizes 256,512] [--throughput N]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time

import numpy as np

from ebsdxc import materials
from ebsdxc import simulate as sim
from ebsdxc import strain as sn
from ebsdxc.backend import select_backend
from ebsdxc.config import load_config
from ebsdxc.crystal import rotation_from_vector
from ebsdxc.hrebsd import StrainConfig
from ebsdxc.io.results import read_results, read_strain
from ebsdxc.run import process, strain

EULER = (160.0, 40.0, 20.0)
_IU = np.triu_indices(3)


def _dev(a):
    return a - np.trace(a, axis1=-2, axis2=-1)[..., None, None] * np.eye(3) / 3


def make_scan(rows, cols, size, *, noise, rotation_deg=0.0, seed=4):
    g = sim.bunge_to_matrix(*EULER)
    C = materials.stiffness_tensor(materials.parse_material("Ni")[1])
    F = sim.smooth_deformation_field(rows, cols, strain=1e-3, rotation=1e-3, seed=seed)
    if rotation_deg:
        F = F @ rotation_from_vector(np.deg2rad(rotation_deg) * np.array([0.48, 0.6, -0.64]))
    F = sn.traction_free(F, C, g)
    return sim.simulate_scan(rows, cols, shape=(size, size), counts=1000 if noise else None, F=F,
                             euler_deg=EULER, seed=seed)


def errors(fit, F):
    """RMS over points of each independent component: deviatoric strain (6), full strain (6),
    rotation (3); and the largest of each group."""
    V, R = sn.polar_decomposition(F)
    e, w = V - np.eye(3), sn.rotation_log(R)
    ok = fit["status"] == sn.FIT_OK
    dev = np.sqrt(((_dev(fit["strain"]) - _dev(e))[ok] ** 2).mean(0))[_IU]
    full = np.sqrt(((fit["strain"] - e)[ok] ** 2).mean(0))[_IU]
    rot = np.sqrt(((fit["rotation"] - w)[ok] ** 2).mean(0))[[0, 0, 1], [1, 2, 2]]
    return {"dev": dev, "full": full, "rot": rot, "dev_max": dev.max(), "full_max": full.max(),
            "rot_max": rot.max(), "points": int(ok.sum()), "of": ok.size,
            "residual": float(np.nanmedian(fit["residual"])), "rois": float(np.median(fit["rois"][ok]))}


def _from_file(path):
    s = read_strain(path)
    return {"strain": s["strain"].astype(np.float64), "rotation": s["rotation"].astype(np.float64),
            "status": s["fit_status"], "residual": s["fit_residual"], "rois": s["rois_used"],
            "remapped": int(s["remapped"].sum())}


def run_case(sc, cfg, run, folder, device):
    scan, ref = sc.save(folder, euler_deg=EULER)
    cfg = cfg.replace(strain=StrainConfig(material="Ni"))
    run = dataclasses.replace(run, device=device)
    t = time.perf_counter()
    out = process(scan, ref=ref, config=cfg, run=run, output=f"{folder}/results.h5")
    return out, time.perf_counter() - t


def pc_sensitivity(out, sc, cfg_strain, deltas, *, reference_only=False):
    """Fit again with the PCs (of the reference and every point, or of the reference only) off by
    delta x detector width."""
    r = read_results(out)
    H, W = sc.patterns.shape[2:]
    C = materials.stiffness_tensor(materials.parse_material(cfg_strain.material)[1])
    g = sim.bunge_to_matrix(*EULER)
    rows, cols, n = r["status"].shape
    rows_out = []
    for comp, label in ((0, "PCx"), (1, "PCy"), (2, "PCz")):
        for d in deltas:
            off = np.zeros(3)
            off[comp] = d * W / (W if comp == 0 else H)  # PCx is a fraction of W; PCy, PCz of H
            fit = sn.fit_strain(r["displacement"].reshape(-1, n, 2), r["peak_height"].reshape(-1, n),
                                r["status"].reshape(-1, n), centres=r["roi_centers"], shape=(H, W),
                                pc=(sc.pc + (0 if reference_only else off)).reshape(-1, 3), pc_ref=sc.pc_ref + off,
                                stiffness=C, orientation=g)
            f = {"strain": fit.strain, "rotation": fit.rotation, "status": fit.status,
                 "residual": fit.residual_px, "rois": fit.n_used}
            rows_out.append((label, d, errors(f, sc.F.reshape(-1, 3, 3))))
    return rows_out


def fit_speed(device, n_points=100_000, n_roi=25):
    be = select_backend(device)
    xp = be.xp
    rng = np.random.default_rng(0)
    shape = (256, 256)
    from ebsdxc.rois import grid_layout

    c = grid_layout(shape, grid=(5, 5)).centres
    F = sn.traction_free(sim.smooth_deformation_field(1, n_points, seed=1)[0],
                         materials.stiffness_tensor(materials.cubic_stiffness(246.5, 147.3, 124.7)),
                         sim.bunge_to_matrix(*EULER))
    pc = np.array([0.5, 0.45, 0.6])
    q = (sim.displacement_truth(c, shape=shape, pc_ref=pc, pc=pc, F=F)
         + rng.normal(scale=0.02, size=(n_points, n_roi, 2)))
    args = dict(centres=c, shape=shape, pc=pc, pc_ref=pc,
                stiffness=materials.stiffness_tensor(materials.cubic_stiffness(246.5, 147.3, 124.7)),
                orientation=sim.bunge_to_matrix(*EULER))
    qd, h, s = xp.asarray(q), xp.full((n_points, n_roi), 0.9), xp.zeros((n_points, n_roi), xp.uint8)
    float(sn.fit_strain(qd, h, s, **args).F.sum())  # warm-up: every kernel compiled, memory pool filled
    t = time.perf_counter()
    r = sn.fit_strain(qd, h, s, **args)
    float(r.F.sum())  # waits for the device
    return n_points / (time.perf_counter() - t)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--rows", type=int, default=6)
    p.add_argument("--cols", type=int, default=6)
    p.add_argument("--sizes", default="256,512")
    p.add_argument("--recipe", default="hrebsd")
    p.add_argument("--throughput", type=int, default=0, metavar="N",
                   help="also time a whole run on an N-point scan with and without strain")
    a = p.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",")]
    cfg, run = load_config(a.recipe)
    print(f"device {a.device}, recipe {a.recipe}, {a.rows}x{a.cols} points, Ni, Bunge {EULER}", file=sys.stderr)

    def fmt(v):
        return f"{v * 1e6:.1f}"

    print("\n### Strain and rotation error (RMS over points, units of 1e-6)\n")
    print("| pattern | noise | ROIs used | residual (px) | max dev. strain | dev. strain e11 e12 e13 e22 e23 e33 | "
          "max rotation (rad) | rotation w12 w13 w23 | max full strain | time (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    kept = {}
    for size in sizes:
        for noise in (True, False):
            sc = make_scan(a.rows, a.cols, size, noise=noise)
            with tempfile.TemporaryDirectory() as d:
                out, dt = run_case(sc, cfg, run, d, a.device)
                e = errors(_from_file(out), sc.F)
                if noise and size == sizes[0]:
                    import shutil

                    keep = tempfile.mkdtemp()
                    shutil.copy(out, keep)
                    kept = {"out": f"{keep}/results.h5", "sc": sc}
            print(f"| {size}x{size} | {'Poisson' if noise else 'none'} | {e['rois']:.0f} | {e['residual']:.4f} | "
                  f"**{fmt(e['dev_max'])}** | {' '.join(fmt(v) for v in e['dev'])} | **{fmt(e['rot_max'])}** | "
                  f"{' '.join(fmt(v) for v in e['rot'])} | {fmt(e['full_max'])} | {dt:.2f} |")

    print("\n### 3-degree lattice rotation plus 1e-3 strain (Poisson noise)\n")
    print("| pattern | remapping | points remapped | ROIs used | residual (px) | max dev. strain | max rotation | "
          "max full strain |")
    print("|---|---|---|---|---|---|---|---|")
    for size in sizes:
        sc = make_scan(a.rows, a.cols, size, noise=True, rotation_deg=3.0)
        with tempfile.TemporaryDirectory() as d:
            out, _ = run_case(sc, cfg, run, d, a.device)
            for remap in (True, False):
                if not remap:
                    strain(out, config=StrainConfig(material="Ni", remap_threshold_deg=0), overwrite=True,
                           device=a.device)
                f = _from_file(out)
                e = errors(f, sc.F)
                print(f"| {size}x{size} | {'on (1 deg)' if remap else 'off'} | {f['remapped']} | {e['rois']:.0f} | "
                      f"{e['residual']:.4f} | **{fmt(e['dev_max'])}** | {fmt(e['rot_max'])} | {fmt(e['full_max'])} |")

    print(f"\n### Pattern-centre error ({sizes[0]}x{sizes[0]}, Poisson noise)\n")
    print("Common: the PCs of the reference and of every point are off by the same amount (a calibration "
          "error). Reference only: the reference's PC is off, the points' PCs are right (a relative error, "
          "as when the reference comes from elsewhere).\n")
    print("| PC component | error (% of detector width) | px | common: max dev. strain | common: max rotation | "
          "reference only: max dev. strain | reference only: max rotation |")
    print("|---|---|---|---|---|---|---|")
    sc = kept["sc"]
    base = errors(_from_file(kept["out"]), sc.F)
    print(f"| none | 0 | 0 | {fmt(base['dev_max'])} | {fmt(base['rot_max'])} | {fmt(base['dev_max'])} | "
          f"{fmt(base['rot_max'])} |")
    deltas = (0.001, 0.005, 0.01)
    common = pc_sensitivity(kept["out"], sc, StrainConfig(material="Ni"), deltas)
    ref_only = pc_sensitivity(kept["out"], sc, StrainConfig(material="Ni"), deltas, reference_only=True)
    for (label, d, e), (_, _, e2) in zip(common, ref_only):
        print(f"| {label} | {d * 100:.1f} | {d * sc.patterns.shape[3]:.2f} | {fmt(e['dev_max'])} | "
              f"{fmt(e['rot_max'])} | {fmt(e2['dev_max'])} | {fmt(e2['rot_max'])} |")

    rate = fit_speed(a.device)
    print(f"\nFit alone ({a.device}, 100,000 points in one call, 25 ROIs, float64, rejection on): "
          f"{rate:,.0f} points/s")
    if a.throughput:
        n = a.throughput
        t0, t1 = pipeline_throughput(a.device, n, cfg, run)
        print(f"\nWhole run, {n} points of 256x256 (recipe {a.recipe}, {a.device}): displacements only "
              f"{t0:.2f} s ({n / t0:,.0f} points/s); with strain {t1:.2f} s ({n / t1:,.0f} points/s); "
              f"the strain pass adds {t1 - t0:.2f} s")
        t0, t1 = pipeline_throughput(a.device, n, cfg, run, rotation_deg=3.0,
                                     strain_cfgs=(StrainConfig(material="Ni", remap_threshold_deg=0),
                                                  StrainConfig(material="Ni")))
        print(f"Every point rotated 3 degrees: strain without remapping {t0:.2f} s ({n / t0:,.0f} points/s); "
              f"with every point remapped {t1:.2f} s ({n / t1:,.0f} points/s)")
    return 0


def pipeline_throughput(device, n_points, cfg, run, *, rotation_deg=0.0, strain_cfgs=None, size=256):
    """Seconds for ``process`` on an n-point scan (16 simulated patterns of ``size`` px repeated),
    one per strain configuration (default: none, then Ni)."""
    import h5py

    cols = 100
    rows = max(1, n_points // cols)
    sc = make_scan(4, 4, size, noise=True, rotation_deg=rotation_deg)
    reps = -(-rows * cols // 16)
    pats = np.tile(sc.patterns.reshape(16, size, size), (reps, 1, 1))[: rows * cols].reshape(rows, cols, size, size)
    times = []
    with tempfile.TemporaryDirectory() as d:
        sc.save(d, euler_deg=EULER)
        with h5py.File(f"{d}/scan.h5", "r+") as f:
            del f["patterns"]
            ds = f.create_dataset("patterns", data=pats, chunks=(1, cols, size, size))
            # one PC for the scan: per-point PCs of 10^4 points do not fit in an HDF5 attribute
            for k, v in (("pattern_centre", sc.pc_ref), ("euler_angles", np.asarray(EULER)), ("sample_tilt", 70.0),
                         ("detector_tilt", 0.0)):
                ds.attrs[k] = v
        run = dataclasses.replace(run, device=device)
        for sc_cfg in strain_cfgs or (StrainConfig(), StrainConfig(material="Ni")):
            c = cfg.replace(strain=sc_cfg)
            process(f"{d}/scan.h5", ref=f"{d}/ref.tif", config=c, run=run, output=f"{d}/warm.h5", overwrite=True)
            t = time.perf_counter()
            process(f"{d}/scan.h5", ref=f"{d}/ref.tif", config=c, run=run, output=f"{d}/r.h5", overwrite=True)
            times.append(time.perf_counter() - t)
    return times


if __name__ == "__main__":
    sys.exit(main())
