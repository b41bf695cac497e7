"""ebsdxc.run.pc_calibration: calibrate the PC of a simulated scan file end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ebsdxc import simulate as sim
from ebsdxc.backend import select_backend
from ebsdxc.errors import InputError
from ebsdxc.io import open_scan
from ebsdxc.run.pc_calibration import calibrate_pattern_centre, calibration_points


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    try:
        master = sim.load_nickel_master_pattern()
    except ValueError as exc:
        pytest.skip(str(exc))
    # the PC moves 3 px over the map in x and y, as a beam scan moves it; patterns carry a detector
    # background (removed by the default dynamic background correction) and no deformation
    sc = sim.simulate_scan(6, 7, shape=(96, 96), counts=None, strain=0.0, rotation=0.0, pc_shift_px=3.0, seed=2,
                           master=master)
    folder = tmp_path_factory.mktemp("pc_scan")
    path, _ = sc.save(folder, euler_deg=(160.0, 40.0, 20.0))
    return path, sc, master


def test_calibration_points():
    from ebsdxc.io import ScanGrid

    grid = ScanGrid(10, 20)
    rc = calibration_points(grid, (3, 4))
    assert rc.tolist() == [[r, c] for r in (1, 4, 8) for c in (2, 7, 12, 17)]
    hexa = ScanGrid(4, 5, kind="hexagonal")
    assert calibration_points(hexa, np.array([[1, 4], [2, 4]])).tolist() == [[1, 3], [2, 4]]
    with pytest.raises(ValueError, match="lie in"):
        calibration_points(grid, np.array([[10, 0]]))


def test_calibrates_a_moving_pc(scan):
    path, sc, master = scan
    start = sc.pc_ref + np.array([0.01, -0.01, 0.01])  # 1% of the detector off
    res = calibrate_pattern_centre(path, master, points=(3, 3), pc0=start, backend=select_backend("cpu"))
    assert res.points.shape == (9, 2) and res.used.all() and all(not why for why in res.excluded)
    err = np.abs(res.pc_map - sc.pc)
    print(f"scan PC map error max {err.max(axis=(0, 1))} (detector fractions), NCC {res.ncc.min():.4f}")
    assert err.max() < 5e-4
    # without calibration the start PC would be off by 1% plus the beam shift
    assert np.abs(start - sc.pc).max() > 0.01
    d = res.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["model"] == "plane" and d["n_used"] == 9 and d["max_residual"] < 2e-4 and d["excluded"] == {}
    assert d["master_pattern"] == {"size": 401}


def test_bad_points_are_excluded_and_said(scan, tmp_path):
    path, sc, master = scan
    from ebsdxc.io.master_pattern import read_master_pattern

    mp = read_master_pattern(sim.nickel_master_pattern_path())
    # a wrong start orientation at one point: its search ends at a poor NCC and is left out of the fit
    g = np.broadcast_to(sim.bunge_to_matrix(160.0, 40.0, 20.0), (6, 7, 3, 3)).copy()
    g[2, 3] = sim.bunge_to_matrix(10.0, 70.0, 50.0)
    res = calibrate_pattern_centre(open_scan(path), mp, points=(3, 3), pc0=sc.pc_ref, orientations=g,
                                   backend=select_backend("cpu"), min_ncc=0.9)
    k = res.points.tolist().index([2, 3])
    assert not res.used[k] and "below 0.9" in res.excluded[k] and res.used.sum() == 8
    assert np.abs(res.pc_map - sc.pc).max() < 5e-4
    d = res.to_dict()
    assert list(d["excluded"]) == ["2,3"] and d["master_pattern"]["space_group"] == 225
    # too few good points for a plane: one line naming the scan
    with pytest.raises(InputError, match="1 of 1 points refined well.*plane model cannot be fitted") as e:
        calibrate_pattern_centre(path, mp, points=(1, 1), pc0=sc.pc_ref, backend=select_backend("cpu"))
    assert str(e.value).startswith(path)


def test_extrapolation_model(scan):
    path, sc, master = scan
    # simulate_scan moves the PC by 3 px over the map: not the beam-shift model, so the fit shows a residual
    res = calibrate_pattern_centre(path, master, points=(2, 2), pc0=sc.pc_ref, backend=select_backend("cpu"),
                                   model="extrapolation", step=(1.0, 1.0), pixel_size=50.0)
    assert res.model.model == "extrapolation" and res.to_dict()["mean_residual"] > 1e-3
    with pytest.raises(ValueError, match="pixel_size"):
        calibrate_pattern_centre(path, master, points=(2, 2), pc0=sc.pc_ref, backend=select_backend("cpu"),
                                 model="extrapolation")


def test_needs_orientations(tmp_path):
    sc = sim.simulate_scan(1, 2, shape=(32, 32), counts=None, seed=1)
    path, _ = sc.save(tmp_path)
    with pytest.raises(InputError, match="needs start orientations"):
        calibrate_pattern_centre(path, np.ones((2, 5, 5)), points=(1, 2), pc0=sc.pc_ref,
                                 backend=select_backend("cpu"))
