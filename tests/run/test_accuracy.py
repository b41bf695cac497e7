"""Displacements against ground truth: the committed sample data and a freshly simulated scan."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest
import tifffile

from ebsdxc import cli
from ebsdxc import simulate as sim
from ebsdxc import status as st
from ebsdxc.config import RunConfig, load_config
from ebsdxc.io import ArraySource
from ebsdxc.io.results import read_results
from ebsdxc.run import process


def errors_against_truth(res, truth):
    """(rows, cols, n, 2) displacement error of a results dict against ``truth`` (dict)."""
    d = sim.displacement_truth(res["roi_centers"], shape=truth["shape"], pc_ref=truth["pc_ref"],
                               pc=truth["pc"], F=truth["F"], sample_tilt=truth["sample_tilt"],
                               detector_tilt=truth["detector_tilt"])
    assert d.shape == res["displacement"].shape
    return res["displacement"] - d, d


def rms(e):
    return float(np.sqrt(np.mean(e ** 2)))


@pytest.fixture(scope="module")
def sample_runs(tmp_path_factory, request):
    """``ebsdxc process`` on sample_data with default settings, once per subpixel method."""
    sample_dir = request.getfixturevalue("sample_dir")
    d = tmp_path_factory.mktemp("acc")
    out = {}
    for method in (None, "dft", "upsampled", "quadratic", "gaussian", "parabolic", "none"):
        path = d / f"{method or 'default'}.h5"
        argv = ["process", os.path.join(sample_dir, "scan.h5"), "--ref",
                os.path.join(sample_dir, "ref.tif"), "-o", str(path), "--device", "cpu", "-q"]
        if method:
            argv += ["--subpixel", method]
        assert cli.main(argv) == 0
        out[method or "default"] = read_results(path)
    return out


def test_sample_data_default_settings(sample_runs, sample_truth):
    res = sample_runs["default"]
    assert res["attrs"]["complete"]
    assert res["done"].all()
    assert (res["status"] == st.OK).all(), "every match must be OK on the sample data"
    assert res["attrs"]["parameters"]["correlation"]["subpixel"] == "dft"
    e, d = errors_against_truth(res, sample_truth)
    assert np.abs(d).max() > 0.8  # the truth has shifts of about a pixel: a real test
    assert rms(e) <= 0.02, rms(e)
    assert np.abs(e).max() <= 0.1, np.abs(e).max()
    assert abs(e[..., 0].mean()) < 0.005 and abs(e[..., 1].mean()) < 0.005  # no bias
    h = res["peak_height"]
    assert (h > 0.5).all() and (h <= 1).all()


def test_sample_data_subpixel_methods_ordering(sample_runs, sample_truth):
    r = {}
    for m, res in sample_runs.items():
        assert (res["status"] == st.OK).all(), m
        r[m] = rms(errors_against_truth(res, sample_truth)[0])
    # observed (CPU, 25 ROIs 40x40, full mode): dft 0.0144, upsampled 0.0144, quadratic 0.027,
    # gaussian 0.098, parabolic 0.101, none (integer peak) 0.31
    assert r["default"] == r["dft"]
    assert r["dft"] <= 0.02 and r["upsampled"] <= 0.02
    assert abs(r["dft"] - r["upsampled"]) < 0.003
    assert 0.015 <= r["quadratic"] <= 0.04
    assert 0.05 <= r["gaussian"] <= 0.15 and 0.05 <= r["parabolic"] <= 0.15
    assert 0.2 <= r["none"] <= 0.4  # whole pixels: about 1/sqrt(12) rms per component
    assert max(r["dft"], r["upsampled"]) <= r["quadratic"]
    assert r["quadratic"] < 0.5 * r["parabolic"]
    assert r["quadratic"] < 0.5 * r["gaussian"]
    assert max(r["gaussian"], r["parabolic"]) < r["none"]


# ----------------------------------------------------------------------------- simulated scan


def test_simulated_strained_scan_paper_layout(tmp_path):
    sc = sim.simulate_scan(4, 4, seed=3)
    tifffile.imwrite(tmp_path / "ref.tif", sc.reference)
    scan = tmp_path / "sim.h5"
    with h5py.File(scan, "w") as f:
        f["patterns"] = sc.patterns
    cfg = load_config("paper-86roi-96")[0]
    cpu = RunConfig(device="cpu")
    assert cfg.correlation.subpixel == "dft"
    out = process(str(scan), ref=str(tmp_path / "ref.tif"), output=str(tmp_path / "res.h5"), config=cfg, run=cpu)
    res = read_results(out)
    assert res["roi_centers"].shape == (86, 2) and res["roi_size"].tolist() == [96, 96]
    assert (res["status"] == st.OK).all()
    d = sc.truth(res["roi_centers"])
    e = res["displacement"] - d
    assert np.abs(d).max() > 0.8, np.abs(d).max()  # shifts reach about a pixel
    assert rms(e) <= 0.02, rms(e)
    assert np.abs(e).max() <= 0.08, np.abs(e).max()

    # the same patterns in memory (ArraySource) give the same answer
    out2 = process(ArraySource(sc.patterns), ref=str(tmp_path / "ref.tif"), output=str(tmp_path / "res2.h5"),
                   config=cfg, run=cpu)
    np.testing.assert_allclose(read_results(out2)["displacement"], res["displacement"], atol=1e-5)
