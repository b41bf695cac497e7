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


def test_absolute_strain_against_simulated_references(scan, tmp_path):
    path, F, g = scan
    out = str(tmp_path / "r.h5")
    assert cli.main(["process", path, "--ref", "simulated", "--master-pattern", MASTER, "--material", "Ni",
                     "--pipeline", "hrebsd", "--roi-size", "48", "-o", out, "-q"]) == 0
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
