"""Scan grids (square, hexagonal), missing points and the scan's own static background,
from the reader through ``process`` into the results file."""

import dataclasses
import json

import h5py
import numpy as np
import pytest

from ebsdxc import process, read_results
from ebsdxc import status as st
from ebsdxc.config import ProcessConfig, RoiConfig, RunConfig
from ebsdxc.errors import InputError
from ebsdxc.io import open_scan
from ebsdxc.io.results import read_summary
from ebsdxc.io.source import ScanGrid, choose_grid, grid_kind, parse_grid_shape


def sample_patterns(sample_dir, n):
    with h5py.File(f"{sample_dir}/scan.h5", "r") as f:
        return f["patterns"][...].reshape(-1, 160, 160)[:n]


def write_h5ebsd(path, patterns, *, n_rows, n_columns, grid_type="square", background=None):
    h, w = patterns.shape[-2:]
    with h5py.File(path, "w") as f:
        f["manufacturer"] = np.array([b"kikuchipy"])
        f["version"] = np.array([b"0.13.1"])
        f["Scan 1/EBSD/Data/patterns"] = patterns
        hdr = f.create_group("Scan 1/EBSD/Header")
        for key, value in {"n_rows": n_rows, "n_columns": n_columns, "pattern_height": h,
                           "pattern_width": w, "step_x": 2.0, "step_y": np.sqrt(3.0),
                           "grid_type": grid_type.encode()}.items():
            hdr[key] = np.array([value])
        if background is not None:
            hdr["static_background"] = background
    return path


CFG = ProcessConfig(roi=RoiConfig(grid=(3, 3), size=48))
CPU = RunConfig(device="cpu")


# --------------------------------------------------------------------------- the grid itself


def test_hexagonal_grid_slots_and_positions():
    g = ScanGrid(4, 3, step=(np.sqrt(3.0), 2.0), kind="hexagonal")
    assert g.size == 12 and g.n_points == 10
    np.testing.assert_array_equal(g.in_grid(), [[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 0]])
    np.testing.assert_array_equal(g.slot_to_record().reshape(4, 3),
                                  [[0, 1, 2], [3, 4, -1], [5, 6, 7], [8, 9, -1]])
    pos = g.positions()
    np.testing.assert_allclose(pos[1, :2, 0], [1.0, 3.0])  # odd rows half a step right
    np.testing.assert_allclose(pos[:, 0, 1], np.sqrt(3.0) * np.arange(4))
    assert np.isnan(pos[1, 2]).all() and np.isfinite(pos[0, 2]).all()
    # every neighbour of an inner point sits one step away, as on a true hexagonal lattice
    d = np.linalg.norm(pos[[0, 0, 1, 2, 2], [0, 1, 1, 0, 1]] - pos[1, 0], axis=1)
    np.testing.assert_allclose(d, 2.0)


def test_square_grid_has_every_slot():
    g = ScanGrid(2, 3)
    assert g.n_points == 6 and g.in_grid().all()
    np.testing.assert_array_equal(g.slot_to_record(), np.arange(6))


@pytest.mark.parametrize("text, kind", [("SqrGrid", "square"), ("HexGrid", "hexagonal"),
                                        ("square", "square"), ("hexagonal", "hexagonal"),
                                        (" Hex Grid ", "hexagonal")])
def test_vendor_grid_names(text, kind):
    assert grid_kind(text) == kind


def test_bad_grids():
    with pytest.raises(ValueError, match="triangular"):
        grid_kind("triangular")
    with pytest.raises(ValueError, match="grid kind"):
        ScanGrid(2, 2, kind="hex")
    with pytest.raises(ValueError, match="at least one row"):
        ScanGrid(0, 2)


@pytest.mark.parametrize("text", ["20x30", "20,30", "20 30", (20, 30), "20X30"])
def test_parse_grid_shape(text):
    assert parse_grid_shape(text) == (20, 30)


@pytest.mark.parametrize("text", ["20", "20x", "ax3", "0x5", "2x3x4"])
def test_parse_grid_shape_refuses(text):
    with pytest.raises(ValueError, match="ROWSxCOLS|at least one"):
        parse_grid_shape(text)


def test_choose_grid_rules():
    said = ScanGrid(2, 3)
    assert choose_grid(said, None, 6, "f") is said
    assert choose_grid(said, "2x3", 6, "f") is said
    with pytest.raises(InputError, match="contradicts the file's own grid of 2 x 3") as e:
        choose_grid(said, "3x2", 6, "f.h5")
    assert "f.h5" in str(e.value)
    assert choose_grid(None, None, 6, "f") == ScanGrid(1, 6)
    assert choose_grid(None, "2x4", 6, "f") == ScanGrid(2, 4)  # an interrupted scan
    with pytest.raises(InputError, match="has 4 points but the file holds 6"):
        choose_grid(None, "2x2", 6, "f")


# --------------------------------------------------------------------------- through process


def test_hexagonal_scan_read_and_processed(tmp_path, sample_dir):
    data = sample_patterns(sample_dir, 10)  # 4 rows of 3, 3-1 points: 10 points
    path = write_h5ebsd(tmp_path / "hex.h5", data, n_rows=4, n_columns=3, grid_type="hexagonal")
    with open_scan(path) as src:
        assert src.grid.kind == "hexagonal" and src.grid.n_points == 10
        np.testing.assert_array_equal(src.present, src.grid.in_grid())
        got = src.read(0, 12)
        assert src.describe()["grid"]["points"] == 10
    rec = src.grid.slot_to_record()
    for slot in range(12):
        if rec[slot] < 0:
            assert not got[slot].any()
        else:
            np.testing.assert_array_equal(got[slot], data[rec[slot]])
    out = process(path, ref_index=0, config=CFG, run=CPU, output=tmp_path / "r.h5")
    r = read_results(out)
    assert r["done"].all() and r["attrs"]["complete"]
    assert r["attrs"]["grid_kind"] == "hexagonal"
    assert (r["status"][[1, 3], 2] == st.MISSING_PATTERN).all()
    assert np.isnan(r["displacement"][[1, 3], 2]).all()
    assert (r["status"][src.grid.in_grid()] == st.OK).all()
    np.testing.assert_allclose(r["positions"][1, 0], [1.0, np.sqrt(3.0)])
    s = read_summary(out)
    # padding slots are not scan points: they are neither counted nor missing
    assert s["points_missing"] == 0 and s["points"] == src.grid.n_points
    assert s["ok_fraction"] == 1.0 and s["grid_kind"] == "hexagonal"


def test_interrupted_scan_missing_points_are_flagged_not_processed(tmp_path, sample_dir):
    data = sample_patterns(sample_dir, 4)
    path = write_h5ebsd(tmp_path / "cut.h5", data, n_rows=2, n_columns=3)
    with pytest.warns(UserWarning, match="4 of 6"):
        out = process(path, ref_index=0, config=CFG, run=CPU, output=tmp_path / "r.h5")
    r = read_results(out)
    assert r["done"].all()
    assert (r["status"][1, 1:] == st.MISSING_PATTERN).all()
    assert np.isnan(r["displacement"][1, 1:]).all() and np.isnan(r["peak_height"][1, 1:]).all()
    assert (r["status"][0] == st.OK).all() and (r["status"][1, 0] == st.OK).all()


def test_all_zero_pattern_is_missing_not_measured(tmp_path, sample_dir):
    data = sample_patterns(sample_dir, 6).copy()
    data[4] = 0
    path = write_h5ebsd(tmp_path / "z.h5", data, n_rows=2, n_columns=3)
    out = process(path, ref_index=0, config=CFG, run=CPU, output=tmp_path / "r.h5")
    r = read_results(out)
    assert (r["status"][1, 1] == st.MISSING_PATTERN).all()
    assert (r["status"].reshape(6, -1)[[0, 1, 2, 3, 5]] == st.OK).all()
    codes = json.loads(h5py.File(out, "r")["ebsdxc/status"].attrs["codes"])
    assert "no pattern" in codes[str(st.MISSING_PATTERN)]


def test_static_background_from_the_file(tmp_path, sample_dir):
    data = sample_patterns(sample_dir, 6).astype(np.float32)
    # fixed-pattern noise as strong as the patterns' contrast: it pulls every shift to zero
    bg = (np.random.default_rng(1).normal(0, 1, (160, 160)) * data.std() + 2 * data.mean()).astype(np.float32)
    path = write_h5ebsd(tmp_path / "bg.h5", data + bg, n_rows=2, n_columns=3, background=bg)
    plain = write_h5ebsd(tmp_path / "plain.h5", data, n_rows=2, n_columns=3)
    cfg = CFG.replace(preprocess=dataclasses.replace(CFG.preprocess, static_background="file"))
    with open_scan(path) as src:
        assert src.describe()["static_background"] is True
    a = read_results(process(path, ref_index=0, config=cfg, run=CPU, output=tmp_path / "a.h5"))
    b = read_results(process(plain, ref_index=0, config=CFG, run=CPU, output=tmp_path / "b.h5"))
    c = read_results(process(path, ref_index=0, config=CFG, run=CPU, output=tmp_path / "c.h5"))
    # subtracting the stored background gives the clean patterns' shifts (to float32 rounding)
    np.testing.assert_allclose(a["displacement"], b["displacement"], atol=1e-3)
    assert np.nanmax(np.abs(c["displacement"] - b["displacement"])) > 1e-2  # and it mattered
    with pytest.raises(InputError, match="stores no static background") as e:
        process(plain, ref_index=0, config=cfg, run=CPU, output=tmp_path / "d.h5")
    assert str(plain) in str(e.value)
    assert not (tmp_path / "d.h5").exists()


def test_mean_background_leaves_out_missing_points(tmp_path, sample_dir):
    from ebsdxc.backend import select_backend
    from ebsdxc.run.inputs import mean_pattern

    data = sample_patterns(sample_dir, 4)
    path = write_h5ebsd(tmp_path / "cut.h5", data, n_rows=2, n_columns=3)
    with pytest.warns(UserWarning), open_scan(path) as src:
        mean = mean_pattern(src, select_backend("cpu"), 4)
    np.testing.assert_allclose(mean, data.astype(np.float64).mean(axis=0))


def test_grid_option_for_a_file_without_one(tmp_path, sample_dir):
    data = sample_patterns(sample_dir, 6)
    path = tmp_path / "flat.h5"
    with h5py.File(path, "w") as f:
        f["patterns"] = data
    out = process(path, ref_index=0, config=CFG, run=CPU, output=tmp_path / "r.h5", grid_shape="2x3")
    assert read_results(out)["done"].shape == (2, 3)
    with pytest.raises(InputError, match="has 4 points but the file holds 6"):
        process(path, ref_index=0, config=CFG, run=CPU, output=tmp_path / "s.h5", grid_shape="2x2")
