"""``ebsdxc process --pc-calibrate --master-pattern FILE``: the PCs a scan file states are 1% of the
detector width off; the calibration against the EMsoft master pattern finds the true ones, the
strain pass uses them, and the results file records how."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from ebsdxc import cli
from ebsdxc import simulate as sim

try:
    MASTER = sim.nickel_master_pattern_path()
except ValueError:  # kikuchipy (which ships the file) is not installed
    MASTER = None
pytestmark = pytest.mark.skipif(MASTER is None, reason="kikuchipy's Ni master pattern is not installed")


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    """A strain-free 6x6 scan (PC moving with the beam, Poisson noise) whose file states PCs 1% off."""
    d = tmp_path_factory.mktemp("pcc")
    sc = sim.simulate_scan(6, 6, shape=(96, 96), counts=200, seed=3, strain=0.0, rotation=0.0)
    path, _ = sc.save(str(d), euler_deg=(160.0, 40.0, 20.0))
    with h5py.File(path, "r+") as f:
        f["patterns"].attrs["pattern_centre"] = sc.pc + np.array([0.01, 0.0, 0.0])
    return path, sc.pc


def test_calibrated_pattern_centre_is_found_and_used(scan, tmp_path):
    path, true_pc = scan
    out = str(tmp_path / "r.h5")
    assert cli.main(["process", path, "--ref-index", "2,2", "--material", "Ni", "--pc-calibrate",
                     "--master-pattern", MASTER, "--pc-calibration-points", "3,3", "-o", out, "-q"]) == 0
    with h5py.File(out, "r") as f:
        g = f["ebsdxc"]
        cal = g["pc_calibration"]
        assert cal["points"].shape == (9, 2) and cal["used"][()].all()
        pc_map = cal["pc_map"][()]
        # the bound: within 0.05% of the detector width, from a start 1% off (here 0.02%)
        assert np.abs(pc_map - true_pc).max() < 5e-4
        np.testing.assert_allclose(g["pattern_centre"][()], pc_map)  # the strain pass used them
        assert g["pattern_centre"].attrs["source"].startswith("calibrated: plane fitted to 9 of 9 points")
        record = json.loads(cal.attrs["record"])
        assert record["model"] == "plane" and record["master_pattern"]["xtalname"]
        sources = json.loads(g["strain"].attrs.get("parameters", g.attrs.get("strain_parameters", "{}")))
        assert "calibrated" in json.dumps(sources)


def test_calibration_needs_a_master_pattern(scan, tmp_path, capsys):
    path, _ = scan
    assert cli.main(["process", path, "--ref-index", "0", "--material", "Ni", "--pc-calibrate",
                     "-o", str(tmp_path / "r.h5"), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--pc-calibrate" in err[0] and "--master-pattern" in err[0]


def test_a_master_pattern_of_another_material_is_refused(scan, tmp_path, capsys):
    path, _ = scan
    assert cli.main(["process", path, "--ref-index", "0", "--material", "Fe", "--pc-calibrate",
                     "--master-pattern", MASTER, "-o", str(tmp_path / "r.h5"), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and MASTER.split("/")[-1] in err[0]
    assert not (tmp_path / "r.h5").exists()
