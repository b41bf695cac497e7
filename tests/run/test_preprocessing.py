"""Binning, the detector mask and neighbour averaging through ``process``, each against an
oracle: the same scan preprocessed by hand in NumPy and processed without the option."""

import h5py
import numpy as np
import pytest

from ebsdxc import process, read_results, read_strain
from ebsdxc import status as st
from ebsdxc.config import ProcessConfig, RoiConfig, RunConfig, load_config
from ebsdxc.errors import InputError
from ebsdxc.hrebsd import StrainConfig
from ebsdxc.preprocess import PreprocessConfig, average_neighbours, bin_patterns, circular_mask

ROWS, COLS = 4, 5


def scan_file(path, patterns, *, kind="square", rows=ROWS, cols=COLS):
    with h5py.File(path, "w") as f:
        f["manufacturer"] = np.array([b"kikuchipy"])
        f["version"] = np.array([b"0.13.1"])
        f["Scan 1/EBSD/Data/patterns"] = patterns
        hdr = f.create_group("Scan 1/EBSD/Header")
        for key, value in {"n_rows": rows, "n_columns": cols, "pattern_height": patterns.shape[1],
                           "pattern_width": patterns.shape[2], "step_x": 1.0, "step_y": 1.0,
                           "grid_type": kind.encode()}.items():
            hdr[key] = np.array([value])
    return path


@pytest.fixture(scope="module")
def noisy(sample_dir):
    """20 sample patterns (4 x 5 points) with Poisson noise: averaging has something to do."""
    with h5py.File(f"{sample_dir}/scan.h5", "r") as f:
        p = f["patterns"][...].reshape(-1, 160, 160)[:ROWS * COLS].astype(np.float64)
    rng = np.random.default_rng(7)
    return rng.poisson(p * 0.05).astype(np.uint16)


DEVICES = pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])


def cfg(**pre):
    return ProcessConfig(roi=RoiConfig(grid=(3, 3), size=48),
                         preprocess=PreprocessConfig(dynamic_background_sigma=8.0, **pre))


def on(device="cpu", batch=None):
    return RunConfig(device=device, batch=batch)


def assert_same_results(a, b, atol=1e-4):
    np.testing.assert_array_equal(a["status"], b["status"])
    np.testing.assert_allclose(a["displacement"], b["displacement"], atol=atol, equal_nan=True)
    np.testing.assert_allclose(a["peak_height"], b["peak_height"], atol=atol, equal_nan=True)


# --------------------------------------------------------------------------- neighbour averaging


@pytest.mark.parametrize("kernel, size", [("gaussian", 3), ("box", 5)])
@DEVICES
def test_averaging_equals_processing_pre_averaged_patterns(tmp_path, noisy, kernel, size, device):
    path = scan_file(tmp_path / "s.h5", noisy)
    avg = average_neighbours(noisy.astype(np.float32), cols=COLS, kernel=kernel, size=size, xp=np)
    oracle = scan_file(tmp_path / "avg.h5", avg.astype(np.float32))
    plain = read_results(process(oracle, ref_index=7, config=cfg(), run=on(device), output=tmp_path / "o.h5"))
    # one row per chunk (batch 5): every chunk needs halo rows read around it
    config = cfg(average_neighbours=size, average_kernel=kernel)
    got = read_results(process(path, ref_index=7, config=config, run=on(device, batch=COLS), output=tmp_path / "g.h5"))
    assert_same_results(got, plain)
    # and it changed something: without averaging the noisy patterns match differently
    raw = read_results(process(path, ref_index=7, config=cfg(), run=on(device), output=tmp_path / "r.h5"))
    assert np.nanmax(np.abs(raw["displacement"] - plain["displacement"])) > 1e-3


@DEVICES
def test_averaging_resume_redoes_whole_rows(tmp_path, noisy, device):
    path = scan_file(tmp_path / "s.h5", noisy)
    config = cfg(average_neighbours=3)
    run = on(device, batch=COLS * 2)
    full = read_results(process(path, ref_index=0, config=config, run=run, output=tmp_path / "full.h5"))
    out = tmp_path / "part.h5"
    process(path, ref_index=0, config=config, run=run, output=out)
    with h5py.File(out, "r+") as f:  # as if a crash lost row 2 (and one point of row 1)
        g = f["ebsdxc"]
        g["done"][2] = False
        g["done"][1, 3] = False
        g["displacement"][2] = np.nan
        g["displacement"][1, 3] = np.nan
        g.attrs["complete"] = False
    resumed = read_results(process(path, ref_index=0, config=config, run=run, output=out, resume=True))
    assert resumed["attrs"]["complete"]
    assert_same_results(resumed, full, atol=0)


@DEVICES
def test_averaging_leaves_missing_points_out(tmp_path, noisy, device):
    stored = noisy[:17]  # an interrupted scan: the last 3 points were never stored
    path = scan_file(tmp_path / "cut.h5", stored)
    full = np.zeros_like(noisy)
    full[:17] = stored
    present = np.arange(ROWS * COLS) < 17
    avg = average_neighbours(full.astype(np.float32), cols=COLS, size=3, present=present, xp=np)
    oracle = scan_file(tmp_path / "avg.h5", avg[:17].astype(np.float32))
    with pytest.warns(UserWarning, match="17 of 20"):
        plain = read_results(process(oracle, ref_index=0, config=cfg(), run=on(device), output=tmp_path / "o.h5"))
    with pytest.warns(UserWarning, match="17 of 20"):
        got = read_results(process(path, ref_index=0, config=cfg(average_neighbours=3), run=on(device),
                                   output=tmp_path / "g.h5"))
    assert_same_results(got, plain)
    assert (got["status"][3, 2:] == st.MISSING_PATTERN).all()


def test_averaging_refuses_hexagonal_grids(tmp_path, noisy):
    path = scan_file(tmp_path / "hex.h5", noisy[:18], kind="hexagonal")
    with pytest.raises(InputError, match="square scan grid") as e:
        process(path, ref_index=0, config=cfg(average_neighbours=3), run=on(), output=tmp_path / "r.h5")
    assert str(path) in str(e.value) and not (tmp_path / "r.h5").exists()


def test_reference_index_without_a_pattern_is_refused(tmp_path, noisy):
    path = scan_file(tmp_path / "hex.h5", noisy[:18], kind="hexagonal")
    with pytest.raises(InputError, match="without a pattern") as e:
        process(path, ref_index=(1, 4), config=cfg(), run=on(), output=tmp_path / "r.h5")
    assert str(path) in str(e.value)


# --------------------------------------------------------------------------- binning


@DEVICES
def test_binning_equals_processing_binned_patterns(tmp_path, noisy, device):
    path = scan_file(tmp_path / "s.h5", noisy)
    binned = bin_patterns(noisy.astype(np.float32), 2, xp=np)
    oracle = scan_file(tmp_path / "b.h5", binned)
    small = ProcessConfig(roi=RoiConfig(grid=(3, 3), size=24),
                          preprocess=PreprocessConfig(dynamic_background_sigma=4.0))
    plain = read_results(process(oracle, ref_index=3, config=small, run=on(device), output=tmp_path / "o.h5"))
    config = small.replace(preprocess=PreprocessConfig(dynamic_background_sigma=4.0, binning=2))
    got = read_results(process(path, ref_index=3, config=config, run=on(device), output=tmp_path / "g.h5"))
    assert_same_results(got, plain)
    np.testing.assert_array_equal(got["roi_centers"], plain["roi_centers"])  # binned pixels
    assert got["roi_centers"].max() < 80


def test_binning_that_does_not_divide_is_one_error(tmp_path, noisy):
    path = scan_file(tmp_path / "s.h5", noisy)
    with pytest.raises(InputError, match="preprocess.binning 3 does not divide the 160x160") as e:
        process(path, ref_index=0, config=cfg(binning=3), run=on(), output=tmp_path / "r.h5")
    assert str(path) in str(e.value) and not (tmp_path / "r.h5").exists()


def test_strain_with_binning_against_ground_truth(tmp_path, sample_dir, sample_truth):
    """The strain fit on 2x binned patterns sees pixels twice as large: shifts halve, the PC
    in fractions stays, and the strain still matches the sample's known deformation."""
    config = load_config("hrebsd")[0].replace(
        roi=RoiConfig(grid=(5, 5), size=32),
        strain=StrainConfig(material="Ni"))
    config = config.replace(preprocess=PreprocessConfig(dynamic_background_sigma=4.0, binning=2))
    out = process(f"{sample_dir}/scan.h5", ref=f"{sample_dir}/ref.tif", config=config, run=on(),
                  output=tmp_path / "r.h5")
    s = read_strain(out)
    F = sample_truth["F"]
    true = 0.5 * (F + np.swapaxes(F, -1, -2)) - np.eye(3)  # small strain, F near-symmetric here
    ok = s["fit_status"] == 0
    assert ok.mean() > 0.9
    err = s["strain"][ok] - true[ok]
    dev = err - np.trace(err, axis1=-2, axis2=-1)[:, None, None] / 3 * np.eye(3)
    assert np.sqrt(np.mean(dev ** 2, axis=0)).max() < 3e-4


# --------------------------------------------------------------------------- detector mask


@DEVICES
def test_rois_off_the_screen_are_flagged(tmp_path, noisy, device):
    path = scan_file(tmp_path / "s.h5", noisy)
    config = cfg(mask="circle", mask_radius=95.0)
    with pytest.warns(UserWarning, match="4 of 9 ROIs reach outside the detector mask"):
        got = read_results(process(path, ref_index=0, config=config, run=on(device), output=tmp_path / "g.h5"))
    corners = [0, 2, 6, 8]  # the 3x3 grid's corner ROIs leave a circle of radius 95 px
    assert (got["status"][..., corners] == st.OUTSIDE_MASK).all()
    assert np.isnan(got["displacement"][..., corners, :]).all()
    inside = [1, 3, 4, 5, 7]
    assert (got["status"][..., inside] == st.OK).all()
    # what lies off the screen does not change what is measured on it
    wild = noisy.copy()
    wild[:, ~circular_mask((160, 160), radius=95.0)] = 60000
    other = read_results(process(scan_file(tmp_path / "w.h5", wild), ref_index=0, config=config, run=on(device),
                                 output=tmp_path / "w_r.h5"))
    assert_same_results(other, got)


def test_mask_with_no_roi_inside_is_one_error(tmp_path, noisy):
    path = scan_file(tmp_path / "s.h5", noisy)
    with pytest.raises(InputError, match="every ROI reaches outside the detector mask"):
        process(path, ref_index=0, config=cfg(mask="circle", mask_radius=10.0), run=on(), output=tmp_path / "r.h5")
