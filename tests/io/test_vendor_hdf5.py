"""Vendor HDF5 readers (EDAX, Bruker, Oxford H5OINA, EMsoft) against ``kikuchipy.load``.

The files are the real samples that ship with kikuchipy (EDAX, EMsoft) and those its own
dummy-file generators write (Bruker, with and without a region of interest; Oxford H5OINA
versions 6.0 and 7.0 with processed and unprocessed patterns). Bad inputs are modified
copies of them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest

from ebsdxc.errors import InputError
from ebsdxc.geometry import convert_pc
from ebsdxc.io import get_reader, open_scan

kp = pytest.importorskip("kikuchipy")

KP_DATA = Path(importlib.util.find_spec("kikuchipy").origin).parent / "data"
SAMPLE_SCAN = Path(__file__).resolve().parents[2] / "sample_data" / "scan.h5"
VENDOR_FORMATS = ("edax_h5", "bruker_h5", "oxford_h5oina", "emsoft_h5")

# Where each vendor keeps its patterns, in the sample files used here.
PATTERNS = {
    "edax_h5": "Scan 1/EBSD/Data/Pattern",
    "bruker_h5": "Scan 0/EBSD/Data/RawPatterns",
    "oxford_h5oina": "1/EBSD/Data/Processed Patterns",
    "emsoft_h5": "EMData/EBSD/EBSDPatterns",
}

# case -> (file key, reader name, dataset=, kikuchipy.load keyword arguments)
CASES = {
    "edax": ("edax", "edax_h5", None, {}),
    "emsoft_ni": ("emsoft_ni", "emsoft_h5", None, {}),
    "emsoft_sim": ("emsoft_sim", "emsoft_h5", None, {}),
    "bruker": ("bruker", "bruker_h5", None, {}),
    "bruker_roi": ("bruker_roi", "bruker_h5", None, {}),
    "oxford7": ("oxford7", "oxford_h5oina", None, {}),
    "oxford7_unprocessed": ("oxford7", "oxford_h5oina", "unprocessed", {"processed": False}),
    "oxford6": ("oxford6", "oxford_h5oina", None, {}),
    "oxford6_unprocessed": ("oxford6", "oxford_h5oina", "unprocessed", {"processed": False}),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Paths of the vendor sample files, dummy ones written once for the module."""
    from kikuchipy.data._dummy_files.bruker_h5ebsd import (
        create_dummy_bruker_h5ebsd_file,
        create_dummy_bruker_h5ebsd_nonrectangular_roi_file,
        create_dummy_bruker_h5ebsd_roi_file,
    )
    from kikuchipy.data._dummy_files.oxford_h5ebsd import (
        create_dummy_oxford_h5ebsd_file,
    )

    d = tmp_path_factory.mktemp("vendor")
    out = {
        "edax": KP_DATA / "edax_h5ebsd" / "patterns.h5",
        "emsoft_ni": KP_DATA / "emsoft_ebsd" / "EBSD_TEST_Ni.h5",
        "emsoft_sim": KP_DATA / "emsoft_ebsd" / "simulated_ebsd.h5",
        "bruker": d / "bruker.h5",
        "bruker_roi": d / "bruker_roi.h5",
        "bruker_nonrect": d / "bruker_nonrect.h5",
        "oxford7": d / "oxford7.h5oina",
        "oxford6": d / "oxford6.h5oina",
        "kikuchipy": KP_DATA / "kikuchipy_h5ebsd" / "patterns.h5",
    }
    create_dummy_bruker_h5ebsd_file(out["bruker"])
    create_dummy_bruker_h5ebsd_roi_file(out["bruker_roi"])
    create_dummy_bruker_h5ebsd_nonrectangular_roi_file(out["bruker_nonrect"])
    create_dummy_oxford_h5ebsd_file(out["oxford7"], version="7.0")
    create_dummy_oxford_h5ebsd_file(out["oxford6"], version="6.0")
    return out


# the file of each vendor that modified copies start from
BASE = {"edax_h5": "edax", "bruker_h5": "bruker", "oxford_h5oina": "oxford7",
        "emsoft_h5": "emsoft_sim"}


def copy_of(files, key, tmp_path) -> Path:
    dst = tmp_path / f"copy_{Path(files[key]).name}"
    shutil.copy(files[key], dst)
    os.chmod(dst, 0o644)  # the shipped samples may be read-only
    return dst


def _key(group, name):
    """``name`` as the group spells it (EDAX writes ' Version' with a leading space)."""
    return next(k for k in group if k.strip().lower() == name.strip().lower())


def set_entry(path, name, value):
    """Overwrite header entry ``name`` (a path in the file) of the file at ``path``."""
    with h5py.File(path, "r+") as f:
        parent, _, leaf = name.rpartition("/")
        group = f[parent] if parent else f
        key = _key(group, leaf)
        old = group[key]
        if isinstance(value, str):
            shape = old.shape
            del group[key]
            data = value.encode()
            group.create_dataset(key, data=np.array([data]) if shape == (1,) else data)
        else:
            old[...] = value


def rewrite_patterns(path, name, *, keep=None, filter_id=None):
    """Replace pattern dataset ``name``: keep its first ``keep`` patterns, or store it with
    HDF5 filter ``filter_id`` (written as raw chunks, as a missing filter cannot encode)."""
    with h5py.File(path, "r+") as f:
        data = f[name][()]
        del f[name]
        if filter_id is None:
            f.create_dataset(name, data=data[:keep])
            return
        ds = f.create_dataset(name, shape=data.shape, dtype=data.dtype,
                              chunks=(1, *data.shape[1:]), compression=filter_id,
                              allow_unknown_filter=True)
        for i in range(data.shape[0]):
            ds.id.write_direct_chunk((i, 0, 0), np.ascontiguousarray(data[i]).tobytes())


def kp_load(path, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return kp.load(path, **kwargs)


def kp_grid(s):
    nav = s.data.shape[:-2]
    if len(nav) == 2:
        return nav
    return (1, nav[0]) if nav else (1, 1)


def flat(s, n, shape):
    return np.asarray(s.data).reshape(n, *shape)


def assert_names_file(exc_info, path):
    assert os.fspath(path) in str(exc_info.value)


def to_bruker(pcs, src):
    meta = src.metadata
    return convert_pc(pcs, from_convention=meta["pattern_centre_convention"],
                      to_convention="bruker", shape=src.pattern_shape,
                      pixel_size=meta.get("detector_pixel_size"), binning=meta.get("binning", 1))


# ----------------------------------------------------------------------------- vs kikuchipy


@pytest.mark.parametrize("case", list(CASES))
def test_patterns_and_grid_match_kikuchipy(files, case):
    key, fmt, dataset, kp_kwargs = CASES[case]
    path = files[key]
    s = kp_load(path, **kp_kwargs)
    with open_scan(path, dataset=dataset) as src:
        assert src.format == fmt
        assert (src.grid.rows, src.grid.cols) == kp_grid(s)
        assert src.present is None
        assert src.dtype == s.data.dtype
        n = src.n_patterns
        expected = flat(s, n, src.pattern_shape)
        np.testing.assert_array_equal(src.read(0, n), expected)
        # odd sub-ranges straight into caller buffers: from the middle of a row, one
        # pattern, the last ones
        for start, stop in ((1, n - 1), (n // 2, n), (n - 1, n), (0, 1)):
            if start >= stop:
                continue
            out = np.full((stop - start, *src.pattern_shape), 7, dtype=src.dtype)
            src.read_into(start, stop, out)
            np.testing.assert_array_equal(out, expected[start:stop])
        if fmt == "emsoft_h5":
            assert src.grid.step is None
        else:
            assert src.grid.step == pytest.approx((s.axes_manager["y"].scale,
                                                   s.axes_manager["x"].scale))
        json.dumps(src.describe())  # metadata stays JSON-able


@pytest.mark.parametrize("case", list(CASES))
def test_geometry_matches_kikuchipy(files, case):
    key, fmt, dataset, kp_kwargs = CASES[case]
    path = files[key]
    s = kp_load(path, **kp_kwargs)
    det = s.detector
    with open_scan(path, dataset=dataset) as src:
        meta = src.metadata
        shape = (src.grid.rows, src.grid.cols, 3)
        kp_pc = np.broadcast_to(np.asarray(det.pc).reshape(-1, 3)
                                if np.asarray(det.pc).size == 3 else det.pc, shape)
        if fmt == "edax_h5":
            # the sample's PC is 0, 0, 0 (uncalibrated): kept out of the metadata, but the
            # raw values convert to what kikuchipy makes of them
            assert "pattern_centre" not in meta
            raw = [meta["header"][k] for k in ("x_star", "y_star", "z_star")]
            got = convert_pc(raw, from_convention="tsl", to_convention="bruker",
                             shape=src.pattern_shape)
            np.testing.assert_allclose(np.broadcast_to(got, shape), kp_pc, atol=1e-6)
            assert src.pattern_centres() is None
        else:
            pcs = src.pattern_centres()
            if pcs is None:
                pcs = np.broadcast_to(meta["pattern_centre"], shape)
            got = to_bruker(pcs, src)
            if meta["pattern_centre_convention"] == "emsoft4":
                # EMsoft 4's xpc points left; kikuchipy reads it as EMsoft 5's (right)
                assert meta["file_version"].startswith("4_")
                np.testing.assert_allclose(got[..., 0], 1 - kp_pc[..., 0], atol=1e-6)
                np.testing.assert_allclose(got[..., 1:], kp_pc[..., 1:], atol=1e-6)
            else:
                np.testing.assert_allclose(got, kp_pc, atol=1e-6)
        expected_conv = {"edax_h5": None, "bruker_h5": "bruker", "oxford_h5oina": "oxford"}
        if expected_conv.get(fmt):
            assert meta["pattern_centre_convention"] == expected_conv[fmt]

        checks = [("detector_tilt", det.tilt), ("detector_pixel_size", det.px_size),
                  ("binning", det.binning)]
        if fmt != "bruker_h5":
            # kikuchipy looks for a "Sample Tilt" entry that Bruker files spell SampleTilt
            checks.append(("sample_tilt", det.sample_tilt))
        for name, value in checks:
            if name in meta:
                assert meta[name] == pytest.approx(value, abs=1e-4), name
        if fmt == "bruker_h5":
            assert meta["sample_tilt"] == 70.0
        if fmt in ("edax_h5", "oxford_h5oina"):
            assert "sample_tilt" in meta and "detector_tilt" in meta

        if fmt == "emsoft_h5":
            from orix.quaternion import Rotation

            ours = Rotation.from_euler(np.radians(src.orientations().reshape(-1, 3)))
            theirs = s.xmap.rotations.flatten()
            np.testing.assert_allclose(np.abs(np.sum(ours.data * theirs.data, axis=-1)), 1,
                                       atol=1e-6)
            assert meta["euler_angles"] == pytest.approx(src.orientations()[0, 0].tolist())

        bg = src.static_background()
        if fmt == "bruker_h5" or (fmt == "oxford_h5oina" and dataset is None):
            np.testing.assert_array_equal(bg, s.static_background)
            assert meta["static_background"]
        elif fmt == "oxford_h5oina":
            # kikuchipy gives the processed background with unprocessed patterns too; the
            # dummy file stores no unprocessed one
            assert bg is None
        else:
            assert bg is None


@pytest.mark.parametrize("key, data, names, radians", [
    ("edax", "Scan 1/EBSD/Data", ("Phi1", "Phi", "Phi2"), True),
    ("bruker", "Scan 0/EBSD/Data", ("phi1", "PHI", "phi2"), False),
    ("oxford7", "1/EBSD/Data", ("Euler",), True),
])
def test_orientations_are_the_files_in_bunge_degrees(files, key, data, names, radians):
    with h5py.File(files[key], "r") as f:
        raw = np.column_stack([f[f"{data}/{n}"][()] for n in names]).astype(np.float64)
    expected = np.degrees(raw) if radians else raw
    with open_scan(files[key]) as src:
        got = src.orientations()
        assert got.shape == (src.grid.rows, src.grid.cols, 3)
        np.testing.assert_allclose(got.reshape(-1, 3), expected)
        assert src.metadata["euler_angles"] == pytest.approx(expected[0].tolist())


def test_oxford_orientations_are_the_dummy_rotations(files):
    from orix.quaternion import Rotation

    with h5py.File(files["oxford7"], "r") as f:
        rot = Rotation.from_euler(f["1/EBSD/Data/Euler"][()])
    with open_scan(files["oxford7"]) as src:
        ours = Rotation.from_euler(np.radians(src.orientations().reshape(-1, 3)))
    np.testing.assert_allclose(np.abs(np.sum(ours.data * rot.data, axis=-1)), 1, atol=1e-6)


# ----------------------------------------------------------------------------- choosing data


@pytest.mark.parametrize("version", ["oxford7", "oxford6"])
def test_oxford_processed_and_unprocessed_choices(files, version):
    path = files[version]
    processed = flat(kp_load(path), 9, (60, 60))
    unprocessed = flat(kp_load(path, processed=False), 9, (60, 60))
    choices = {None: processed, "processed": processed, "Processed Patterns": processed,
               "1": processed, 1: processed, "1/unprocessed": unprocessed,
               "unprocessed": unprocessed, "/1/EBSD/Data/Unprocessed Patterns": unprocessed,
               "1/EBSD/Data/Processed Patterns": processed}
    for choice, expected in choices.items():
        with open_scan(path, dataset=choice) as src:
            kind = "unprocessed" if expected is unprocessed else "processed"
            assert src.metadata["patterns"] == kind
            assert src.metadata["dataset"].endswith(kind.capitalize() + " Patterns")
            np.testing.assert_array_equal(src.read(0, 9), expected)
    for bad in ("2", "2/processed", "raw", "/1/EBSD/Header/Pattern Height"):
        with pytest.raises(InputError) as exc:
            open_scan(path, dataset=bad)
        assert_names_file(exc, path)


def test_oxford_without_processed_patterns_reads_unprocessed(files, tmp_path):
    path = copy_of(files, "oxford7", tmp_path)
    expected = flat(kp_load(path, processed=False), 9, (60, 60))
    with h5py.File(path, "r+") as f:
        del f["1/EBSD/Data/Processed Patterns"]
    with open_scan(path) as src:
        assert src.metadata["patterns"] == "unprocessed"
        np.testing.assert_array_equal(src.read(0, 9), expected)
    with pytest.raises(InputError, match="no processed patterns") as exc:
        open_scan(path, dataset="processed")
    assert_names_file(exc, path)


def test_oxford_unprocessed_static_background(files, tmp_path):
    path = copy_of(files, "oxford7", tmp_path)
    bg = np.arange(3600, dtype=np.int16).reshape(60, 60)
    with h5py.File(path, "r+") as f:
        f["1/EBSD/Header"].create_dataset("Unprocessed Static Background", data=bg)
    with open_scan(path, dataset="unprocessed") as src:
        np.testing.assert_array_equal(src.static_background(), bg)
        assert src.metadata["static_background"] == "/1/EBSD/Header/Unprocessed Static Background"


def test_edax_second_scan(files, tmp_path):
    path = copy_of(files, "edax", tmp_path)
    with h5py.File(path, "r+") as f:
        f.copy("Scan 1", "Scan 2")
        data = f["Scan 2/EBSD/Data/Pattern"]
        data[...] = 255 - data[()]
    expected = flat(kp_load(path, scan_group_names="Scan 2"), 9, (60, 60))
    with open_scan(path) as src:
        assert src.metadata["scan"] == "Scan 1"
        assert src.metadata["scans"] == ["Scan 1", "Scan 2"]
    for choice in ("Scan 2", 2, "2", "/Scan 2/EBSD/Data/Pattern"):
        with open_scan(path, dataset=choice) as src:
            assert src.metadata["scan"] == "Scan 2"
            np.testing.assert_array_equal(src.read(0, 9), expected)
    with pytest.raises(InputError, match="Scan 1") as exc:
        open_scan(path, dataset="Scan 7")
    assert_names_file(exc, path)


def test_bruker_and_emsoft_dataset_choice(files):
    with open_scan(files["bruker"], dataset="/Scan 0/EBSD/Data/RawPatterns") as src:
        assert src.metadata["scan"] == "Scan 0"
    with open_scan(files["bruker"], dataset=0) as src:
        assert src.metadata["scan"] == "Scan 0"
    with open_scan(files["emsoft_sim"], dataset="/EMData/EBSD/EBSDPatterns") as src:
        assert src.n_patterns == 10
    for key, bad in (("bruker", "Scan 3"), ("emsoft_sim", "EMData/EBSD/EulerAngles")):
        with pytest.raises(InputError) as exc:
            open_scan(files[key], dataset=bad)
        assert_names_file(exc, files[key])


# ----------------------------------------------------------------------------- grids


def test_bruker_region_of_interest_maps_patterns_by_position(files, tmp_path):
    path = copy_of(files, "bruker_roi", tmp_path)
    # distinct per-point PCs, to see that they follow the patterns to their slots
    with h5py.File(path, "r+") as f:
        f["Scan 0/EBSD/Data/PCX"][...] = np.linspace(0.40, 0.45, 6)
        iy, ix = f["Scan 0/EBSD/SEM/IY"][()], f["Scan 0/EBSD/SEM/IX"][()]
        raw = f["Scan 0/EBSD/Data/RawPatterns"][()]
        pcx = f["Scan 0/EBSD/Data/PCX"][()]
    with open_scan(path) as src:
        assert (src.grid.rows, src.grid.cols) == (3, 2)
        assert src.metadata["region_of_interest"] == {
            "row": 0, "col": 1, "rows": 3, "cols": 2, "map_rows": 3, "map_cols": 3}
        got = src.read(0, 6).reshape(3, 2, 60, 60)
        pcs = src.pattern_centres()
        for rec, (r, c) in enumerate(zip(iy - iy.min(), ix - ix.min())):
            np.testing.assert_array_equal(got[r, c], raw[rec])
            assert pcs[r, c, 0] == pytest.approx(pcx[rec])
        assert src.metadata["pattern_centre_varies"] is True


@pytest.mark.parametrize("key", ["bruker_roi", "edax"])
def test_reads_only_the_requested_records(files, key):
    with open_scan(files[key]) as src:
        calls = []
        read_records = src.read_records

        def spy(start, stop, out):
            calls.append((start, stop))
            read_records(start, stop, out)

        src.read_records = spy
        out = np.empty((3, 60, 60), src.dtype)
        src.read_into(2, 5, out)
        wanted = src._records[2:5]
        assert sorted(r for a, b in calls for r in range(a, b)) == sorted(wanted.tolist())
        np.testing.assert_array_equal(out, src.read(0, src.n_patterns)[2:5])


def test_bruker_non_rectangular_region(files):
    path = files["bruker_nonrect"]
    with pytest.raises(ValueError, match="rectangular"):
        kp_load(path)  # kikuchipy refuses this file; ebsdxc flags the point not scanned
    with h5py.File(path, "r") as f:
        iy, ix = f["Scan 0/EBSD/SEM/IY"][()], f["Scan 0/EBSD/SEM/IX"][()]
        raw = f["Scan 0/EBSD/Data/RawPatterns"][()]
    with pytest.warns(UserWarning, match="1 of the 6 points") as rec:
        src = open_scan(path)
    assert os.fspath(path) in str(rec[0].message)
    with src:
        assert (src.grid.rows, src.grid.cols) == (3, 2)
        np.testing.assert_array_equal(src.present, [[1, 1], [1, 1], [1, 0]])
        assert src.metadata["n_stored"] == 5
        got = src.read(0, 6).reshape(3, 2, 60, 60)
        assert not got[2, 1].any()
        for k, (r, c) in enumerate(zip(iy - iy.min(), ix - ix.min())):
            np.testing.assert_array_equal(got[r, c], raw[k])
        # reading from the middle, across the missing slot
        out = np.full((3, 60, 60), 9, dtype=np.uint8)
        src.read_into(3, 6, out)
        np.testing.assert_array_equal(out, got.reshape(6, 60, 60)[3:6])
        assert np.isnan(src.pattern_centres()[2, 1]).all()
        assert np.isnan(src.orientations()[2, 1]).all()
        assert src.describe()["missing_points"] == 1


def test_bruker_region_errors(files, tmp_path):
    path = copy_of(files, "bruker_roi", tmp_path)
    with h5py.File(path, "r+") as f:
        f["Scan 0/EBSD/SEM/IX"][0] = f["Scan 0/EBSD/SEM/IX"][1]
        f["Scan 0/EBSD/SEM/IY"][0] = f["Scan 0/EBSD/SEM/IY"][1]
    with pytest.raises(InputError, match="same map position") as exc:
        open_scan(path)
    assert_names_file(exc, path)
    path = copy_of(files, "bruker_roi", tmp_path)
    with h5py.File(path, "r+") as f:
        del f["Scan 0/EBSD/SEM/IX"]
        f["Scan 0/EBSD/SEM"].create_dataset("IX", data=np.arange(4))
    with pytest.raises(InputError, match="4 points") as exc:
        open_scan(path)
    assert_names_file(exc, path)
    assert "6 patterns" in str(exc.value)


def test_edax_hexagonal_grid(files, tmp_path):
    path = copy_of(files, "edax", tmp_path)
    set_entry(path, "Scan 1/EBSD/Header/Grid Type", "HexGrid")
    set_entry(path, "Scan 1/EBSD/Header/nRows", 2)
    set_entry(path, "Scan 1/EBSD/Header/nColumns", 5)  # 5 + 4 points = the 9 stored
    with h5py.File(path, "r") as f:
        raw = f["Scan 1/EBSD/Data/Pattern"][()]
    with open_scan(path) as src:
        assert src.format == "edax_h5"
        assert src.grid.kind == "hexagonal" and (src.grid.rows, src.grid.cols) == (2, 5)
        assert src.grid.n_points == 9
        np.testing.assert_array_equal(src.present, [[1] * 5, [1] * 4 + [0]])
        got = src.read(0, 10)
        np.testing.assert_array_equal(got[:9], raw)
        assert not got[9].any()
        out = np.empty((4, 60, 60), np.uint8)
        src.read_into(6, 10, out)
        np.testing.assert_array_equal(out, got[6:10])
        assert np.isnan(src.orientations()[1, 4]).all()
        assert np.isfinite(src.orientations()[1, :4]).all()


def test_emsoft_grid_option(files):
    path = files["emsoft_sim"]
    expected = flat(kp_load(path), 10, (10, 10))
    with open_scan(path, grid_shape=(2, 5)) as src:
        assert (src.grid.rows, src.grid.cols) == (2, 5) and src.present is None
        np.testing.assert_array_equal(src.read(0, 10), expected)
    with open_scan(path, grid_shape="3x4") as src:
        assert src.metadata["n_stored"] == 10
        assert src.present.sum() == 10
        got = src.read(0, 12)
        np.testing.assert_array_equal(got[:10], expected)
        assert not got[10:].any()
    with pytest.raises(InputError, match="10 patterns") as exc:
        open_scan(path, grid_shape=(1, 5))
    assert_names_file(exc, path)


@pytest.mark.parametrize("key", ["edax", "bruker", "oxford7"])
def test_grid_option_must_agree_with_header(files, key):
    with pytest.raises(InputError, match="contradicts") as exc:
        open_scan(files[key], grid_shape=(9, 1))
    assert_names_file(exc, files[key])
    with open_scan(files[key], grid_shape=(3, 3)) as src:
        assert src.grid.size == 9


# ----------------------------------------------------------------------------- detection


@pytest.mark.parametrize("fmt", VENDOR_FORMATS)
def test_detection_claims_only_its_own_files(files, tmp_path, fmt):
    owner = {"edax": "edax_h5", "emsoft_ni": "emsoft_h5", "emsoft_sim": "emsoft_h5",
             "bruker": "bruker_h5", "bruker_roi": "bruker_h5", "bruker_nonrect": "bruker_h5",
             "oxford7": "oxford_h5oina", "oxford6": "oxford_h5oina", "kikuchipy": "h5ebsd"}
    reader = get_reader(fmt)
    for key, who in owner.items():
        assert reader.detect(files[key]) == (who == fmt), key
    text = tmp_path / "notes.h5"
    text.write_text("not HDF5")
    empty = tmp_path / "empty.h5"
    with h5py.File(empty, "w"):
        pass
    for other in (SAMPLE_SCAN, text, empty, tmp_path / "missing.h5", tmp_path):
        assert reader.detect(other) is False


def test_sample_scan_is_not_claimed():
    assert SAMPLE_SCAN.exists()
    with open_scan(SAMPLE_SCAN) as src:
        assert src.format not in VENDOR_FORMATS


@pytest.mark.parametrize("key, fmt", [("edax", "edax_h5"), ("bruker_roi", "bruker_h5"),
                                      ("oxford7", "oxford_h5oina"),
                                      ("emsoft_sim", "emsoft_h5")])
def test_forced_reader_refuses_other_files(files, key, fmt):
    for other in VENDOR_FORMATS:
        if other == fmt:
            continue
        with pytest.raises(InputError, match=r"not an? ") as exc:
            open_scan(files[key], format=other)
        assert_names_file(exc, files[key])


# ----------------------------------------------------------------------------- CLI, pickling


@pytest.mark.parametrize("key, fmt, rows, cols", [
    ("edax", "edax_h5", 3, 3), ("bruker_roi", "bruker_h5", 3, 2),
    ("oxford6", "oxford_h5oina", 3, 3), ("emsoft_sim", "emsoft_h5", 1, 10)])
def test_cli_info(files, key, fmt, rows, cols):
    run = subprocess.run([sys.executable, "-m", "ebsdxc", "info", os.fspath(files[key])],
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert f"format: {fmt}" in run.stdout
    assert f"rows: {rows}" in run.stdout and f"cols: {cols}" in run.stdout
    run = subprocess.run([sys.executable, "-m", "ebsdxc", "info", "--json",
                          os.fspath(files[key])], capture_output=True, text=True, timeout=120,
                         check=False)
    assert run.returncode == 0, run.stderr
    info = json.loads(run.stdout)
    assert info["format"] == fmt
    assert (info["grid"]["rows"], info["grid"]["cols"]) == (rows, cols)


@pytest.mark.parametrize("case", ["edax", "bruker_roi", "oxford7_unprocessed", "emsoft_ni"])
def test_pickled_source_reads_the_same(files, case):
    key, _fmt, dataset, _ = CASES[case]
    with open_scan(files[key], dataset=dataset) as src:
        expected = src.read(0, src.n_patterns)
        clone = pickle.loads(pickle.dumps(src))
    try:
        assert clone.format == src.format and clone.metadata == src.metadata
        np.testing.assert_array_equal(clone.read(0, clone.n_patterns), expected)
        if clone.pattern_centres() is not None:
            np.testing.assert_array_equal(clone.pattern_centres(), src.pattern_centres())
    finally:
        clone.close()


def test_nonrectangular_region_survives_pickling(files):
    with pytest.warns(UserWarning):
        src = open_scan(files["bruker_nonrect"])
    with src:
        expected = src.read(0, 6)
        clone = pickle.loads(pickle.dumps(src))
    with clone:
        np.testing.assert_array_equal(clone.present, src.present)
        np.testing.assert_array_equal(clone.read(0, 6), expected)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("fmt, entry, value, words", [
    ("edax_h5", "Scan 1/EBSD/Header/Pattern Height", 61, ("61 x 60", "60 x 60")),
    ("edax_h5", "Scan 1/EBSD/Header/nRows", 2, ("2 x 3", "9 patterns")),
    ("bruker_h5", "Scan 0/EBSD/Header/PatternWidth", 59, ("60 x 59", "60 x 60")),
    ("bruker_h5", "Scan 0/EBSD/Header/NCOLS", 2, ("3 x 2", "9 patterns")),
    ("oxford_h5oina", "1/EBSD/Header/Pattern Height", 64, ("64 x 60", "60 x 60")),
    ("oxford_h5oina", "1/EBSD/Header/Y Cells", 1, ("1 x 3", "9 patterns")),
    ("emsoft_h5", "NMLparameters/EBSDNameList/numsx", 12, ("10 x 12", "10 x 10")),
])
def test_header_that_does_not_fit_the_data(files, tmp_path, fmt, entry, value, words):
    path = copy_of(files, BASE[fmt], tmp_path)
    set_entry(path, entry, value)
    with pytest.raises(InputError) as exc:
        open_scan(path)
    assert_names_file(exc, path)
    for w in words:
        assert w in str(exc.value)


@pytest.mark.parametrize("fmt, entry, value", [
    ("edax_h5", "Version", "APEX 3.0"),
    ("edax_h5", "Version", "OIM Analysis 5.3"),
    ("bruker_h5", "Version", "Quantax 1.0"),
    ("oxford_h5oina", "Format Version", "99.0"),
    ("oxford_h5oina", "Format Version", "seven"),
    ("emsoft_h5", "EMheader/EBSD/Version", "3_1_0_0"),
])
def test_unsupported_version(files, tmp_path, fmt, entry, value):
    path = copy_of(files, BASE[fmt], tmp_path)
    set_entry(path, entry, value)
    assert get_reader(fmt).detect(path)  # still recognised, so the message is the vendor's
    with pytest.raises(InputError) as exc:
        open_scan(path)
    assert_names_file(exc, path)
    assert value in str(exc.value) and "version" in str(exc.value).lower()
    assert "--format hdf5" in str(exc.value)


@pytest.mark.parametrize("fmt", ["edax_h5", "bruker_h5", "oxford_h5oina"])
def test_truncated_scan_warns_and_flags_missing_points(files, tmp_path, fmt):
    path = copy_of(files, BASE[fmt], tmp_path)
    rewrite_patterns(path, PATTERNS[fmt], keep=7)
    expected = flat(kp_load(path), 9, (60, 60))  # kikuchipy pads with zeros too
    with pytest.warns(UserWarning, match="7 of 9 patterns") as rec:
        src = open_scan(path)
    assert os.fspath(path) in str(rec[0].message)
    with src:
        assert src.format == fmt
        assert src.metadata["n_stored"] == 7
        np.testing.assert_array_equal(src.present, [[1, 1, 1], [1, 1, 1], [1, 0, 0]])
        got = src.read(0, 9)
        np.testing.assert_array_equal(got, expected)
        assert not got[7:].any()
        out = np.full((3, 60, 60), 5, dtype=src.dtype)
        src.read_into(6, 9, out)
        np.testing.assert_array_equal(out, got[6:9])
        assert src.describe()["missing_points"] == 2


@pytest.mark.parametrize("fmt", ["edax_h5", "bruker_h5", "oxford_h5oina"])  # EMsoft: no grid
def test_more_patterns_than_the_grid(files, tmp_path, fmt):
    path = copy_of(files, BASE[fmt], tmp_path)
    with h5py.File(path, "r+") as f:
        data = f[PATTERNS[fmt]][()]
        del f[PATTERNS[fmt]]
        f.create_dataset(PATTERNS[fmt], data=np.concatenate([data, data[:2]]))
    with pytest.raises(InputError, match="11 patterns") as exc:
        open_scan(path)
    assert_names_file(exc, path)


@pytest.mark.parametrize("filter_id", [32001, 40000])
@pytest.mark.parametrize("fmt", VENDOR_FORMATS)
def test_unavailable_compression_filter(files, tmp_path, fmt, filter_id):
    if h5py.h5z.filter_avail(filter_id):
        pytest.skip(f"HDF5 filter {filter_id} is available here")
    path = copy_of(files, BASE[fmt], tmp_path)
    rewrite_patterns(path, PATTERNS[fmt], filter_id=filter_id)
    with pytest.raises(InputError, match=str(filter_id)) as exc:
        open_scan(path)
    assert_names_file(exc, path)
    assert "filter" in str(exc.value)


@pytest.mark.parametrize("fmt", ["edax_h5", "bruker_h5", "oxford_h5oina", "emsoft_h5"])
def test_lzf_compressed_patterns_read(files, tmp_path, fmt):
    path = copy_of(files, BASE[fmt], tmp_path)
    with h5py.File(path, "r+") as f:
        data = f[PATTERNS[fmt]][()]
        del f[PATTERNS[fmt]]
        f.create_dataset(PATTERNS[fmt], data=data, chunks=(2, *data.shape[1:]),
                         compression="lzf")
    with open_scan(path) as src:
        assert src.metadata["compression"] == "lzf"
        np.testing.assert_array_equal(src.read(0, data.shape[0]), data)


def test_vendor_file_without_patterns(files, tmp_path):
    path = copy_of(files, "edax", tmp_path)
    with h5py.File(path, "r+") as f:
        del f["Scan 1/EBSD/Data/Pattern"]
    with pytest.raises(InputError, match="no scan with patterns") as exc:
        open_scan(path)
    assert_names_file(exc, path)
    path = copy_of(files, "oxford7", tmp_path)
    with h5py.File(path, "r+") as f:
        del f["1/EBSD/Data/Processed Patterns"]
        del f["1/EBSD/Data/Unprocessed Patterns"]
    with pytest.raises(InputError, match="no EBSD patterns") as exc:
        open_scan(path)
    assert_names_file(exc, path)
