"""``ebsdxc process FRAMES --ref REF.tif --mode dic --subset 31 --step 8 -o OUT.h5``: the contract's
datasets, their shapes and meaning, against frames with known deformation."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest
import tifffile
from exact_warps import texture

from ebsdxc import cli
from ebsdxc import status as st

H, W = 160, 200
FIELDS = [(np.diag([2e-3, -1e-3]), np.array([3.3, -1.6])),
          (np.array([[1e-2, 2e-3], [0.0, 4e-3]]), np.array([-0.4, 0.25]))]


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    d = tmp_path_factory.mktemp("dic")
    f = texture()
    yy, xx = np.mgrid[0:H, 0:W].astype(float)
    tifffile.imwrite(d / "ref.tif", (f(xx, yy) * 300 + 32768).astype(np.uint16))
    os.makedirs(d / "frames")
    for i, (G, t) in enumerate(FIELDS):
        X = (np.stack([xx, yy], -1) - t) @ np.linalg.inv(np.eye(2) + G).T
        tifffile.imwrite(d / "frames" / f"f{i}.tif", (f(X[..., 0], X[..., 1]) * 300 + 32768).astype(np.uint16))
    return d


def test_contract(frames, tmp_path, capsys):
    out = str(tmp_path / "r.h5")
    assert cli.main(["process", str(frames / "frames"), "--ref", str(frames / "ref.tif"), "--mode", "dic",
                     "--subset", "31", "--step", "8", "-o", out, "-q"]) == 0
    with h5py.File(out, "r") as fh:
        g = fh["ebsdxc/dic"]
        pts = g["points"][()]
        ny, nx = pts.shape[:2]
        assert pts.shape == (ny, nx, 2) and pts[0, 0].tolist() == [15.0, 15.0] and pts[0, 1, 0] == 23.0
        disp, status = g["displacement"][()], g["status"][()]
        assert disp.shape == (2, ny, nx, 2) and status.shape == (2, ny, nx)
        assert g["strain"].shape == (2, ny, nx, 2, 2) and bool(g.attrs["strain_complete"])
        strain = g["strain"][()]
        params = json.loads(fh["ebsdxc"].attrs["parameters"])
        assert params["dic"]["subset"] == 31 and params["dic"]["step"] == 8
        assert json.loads(g.attrs["strain_parameters"])["gauge_length_px"] > 31
    for i, (G, t) in enumerate(FIELDS):
        ok = status[i] == st.OK
        assert ok.mean() > 0.7
        truth = t + pts @ G.T
        err = disp[i][ok] - truth[ok]
        assert np.sqrt((err**2).mean()) < 0.002
        assert np.isnan(disp[i][~ok]).all()
        F = np.eye(2) + G
        E = (F.T @ F - np.eye(2)) / 2
        inner = ok.copy()
        inner[:2], inner[-2:], inner[:, :2], inner[:, -2:] = False, False, False, False
        e = strain[i][inner] - E
        # displacement errors of a few 1e-3 px over the 32 px window: about 1e-4
        assert np.sqrt(np.nanmean(e**2)) < 1e-4 and np.nanmax(np.abs(e)) < 3e-4


def test_step_must_be_whole_pixels_and_dic_flags_need_the_mode(frames, tmp_path, capsys):
    args = ["process", str(frames / "frames"), "--ref", str(frames / "ref.tif"), "-o", str(tmp_path / "r.h5"), "-q"]
    assert cli.main([*args, "--mode", "dic", "--step", "7.5"]) == 2
    assert "whole pixels" in capsys.readouterr().err
    assert cli.main([*args, "--subset", "31"]) == 2
    assert "--subset applies with --mode dic" in capsys.readouterr().err
    assert cli.main([*args, "--mode", "dic", "--subset", "30"]) == 2
    assert "--subset" in capsys.readouterr().err


@pytest.mark.parametrize("recipe", ["dic", "dic-incremental"])
def test_shipped_dic_recipes(frames, tmp_path, recipe):
    """The recipes in pipelines/ switch DIC on by themselves (no --mode dic)."""
    out = str(tmp_path / "r.h5")
    assert cli.main(["process", str(frames / "frames"), "--ref", str(frames / "ref.tif"), "--pipeline", recipe,
                     "-o", out, "-q"]) == 0
    with h5py.File(out, "r") as fh:
        g = fh["ebsdxc/dic"]
        pts, disp, status = g["points"][()], g["displacement"][()], g["status"][()]
        assert bool(g.attrs["strain_complete"])
        assert bool(g.attrs.get("displacement_complete", True))
    G, t = FIELDS[0]
    ok = status[0] == st.OK
    assert ok.mean() > 0.6
    assert np.abs(disp[0][ok] - (t + pts[ok] @ G.T)).max() < 0.01
