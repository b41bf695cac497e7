"""Readers of ebsdxc.io, on real files written with h5py, tifffile and kikuchipy."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import tifffile

from ebsdxc.errors import InputError
from ebsdxc.io import (
    SCAN_FORMATS,
    ArraySource,
    open_scan,
    read_reference,
    reference_from_scan,
)
from ebsdxc.io import h5ebsd as h5ebsd_reader
from ebsdxc.io import hdf5 as hdf5_reader

DTYPES = [np.uint8, np.uint16, np.float32, np.float64]


def make_patterns(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.random(shape).astype(dtype)
    return rng.integers(0, np.iinfo(dtype).max, size=shape, dtype=dtype)


def write_h5(path, datasets, attrs=None):
    """datasets: {name: array or (array, create_dataset kwargs)}; attrs: {obj: {k: v}}."""
    with h5py.File(path, "w") as f:
        for name, value in datasets.items():
            if isinstance(value, tuple):
                f.create_dataset(name, data=value[0], **value[1])
            else:
                f.create_dataset(name, data=value)
        for obj, kv in (attrs or {}).items():
            if obj not in f:
                f.create_group(obj)
            f[obj].attrs.update(kv)
    return path


def assert_names(exc_info, path):
    assert os.fspath(path) in str(exc_info.value)


# ----------------------------------------------------------------------------- registry


def test_formats_are_registered_specific_first():
    assert "hdf5" in SCAN_FORMATS and "h5ebsd" in SCAN_FORMATS
    assert SCAN_FORMATS.index("h5ebsd") < SCAN_FORMATS.index("hdf5")


def test_importing_io_is_light():
    code = ("import sys, ebsdxc.io; "
            "print(any(m.split('.')[0] in ('kikuchipy', 'h5py', 'tifffile', 'hyperspy') "
            "for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "False"


# ----------------------------------------------------------------------------- generic HDF5


@pytest.mark.parametrize("dtype", DTYPES)
def test_3d_dataset_roundtrip(tmp_path, dtype):
    data = make_patterns((6, 16, 20), dtype)
    path = write_h5(tmp_path / "scan.h5", {"patterns": data})
    with open_scan(path) as src:
        assert src.format == "hdf5"
        assert (src.grid.rows, src.grid.cols) == (1, 6)
        assert src.grid.step is None
        assert src.pattern_shape == (16, 20)
        assert src.dtype == np.dtype(dtype)
        got = src.read(0, 6)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, data)


@pytest.mark.parametrize("dtype", DTYPES)
def test_4d_dataset_roundtrip(tmp_path, dtype):
    data = make_patterns((3, 4, 10, 12), dtype)
    path = write_h5(tmp_path / "scan4.h5", {"scan/patterns": data},
                    attrs={"scan/patterns": {"step_x": 0.5, "step_y": 0.25}})
    with open_scan(path) as src:
        assert (src.grid.rows, src.grid.cols) == (3, 4)
        assert src.grid.step == (0.25, 0.5)
        assert src.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(src.read(0, 12), data.reshape(12, 10, 12))


def test_dataset_found_in_nested_group_among_other_data(tmp_path):
    data = make_patterns((5, 32, 32), np.uint16)
    path = write_h5(tmp_path / "nested.h5", {
        "entry/instrument/detector/frames": (data, {"chunks": (1, 32, 32),
                                                   "compression": "gzip"}),
        "entry/instrument/detector/background": np.zeros((32, 32)),  # 2-D: not a stack
        "entry/x": np.arange(5.0),
        "entry/tiny": np.zeros((5, 3, 3)),                            # too small
        "entry/labels": np.array([b"a", b"b"]),
        "entry/flags": np.zeros((5, 32, 32), dtype=bool),             # not numeric
    }, attrs={"entry": {"pattern_centre": [0.5, 0.4, 0.6]}})
    with open_scan(path) as src:
        assert src.metadata["dataset"] == "/entry/instrument/detector/frames"
        assert src.metadata["chunks"] == [1, 32, 32]
        assert src.metadata["compression"] == "gzip"
        assert src.metadata["pattern_centre"] == [0.5, 0.4, 0.6]
        np.testing.assert_array_equal(src.read(1, 4), data[1:4])


@pytest.mark.parametrize("keys", [("nrows", "ncols"), ("rows", "cols")])
def test_grid_from_attrs_for_3d(tmp_path, keys):
    data = make_patterns((12, 8, 8), np.uint8)
    path = write_h5(tmp_path / "g.h5", {"ebsd/patterns": data},
                    attrs={"ebsd": {keys[0]: 3, keys[1]: 4, "step_x": 2.0, "step_y": 1.0}})
    with open_scan(path) as src:
        assert (src.grid.rows, src.grid.cols) == (3, 4)
        assert src.grid.step == (1.0, 2.0)
        np.testing.assert_array_equal(src.read(4, 8), data[4:8])


def test_grid_attrs_that_do_not_fit_fall_back_to_one_row(tmp_path):
    data = make_patterns((12, 8, 8), np.uint8)
    path = write_h5(tmp_path / "g.h5", {"patterns": data},
                    attrs={"/": {"nrows": 5, "ncols": 5}})
    with pytest.warns(UserWarning, match="do not fit"):
        src = open_scan(path)
    with src:
        assert (src.grid.rows, src.grid.cols) == (1, 12)


def test_dataset_option_chooses_among_candidates(tmp_path):
    a = make_patterns((4, 16, 16), np.uint8, seed=1)
    b = make_patterns((2, 3, 16, 16), np.uint16, seed=2)
    path = write_h5(tmp_path / "two.h5", {"raw/a": a, "processed/b": b})
    with pytest.raises(InputError) as exc:
        open_scan(path)
    assert_names(exc, path)
    msg = str(exc.value)
    assert "/raw/a" in msg and "/processed/b" in msg and "choose one with --dataset" in msg

    with open_scan(path, dataset="/processed/b") as src:
        assert (src.grid.rows, src.grid.cols) == (2, 3)
        np.testing.assert_array_equal(src.read(0, 6), b.reshape(6, 16, 16))
    with open_scan(path, dataset="raw/a") as src:  # leading slash optional
        np.testing.assert_array_equal(src.read(0, 4), a)


@pytest.mark.parametrize("name, words", [
    ("/missing", "has no dataset"),
    ("/grp", "is a group"),
    ("/grp/image", "dimensions"),
    ("/grp/five_d", "dimensions"),
    ("/grp/text", "not numbers"),
    ("/grp/small", "at least 8"),
])
def test_dataset_option_errors(tmp_path, name, words):
    path = write_h5(tmp_path / "bad.h5", {
        "grp/image": np.zeros((32, 32)),
        "grp/five_d": np.zeros((1, 2, 2, 8, 8)),
        "grp/text": np.full((2, 8, 8), b"x", dtype="S1"),
        "grp/small": np.zeros((4, 4, 4)),
        "grp/ok": np.zeros((4, 8, 8)),
    })
    with pytest.raises(InputError) as exc:
        open_scan(path, dataset=name)
    assert_names(exc, path)
    assert words in str(exc.value)


def test_no_candidate_dataset(tmp_path):
    path = write_h5(tmp_path / "none.h5", {"image": np.zeros((64, 64)), "x": np.arange(3)})
    with pytest.raises(InputError) as exc:
        open_scan(path)
    assert_names(exc, path)
    assert "no pattern dataset" in str(exc.value) and "/image" in str(exc.value)


def test_empty_hdf5_file(tmp_path):
    path = tmp_path / "empty.h5"
    h5py.File(path, "w").close()
    with pytest.raises(InputError, match="no pattern dataset") as exc:
        open_scan(path)
    assert_names(exc, path)


def test_text_file_named_h5(tmp_path):
    path = tmp_path / "fake.h5"
    path.write_text("this is not HDF5\n")
    with pytest.raises(InputError, match="not a scan format ebsdxc can read .its content matches "
                       "none of the formats.; it reads kikuchipy h5ebsd, EDAX") as exc:
        open_scan(path)
    assert_names(exc, path)
    # forcing the format does not help, and still names the file
    with pytest.raises(InputError, match="not an HDF5 file") as exc:
        open_scan(path, format="hdf5")
    assert_names(exc, path)


def test_a_tiff_is_a_series_of_frames(tmp_path):
    path = tmp_path / "scan.h5"  # extension lies; content decides
    tifffile.imwrite(path, np.arange(256, dtype=np.uint8).reshape(16, 16))
    src = open_scan(path)
    assert src.format == "tiff_stack" and src.n_patterns == 1
    np.testing.assert_array_equal(src.read(0, 1)[0], np.arange(256).reshape(16, 16))


def test_missing_file_directory_empty_file(tmp_path):
    missing = tmp_path / "nope.h5"
    with pytest.raises(InputError, match="no such file") as exc:
        open_scan(missing)
    assert_names(exc, missing)
    with pytest.raises(InputError, match="directory") as exc:
        open_scan(tmp_path)
    assert_names(exc, tmp_path)
    empty = tmp_path / "empty.h5"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match="empty") as exc:
        open_scan(empty)
    assert_names(exc, empty)


def test_unknown_format_name(tmp_path):
    path = write_h5(tmp_path / "s.h5", {"p": np.zeros((2, 8, 8))})
    with pytest.raises(InputError, match="unknown scan format") as exc:
        open_scan(path, format="nordif")
    assert_names(exc, path)


def test_hdf5_with_user_block_is_detected(tmp_path):
    path = tmp_path / "ub.h5"
    data = make_patterns((3, 8, 8), np.uint8)
    with h5py.File(path, "w", userblock_size=512) as f:
        f["p"] = data
    assert hdf5_reader.is_hdf5_file(path)
    with open_scan(path) as src:
        np.testing.assert_array_equal(src.read(0, 3), data)


# ----------------------------------------------------------------------------- read_into


@pytest.mark.parametrize("chunks", [None, (2, 3, 8, 9)])
def test_read_into_fills_buffer_across_rows(tmp_path, chunks):
    rows, cols = 5, 7
    data = make_patterns((rows, cols, 8, 9), np.uint16)
    kw = {"chunks": chunks} if chunks else {}
    path = write_h5(tmp_path / "rows.h5", {"p": (data, kw)})
    flat = data.reshape(rows * cols, 8, 9)
    with open_scan(path) as src:
        for start, stop in [(0, 35), (3, 20), (6, 8), (7, 14), (14, 29), (20, 22),
                            (34, 35), (5, 5), (1, 34)]:
            out = np.full((stop - start, 8, 9), 7777, dtype=np.uint16)
            src.read_into(start, stop, out)  # fills the caller's buffer in place
            np.testing.assert_array_equal(out, flat[start:stop])

        # a strided (non-contiguous) buffer and a float32 buffer work too
        big = np.zeros((10, 8, 9), np.uint16)
        src.read_into(3, 8, big[::2])
        np.testing.assert_array_equal(big[::2], flat[3:8])
        as_float = np.empty((9, 8, 9), np.float32)
        src.read_into(5, 14, as_float)
        np.testing.assert_array_equal(as_float, flat[5:14].astype(np.float32))


def test_read_into_rejects_bad_ranges_and_buffers(tmp_path):
    path = write_h5(tmp_path / "s.h5", {"p": np.zeros((4, 8, 8), np.uint8)})
    with open_scan(path) as src:
        with pytest.raises(IndexError):
            src.read_into(2, 5, np.empty((3, 8, 8), np.uint8))
        with pytest.raises(ValueError):
            src.read_into(0, 2, np.empty((3, 8, 8), np.uint8))


class _Spy:
    """Stands in for the h5py dataset and records what read_direct was asked for."""

    def __init__(self, ds):
        self.ds = ds
        self.calls = []

    def read_direct(self, dest, source_sel=None, dest_sel=None):
        self.calls.append((dest, source_sel, dest_sel))
        return self.ds.read_direct(dest, source_sel, dest_sel)

    def __getattr__(self, name):
        return getattr(self.ds, name)


def test_read_into_reads_only_the_requested_slice_into_out(tmp_path, monkeypatch):
    monkeypatch.setenv("EBSDXC_DIRECT_READ", "0")  # the h5py path (tests/test_io_direct.py: the other)
    rows, cols = 6, 5
    data = make_patterns((rows, cols, 8, 8), np.uint8)
    path = write_h5(tmp_path / "spy.h5", {"p": data})
    with open_scan(path) as src:
        spy = _Spy(src.dataset)
        src._ds = spy
        out = np.zeros((14, 8, 8), np.uint8)
        src.read_into(3, 17, out)  # 2 of row 0, rows 1-2 whole, 2 of row 3
        np.testing.assert_array_equal(out, data.reshape(-1, 8, 8)[3:17])
        covered = []
        for dest, sel, _ in spy.calls:
            assert np.shares_memory(dest, out)  # straight into the caller's buffer
            if isinstance(sel, slice):  # a block of whole rows
                covered += [(i, j) for i in range(sel.start, sel.stop) for j in range(cols)]
            else:                       # part of one row
                r, c = sel
                covered += [(r, j) for j in range(c.start, c.stop)]
        assert sorted(covered) == [divmod(i, cols) for i in range(3, 17)]
        assert len(spy.calls) == 3


def _bytes_read_by_process():
    try:
        with open("/proc/self/io") as fh:
            for line in fh:
                if line.startswith("rchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


@pytest.mark.parametrize("chunks", [None, (4, 128, 128)])
def test_reading_one_pattern_does_not_read_the_dataset(tmp_path, chunks):
    if _bytes_read_by_process() is None:
        pytest.skip("needs /proc/self/io")
    n = 4096  # 64 MiB of patterns
    path = tmp_path / "big.h5"
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("p", shape=(n, 128, 128), dtype=np.uint8, chunks=chunks)
        for i in range(0, n, 512):
            values = (np.arange(i, i + 512) % 251).astype(np.uint8)
            ds[i:i + 512] = np.repeat(values, 128 * 128).reshape(512, 128, 128)
    with open_scan(path) as src:
        out = np.empty((1, 128, 128), np.uint8)
        before = _bytes_read_by_process()
        src.read_into(3000, 3001, out)
        read = _bytes_read_by_process() - before
    assert (out == 3000 % 251).all()
    assert read < 2 * 2**20, f"read {read} bytes for one 16 KiB pattern"


def test_source_survives_pickling(tmp_path):
    data = make_patterns((2, 3, 8, 8), np.float32)
    path = write_h5(tmp_path / "p.h5", {"p": data})
    with open_scan(path) as src:
        clone = pickle.loads(pickle.dumps(src))
    try:
        assert clone.grid == src.grid
        np.testing.assert_array_equal(clone.read(1, 5), data.reshape(6, 8, 8)[1:5])
    finally:
        clone.close()


# ----------------------------------------------------------------------------- h5ebsd
# (files written by hand with h5py; kikuchipy's own files further down)


def write_h5ebsd(path, patterns, *, n_rows, n_columns, manufacturer="kikuchipy",
                 scan="Scan 1", pc=(0.5, 0.3, 0.6)):
    h, w = patterns.shape[-2:]
    with h5py.File(path, "a") as f:
        if "manufacturer" not in f:
            f["manufacturer"] = np.array([manufacturer.encode()])
            f["version"] = np.array([b"0.13.1"])
        f[f"{scan}/EBSD/Data/patterns"] = patterns
        hdr = f.create_group(f"{scan}/EBSD/Header")
        for key, value in {"n_rows": n_rows, "n_columns": n_columns, "pattern_height": h,
                           "pattern_width": w, "step_x": 1.5, "step_y": 0.5,
                           "pcx": pc[0], "pcy": pc[1], "pcz": pc[2],
                           "grid_type": b"square", "sample_tilt": 70.0}.items():
            hdr[key] = np.array([value])
    return path


def test_h5ebsd_written_by_hand(tmp_path):
    data = make_patterns((6, 16, 16), np.uint16)
    path = write_h5ebsd(tmp_path / "k.h5", data, n_rows=2, n_columns=3)
    assert h5ebsd_reader.detect(path)
    assert hdf5_reader.detect(path)  # the generic reader would take it: order matters
    with open_scan(path) as src:
        assert src.format == "h5ebsd"
        assert (src.grid.rows, src.grid.cols) == (2, 3)
        assert src.grid.step == (0.5, 1.5)
        assert src.metadata["pattern_centre"] == [0.5, 0.3, 0.6]
        assert src.metadata["header"]["sample_tilt"] == 70.0
        assert src.pattern_centres().shape == (2, 3, 3)
        np.testing.assert_array_equal(src.read(0, 6), data)


def test_other_vendor_h5ebsd_is_not_read_as_kikuchipy(tmp_path):
    data = make_patterns((4, 16, 16), np.uint8)
    path = write_h5ebsd(tmp_path / "edax.h5", data, n_rows=2, n_columns=2,
                        manufacturer="EDAX")
    assert not h5ebsd_reader.detect(path)
    # nor as EDAX's (whose root keys and pattern dataset differ): the generic reader takes it
    with open_scan(path) as src:
        assert src.format == "hdf5"
    with pytest.raises(InputError, match="not a kikuchipy h5ebsd file") as exc:
        open_scan(path, format="h5ebsd")
    assert_names(exc, path)
    with open_scan(path, format="hdf5") as src:
        np.testing.assert_array_equal(src.read(0, 4), data)


def test_h5ebsd_interrupted_scan_reads_zeros(tmp_path):
    data = make_patterns((4, 8, 8), np.uint8) | 1  # no zero patterns stored
    path = write_h5ebsd(tmp_path / "cut.h5", data, n_rows=2, n_columns=3)
    with pytest.warns(UserWarning, match="4 of 6"):
        src = open_scan(path)
    with src:
        assert src.metadata["n_stored"] == 4
        got = src.read(2, 6)
    np.testing.assert_array_equal(got[:2], data[2:4])
    assert not got[2:].any()


def test_h5ebsd_header_that_does_not_fit(tmp_path):
    path = write_h5ebsd(tmp_path / "bad.h5", np.zeros((6, 8, 8), np.uint8), n_rows=1,
                        n_columns=2)
    with pytest.raises(InputError, match="--format hdf5") as exc:
        open_scan(path)
    assert_names(exc, path)
    with open_scan(path, format="hdf5") as src:  # the escape hatch works
        assert src.n_patterns == 6


# ----------------------------------------------------------------------------- kikuchipy


@pytest.fixture(scope="module")
def kp():
    """kikuchipy, imported once for the module (its import is slow)."""
    return pytest.importorskip("kikuchipy")


@pytest.fixture(scope="module")
def kp_data(kp):
    return Path(kp.__file__).parent / "data" / "kikuchipy_h5ebsd"


def _as_flat(array, n_patterns, shape):
    return np.asarray(array).reshape(n_patterns, *shape)


@pytest.mark.parametrize("name", ["patterns.h5", "patterns_nochunks.h5"])
def test_kikuchipy_shipped_files(kp, kp_data, name):
    path = kp_data / name
    expected = kp.load(path).data
    with open_scan(path) as src:
        assert src.format == "h5ebsd"
        assert src.metadata["scan"] == "Scan 1"
        got = src.read(0, src.n_patterns)
        assert src.dtype == expected.dtype
        np.testing.assert_array_equal(got, _as_flat(expected, src.n_patterns,
                                                    src.pattern_shape))
        assert src.grid.size == int(np.prod(expected.shape[:-2]))
        bg = src.static_background()
        assert bg is not None and bg.shape == src.pattern_shape


def test_kikuchipy_second_scan_and_pattern_centres(kp, kp_data):
    path = kp_data / "patterns.h5"
    with open_scan(path) as first:
        assert first.metadata["scans"] == ["Scan 1", "Scan 2"]
        assert (first.grid.rows, first.grid.cols) == (3, 3)
        assert first.grid.step == (1.5, 1.5)
        s = kp.load(path)
        np.testing.assert_allclose(first.pattern_centres(), s.detector.pc)
    expected = kp.load(path, scan_group_names="Scan 2").data
    for choice in ("Scan 2", 2, "2", "/Scan 2/EBSD/Data/patterns"):
        with open_scan(path, dataset=choice) as src:
            assert src.metadata["scan"] == "Scan 2"
            np.testing.assert_array_equal(src.read(0, 9), expected.reshape(9, 60, 60))
    with pytest.raises(InputError) as exc:
        open_scan(path, dataset="Scan 7")
    assert_names(exc, path)
    assert "Scan 1" in str(exc.value) and "--dataset" in str(exc.value)
    # forced generic reading sees the two scans' datasets and asks to choose
    with pytest.raises(InputError, match="choose one with --dataset") as exc:
        open_scan(path, format="hdf5")
    assert_names(exc, path)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float32])
def test_kikuchipy_saved_file(kp, tmp_path, dtype):
    data = make_patterns((2, 3, 20, 24), dtype)
    s = kp.signals.EBSD(data)
    x_axis, y_axis = s.axes_manager.navigation_axes  # hyperspy lists x first
    x_axis.scale = 0.5
    y_axis.scale = 0.25
    s.detector.pc = [0.4, 0.3, 0.6]
    path = tmp_path / "saved.h5"
    s.save(path)
    with open_scan(path) as src:
        assert src.format == "h5ebsd"
        assert (src.grid.rows, src.grid.cols) == (2, 3)
        assert src.pattern_shape == (20, 24)
        assert src.grid.step == pytest.approx((0.25, 0.5))
        assert src.metadata["pattern_centre"] == pytest.approx([0.4, 0.3, 0.6])
        assert src.dtype == np.dtype(dtype)
        got = src.read(0, 6)
    np.testing.assert_array_equal(got, data.reshape(6, 20, 24))
    np.testing.assert_array_equal(got, _as_flat(kp.load(path).data, 6, (20, 24)))


def test_kikuchipy_saved_line_scan(kp, tmp_path):
    data = make_patterns((5, 16, 16), np.uint8)
    path = tmp_path / "line.h5"
    kp.signals.EBSD(data).save(path)
    with open_scan(path) as src:
        assert (src.grid.rows, src.grid.cols) == (1, 5)
        np.testing.assert_array_equal(src.read(0, 5), kp.load(path).data.reshape(5, 16, 16))


# ----------------------------------------------------------------------------- references


@pytest.mark.parametrize("dtype", DTYPES)
def test_read_reference_tiff(tmp_path, dtype):
    image = make_patterns((40, 48), dtype)
    path = tmp_path / "ref.tif"
    tifffile.imwrite(path, image)
    got = read_reference(path)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, image)


def test_read_reference_multipage_tiff(tmp_path):
    path = tmp_path / "stack.tif"
    tifffile.imwrite(path, np.zeros((3, 16, 16), np.uint8), photometric="minisblack")
    with pytest.raises(InputError, match="multi-page") as exc:
        read_reference(path)
    assert_names(exc, path)
    appended = tmp_path / "appended.tif"
    for _ in range(2):
        tifffile.imwrite(appended, np.zeros((16, 16), np.uint16), append=True)
    with pytest.raises(InputError, match="2 images") as exc:
        read_reference(appended)
    assert_names(exc, appended)


def test_read_reference_rgb_tiff(tmp_path):
    path = tmp_path / "rgb.tif"
    tifffile.imwrite(path, np.zeros((16, 16, 3), np.uint8), photometric="rgb")
    with pytest.raises(InputError, match="colour") as exc:
        read_reference(path)
    assert_names(exc, path)


def test_read_reference_errors(tmp_path):
    missing = tmp_path / "ref.tif"
    with pytest.raises(InputError, match="no such file") as exc:
        read_reference(missing)
    assert_names(exc, missing)
    text = tmp_path / "ref2.tif"
    text.write_text("not an image")
    with pytest.raises(InputError, match="not a file format ebsdxc can read") as exc:
        read_reference(text)
    assert_names(exc, text)
    h5 = write_h5(tmp_path / "scan.h5", {"p": np.zeros((2, 8, 8))})
    with pytest.raises(InputError, match="--ref-index") as exc:
        read_reference(h5)
    assert_names(exc, h5)


def test_reference_from_scan(tmp_path):
    data = make_patterns((3, 4, 8, 8), np.uint16)
    path = write_h5(tmp_path / "s.h5", {"p": data})
    with open_scan(path) as src:
        np.testing.assert_array_equal(reference_from_scan(src, 6), data[1, 2])
        np.testing.assert_array_equal(reference_from_scan(src, (2, 3)), data[2, 3])
        np.testing.assert_array_equal(reference_from_scan(src, np.int64(11)), data[2, 3])
        np.testing.assert_array_equal(reference_from_scan(src, "1,2"), data[1, 2])
        ref = reference_from_scan(src, 0)
        assert ref.shape == (8, 8) and ref.dtype == np.uint16
        for bad in (12, -1, (3, 0), (0, 4), (-1, 0), "x", 1.5, True, (1, 2, 3)):
            with pytest.raises(InputError) as exc:
                reference_from_scan(src, bad)
            assert_names(exc, path)


def test_reference_from_array_source():
    stack = make_patterns((5, 8, 8), np.float32)
    src = ArraySource(stack)
    np.testing.assert_array_equal(reference_from_scan(src, 4), stack[4])
    with pytest.raises(InputError, match="outside"):
        reference_from_scan(src, 5)
