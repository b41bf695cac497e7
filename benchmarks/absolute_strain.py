"""Absolute strain against simulated references (``--ref simulated``) and pattern-centre calibration.

1. Absolute strain: a scan with no strain-free point (kikuchipy's Ni master pattern, smooth
   traction-free F of about 1e-3 strain and rotation, PC moving with the beam), its orientation
   map 0.5 degree off (an indexing error), run with ``--ref simulated`` against the exact master
   pattern and the known PCs, with ROI cross-correlation and with IC-GN. Error = fitted minus
   true full strain (6 components), RMS over points.
2. PC calibration: the same crystal strain-free, the file's PCs 1% of the detector width off
   (PCx, or PCz), ``--pc-calibrate`` on a 3x3 grid of points with a plane model; error = the
   calibrated PC map minus the true one, over every point.
3. Per-point PC (``--simulated-pc model|refine``): the file's PCs 0.5% of the width off (PCx and
   PCz), strain-free and strained (1e-3); the PC each reference was simulated with, and the
   absolute strain error. Shows what refining each point's PC buys where the PC model is wrong
   and what it costs where the crystal is strained (PC and strain trade off on one pattern).
4. Speed (with ``--speed N``): whole runs of N points with a fixed reference and with simulated
   references, on the device given.

Usage::

    python benchmarks/absolute_strain.py [--device cpu|cuda] [--rows 4 --cols 4] [--size 256] [--speed N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import h5py
import numpy as np

from ebsdxc import materials
from ebsdxc import simulate as sim
from ebsdxc import strain as sn
from ebsdxc.config import load_config
from ebsdxc.crystal import rotation_angle
from ebsdxc.hrebsd import StrainConfig
from ebsdxc.io.results import read_strain
from ebsdxc.refine import RefineConfig
from ebsdxc.run import process

EULER = (160.0, 40.0, 20.0)


def scan(rows, cols, size, *, noise, strained=True, seed=4):
    g = sim.bunge_to_matrix(*EULER)
    C = materials.stiffness_tensor(materials.parse_material("Ni")[1])
    amp = 1e-3 if strained else 0.0
    F = sn.traction_free(sim.smooth_deformation_field(rows, cols, strain=amp, rotation=amp, seed=seed), C, g)
    return sim.simulate_scan(rows, cols, shape=(size, size), counts=1000 if noise else None, F=F, seed=seed), g


def absolute(a):
    print(f"\n### Absolute strain, simulated references ({a.size}x{a.size}, {a.rows}x{a.cols} points, "
          f"orientation map 0.5 deg off; {a.device})\n")
    print("| noise | method | points | max full strain RMS (1e-6) | e11 e12 e13 e22 e23 e33 | orientation error after "
          "re-estimation (deg, max) | simulations per point (median) | time (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for noise in (False, True):
        sc, g = scan(a.rows, a.cols, a.size, noise=noise)
        V, R = sn.polar_decomposition(sc.F.reshape(-1, 3, 3))
        true_e = V - np.eye(3)
        true_g = g @ np.swapaxes(R, -1, -2)
        for method in ("none", "icgn"):
            with tempfile.TemporaryDirectory() as d:
                path, _ = sc.save(d, euler_deg=(EULER[0] + 0.5, EULER[1], EULER[2]))
                cfg, run = load_config("hrebsd", {"run": {"device": a.device}})
                cfg = cfg.replace(strain=StrainConfig(material="Ni", master_pattern=sim.nickel_master_pattern_path()),
                                  refine=RefineConfig(method=method))
                t = time.perf_counter()
                out = process(path, ref="simulated", config=cfg, run=run, output=f"{d}/r.h5")
                dt = time.perf_counter() - t
                s = read_strain(out)
                ok = s["fit_status"].reshape(-1) == 0
                e = s["strain"].reshape(-1, 3, 3)[ok]
                rms = np.sqrt(((e - true_e[ok]) ** 2).mean(axis=0))[np.triu_indices(3)]
                with h5py.File(out, "r") as f:
                    G = f["ebsdxc/simulated_reference/orientation"][()].reshape(-1, 3, 3)
                    sims = f["ebsdxc/simulated_reference/simulations"][()]
                err = np.degrees(rotation_angle(G @ np.swapaxes(true_g, -1, -2))).max()
            print(f"| {'Poisson' if noise else 'none'} | {'IC-GN' if method == 'icgn' else 'ROI CC'} | "
                  f"{ok.sum()}/{ok.size} | **{rms.max() * 1e6:.1f}** | {' '.join(f'{v * 1e6:.1f}' for v in rms)} | "
                  f"{err:.4f} | {np.median(sims):.0f} | {dt:.1f} |", flush=True)


def calibration(a):
    print(f"\n### Pattern-centre calibration ({a.size}x{a.size}, {a.rows}x{a.cols} points, strain-free, file PCs "
          f"1% of the width off, 3x3 calibration points, plane; {a.device})\n")
    print("| noise | PC off | max error of the calibrated PC map (% of width) | PCx PCy PCz | time (s) |")
    print("|---|---|---|---|---|")
    for noise in (False, True):
        sc, _ = scan(a.rows, a.cols, a.size, noise=noise, strained=False)
        for comp, label in ((0, "PCx +1%"), (2, "PCz +1%")):
            off = np.zeros(3)
            off[comp] = 0.01
            with tempfile.TemporaryDirectory() as d:
                path, _ = sc.save(d, euler_deg=EULER)
                with h5py.File(path, "r+") as f:
                    f["patterns"].attrs["pattern_centre"] = sc.pc + off
                cfg, run = load_config("hrebsd", {"run": {"device": a.device}})
                cfg = cfg.replace(strain=StrainConfig(material="Ni", master_pattern=sim.nickel_master_pattern_path(),
                                                      pc_calibrate=True, pc_calibration_points=(3, 3)))
                t = time.perf_counter()
                out = process(path, ref_index=0, config=cfg, run=run, output=f"{d}/r.h5")
                dt = time.perf_counter() - t
                with h5py.File(out, "r") as f:
                    pc_map = f["ebsdxc/pc_calibration/pc_map"][()]
            err = np.abs(pc_map - sc.pc).reshape(-1, 3).max(axis=0)
            print(f"| {'Poisson' if noise else 'none'} | {label} | **{err.max() * 100:.3f}** | "
                  f"{' '.join(f'{v * 100:.3f}' for v in err)} | {dt:.1f} |", flush=True)


def per_point_pc(a):
    print(f"\n### Per-point PC of simulated references ({a.size}x{a.size}, {a.rows}x{a.cols} points, "
          f"file PCs +0.5% of the width in PCx and PCz, orientation map 0.5 deg off; {a.device})\n")
    print("| crystal | --simulated-pc | max PC error (% of width) | max full strain RMS (1e-6) | time (s) |")
    print("|---|---|---|---|---|")
    for strained in (False, True):
        sc, g = scan(a.rows, a.cols, a.size, noise=False, strained=strained)
        V, _ = sn.polar_decomposition(sc.F.reshape(-1, 3, 3))
        true_e = V - np.eye(3)
        for mode in ("model", "refine"):
            with tempfile.TemporaryDirectory() as d:
                path, _ = sc.save(d, euler_deg=(EULER[0] + 0.5, EULER[1], EULER[2]))
                with h5py.File(path, "r+") as f:
                    f["patterns"].attrs["pattern_centre"] = sc.pc + np.array([0.005, 0.0, 0.005])
                cfg, run = load_config("hrebsd", {"run": {"device": a.device}})
                cfg = cfg.replace(strain=StrainConfig(material="Ni", master_pattern=sim.nickel_master_pattern_path(),
                                                      simulated_pc=mode))
                t = time.perf_counter()
                out = process(path, ref="simulated", config=cfg, run=run, output=f"{d}/r.h5")
                dt = time.perf_counter() - t
                with h5py.File(out, "r") as f:
                    pc = f["ebsdxc/simulated_reference/pattern_centre"][()].reshape(-1, 3)
                s = read_strain(out)
                ok = s["fit_status"].reshape(-1) == 0
                e = s["strain"].reshape(-1, 3, 3)[ok]
                rms = np.sqrt(((e - true_e[ok]) ** 2).mean(axis=0))[np.triu_indices(3)]
            err = np.abs(pc - sc.pc.reshape(-1, 3)).max()
            print(f"| {'strained 1e-3' if strained else 'strain-free'} | {mode} | {err * 100:.4f} | "
                  f"**{rms.max() * 1e6:.1f}** | {dt:.1f} |", flush=True)


def speed(a):
    sc, _ = scan(4, 4, a.size, noise=True)
    cols = 100
    rows = max(1, a.speed // cols)
    big = np.tile(sc.patterns.reshape(16, a.size, a.size), (-(-rows * cols // 16), 1, 1))[:rows * cols]
    print(f"\n### Speed, {rows * cols} points of {a.size}x{a.size}, hrebsd recipe, with strain ({a.device})\n")
    print("| reference | method | points/s |")
    print("|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        path, ref = sc.save(d, euler_deg=EULER)
        with h5py.File(path, "r+") as f:
            del f["patterns"]
            ds = f.create_dataset("patterns", data=big.reshape(rows, cols, a.size, a.size),
                                  chunks=(1, cols, a.size, a.size))
            for k, v in (("pattern_centre", sc.pc_ref), ("euler_angles", np.asarray(EULER)), ("sample_tilt", 70.0),
                         ("detector_tilt", 0.0)):
                ds.attrs[k] = v
        for kind in ("image", "simulated"):
            for method in ("none", "icgn"):
                cfg, run = load_config("hrebsd", {"run": {"device": a.device}})
                cfg = cfg.replace(refine=RefineConfig(method=method))
                # strain in both (the simulated references are made for it)
                master = sim.nickel_master_pattern_path() if kind == "simulated" else None
                cfg = cfg.replace(strain=StrainConfig(material="Ni", master_pattern=master))
                r = "simulated" if kind == "simulated" else ref
                process(path, ref=r, config=cfg, run=run, output=f"{d}/w.h5", overwrite=True)
                t = time.perf_counter()
                process(path, ref=r, config=cfg, run=run, output=f"{d}/r.h5", overwrite=True)
                dt = time.perf_counter() - t
                print(f"| {'simulated per point' if kind == 'simulated' else 'one image'} | "
                      f"{'IC-GN' if method == 'icgn' else 'ROI CC'} | {rows * cols / dt:,.0f} |", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--cols", type=int, default=4)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--speed", type=int, default=0, metavar="N")
    p.add_argument("--skip-accuracy", action="store_true")
    p.add_argument("--pc-only", action="store_true", help="only the per-point PC section")
    a = p.parse_args(argv)
    if a.pc_only:
        per_point_pc(a)
    elif not a.skip_accuracy:
        absolute(a)
        calibration(a)
        per_point_pc(a)
    if a.speed:
        speed(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
