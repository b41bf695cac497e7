"""``--ref simulated``: a scan with no strain-free point, each point correlated against a pattern
simulated from the master pattern at its orientation and PC; the orientation the map gives is
0.5 degree off and is re-estimated. Absolute strain against the truth."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from ebsdxc import cli, materials
from ebsdxc import simulate as sim
from ebsdxc import strain as sn
from ebsdxc.crystal import rotation_angle
from ebsdxc.io.results import read_strain

try:
    MASTER = sim.nickel_master_pattern_path()
except ValueError:
    MASTER = None
pytestmark = pytest.mark.skipif(MASTER is None, reason="kikuchipy's Ni master pattern is not installed")
EULER = (160.0, 40.0, 20.0)


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    d = tmp_path_factory.mktemp("simref")
    g = sim.bunge_to_matrix(*EULER)
    C = materials.stiffness_tensor(materials.parse_material("Ni")[1])
    F = sn.traction_free(sim.smooth_deformation_field(3, 3, strain=1e-3, rotation=1e-3, seed=4), C, g)
    sc = sim.simulate_scan(3, 3, shape=(160, 160), counts=None, F=F, seed=4)
    path, _ = sc.save(str(d), euler_deg=(EULER[0] + 0.5, EULER[1], EULER[2]))  # indexing 0.5 degree off
    return path, F, g


def _absolute_error(out, F):
    V, _ = sn.polar_decomposition(F.reshape(-1, 3, 3))
    e = read_strain(out)["strain"].reshape(-1, 3, 3)
    return float(np.sqrt(np.nanmean((e - (V - np.eye(3))) ** 2, axis=0)).max())


def test_absolute_strain_against_simulated_references(scan, tmp_path, capsys):
    path, F, g = scan
    out = str(tmp_path / "r.h5")
    assert cli.main(["process", path, "--ref", "simulated", "--master-pattern", MASTER, "--material", "Ni",
                     "--pipeline", "hrebsd", "--roi-size", "48", "-o", out, "-q"]) == 0
    assert "references simulated for 9 points, 2 per point" in capsys.readouterr().out
    # the bound for absolute strain is 1e-4 RMS (measured here: about 5e-5 at 160 px)
    assert _absolute_error(out, F) < 1e-4
    with h5py.File(out, "r") as f:
        e = f["ebsdxc"]
        params = json.loads(e.attrs["parameters"])
        assert params["reference"]["kind"] == "simulated"
        assert params["reference"]["master_pattern"]["xtalname"]
        r = e["simulated_reference"]
        assert (r["simulations"][()] >= 2).all()  # the 0.5 degree start was re-estimated
        assert (r["rotation_left_deg"][()] < 0.05).all()
        G = r["orientation"][()].reshape(-1, 3, 3)
    _, R = sn.polar_decomposition(F.reshape(-1, 3, 3))
    true = g @ np.swapaxes(R, -1, -2)  # the deformed crystal's orientation
    assert np.degrees(rotation_angle(G @ np.swapaxes(true, -1, -2))).max() < 0.05
    # 'ebsdxc strain' fits the same file again against the same per-point references
    before = read_strain(out)["strain"]
    assert cli.main(["strain", out, "--material", "Ni", "--overwrite", "-q"]) == 0
    np.testing.assert_allclose(read_strain(out)["strain"], before, atol=1e-9)


def test_simulated_references_with_icgn(scan, tmp_path):
    path, F, _ = scan
    out = str(tmp_path / "r.h5")
    assert cli.main(["process", path, "--ref", "simulated", "--master-pattern", MASTER, "--material", "Ni",
                     "--pipeline", "hrebsd", "--roi-size", "48", "--refine", "icgn", "-o", out, "-q"]) == 0
    assert _absolute_error(out, F) < 1e-4
    with h5py.File(out, "r") as f:
        assert (f["ebsdxc/icgn/status"][()] == 0).all()


@pytest.mark.parametrize("args, words", [
    (["--ref", "simulated", "--material", "Ni"], ["master"]),
    (["--ref", "simulated", "--master-pattern", "MASTER"], ["material"]),
    (["--ref", "simulated", "--master-pattern", "MASTER", "--material", "Fe"], ["ni_mc_mp_20kv"]),
])
def test_bad_input_is_one_line(scan, tmp_path, capsys, args, words):
    path, _, _ = scan
    args = [MASTER if a == "MASTER" else a for a in args]
    assert cli.main(["process", path, *args, "-o", str(tmp_path / "r.h5"), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(w in err[0] for w in words)
    assert not (tmp_path / "r.h5").exists()


@pytest.mark.gpu
def test_gpu_matches_cpu(scan, tmp_path):
    path, F, _ = scan
    outs = []
    for device in ("cpu", "cuda"):
        out = str(tmp_path / f"{device}.h5")
        assert cli.main(["process", path, "--ref", "simulated", "--master-pattern", MASTER, "--material", "Ni",
                         "--pipeline", "hrebsd", "--roi-size", "48", "--refine", "icgn", "--device", device,
                         "-o", out, "-q"]) == 0
        outs.append(read_strain(out)["strain"])
    np.testing.assert_allclose(outs[1], outs[0], atol=2e-6)


@pytest.mark.slow
def test_real_ni_patterns(tmp_path):
    """kikuchipy's 3x3 real Ni patterns (60x60): orientations from a 4-degree kikuchipy dictionary
    written as an .ang, the PC calibrated, a reference simulated per point. No truth: the good
    patterns (calibration NCC > 0.3; kikuchipy reaches 0.43-0.51 on the same five) correlate
    with their simulated references at peak heights of 0.5-0.6 and the orientation settles, the
    four poor ones (NCC 0.12-0.15, as for kikuchipy) are not fitted. Absolute strain from 60-px
    patterns is not meaningful (it comes out at 0.4-5%): that needs real detector resolution."""
    kp = pytest.importorskip("kikuchipy")
    import os

    from orix.quaternion import symmetry
    from orix.sampling import get_sample_fundamental

    from ebsdxc.io.ang import write_ang
    from ebsdxc.io.orientation_map import OrientationMap, PhaseInfo
    from ebsdxc.io.source import ScanGrid

    s = kp.data.nickel_ebsd_small()
    s.remove_static_background(show_progressbar=False)
    s.remove_dynamic_background(show_progressbar=False)
    mp = kp.data.nickel_ebsd_master_pattern_small(projection="lambert", energy=20)
    det = kp.detectors.EBSDDetector(shape=(60, 60), pc=(0.421, 0.221, 0.505), sample_tilt=70)
    dictionary = mp.get_patterns(get_sample_fundamental(resolution=4, point_group=symmetry.Oh), det, energy=20,
                                 compute=True, show_progressbar=False)
    xmap = s.dictionary_indexing(dictionary, keep_n=1)
    euler = (np.degrees(xmap.rotations.to_euler()).reshape(3, 3, 3)) % 360
    ang = str(tmp_path / "dict.ang")
    write_ang(ang, OrientationMap(ang, ScanGrid(3, 3, step=(1.5, 1.5)), euler, np.zeros((3, 3), np.int16),
                                  (PhaseInfo(1, "Ni", "m-3m", (3.52, 3.52, 3.52, 90, 90, 90), "Ni", 225),)))
    scan = os.path.join(os.path.dirname(kp.__file__), "data", "kikuchipy_h5ebsd", "patterns.h5")
    out = str(tmp_path / "r.h5")
    assert cli.main(["process", scan, "--ref", "simulated", "--master-pattern", MASTER, "--material", "Ni",
                     "--orientations", ang, "--pc", "0.421,0.221,0.505", "--pc-map", "constant", "--pc-calibrate",
                     "--pc-calibration-points", "3,3", "--roi-size", "24", "--roi-grid", "3x3", "--max-shift", "8",
                     "--dynamic-background", "6", "--static-background", "file", "-o", out, "-q"]) == 0
    with h5py.File(out, "r") as f:
        e = f["ebsdxc"]
        ncc = e["pc_calibration/ncc"][()]
        good = (ncc > 0.3).reshape(3, 3)
        height = np.nanmedian(e["peak_height"][()], axis=-1)
        left = e["simulated_reference/rotation_left_deg"][()]
        fitted = e["fit_status"][()] == 0
    assert good.sum() >= 4
    assert (height[good] > 0.45).all() and (height[~good] < 0.35).all()
    assert fitted[good].mean() >= 0.75 and not fitted[~good].any()
    assert np.nanmedian(left[good]) < 1.0


def test_results_do_not_depend_on_the_batch(scan, tmp_path):
    """Re-estimation and IC-GN run per batch: batches of 1 and of the whole scan agree bit for bit."""
    path, _, _ = scan
    files = []
    for batch in ("1", "9"):
        out = str(tmp_path / f"b{batch}.h5")
        assert cli.main(["process", path, "--ref", "simulated", "--master-pattern", MASTER, "--material", "Ni",
                         "--pipeline", "hrebsd", "--roi-size", "48", "--refine", "icgn", "--batch", batch,
                         "-o", out, "-q"]) == 0
        files.append(out)
    with h5py.File(files[0], "r") as a, h5py.File(files[1], "r") as b:
        for k in ("displacement", "simulated_reference/orientation", "icgn/homography", "strain"):
            np.testing.assert_array_equal(a["ebsdxc"][k][()], b["ebsdxc"][k][()], err_msg=k)


@pytest.fixture(scope="module")
def pc_off_scan(tmp_path_factory):
    """A strain-free scan whose file PCs are 0.5% of the width off in PCx and PCz."""
    d = tmp_path_factory.mktemp("simref_pc")
    sc = sim.simulate_scan(2, 2, shape=(160, 160), counts=None, strain=0.0, rotation=0.0, seed=5)
    path, _ = sc.save(str(d), euler_deg=EULER)
    with h5py.File(path, "r+") as f:
        f["patterns"].attrs["pattern_centre"] = sc.pc + np.array([0.005, 0.0, 0.005])
    return path, sc.pc.reshape(-1, 3)


@pytest.mark.parametrize("mode", ["model", "refine"])
def test_per_point_pc_refinement(pc_off_scan, tmp_path, mode):
    path, pc_true = pc_off_scan
    out = str(tmp_path / "r.h5")
    assert cli.main(["process", path, "--ref", "simulated", "--master-pattern", MASTER, "--material", "Ni",
                     "--pipeline", "hrebsd", "--roi-size", "48", "--simulated-pc", mode, "-o", out, "-q"]) == 0
    with h5py.File(out, "r") as f:
        pc = f["ebsdxc/simulated_reference/pattern_centre"][()].reshape(-1, 3)
        params = json.loads(f["ebsdxc"].attrs["parameters"])
        strain_pc = f["ebsdxc/pattern_centre"]
        source = strain_pc.attrs.get("source", "")
        strain_pc = strain_pc[()].reshape(-1, 3)
    e = read_strain(out)["strain"].reshape(-1, 3, 3)
    err = float(np.sqrt(np.nanmean(e ** 2, axis=0)).max())  # the truth is strain-free
    if mode == "model":
        # the references are simulated with the file's wrong PC: the fit reads the PC error as strain
        np.testing.assert_allclose(pc, pc_true + [0.005, 0, 0.005], atol=1e-12)
        assert err > 2e-4
        assert params["reference"]["pattern_centre"] == "the scan's PC model"
        assert "refined" not in source
    else:
        # each point's PC refined by NCC with simulations: within 0.05% of the width, as calibration
        assert np.abs(pc - pc_true).max() < 5e-4
        assert err < 1e-4
        assert params["reference"]["pattern_centre"].startswith("each point's own")
        assert "refined by NCC" in source
    # the strain was fitted with the PC each reference was simulated with
    np.testing.assert_allclose(strain_pc, pc, atol=1e-9)
    # 'ebsdxc strain' fits again with the PCs the references were simulated with
    before = read_strain(out)["strain"]
    assert cli.main(["strain", out, "--material", "Ni", "--overwrite", "-q"]) == 0
    np.testing.assert_allclose(read_strain(out)["strain"], before, atol=1e-9)


@pytest.mark.gpu
def test_per_point_pc_refinement_gpu_matches_cpu(pc_off_scan, tmp_path):
    path, pc_true = pc_off_scan
    got = {}
    for device in ("cpu", "cuda"):
        out = str(tmp_path / f"{device}.h5")
        assert cli.main(["process", path, "--ref", "simulated", "--master-pattern", MASTER, "--material", "Ni",
                         "--pipeline", "hrebsd", "--roi-size", "48", "--simulated-pc", "refine", "--device", device,
                         "-o", out, "-q"]) == 0
        with h5py.File(out, "r") as f:
            got[device] = f["ebsdxc/simulated_reference/pattern_centre"][()].reshape(-1, 3), read_strain(out)["strain"]
    # float32 simulations on the GPU, float64 on the CPU: the searches end a little apart
    assert np.abs(got["cuda"][0] - pc_true).max() < 5e-4
    np.testing.assert_allclose(got["cuda"][0], got["cpu"][0], atol=2e-4)
    np.testing.assert_allclose(got["cuda"][1], got["cpu"][1], atol=5e-5)
